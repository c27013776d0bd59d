"""Streamable HTTP on both sides of signoff mcp-proxy, with real parts: the proxy served with
`--http 127.0.0.1:0` and driven by the official Python SDK's HTTP client (mcp 2.3.0) in both
protocol eras; and @modelcontextprotocol/server-everything in its streamableHttp mode as an
upstream configured by `url`."""
import json
import subprocess
import urllib.error
import urllib.request

import pytest

import sys
from pathlib import Path

from conftest import MODES, SIGNOFF, Child, free_port, text
from test_proxy import Person, write

pytestmark = pytest.mark.anyio


class Script(Person):
    """Answers with the given decisions in turn (then the last one again)."""

    def __init__(self, *decisions, reason=None):
        super().__init__(decisions[0], reason=reason)
        self.decisions = list(decisions)

    async def __call__(self, ctx, params):
        self.decision = self.decisions[min(len(self.asked), len(self.decisions) - 1)]
        return await super().__call__(ctx, params)


# The proxy served over HTTP.


@pytest.mark.parametrize("mode", MODES)
async def test_over_http_approve_writes_the_file(proxy, sandbox, mode):
    person = Person("approve")
    async with proxy(mode, person, http=True) as c:
        r = await c.call_tool("fs__write_file", write(sandbox / "a.txt"))
    assert proxy.url.startswith("http://127.0.0.1:") and not proxy.url.startswith("http://127.0.0.1:0/")
    assert not r.is_error, text(r)
    assert (sandbox / "a.txt").read_text() == "hello"
    assert len(person.asked) == 1 and "fs__write_file" in person.asked[0]


@pytest.mark.parametrize("mode", MODES)
async def test_over_http_deny_leaves_the_file_untouched_and_the_reason_reaches_the_model(proxy, sandbox, mode):
    person = Person("deny", reason="not over HTTP on a Friday")
    async with proxy(mode, person, http=True) as c:
        r = await c.call_tool("fs__write_file", write(sandbox / "a.txt"))
    assert r.is_error
    assert "not over HTTP on a Friday" in text(r) and "did not run" in text(r), text(r)
    assert not (sandbox / "a.txt").exists()
    assert len(person.asked) == 1


@pytest.mark.parametrize("mode", MODES)
async def test_over_http_a_client_without_elicitation_is_told_approval_is_pending_elsewhere(proxy, sandbox, mode):
    async with proxy(mode, http=True, extra={"console": {}}) as c:
        r = await c.call_tool("fs__write_file", write(sandbox / "a.txt"))
        again = await c.call_tool("fs__write_file", write(sandbox / "a.txt"))
    assert r.is_error and "pending elsewhere" in text(r), text(r)
    request = text(r).split("(request ")[1].split(")")[0]
    assert again.is_error and request in text(again), text(again)
    assert not (sandbox / "a.txt").exists()


@pytest.mark.parametrize("mode", MODES)
async def test_over_http_approve_for_the_session_asks_once_and_stays_in_its_session(proxy, sandbox, mode):
    person = Person("approve_session")
    async with proxy(mode, person, http=True) as c:
        for name in ("a.txt", "b.txt"):
            r = await c.call_tool("fs__write_file", write(sandbox / name))
            assert not r.is_error, text(r)
    assert len(person.asked) == 1
    assert (sandbox / "a.txt").exists() and (sandbox / "b.txt").exists()

    # Another client of the same proxy is another session: it is asked (and denied here).
    other = Person("deny", reason="other session")
    async with proxy(mode, other, http=True, client_name="another-client") as c:
        r = await c.call_tool("fs__write_file", write(sandbox / "c.txt"))
    assert r.is_error and "other session" in text(r), text(r)
    assert len(other.asked) == 1
    assert not (sandbox / "c.txt").exists()

    # The same client connecting again: a 2025-era client gets a new MCP session (asked again);
    # a 2026-07-28 client has no session, so its grant is keyed by its name (not asked again).
    again = Person("deny", reason="new session")
    async with proxy(mode, again, http=True) as c:
        r = await c.call_tool("fs__write_file", write(sandbox / "d.txt"))
    if mode == "legacy":
        assert r.is_error and "new session" in text(r), text(r)
        assert len(again.asked) == 1 and not (sandbox / "d.txt").exists()
    else:
        assert not r.is_error, text(r)
        assert again.asked == [] and (sandbox / "d.txt").exists()


async def test_over_http_a_2026_request_cannot_borrow_a_legacy_session_by_its_header(proxy, sandbox):
    """rmcp checks `Mcp-Session-Id` only on legacy requests: a 2026-07-28 request carrying a legacy
    client's session id does not get that session's grants."""
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async with proxy("legacy", Person(), http=True):
        pass  # starts the proxy
    seen = []

    async def note(response):
        if response.headers.get("mcp-session-id"):
            seen.append(response.headers["mcp-session-id"])

    http_client = create_mcp_http_client()
    http_client.event_hooks["response"].append(note)
    owner = Person("approve_session")
    async with Client(streamable_http_client(proxy.url, http_client=http_client), mode="legacy",
                      elicitation_callback=owner) as c:
        r = await c.call_tool("fs__write_file", write(sandbox / "a.txt"))
        assert not r.is_error, text(r)
        assert seen, "the legacy client has an MCP session"
        thief = Person("deny", reason="asked after all")
        async with proxy("2026-07-28", thief, http=True, headers={"Mcp-Session-Id": seen[-1]}) as t:
            stolen = await t.call_tool("fs__write_file", write(sandbox / "b.txt"))
        # The owner's grant still holds in its own session.
        r = await c.call_tool("fs__write_file", write(sandbox / "c.txt"))
        assert not r.is_error, text(r)
    assert stolen.is_error and "asked after all" in text(stolen), text(stolen)
    assert len(thief.asked) == 1 and not (sandbox / "b.txt").exists()
    assert len(owner.asked) == 1 and (sandbox / "c.txt").exists()


def post(url, body, headers=None):
    """A raw POST; returns (status, body text)."""
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream", **(headers or {})}
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=h, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}


async def test_over_http_a_foreign_origin_or_host_is_refused(proxy, sandbox):
    async with proxy("legacy", Person(), http=True, http_config={"allowed_origins": ["http://localhost:5173"]}):
        pass
    status, body = post(proxy.url, INIT, {"Origin": "http://evil.example"})
    assert status == 403 and "Origin" in body, (status, body)
    status, body = post(proxy.url, INIT, {"Origin": "http://localhost:6666"})
    assert status == 403, (status, body)
    status, body = post(proxy.url, INIT, {"Host": "evil.example"})
    assert status == 403 and "Host" in body, (status, body)
    # The same request without a foreign Origin or Host is served; a configured origin too.
    status, body = post(proxy.url, INIT)
    assert status == 200 and "signoff-mcp" in body, (status, body)
    status, body = post(proxy.url, INIT, {"Origin": "http://localhost:5173"})
    assert status == 200 and "signoff-mcp" in body, (status, body)


def test_over_http_a_non_loopback_address_is_refused(proxy, tmp_path):
    proxy("legacy")  # writes the configuration
    r = subprocess.run([SIGNOFF, "mcp-proxy", "--config", str(tmp_path / "proxy.json"), "--http", "0.0.0.0:0"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "refusing to listen on 0.0.0.0" in r.stderr, r.stderr
    assert "listening on" not in r.stderr


TOKEN = "s3cret-token-for-alice-0123456789"


@pytest.mark.parametrize("mode", MODES)
async def test_over_http_bearer_tokens_authenticate_and_name_the_approver(proxy, sandbox, mode):
    """With bearer tokens, a request without the token is refused (401), and the token's name is
    the principal: the gate accepts the client's approval as alice's."""
    person = Person("approve")
    cfg = {"bearer_tokens": {"alice": TOKEN}}
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with proxy(mode, person, http=True, http_config=cfg, gate={"allowed_responders": ["alice"]},
                     headers=auth) as c:
        r = await c.call_tool("fs__write_file", write(sandbox / "a.txt"))
    assert not r.is_error, text(r)
    assert (sandbox / "a.txt").exists() and len(person.asked) == 1
    status, _ = post(proxy.url, INIT)
    assert status == 401
    status, _ = post(proxy.url, INIT, {"Authorization": "Bearer wrong-token-0123456789abcdef"})
    assert status == 401
    status, body = post(proxy.url, INIT, auth)
    assert status == 200 and "signoff-mcp" in body


# An upstream over HTTP.


@pytest.mark.parametrize("mode", MODES)
async def test_an_http_upstream_is_gated_and_a_denial_never_reaches_it(proxy, sandbox, mode, everything_http):
    """server-everything over Streamable HTTP: `ev__get-sum` (read-only) runs without asking;
    `ev__toggle-simulated-logging` asks. Denied first, approved second: the approved call says
    it *started* logging, so the denied one never toggled it."""
    url, _ = everything_http()
    person = Script("deny", "approve", reason="leave logging alone")
    async with proxy(mode, person, upstreams=[{"name": "ev", "url": url}]) as c:
        names = {t.name for t in (await c.list_tools()).tools}
        assert {"fs__write_file", "ev__get-sum", "ev__toggle-simulated-logging"} <= names
        s = await c.call_tool("ev__get-sum", {"a": 2, "b": 3})
        assert not s.is_error and "5" in text(s), text(s)
        assert person.asked == []
        denied = await c.call_tool("ev__toggle-simulated-logging", {})
        assert denied.is_error and "leave logging alone" in text(denied), text(denied)
        approved = await c.call_tool("ev__toggle-simulated-logging", {})
    assert not approved.is_error and text(approved).startswith("Started"), text(approved)
    assert len(person.asked) == 2


@pytest.mark.parametrize("mode", MODES)
async def test_an_http_upstream_gone_after_approval_gives_an_error_result(proxy, sandbox, mode, everything_http):
    url, server = everything_http()
    person = Person("approve")
    async with proxy(mode, person, upstreams=[{"name": "ev", "url": url}]) as c:
        assert "ev__toggle-simulated-logging" in {t.name for t in (await c.list_tools()).tools}
        server.stop()  # the port now refuses connections
        r = await c.call_tool("ev__toggle-simulated-logging", {})
    assert r.is_error, text(r)
    assert "Started" not in text(r)
    # The model is told the call never reached the server, not that the server failed at it.
    assert "could not be reached, so the call was not delivered" in text(r), text(r)
    assert len(person.asked) == 1


@pytest.mark.parametrize("mode", MODES)
async def test_an_http_upstream_that_ran_the_call_and_then_failed_is_never_told_as_not_run(
        proxy, sandbox, mode, everything_http, children):
    """The upstream gets the call and runs it, then answers HTTP 500 (a forwarder in front of
    server-everything): the model is told the call may or may not have run, never that it did not
    (it would run it again). The next call shows the first one did run."""
    url, _ = everything_http()
    first, second, person = await toggle_twice_through(proxy, mode, url, "500", children)
    assert first.is_error, text(first)
    assert "may or may not have run" in text(first) and "did not run" not in text(first), text(first)
    # It had run: the second toggle stops what the first started.
    assert not second.is_error and text(second).startswith("Stopped"), text(second)
    assert len(person.asked) == 2


@pytest.mark.parametrize("mode", MODES)
async def test_an_http_upstream_that_answers_429_is_told_as_not_run(proxy, sandbox, mode, everything_http, children):
    """Rate limited (429) before the server took the call: it did not run, and the model is told so."""
    url, _ = everything_http()
    first, second, _ = await toggle_twice_through(proxy, mode, url, "429", children)
    assert first.is_error, text(first)
    assert "did not run" in text(first) and "refused the call" in text(first), text(first)
    # It had not run: the second toggle starts logging.
    assert not second.is_error and text(second).startswith("Started"), text(second)


async def toggle_twice_through(proxy, mode, url, failing, children):
    """Two approved toggles of server-everything's logging through `failing_http.py` in `failing` mode."""
    forwarder = Child([sys.executable, str(Path(__file__).with_name("failing_http.py")), url, failing],
                      stream="stdout")
    children.append(forwarder)
    m = forwarder.wait_for(r"listening on (http://\S+)")
    assert m is not None, "".join(forwarder.lines)
    person = Person("approve")
    async with proxy(mode, person, upstreams=[{"name": "ev", "url": m.group(1)}]) as c:
        first = await c.call_tool("ev__toggle-simulated-logging", {})
        second = await c.call_tool("ev__toggle-simulated-logging", {})
    return first, second, person


def test_an_http_upstream_that_refuses_connections_at_start_is_a_clear_error(proxy, tmp_path):
    proxy("legacy", upstreams=[{"name": "gone", "url": f"http://127.0.0.1:{free_port()}/mcp"}])
    r = subprocess.run([SIGNOFF, "mcp-proxy", "--config", str(tmp_path / "proxy.json"), "--http", "127.0.0.1:0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and 'upstream "gone"' in r.stderr, r.stderr
    assert "listening on" not in r.stderr



@pytest.mark.parametrize("mode", MODES)
async def test_a_clean_client_exit_over_http_prints_nothing(proxy, mode, caplog):
    """The official client ends its session with `DELETE` at exit: the proxy answers 204, so the
    client says nothing (a 202 made it warn "Session termination failed: 202" at every clean
    exit; issue 42), and the proxy prints nothing after it started."""
    import logging

    caplog.set_level(logging.DEBUG)
    async with proxy(mode, http=True, extra={"console": {}}) as c:
        await c.list_tools()
    async with proxy(mode, http=True, extra={"console": {}}) as c:
        await c.list_tools()
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warned == [], warned
    after = "".join(proxy.child.lines).split("listening on", 1)[1].split("\n", 1)[1]
    assert after == "", after
