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
  // Signed in again in another tab: that sign-in's key is the one to use (not deleted).
  const signedOut = () => {
    let now = null;
    try { now = JSON.parse(localStorage.getItem('signoff-console') || 'null'); } catch (_) { now = null; }
    if (now && typeof now.key === 'string' && now.key !== stored.key) {
      location.reload();
      return;
    }
    try { localStorage.removeItem('signoff-console'); } catch (_) { /* nothing kept */ }
    location.replace('login');
  };
  // GET `path` with the page key: { ok, status, data }, or null once signed out.
  const get = async (path) => {
    let r;
    try {
      r = await fetch(path, { headers: { 'x-signoff-key': stored.key }, credentials: 'same-origin', cache: 'no-store' });
    } catch (err) {
      return { ok: false, status: 0, data: { message: `The console could not be reached: ${err.message}` } };
    }
    if (r.status === 401) {
      signedOut();
      return null;
    }
    let data = {};
    try { data = await r.json(); } catch (_) { /* no body */ }
    return { ok: r.ok, status: r.status, data };
  };

  (async () => {
    const res = await get('api/audit');
    if (!res) return;
    if (!res.ok || typeof res.data.html !== 'string') {
      show(res.data.message || `The audit could not be read (${res.status})`);
      return;
    }
    const t = document.createElement('template');
    t.innerHTML = res.data.html;
    main.replaceChildren(t.content);
  })();

  // The records, newest first, a page at a time; "Older records" appends the next page.
  const table = document.getElementById('audit-records');
  const status = document.getElementById('records-status');
  const older = document.getElementById('older');
  let next = null;
  async function records() {
    older.disabled = true;
    const res = await get(next === null ? 'api/audit/records' : `api/audit/records?before=${encodeURIComponent(next)}`);
    if (!res) return;
    older.disabled = false;
    if (!res.ok || typeof res.data.html !== 'string') {
      status.textContent = res.data.message || `The records could not be read (${res.status})`;
      status.dataset.kind = 'error';
      return;
    }
    if (res.data.configured === false) {
      status.textContent = 'This gate keeps no audit log it can read back.';
      return;
    }
    // Rows the server rendered and escaped.
    const t = document.createElement('template');
    t.innerHTML = res.data.html;
    for (const el of t.content.querySelectorAll('time[datetime]')) {
      const d = new Date(el.getAttribute('datetime'));
      if (!Number.isNaN(d.getTime())) {
        el.title = el.getAttribute('datetime');
        el.textContent = d.toLocaleString();
      }
    }
    table.tBodies[0].append(t.content);
    const n = table.tBodies[0].rows.length;
    table.hidden = n === 0;
    next = typeof res.data.next === 'number' ? res.data.next : null;
    older.hidden = next === null;
    status.textContent = n === 0 ? 'No records yet.' : `${n} record${n === 1 ? '' : 's'}${next === null ? '' : ' (older ones on the next page)'}.`;
  }
  older.addEventListener('click', () => { records(); });
  records();
})();
