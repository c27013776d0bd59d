// signoff approval console. Plain JavaScript, no build step. Every piece of markup inserted here
// was rendered and escaped by the server; this script only moves it, counts down and submits.
(() => {
  'use strict';
  const $ = (sel, el = document) => el.querySelector(sel);
  const $$ = (sel, el = document) => Array.from(el.querySelectorAll(sel));
  // The page key from the sign-in (see login.js): the page itself carries no data and no key;
  // everything comes from requests that send the key with the cookie.
  const STORE = 'signoff-console';
  const requestHash = () => (/^#request-[0-9a-f-]{36}$/.test(location.hash) ? location.hash : '');
  let stored = null;
  try { stored = JSON.parse(localStorage.getItem(STORE) || 'null'); } catch (_) { stored = null; }
  if (!stored || typeof stored.key !== 'string' || typeof stored.approver !== 'string') {
    location.replace(`login${requestHash()}`);
    return;
  }
  const key = stored.key;
  function signedOut() {
    // Signed in again in another tab: that sign-in's key is the one to use (not deleted).
    let now = null;
    try { now = JSON.parse(localStorage.getItem(STORE) || 'null'); } catch (_) { now = null; }
    if (now && typeof now.key === 'string' && now.key !== key) {
      location.reload();
      return;
    }
    try { localStorage.removeItem(STORE); } catch (_) { /* nothing kept */ }
    location.replace(`login${requestHash()}`);
  }
  let offset = 0; // server clock - ours, from each snapshot
  const pendingList = $('#pending');
  const historyList = $('#history');
  const conn = $('#conn');
  const me = stored.approver;
  $('#approver').textContent = me;
  const decided = new Set(); // ids this page saw resolved
  let selected = null;
  // Whether the person chose the selected card (j/k, a click, a link, a key acting on it), and
  // when the selection last changed: a card the page selected by itself (the first to arrive,
  // the neighbour of one decided elsewhere) is not approved by a key pressed within a second of
  // it (the press was meant for what was there before); that press chooses it instead.
  let chosen = false;
  let selectedAt = 0;

  const cardOf = (id) => pendingList.querySelector(`li.request[data-id="${CSS.escape(id)}"]`);
  const cards = () => $$('li.request', pendingList);
  const fragment = (html) => {
    const t = document.createElement('template');
    t.innerHTML = html;
    return t.content.firstElementChild;
  };

  // ---- the list -------------------------------------------------------------------------
  function place(el) {
    // Oldest first. A new request is almost always the newest: append without a scan.
    const created = Number(el.dataset.created);
    const last = pendingList.lastElementChild;
    if (!last || Number(last.dataset.created) <= created) {
      pendingList.appendChild(el);
      return;
    }
    const after = cards().find((c) => Number(c.dataset.created) > created);
    pendingList.insertBefore(el, after || null);
  }

  // Counts, badges and countdowns are redrawn once per frame, however many events arrived in it
  // (a burst of 1,000 requests costs one redraw, not 1,000).
  let redrawQueued = false;
  function redraw() {
    if (redrawQueued) return;
    redrawQueued = true;
    requestAnimationFrame(() => {
      redrawQueued = false;
      tick();
      refresh();
    });
  }

  function addRequest(c) {
    if (decided.has(c.id) || cardOf(c.id)) return;
    const el = fragment(c.html);
    place(el);
    localTimes(el);
    redraw();
    notifyNew(el);
  }

  function addHistory(d) {
    const old = historyList.querySelector(`li[data-id="${CSS.escape(d.id)}"]`);
    if (old) return;
    const row = fragment(d.html);
    localTimes(row);
    historyList.prepend(row);
    // As many as the server keeps (a snapshot brings the same list back).
    while (historyList.children.length > 500) historyList.lastElementChild.remove();
  }

  function notice(text) {
    const n = $('#notice');
    n.textContent = text;
    n.hidden = !text;
  }

  function resolve(d) {
    decided.add(d.id);
    const card = cardOf(d.id);
    // Someone else (or the deadline) decided a request this page was answering: say so, since
    // the card is about to go.
    if (card && card.classList.contains('busy') && d.responder !== me) {
      const who = d.responder ? ` by ${d.responder}` : '';
      notice(`${$('.tool', card).textContent}: already decided${who}: ${d.outcome}`);
    }
    if (card) {
      if (card === selected) select(neighbour(card, 1) || neighbour(card, -1), false, true);
      card.remove();
    }
    addHistory(d);
    redraw();
  }

  function snapshot(s) {
    offset = s.now_ms - Date.now();
    document.body.dataset.clockOffset = String(offset); // the page's idea of the server's clock
    const shown = new Map(cards().map((c) => [c.dataset.id, c]));
    const keep = new Set(s.pending.map((c) => c.id));
    for (const [id, c] of shown) if (!keep.has(id)) c.remove();
    // Put the server's order in place, moving only what is out of place; cards already shown
    // keep what the person typed.
    let cursor = pendingList.firstElementChild;
    for (const c of s.pending) {
      decided.delete(c.id);
      let el = shown.get(c.id);
      if (!el) {
        el = fragment(c.html);
        localTimes(el);
      }
      if (el === cursor) {
        cursor = cursor.nextElementSibling;
      } else {
        pendingList.insertBefore(el, cursor);
      }
    }
    const rows = historyList.children;
    const same = rows.length === s.history.length && s.history.every((d, i) => rows[i].dataset.id === d.id);
    for (const d of s.history) decided.add(d.id);
    if (!same) {
      historyList.replaceChildren(...s.history.map((d) => {
        const row = fragment(d.html);
        localTimes(row);
        return row;
      }));
    }
    if (selected && !selected.isConnected) selected = null;
    tick();
    refresh();
  }

  function refresh() {
    const all = cards();
    $('#pending-count').textContent = String(all.length);
    $('#empty').hidden = all.length > 0;
    if (!selected && all.length) select(all[0], false, true);
    // A "waiting" badge per agent session.
    // Sessions are shown as the server escaped them (invisible code points spelled out).
    const counts = new Map();
    for (const c of all) {
      const seen = counts.get(c.dataset.session) || { shown: c.dataset.sessionShown, id: c.dataset.sessionId, n: 0 };
      seen.n += 1;
      counts.set(c.dataset.session, seen);
    }
    const badges = [];
    for (const [session, { shown, id, n }] of counts) {
      const b = document.createElement('span');
      b.className = 'badge';
      b.dataset.session = session;
      b.title = `session id: ${id}`; // the whole id, where the badge shows a client's name or a cut one
      b.textContent = `${shown}: ${n} waiting`;
      badges.push(b);
    }
    $('#sessions').replaceChildren(...badges);
    document.title = all.length ? `(${all.length}) ${document.title.replace(/^\(\d+\) /, '')}` : document.title.replace(/^\(\d+\) /, '');
  }

  function localTimes(root) {
    for (const t of $$('time[datetime]', root)) {
      const d = new Date(t.getAttribute('datetime'));
      if (!Number.isNaN(d.getTime())) {
        t.title = t.getAttribute('datetime');
        t.textContent = d.toLocaleString();
      }
    }
  }

  // ---- countdowns ---------------------------------------------------------------------------
  function tick() {
    const now = Date.now() + offset;
    for (const c of cards()) {
      const left = Number(c.dataset.deadline) - now;
      const out = $('.countdown', c);
      if (left > 0) {
        const s = Math.ceil(left / 1000);
        const text = s >= 3600 ? `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m left`
          : `${Math.floor(s / 60)}:${String(s % 60).padStart(2, '0')} left`;
        if (out.textContent !== text) out.textContent = text; // no layout work when nothing changed
      } else if (!c.classList.contains('expired')) {
        c.classList.add('expired');
        out.textContent = 'expired';
        for (const b of $$('button[data-action]', c)) if (b.dataset.action !== 'cancel') b.disabled = true;
        status(c, 'Expired: this call will be reported as timed out, not denied.');
      }
    }
  }
  setInterval(tick, 250);

  // ---- selection and keys ---------------------------------------------------------------------
  function neighbour(card, step) {
    const all = cards();
    const i = all.indexOf(card);
    return i < 0 ? null : all[i + step] || null;
  }

  function select(card, scroll = true, auto = false) {
    if (selected) selected.classList.remove('selected');
    if ((card || null) !== selected || !auto) {
      chosen = !auto;
      selectedAt = performance.now();
    }
    selected = card || null;
    if (selected) {
      selected.classList.add('selected');
      if (scroll) selected.scrollIntoView({ block: 'nearest' });
    }
  }

  document.addEventListener('keydown', (e) => {
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    const typing = e.target instanceof HTMLTextAreaElement || e.target instanceof HTMLInputElement;
    if (e.key === 'Escape') {
      if (selected) closeBoxes(selected);
      if (typing) e.target.blur();
      return;
    }
    if (typing) return;
    const press = (action) => {
      const b = selected && $(`button[data-action="${action}"]`, selected);
      if (!b || b.disabled) return;
      if ((action === 'approve' || action === 'session') && !chosen && performance.now() - selectedAt < 1000) {
        chosen = true;
        notice(`${$('.tool', selected).textContent}: just shown and not chosen yet; press again to approve it`);
        return;
      }
      chosen = true;
      b.click();
    };
    switch (e.key) {
      case 'j': select(selected ? neighbour(selected, 1) || selected : cards()[0]); break;
      case 'k': select(selected ? neighbour(selected, -1) || selected : cards()[0]); break;
      case 'a': press('approve'); break;
      case 's': press('session'); break;
      case 'd': press('deny'); break;
      case 'e': press('edit'); break;
      default: return;
    }
    e.preventDefault();
  });

  // ---- decisions ----------------------------------------------------------------------------------
  function status(card, text, kind) {
    const p = $('.status', card);
    p.textContent = text;
    p.dataset.kind = kind || '';
  }

  function closeBoxes(card) {
    for (const box of $$('.deny-box, .edit-box', card)) box.hidden = true;
  }

  async function post(path, body) {
    const r = await fetch(path, {
      method: 'POST',
      credentials: 'same-origin',
      headers: { 'content-type': 'application/json', 'x-signoff-key': key },
      body: JSON.stringify(body),
    });
    if (r.status === 401) signedOut();
    let data = {};
    try { data = await r.json(); } catch (_) { /* no body */ }
    return { ok: r.ok, status: r.status, data };
  }

  async function decide(card, body, label) {
    const buttons = $$('button[data-action]', card).filter((b) => b.dataset.action !== 'cancel');
    buttons.forEach((b) => { b.disabled = true; });
    card.classList.add('busy');
    status(card, `Sending: ${label}…`);
    let res;
    try {
      res = await post('api/decide', { id: card.dataset.id, digest: card.dataset.digest, ...body });
    } catch (err) {
      res = { ok: false, status: 0, data: { message: `the console could not be reached (${err.message}); nothing was decided` } };
    }
    if (res.ok) {
      card.classList.add('sent');
      status(card, `${label}: done (${res.data.outcome}).`, 'ok');
      return;
    }
    status(card, res.data.message || `refused (${res.status})`, 'error');
    if (res.status === 409 || res.status === 410) {
      card.classList.add('lost');
      notice(`${$('.tool', card).textContent}: ${res.data.message || 'no longer pending'}`);
    } else if (!card.classList.contains('expired')) {
      card.classList.remove('busy');
      buttons.forEach((b) => { b.disabled = false; });
      refreshEditState(card);
      const confirm = $('button[data-action="confirm-deny"]', card);
      if (confirm) confirm.disabled = !$('.deny-reason', card).value.trim();
    }
  }

  function refreshEditState(card) {
    const submit = $('button[data-action="submit-edit"]', card);
    if (submit) submit.disabled = card.dataset.checked === undefined || card.dataset.checked !== $('.editor', card).value;
  }

  async function checkEdit(card) {
    const editor = $('.editor', card);
    const errors = $('.edit-errors', card);
    const diff = $('.diff', card);
    const text = editor.value;
    delete card.dataset.checked;
    refreshEditState(card);
    diff.replaceChildren();
    let args;
    try {
      args = JSON.parse(text);
    } catch (err) {
      errors.textContent = `Not valid JSON: ${err.message}`;
      return;
    }
    const res = await post('api/check', { id: card.dataset.id, arguments: args });
    if (!res.ok) {
      errors.textContent = res.data.message || `refused (${res.status})`;
      return;
    }
    if (editor.value !== text) return; // changed while checking
    const changes = res.data.changes || [];
    if (!changes.length) {
      errors.textContent = 'No change: use Approve once to run the arguments as shown.';
      return;
    }
    errors.textContent = '';
    diff.replaceChildren(...changes.map((c) => {
      const li = document.createElement('li');
      const path = document.createElement('code');
      path.className = 'path';
      path.textContent = c.path;
      li.append(path, ' ');
      if (c.before !== null) {
        const del = document.createElement('del');
        del.textContent = c.before;
        li.append(del, ' ');
      }
      if (c.after !== null) {
        const ins = document.createElement('ins');
        ins.textContent = c.after;
        li.append(ins);
      }
      return li;
    }));
    card.dataset.checked = text;
    refreshEditState(card);
  }

  pendingList.addEventListener('click', (e) => {
    const b = e.target.closest('button[data-action]');
    const card = b && b.closest('li.request');
    if (!card || b.disabled) return;
    select(card, false);
    const sessionName = card.dataset.sessionShown;
    switch (b.dataset.action) {
      case 'approve': decide(card, { decision: 'approve', scope: 'once' }, 'Approve once'); break;
      case 'session': decide(card, { decision: 'approve', scope: 'session' }, `Approve for session ${sessionName}`); break;
      case 'deny': {
        closeBoxes(card);
        const box = $('.deny-box', card);
        box.hidden = false;
        $('.deny-reason', box).focus();
        break;
      }
      case 'confirm-deny': {
        const reason = $('.deny-reason', card).value.trim();
        if (reason) decide(card, { decision: 'deny', reason }, 'Deny');
        break;
      }
      case 'edit': {
        closeBoxes(card);
        const box = $('.edit-box', card);
        box.hidden = false;
        $('.editor', box).focus();
        break;
      }
      case 'check-edit': checkEdit(card); break;
      case 'submit-edit': {
        const text = $('.editor', card).value;
        if (card.dataset.checked !== text) { checkEdit(card); break; }
        decide(card, { decision: 'approve', scope: 'once', arguments: JSON.parse(text) }, 'Approve once with edited arguments');
        break;
      }
      case 'cancel': closeBoxes(card); break;
      default: break;
    }
  });

  pendingList.addEventListener('input', (e) => {
    const card = e.target.closest('li.request');
    if (!card) return;
    if (e.target.classList.contains('deny-reason')) {
      $('button[data-action="confirm-deny"]', card).disabled = !e.target.value.trim() || card.classList.contains('expired');
    } else if (e.target.classList.contains('editor')) {
      $('.diff', card).replaceChildren();
      $('.edit-errors', card).textContent = '';
      refreshEditState(card);
    }
  });

  // ---- notifications ---------------------------------------------------------------------------
  const notifyButton = $('#notify');
  const canNotify = () => 'Notification' in window && Notification.permission === 'granted';
  function showNotifyButton() {
    notifyButton.hidden = !('Notification' in window) || Notification.permission !== 'default';
  }
  notifyButton.addEventListener('click', async () => {
    if ('Notification' in window) await Notification.requestPermission();
    showNotifyButton();
  });
  showNotifyButton();

  function notifyNew(card) {
    if (document.visibilityState !== 'hidden' || !canNotify()) return;
    const tool = $('.tool', card).textContent;
    const n = new Notification(`Approval needed: ${tool}`, { body: `session ${card.dataset.sessionShown}`, tag: card.dataset.id });
    n.onclick = () => { window.focus(); select(card); n.close(); };
  }

  // ---- sign out -----------------------------------------------------------------------------------
  $('#logout').addEventListener('click', async () => {
    try { await post('logout', {}); } catch (_) { /* signed out here either way */ }
    signedOut();
  });

  // ---- the live stream ----------------------------------------------------------------------------
  // Server-Sent Events read with fetch (an EventSource cannot send the page key): reconnects
  // after `retry` ms with `Last-Event-ID`, as an EventSource does.
  const handlers = { snapshot: (d) => snapshot(d), request: (d) => addRequest(d), resolved: (d) => resolve(d) };
  let lastId = null;
  let retry = 3000;
  let first = true;

  function dispatch(type, data) {
    const handle = handlers[type];
    if (!handle) return;
    try {
      handle(JSON.parse(data));
    } catch (err) {
      console.error(`signoff console: a ${type} event could not be shown`, err);
    }
    if (type === 'snapshot' && first) {
      first = false;
      if (linked()) select(linked());
    }
  }

  async function read(body) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    let type = '';
    let data = [];
    let id = lastId; // committed to `lastId` when its event ends (a blank line), as EventSource does
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += value;
      for (;;) {
        const nl = buf.search(/[\r\n]/);
        // A `\r` at the end may be the first half of `\r\n`: wait for what follows.
        if (nl < 0 || (buf[nl] === '\r' && nl === buf.length - 1)) break;
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + (buf[nl] === '\r' && buf[nl + 1] === '\n' ? 2 : 1));
        if (line === '') {
          lastId = id;
          if (data.length) dispatch(type || 'message', data.join('\n'));
          type = '';
          data = [];
          continue;
        }
        const colon = line.indexOf(':');
        if (colon === 0) continue; // a comment
        const field = colon < 0 ? line : line.slice(0, colon);
        let v = colon < 0 ? '' : line.slice(colon + 1);
        if (v.startsWith(' ')) v = v.slice(1);
        if (field === 'event') type = v;
        else if (field === 'data') data.push(v);
        else if (field === 'id' && !v.includes('\0')) id = v;
        else if (field === 'retry' && /^[0-9]+$/.test(v)) retry = Number(v);
      }
    }
  }

  function connState(text, state) {
    conn.textContent = text;
    conn.dataset.state = state;
  }

  async function connect() {
    for (;;) {
      let r = null;
      try {
        const headers = { accept: 'text/event-stream', 'x-signoff-key': key };
        if (lastId !== null) headers['last-event-id'] = lastId;
        r = await fetch('events', { headers, credentials: 'same-origin', cache: 'no-store' });
      } catch (_) {
        r = null; // unreachable: try again
      }
      if (r && r.status === 401) {
        signedOut();
        return;
      }
      if (r && r.ok && r.body) {
        connState('live', 'live');
        try { await read(r.body); } catch (_) { /* the connection dropped */ }
      } else if (r && r.status >= 400 && r.status < 500) {
        connState('disconnected: reload the page (or sign in again)', 'closed');
        return;
      }
      connState('reconnecting…', 'reconnecting');
      await new Promise((ok) => { setTimeout(ok, retry); });
    }
  }

  // A link to one request (`#request-<id>`, e.g. from an MCP client's URL-mode elicitation,
  // sent once the request is pending) selects its card.
  function linked() {
    const m = /^#request-([0-9a-f-]{36})$/.exec(location.hash);
    return m ? cards().find((c) => c.dataset.id === m[1]) || null : null;
  }

  tick();
  refresh();
  connect();
})();
