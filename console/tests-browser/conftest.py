"""Fixtures for the console's browser tests: Playwright's sync API driving the system's Chromium, headless.

Run them with `console/test-browser.sh` (from anywhere): it installs Debian's `chromium` when missing
(scripts/ensure-chromium.sh), installs requirements.txt into bindings-python/.venv and runs pytest here.
Playwright never downloads a browser for these tests: Chromium is launched through its executable path,
SIGNOFF_CHROMIUM when set, else `chromium` on PATH.

Fixtures:
  browser                  one headless Chromium for the session
  new_context(**options)   a fresh browser context (its own cookies, storage, permissions): one per
                           approver, e.g. two approvers racing on a request; closed after the test
  context, page            a fresh context and a page in it, per test; every Playwright wait and
                           `expect` assertion times out after TIMEOUT_MS (10 s)
  tcp_proxy(port)          a loopback TCP proxy in front of a server: `proxy.drop()` cuts every live
                           connection (an EventSource's stream) at once, as a dropped network does
  set_visibility(page, s)  makes `document.visibilityState` s ('hidden' or 'visible') for the page's
                           scripts and fires `visibilitychange` (see VISIBILITY_SHIM_JS)
  notifications            grants the notification permission and records every `new Notification(...)`
                           (see NOTIFICATION_SPY_JS); `notifications.shown(page)` lists them

A test fails when its page threw an uncaught exception or broke the Content Security Policy (the console
ships a strict one); mark it `@pytest.mark.allow_page_errors` when that is what it tests.

Findings for Chromium 148 (Debian 12) with Playwright 1.65, checked by test_browser_smoke.py:

- Sandbox: Playwright launches Chromium with `--no-sandbox` unless `chromium_sandbox=True`; as root with the
  sandbox on, Chromium refuses to start ("Chromium sandboxing failed!"). So no extra argument is needed.
- Hidden tab: headless pages are always 'visible' (Playwright keeps every page "active"; minimizing the
  window through CDP `Browser.setWindowBounds`, opening other pages or `Page.setWebLifecycleState` change
  nothing). The way is an init script that overrides `document.visibilityState`/`hidden` (and
  `hasFocus()`) with Object.defineProperty and dispatches `visibilitychange`: VISIBILITY_SHIM_JS.
- Notifications: `context.grant_permissions(["notifications"])` (no origin: every origin) makes
  `Notification.permission` 'granted'; a real `new Notification(...)` then fires `show` in headless
  Chromium. A spy installed by an init script sees every notification the page creates.
- Dropped connection: `context.set_offline(True)` does NOT close an EventSource stream that is already
  open (events keep arriving; only `navigator.onLine` turns false and new requests fail with
  net::ERR_INTERNET_DISCONNECTED). To drop it, cut the TCP connection: `tcp_proxy(port).drop()`. Combined
  with `set_offline(True)` first, the EventSource keeps retrying (readyState 0, an `error` event per try)
  until `set_offline(False)`, then reconnects with `Last-Event-ID`.
- Last-Event-ID: on a reconnect the browser sends the last `id:` it received. Playwright shows it only in
  the raw headers: `request.header_value("Last-Event-ID")` or `request.all_headers()["last-event-id"]`;
  `request.headers` (the provisional ones) does not have it. Catch the reconnect with
  `page.expect_request(lambda r: r.resource_type == "eventsource")`. Chromium waits 3 s before
  reconnecting unless the stream sets `retry: <ms>`.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
from typing import Any, Callable, Iterator, List

import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    Page,
    Playwright,
    expect,
    sync_playwright,
)

# Every Playwright wait (clicks, navigations, wait_for_*) and every `expect(...)` assertion.
TIMEOUT_MS = 10_000
expect.set_options(timeout=TIMEOUT_MS)


def chromium_path() -> str:
    """SIGNOFF_CHROMIUM, else `chromium` on PATH; fails the test run with what to do when there is none."""
    path = os.environ.get("SIGNOFF_CHROMIUM")
    if path:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
        pytest.fail(f"SIGNOFF_CHROMIUM={path} is not an executable file", pytrace=False)
    found = shutil.which("chromium")
    if found:
        return found
    pytest.fail(
        "no Chromium for the browser tests: `chromium` is not on PATH and SIGNOFF_CHROMIUM is not set.\n"
        "Run them with console/test-browser.sh (it installs Debian's chromium package), run\n"
        "scripts/ensure-chromium.sh, or set SIGNOFF_CHROMIUM to a Chromium or Chrome executable.\n"
        "(Playwright's own browser download is not used: do not run `playwright install`.)",
        pytrace=False,
    )
    raise AssertionError("unreachable")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "allow_page_errors: the page may throw uncaught exceptions or break the CSP without failing the test",
    )


@pytest.fixture(scope="session")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as p:
        yield p


@pytest.fixture(scope="session")
def browser(playwright: Playwright) -> Iterator[Browser]:
    executable = chromium_path()
    headed = os.environ.get("SIGNOFF_BROWSER_HEADED") == "1"  # to watch a test locally (needs a display)
    try:
        browser = playwright.chromium.launch(
            executable_path=executable,
            headless=not headed,
            # Playwright's default, spelled out: Chromium's sandbox cannot start as root (CI runs as root),
            # so it is launched with --no-sandbox.
            chromium_sandbox=False,
            timeout=30_000,
        )
    except Exception as e:  # noqa: BLE001 (any launch failure: say which executable failed)
        pytest.fail(f"could not launch Chromium at {executable}: {e}", pytrace=False)
    yield browser
    browser.close()


@pytest.fixture
def new_context(browser: Browser) -> Iterator[Callable[..., BrowserContext]]:
    """new_context(**options) -> a fresh BrowserContext (Playwright's new_context options), closed after the test."""
    contexts: List[BrowserContext] = []

    def make(**options: Any) -> BrowserContext:
        ctx = browser.new_context(**options)
        ctx.set_default_timeout(TIMEOUT_MS)
        ctx.set_default_navigation_timeout(TIMEOUT_MS)
        contexts.append(ctx)
        return ctx

    yield make
    for ctx in contexts:
        ctx.close()


@pytest.fixture
def context(new_context: Callable[..., BrowserContext]) -> BrowserContext:
    return new_context()


@pytest.fixture
def page(context: BrowserContext, request: pytest.FixtureRequest) -> Iterator[Page]:
    page = context.new_page()
    errors: List[str] = []
    page.on("pageerror", lambda e: errors.append(f"uncaught exception: {e}"))
    page.on(
        "console",
        lambda m: errors.append(f"console: {m.text}")
        if m.type == "error" and "Content Security Policy" in m.text
        else None,
    )
    yield page
    if errors and request.node.get_closest_marker("allow_page_errors") is None:
        pytest.fail("the page reported errors:\n  " + "\n  ".join(errors), pytrace=False)


# ---------------------------------------------------------------------------------------------------------
# A hidden tab

# Installed with add_init_script, so it runs before the page's own scripts, in every navigation. Until
# window.__signoffSetVisibility(state) is called the page sees the real values; afterwards
# document.visibilityState is `state`, document.hidden is (state === 'hidden') and document.hasFocus() is
# false while hidden, and `visibilitychange` (on document) then `blur` or `focus` (on window) are fired, in
# the order a browser fires them when a person switches tabs.
VISIBILITY_SHIM_JS = """
(() => {
  const proto = Document.prototype;
  const real = {
    visibilityState: Object.getOwnPropertyDescriptor(proto, 'visibilityState').get,
    hidden: Object.getOwnPropertyDescriptor(proto, 'hidden').get,
    hasFocus: proto.hasFocus,
  };
  let forced = null;
  Object.defineProperty(document, 'visibilityState', {
    configurable: true,
    get() { return forced === null ? real.visibilityState.call(this) : forced; },
  });
  Object.defineProperty(document, 'hidden', {
    configurable: true,
    get() { return forced === null ? real.hidden.call(this) : forced === 'hidden'; },
  });
  document.hasFocus = function () { return forced === 'hidden' ? false : real.hasFocus.call(this); };
  window.__signoffSetVisibility = (state) => {
    if (state !== 'hidden' && state !== 'visible') throw new Error('visibility: ' + state);
    if (state === forced) return;
    forced = state;
    document.dispatchEvent(new Event('visibilitychange'));
    window.dispatchEvent(new FocusEvent(state === 'hidden' ? 'blur' : 'focus'));
  };
})();
"""


@pytest.fixture
def set_visibility(context: BrowserContext) -> Callable[[Page, str], None]:
    """set_visibility(page, 'hidden' | 'visible'): for pages loaded after the fixture (it uses an init script)."""
    context.add_init_script(VISIBILITY_SHIM_JS)

    def set_(page: Page, state: str) -> None:
        if not page.evaluate("typeof window.__signoffSetVisibility === 'function'"):
            raise AssertionError("the visibility shim is not in this page: navigate after requesting set_visibility")
        page.evaluate("s => window.__signoffSetVisibility(s)", state)

    return set_


# ---------------------------------------------------------------------------------------------------------
# Notifications

# Replaces window.Notification with a constructor that records its arguments and still creates the real
# notification (so `show`/`close` events and handlers behave as in a browser). Recorded, as plain data, in
# window.__signoffNotifications: {title, options, hidden} (hidden: document.hidden when it was created); the
# Notification objects themselves in window.__signoffNotificationObjects, e.g. to fire a click:
#   page.evaluate("window.__signoffNotificationObjects[0].dispatchEvent(new Event('click'))")
# `Notification.permission`, `Notification.requestPermission()` and `instanceof Notification` still work.
# (Notifications shown through a service worker, registration.showNotification, are not recorded.)
NOTIFICATION_SPY_JS = """
(() => {
  const Real = window.Notification;
  if (!Real) return;
  const shown = [], objects = [];
  function Notification(title, options) {
    if (!new.target) throw new TypeError("Failed to construct 'Notification': use 'new'");
    let copy = {};
    try { copy = JSON.parse(JSON.stringify(options || {})); } catch (e) { copy = {unserializable: String(e)}; }
    shown.push({title: String(title), options: copy, hidden: document.hidden});
    const n = new Real(title, options);
    objects.push(n);
    return n;
  }
  Notification.prototype = Real.prototype;
  Object.defineProperty(Notification, 'permission', {get: () => Real.permission});
  Object.defineProperty(Notification, 'maxActions', {get: () => Real.maxActions});
  Notification.requestPermission = (...args) => Real.requestPermission(...args);
  window.Notification = Notification;
  window.__signoffNotifications = shown;
  window.__signoffNotificationObjects = objects;
})();
"""


class Notifications:
    def __init__(self, context: BrowserContext) -> None:
        self.context = context

    def shown(self, page: Page) -> List[dict]:
        """Every notification the page created since it loaded: [{title, options, hidden}, ...]."""
        return page.evaluate("window.__signoffNotifications || null") or []


@pytest.fixture
def notifications(context: BrowserContext) -> Notifications:
    """Grants the notification permission (every origin) and records notifications in pages loaded after it."""
    context.grant_permissions(["notifications"])
    context.add_init_script(NOTIFICATION_SPY_JS)
    return Notifications(context)


# ---------------------------------------------------------------------------------------------------------
# Dropping connections


class TcpProxy:
    """A loopback TCP proxy in front of 127.0.0.1:target_port.

    Point the browser at `proxy.url(...)` instead of the server. `drop()` closes every connection going
    through it at once (the browser sees the stream end with an error; the server sees the client go away);
    `refuse(True)` closes new connections as soon as they are accepted, so the browser's reconnects fail
    as against a server that is down (`context.set_offline(True)` does the same inside the browser);
    `refuse(False)` lets them through again.

    Cookies do not depend on the port, so a session cookie set through the server's own address is sent
    through the proxy too; but the page's Origin is the proxy's (http://127.0.0.1:<proxy port>), so load the
    page through the proxy when the server checks Origin against the Host it was reached by.
    """

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._sockets: set = set()
        self._refusing = False
        self._closed = threading.Event()
        self.accepted = 0  # connections accepted and forwarded so far
        self._thread = threading.Thread(target=self._accept_loop, name="tcp-proxy", daemon=True)
        self._thread.start()

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def drop(self) -> int:
        """Closes every live connection; returns how many there were (each has two sockets)."""
        with self._lock:
            sockets, self._sockets = self._sockets, set()
        for s in sockets:
            _close(s)
        return len(sockets) // 2

    def refuse(self, refusing: bool = True) -> None:
        self._refusing = refusing

    def live(self) -> int:
        with self._lock:
            return len(self._sockets) // 2

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=5)
        self._listener.close()
        self.drop()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            client.settimeout(None)
            if self._refusing:
                _close(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                self._sockets.update((client, upstream))
                self.accepted += 1
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), name="tcp-proxy-pump", daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        # One side ended: end both, so neither end waits on a half-open connection.
        with self._lock:
            self._sockets.discard(src)
            self._sockets.discard(dst)
        _close(src)
        _close(dst)


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()


@pytest.fixture
def tcp_proxy() -> Iterator[Callable[..., TcpProxy]]:
    """tcp_proxy(port) -> a TcpProxy in front of 127.0.0.1:port, closed after the test."""
    proxies: List[TcpProxy] = []

    def make(target_port: int, target_host: str = "127.0.0.1") -> TcpProxy:
        proxy = TcpProxy(target_port, target_host)
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        proxy.close()

