// signoff console: the audit page. The page carries no data; the verification is fetched with
// the page key kept at sign-in (see login.js), and its markup was rendered and escaped by the
// server.
(() => {
  'use strict';
  const main = document.getElementById('audit');
  const show = (text) => {
    const p = document.createElement('p');
    p.id = 'audit-result';
    p.className = 'bad';
    p.dataset.ok = 'false';
    p.textContent = text;
    main.replaceChildren(p);
  };
  let stored = null;
  try { stored = JSON.parse(localStorage.getItem('signoff-console') || 'null'); } catch (_) { stored = null; }
  if (!stored || typeof stored.key !== 'string') {
    location.replace('login');
    return;
  }
  (async () => {
    let r;
    try {
      r = await fetch('api/audit', { headers: { 'x-signoff-key': stored.key }, credentials: 'same-origin', cache: 'no-store' });
    } catch (err) {
      show(`The console could not be reached: ${err.message}`);
      return;
    }
    if (r.status === 401) {
      // Signed in again in another tab: that sign-in's key is the one to use (not deleted).
      let now = null;
      try { now = JSON.parse(localStorage.getItem('signoff-console') || 'null'); } catch (_) { now = null; }
      if (now && typeof now.key === 'string' && now.key !== stored.key) {
        location.reload();
        return;
      }
      try { localStorage.removeItem('signoff-console'); } catch (_) { /* nothing kept */ }
      location.replace('login');
      return;
    }
    let data = {};
    try { data = await r.json(); } catch (_) { /* no body */ }
    if (!r.ok || typeof data.html !== 'string') {
      show(data.message || `The audit could not be read (${r.status})`);
      return;
    }
    const t = document.createElement('template');
    t.innerHTML = data.html;
    main.replaceChildren(t.content);
  })();
})();
