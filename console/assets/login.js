// signoff console sign-in. A sign-in link carries its token in the URL fragment, which the
// browser never sends to a server; it is removed from the address bar and history before use.
(() => {
  'use strict';
  const message = document.getElementById('login-message');
  async function signIn(body) {
    let r;
    try {
      r = await fetch('login', {
        method: 'POST',
        credentials: 'same-origin',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    } catch (err) {
      message.textContent = `The console could not be reached: ${err.message}`;
      return;
    }
    if (r.ok) {
      // The page key comes only in this answer. localStorage keeps it for this origin alone
      // (the port included), unlike the cookie, which the browser sends to every port.
      try {
        const data = await r.json();
        localStorage.setItem('signoff-console', JSON.stringify({ key: data.key, approver: data.approver }));
      } catch (err) {
        message.textContent = `Signed in, but this browser would not keep the console's key (${err.message})`;
        return;
      }
      // A link to one request keeps pointing at it after sign-in.
      location.replace(/^#request-[0-9a-f-]{36}$/.test(location.hash) ? `./${location.hash}` : './');
      return;
    }
    let text = `Sign-in failed (${r.status})`;
    try { text = (await r.json()).message || text; } catch (_) { /* no body */ }
    message.textContent = text;
  }
  if (location.hash.startsWith('#token=')) {
    const token = decodeURIComponent(location.hash.slice('#token='.length));
    history.replaceState(null, '', location.pathname + location.search);
    signIn({ token });
  }
  const form = document.getElementById('login-form');
  if (form) {
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      signIn({ approver: form.elements.approver.value, key: form.elements.key.value });
    });
  }
})();
