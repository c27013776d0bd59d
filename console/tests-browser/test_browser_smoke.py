"""The browser test harness works: headless Chromium loads a page from a local server, runs its script, takes a
click; notifications can be granted and spied on; a tab can be made hidden; an EventSource stream can be cut
and resumes with Last-Event-ID. The console's own tests use the same fixtures (conftest.py, which also
records what was found out about Chromium here).
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from typing import Dict, Iterator, List, Optional, Tuple

import pytest
from playwright.sync_api import BrowserContext, Page, expect

CLICK_PAGE = """<!doctype html>
<meta charset="utf-8"><title>click</title>
<p id="out">not clicked</p>
<button id="approve" type="button">Approve</button>
<script>
  let clicks = 0;
  document.getElementById('approve').addEventListener('click', () => {
    clicks += 1;
    document.getElementById('out').textContent = 'clicked ' + clicks;
  });
</script>
"""

# A request "arrives" (window.arrive); the page notifies only while the tab is hidden, as the console will.
NOTIFY_PAGE = """<!doctype html>
<meta charset="utf-8"><title>notify</title>
<p id="state"></p>
<script>
  window.visibilityLog = [];
  window.shownEvents = 0;
  const state = () => { document.getElementById('state').textContent = document.visibilityState; };
  document.addEventListener('visibilitychange', () => { visibilityLog.push(document.visibilityState); state(); });
  window.addEventListener('blur', () => visibilityLog.push('blur'));
  window.addEventListener('focus', () => visibilityLog.push('focus'));
  state();
  window.arrive = (tool) => {
    if (!document.hidden || Notification.permission !== 'granted') return false;
    const n = new Notification('Approval needed', {body: tool, tag: 'signoff-' + tool});
    n.addEventListener('show', () => { window.shownEvents += 1; });
    return true;
  };
</script>
"""

# Counts what the EventSource saw; #ids lists the event ids received, in order.
SSE_PAGE = """<!doctype html>
<meta charset="utf-8"><title>sse</title>
<p id="count">0</p><p id="ids"></p>
<script>
  window.ids = []; window.opens = 0; window.errors = 0;
  window.es = new EventSource('/events');
  es.addEventListener('open', () => { opens += 1; });
  es.addEventListener('error', () => { errors += 1; });
  es.addEventListener('message', (m) => {
    ids.push(m.lastEventId);
    document.getElementById('count').textContent = String(ids.length);
    document.getElementById('ids').textContent = ids.join(',');
  });
</script>
"""


class EventLog:
    """The server's events, numbered from 1; a stream replays those after the client's Last-Event-ID."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.events: List[str] = []
        self.stopping = False
        # One entry per /events request: the Last-Event-ID header it came with (None: none).
        self.connections: List[Optional[str]] = []

    def publish(self, data: str) -> int:
        with self.cond:
            self.events.append(data)
            self.cond.notify_all()
            return len(self.events)

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()


class Server:
    def __init__(self, pages: Dict[str, str], log: EventLog) -> None:
        handler = _handler(pages, log)
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.port: int = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _handler(pages: Dict[str, str], log: EventLog) -> type:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

        def do_GET(self) -> None:
            if self.path == "/events":
                self._stream()
                return
            body = pages.get(self.path)
            if body is None:
                self.send_error(404)
                return
            data = body.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _stream(self) -> None:
            last = self.headers.get("Last-Event-ID")
            with log.cond:
                log.connections.append(last)
            sent = int(last) if last and last.isdigit() else 0
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            try:
                # Reconnect 200 ms after a drop (Chromium's default is 3 s).
                self.wfile.write(b"retry: 200\n\n")
                self.wfile.flush()
                while True:
                    with log.cond:
                        log.cond.wait_for(lambda: log.stopping or len(log.events) > sent, timeout=1.0)
                        if log.stopping:
                            return
                        pending: List[Tuple[int, str]] = [
                            (i + 1, d) for i, d in enumerate(log.events[sent:], start=sent)
                        ]
                    for event_id, data in pending:
                        self.wfile.write(f"id: {event_id}\ndata: {json.dumps(data)}\n\n".encode())
                        sent = event_id
                    self.wfile.flush()
            except OSError:
                return  # the client went away

    return Handler


@pytest.fixture
def events() -> EventLog:
    return EventLog()


@pytest.fixture
def server(events: EventLog) -> Iterator[Server]:
    srv = Server({"/click": CLICK_PAGE, "/notify": NOTIFY_PAGE, "/sse": SSE_PAGE}, events)
    yield srv
    events.stop()
    srv.close()


def test_a_click_changes_the_page(page: Page, server: Server) -> None:
    page.goto(server.url("/click"))
    expect(page.locator("#out")).to_have_text("not clicked")
    # Nothing is focused by default (the console must not focus Approve).
    assert page.evaluate("document.activeElement === document.body")
    # Keyboard only: Tab reaches the button, Enter presses it.
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "approve"
    page.keyboard.press("Enter")
    expect(page.locator("#out")).to_have_text("clicked 1")
    page.get_by_role("button", name="Approve").click()
    expect(page.locator("#out")).to_have_text("clicked 2")


def test_notifications_can_be_granted_and_spied_on(context: BrowserContext, page: Page, server: Server) -> None:
    page.goto(server.url("/notify"))
    assert page.evaluate("Notification.permission") == "default"
    context.grant_permissions(["notifications"])
    assert page.evaluate("Notification.permission") == "granted"
    assert page.evaluate("navigator.permissions.query({name: 'notifications'}).then(s => s.state)") == "granted"
    # A spy added after the page loaded, by hand (the `notifications` fixture installs it before).
    page.evaluate("""() => {
      const Real = window.Notification; window.spied = [];
      window.Notification = function (title, options) { spied.push(title); return new Real(title, options); };
      Object.defineProperty(window.Notification, 'permission', {get: () => Real.permission});
    }""")
    # A real notification shows in headless Chromium.
    shown = page.evaluate("""() => new Promise(resolve => {
      const n = new Notification('hello', {body: 'world'});
      n.addEventListener('show', () => resolve('show'));
      n.addEventListener('error', () => resolve('error'));
      setTimeout(() => resolve('no event'), 5000);
    })""")
    assert shown == "show"
    assert page.evaluate("spied") == ["hello"]


def test_a_hidden_tab_gets_a_notification(page: Page, server: Server, set_visibility, notifications) -> None:
    page.goto(server.url("/notify"))
    state = "[document.visibilityState, document.hidden, document.hasFocus()]"
    assert page.evaluate(state) == ["visible", False, True]
    assert page.evaluate("Notification.permission") == "granted"
    assert page.evaluate("arrive('delete_file')") is False  # visible: no notification
    assert notifications.shown(page) == []

    set_visibility(page, "hidden")
    assert page.evaluate(state) == ["hidden", True, False]
    expect(page.locator("#state")).to_have_text("hidden")
    assert page.evaluate("arrive('send_email')") is True
    shown = notifications.shown(page)
    assert [(n["title"], n["options"]["body"], n["hidden"]) for n in shown] == [
        ("Approval needed", "send_email", True)
    ]
    page.wait_for_function("window.shownEvents === 1")  # the real notification was shown, too

    set_visibility(page, "visible")
    assert page.evaluate(state) == ["visible", False, True]
    assert page.evaluate("visibilityLog") == ["hidden", "blur", "visible", "focus"]


def test_set_offline_does_not_drop_an_open_eventsource(context: BrowserContext, page: Page, server: Server,
                                                       events: EventLog) -> None:
    page.goto(server.url("/sse"))
    page.wait_for_function("window.opens === 1")
    events.publish("one")
    expect(page.locator("#count")).to_have_text("1")

    context.set_offline(True)
    assert page.evaluate("navigator.onLine") is False
    events.publish("two")  # still arrives: offline emulation leaves open connections alone
    expect(page.locator("#count")).to_have_text("2")
    assert page.evaluate("[window.errors, es.readyState]") == [0, 1]
    # New requests do fail.
    assert page.evaluate("fetch('/click').then(() => 'ok', () => 'failed')") == "failed"
    context.set_offline(False)
    assert events.connections == [None]


def test_a_dropped_eventsource_resumes_with_last_event_id(context: BrowserContext, page: Page, server: Server,
                                                          events: EventLog, tcp_proxy) -> None:
    proxy = tcp_proxy(server.port)
    page.goto(proxy.url("/sse"))
    page.wait_for_function("window.opens === 1")
    for data in ("a", "b", "c"):
        events.publish(data)
    expect(page.locator("#ids")).to_have_text("1,2,3")

    # The network goes away: offline first (so reconnects fail in the browser), then cut the stream.
    context.set_offline(True)
    assert proxy.drop() >= 1
    page.wait_for_function("window.errors >= 2")  # the drop, then at least one failed reconnect ...
    assert page.evaluate("es.readyState") == 0  # ... and it keeps trying (CONNECTING, not CLOSED)
    events.publish("d")  # while the page is away
    events.publish("e")

    started = time.monotonic()
    with page.expect_request(lambda r: r.resource_type == "eventsource") as reconnect:
        context.set_offline(False)
    # Only in the raw headers: request.headers (provisional) has no Last-Event-ID.
    assert reconnect.value.header_value("Last-Event-ID") == "3"
    expect(page.locator("#ids")).to_have_text("1,2,3,4,5")  # what was missed, once, in order
    assert time.monotonic() - started < 5
    assert events.connections[0] is None
    assert events.connections[-1] == "3"
    assert page.evaluate("window.opens") == 2

    # A drop while online: reconnects by itself, 200 ms later (the stream's `retry:`).
    with page.expect_request(lambda r: r.resource_type == "eventsource") as again:
        proxy.drop()
    assert again.value.header_value("Last-Event-ID") == "5"
    events.publish("f")
    expect(page.locator("#ids")).to_have_text("1,2,3,4,5,6")
