"""The browser approval console (``Gate.serve_console``) against its real server, with the standard
library's HTTP client: sign-in, session cookie and page key, a real gated call decided over HTTP, errors,
and closing."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import urlsplit

import pytest

import signoff
from conftest import LOOPS, run_in
from helpers import Recorder, gate_with_tools


def keyed_gate(executor: Optional[Recorder] = None, **options: Any) -> signoff.Gate:
    return gate_with_tools(executor, token_keys=signoff.TokenKeys("k1", signoff.Secret.generate()), **options)


class Browser:
    """Just enough of a browser: the console's origin, its session cookie, the page key from the
    sign-in's answer (the console's script keeps it in the origin's storage)."""

    def __init__(self, console: signoff.Console) -> None:
        parts = urlsplit(console.url)
        assert parts.hostname is not None and parts.port is not None
        self.host, self.port = parts.hostname, parts.port
        self.origin = f"http://{self.host}:{self.port}"
        self.cookie: Optional[str] = None
        self.key: Optional[str] = None

    def request(
        self, method: str, path: str, body: Any = None, headers: Optional[Dict[str, str]] = None
    ) -> Tuple[int, Dict[str, str], List[str], str]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            h = dict(headers or {})
            if self.cookie is not None:
                h["Cookie"] = self.cookie
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                h["Content-Type"] = "application/json"
            conn.request(method, path, body=data, headers=h)
            res = conn.getresponse()
            text = res.read().decode()
            cookies = res.msg.get_all("Set-Cookie") or []
            return res.status, {k.lower(): v for k, v in res.getheaders()}, cookies, text
        finally:
            conn.close()

    def sign_in(self, link: str) -> Tuple[int, List[str], str]:
        token = link.split("#token=", 1)[1]
        status, _, cookies, text = self.request("POST", "/login", {"token": token}, {"Origin": self.origin})
        if status == 200:
            self.cookie = cookies[0].split(";", 1)[0]
            self.key = json.loads(text)["key"]
        return status, cookies, text

    def load_page(self) -> str:
        status, _, _, page = self.request("GET", "/")
        assert status == 200, page
        return page

    def decide(self, request: signoff.ConfirmationRequest, **fields: Any) -> Tuple[int, Any]:
        assert self.key is not None
        body = {"id": request.id, "digest": request.arguments_digest, "decision": "approve", "scope": "once"}
        body.update(fields)
        status, _, _, text = self.request(
            "POST", "/api/decide", body, {"Origin": self.origin, "x-signoff-key": self.key}
        )
        return status, json.loads(text)


def wait_pending(gate: signoff.Gate) -> signoff.ConfirmationRequest:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        pending = gate.pending()
        if pending:
            return pending[0]
        time.sleep(0.01)
    raise AssertionError("no request became pending")


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def test_sign_in_then_approve_a_real_call_over_http() -> None:
    runs = Recorder("deleted")
    gate = keyed_gate(runs)
    with gate.serve_console(title="approvals") as console:
        assert isinstance(console, signoff.Console)
        assert console.url.startswith("http://127.0.0.1:") and console.url.endswith("/")
        assert console.address[1] == urlsplit(console.url).port
        assert console.gate is gate and not console.closed
        browser = Browser(console)

        status, headers, _, page = browser.request("GET", "/login")
        assert status == 200 and headers["content-type"].startswith("text/html") and "<html" in page
        status, headers, _, _ = browser.request("GET", "/")
        assert status == 303 and headers["location"] == "login"

        link = console.sign_in_link("alice")
        assert link.startswith(console.url + "login#token=")
        status, cookies, text = browser.sign_in(link)
        assert status == 200, text
        answer = json.loads(text)
        assert answer["approver"] == "alice" and len(answer["key"]) >= 43
        assert len(cookies) == 1 and "HttpOnly" in cookies[0] and "SameSite=Strict" in cookies[0]
        # A sign-in link is single-use.
        status, _, _ = Browser(console).sign_in(link)
        assert status == 401

        # The page is a shell: the key and the data come only with the key.
        page = browser.load_page()
        assert "approvals" in page and browser.key not in page

        results: List[signoff.ToolResult] = []
        call = threading.Thread(
            target=lambda: results.append(gate.execute_blocking("delete_file", {"path": "/tmp/x"}, call_id="c1"))
        )
        call.start()
        request = wait_pending(gate)
        assert request.tool == "delete_file"

        # The cookie without the page key (what any other server on this host receives), or
        # from another origin: refused, and nothing changes.
        status, _, _, text = browser.request(
            "POST",
            "/api/decide",
            {"id": request.id, "digest": request.arguments_digest, "decision": "approve"},
            {"Origin": browser.origin},
        )
        assert status == 401 and json.loads(text)["kind"] == "key"
        status, _, _, _ = browser.request(
            "POST",
            "/api/decide",
            {"id": request.id, "digest": request.arguments_digest, "decision": "approve"},
            {"Origin": "http://evil.example", "x-signoff-key": browser.key or ""},
        )
        assert status == 403
        assert gate.pending_count == 1

        status, body = browser.decide(request)
        assert status == 200, body
        assert body["outcome"] == "approved"
        call.join(20)
        assert not call.is_alive()
        assert results[0].status == "executed" and results[0].content == "deleted"
        assert runs.calls == [{"path": "/tmp/x"}]
        # Answered once: a second decision loses, and the tool still ran once.
        status, body = browser.decide(request)
        assert status == 409, body
        assert runs.calls == [{"path": "/tmp/x"}]
    assert console.closed


@pytest.mark.parametrize("loop", LOOPS)
def test_a_decision_from_the_page_wakes_an_awaiting_call(loop: str) -> None:
    async def main() -> None:
        runs = Recorder("ok")
        gate = keyed_gate(runs)
        async with gate.serve_console() as console:
            browser = Browser(console)
            assert (await asyncio.to_thread(browser.sign_in, console.sign_in_link("bob")))[0] == 200
            await asyncio.to_thread(browser.load_page)
            call = asyncio.ensure_future(gate.execute("delete_file", {"path": "/tmp/y"}))
            while not gate.pending():
                await asyncio.sleep(0.01)
            request = gate.pending()[0]
            status, body = await asyncio.to_thread(browser.decide, request, decision="deny", reason="not now")
            assert status == 200 and body["outcome"] == "denied"
            result = await call
            assert result.status == "denied" and "not now" in result.content
            assert runs.calls == []
        gate.close()

    run_in(loop, main())


def test_approver_keys_sign_in(tmp_path: Path) -> None:
    gate = keyed_gate()
    with gate.serve_console(approver_keys={"carol": "carol-has-a-long-key"}, sign_in_ttl=60) as console:
        browser = Browser(console)
        status, _, _, text = browser.request(
            "POST", "/login", {"approver": "carol", "key": "carol-has-a-long-key"}, {"Origin": browser.origin}
        )
        assert status == 200 and json.loads(text)["approver"] == "carol"
        status, _, _, _ = browser.request(
            "POST", "/login", {"approver": "carol", "key": "not-carols-key-at-all"}, {"Origin": browser.origin}
        )
        assert status == 401
    keys = tmp_path / "approvers"
    keys.write_text("# operators\ndave:dave-has-a-long-key\n")
    with gate.serve_console(approver_keys_file=keys, session_ttl=timedelta(hours=1)) as console:
        browser = Browser(console)
        status, _, _, _ = browser.request(
            "POST", "/login", {"approver": "dave", "key": "dave-has-a-long-key"}, {"Origin": browser.origin}
        )
        assert status == 200


def test_configuration_errors() -> None:
    with pytest.raises(signoff.ConfigError, match="token keys"):
        signoff.Gate().serve_console()
    gate = keyed_gate()
    for bad in (
        {"bind": "localhost"},
        {"bind": "0.0.0.0:0"},
        {"public_origin": "approve.example.com"},
        {"sign_in_ttl": 0},
        {"session_ttl": "1h"},
        {"approver_keys": {"erin": "short"}},
        {"approver_keys": {"erin": "erin-has-a-long-key"}, "approver_keys_file": "/nonexistent"},
        {"approver_keys_file": "/nonexistent/approvers"},
    ):
        with pytest.raises(signoff.ConfigError):
            gate.serve_console(**bad)
    with gate.serve_console() as console, pytest.raises(signoff.MalformedError):
        console.sign_in_link("")


def test_close_releases_the_port_and_is_idempotent() -> None:
    gate = keyed_gate()
    console = gate.serve_console()
    port = console.address[1]
    assert not refused(port)
    console.close()
    assert console.closed and refused(port)
    console.close()
    assert console.closed
    assert repr(console) == f"Console(url={console.url!r}, closed=True)"
    # A console dropped without close() stops too.
    other = gate.serve_console()
    port = other.address[1]
    del other
    assert refused(port)
