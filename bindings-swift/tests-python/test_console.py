"""The browser approval console through the uniffi surface the Swift package wraps
(`Gate.serveConsole(options:)`, `Console`), against its real server with the standard library's HTTP
client. The XCTest suite (Tests/SignoffTests/ConsoleTests.swift) covers the same cases in Swift."""

import asyncio
import http.client
import json
import re
import socket
from urllib.parse import urlsplit

import pytest

from conftest import async_test
import signoff_ffi as so

SECRET_A = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
PATH_SCHEMA = json.dumps({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})


class Exec(so.ToolExecutor):
    def __init__(self):
        self.calls = []

    async def execute(self, arguments_json, context):
        self.calls.append(json.loads(arguments_json))
        return json.dumps("deleted")


def keyed_gate(executor=None):
    gate = so.Gate.open(so.GateConfig(), so.TokenKeys("k1", so.Secret.from_base64(SECRET_A)))
    spec = so.ToolSpec(name="delete_file", description="Deletes a file", parameters_json=PATH_SCHEMA)
    if executor is None:
        gate.register_tool(spec)
    else:
        gate.register_executable_tool(spec, executor)
    return gate


class Browser:
    """Just enough of a browser: the console's origin, its session cookie, the sign-in's page key."""

    def __init__(self, console):
        parts = urlsplit(console.url())
        self.host, self.port = parts.hostname, parts.port
        self.origin = f"http://{self.host}:{self.port}"
        self.cookie = None
        self.key = None

    def request(self, method, path, body=None, headers=None):
        conn = http.client.HTTPConnection(self.host, self.port, timeout=20)
        try:
            h = dict(headers or {})
            if self.cookie:
                h["Cookie"] = self.cookie
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                h["Content-Type"] = "application/json"
            conn.request(method, path, body=data, headers=h)
            res = conn.getresponse()
            text = res.read().decode()
            return res.status, {k.lower(): v for k, v in res.getheaders()}, res.msg.get_all("Set-Cookie") or [], text
        finally:
            conn.close()

    def sign_in(self, link):
        token = link.split("#token=", 1)[1]
        status, _, cookies, text = self.request("POST", "/login", {"token": token}, {"Origin": self.origin})
        if status == 200:
            self.cookie = cookies[0].split(";", 1)[0]
            self.key = json.loads(text)["key"]
        return status, cookies, text

    def load_page(self):
        status, _, _, page = self.request("GET", "/")
        assert status == 200, page
        return page

    def decide(self, request, **fields):
        body = {"id": request.id, "digest": request.arguments_digest, "decision": "approve", "scope": "once"}
        body.update(fields)
        status, _, _, text = self.request("POST", "/api/decide", body, {"Origin": self.origin, "x-signoff-key": self.key})
        return status, json.loads(text)


def refused(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


@async_test
async def test_sign_in_then_approve_a_real_call_over_http():
    ex = Exec()
    gate = keyed_gate(ex)
    console = gate.serve_console(so.ConsoleOptions(title="approvals"))
    try:
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", console.url())
        assert console.port() == urlsplit(console.url()).port
        assert not console.is_closed()
        browser = Browser(console)

        status, headers, _, page = await asyncio.to_thread(browser.request, "GET", "/login")
        assert status == 200 and headers["content-type"].startswith("text/html") and "<html" in page
        status, headers, _, _ = await asyncio.to_thread(browser.request, "GET", "/")
        assert status == 303 and headers["location"] == "login"

        link = console.sign_in_link("alice")
        assert link.startswith(console.url() + "login#token=")
        status, cookies, text = await asyncio.to_thread(browser.sign_in, link)
        assert status == 200, text
        answer = json.loads(text)
        assert answer["approver"] == "alice" and len(answer["key"]) >= 43
        assert len(cookies) == 1 and "HttpOnly" in cookies[0] and "SameSite=Strict" in cookies[0]
        assert (await asyncio.to_thread(Browser(console).sign_in, link))[0] == 401  # single-use

        # The page is a shell: the key and the data come only with the key.
        page = await asyncio.to_thread(browser.load_page)
        assert "approvals" in page and browser.key not in page

        handle = gate.execute_cancellable(so.ToolCall(tool="delete_file", arguments_json='{"path":"/tmp/x"}'))
        while gate.pending_count() == 0:
            await asyncio.sleep(0.005)
        request = gate.pending()[0]

        # The cookie without the page key (what any other server on this host receives):
        # refused, and nothing changes.
        bare = {"id": request.id, "digest": request.arguments_digest, "decision": "approve"}
        status, _, _, text = await asyncio.to_thread(browser.request, "POST", "/api/decide", bare, {"Origin": browser.origin})
        assert status == 401 and json.loads(text)["kind"] == "key" and gate.pending_count() == 1

        status, body = await asyncio.to_thread(browser.decide, request)
        assert status == 200 and body["outcome"] == "approved", body
        result = await handle.wait()
        assert result.status == so.ToolStatus.EXECUTED
        assert ex.calls == [{"path": "/tmp/x"}]
        status, body = await asyncio.to_thread(browser.decide, request)
        assert status == 409, body
        assert ex.calls == [{"path": "/tmp/x"}]
    finally:
        console.close()
        gate.close()
    assert console.is_closed()


def test_approver_keys_sign_in(tmp_path):
    gate = keyed_gate()
    console = gate.serve_console(so.ConsoleOptions(approver_keys={"carol": "carol-has-a-long-key"}, sign_in_ttl_ms=60_000))
    browser = Browser(console)
    ok = browser.request("POST", "/login", {"approver": "carol", "key": "carol-has-a-long-key"}, {"Origin": browser.origin})
    assert ok[0] == 200 and json.loads(ok[3])["approver"] == "carol"
    bad = browser.request("POST", "/login", {"approver": "carol", "key": "not-carols-key-at-all"}, {"Origin": browser.origin})
    assert bad[0] == 401
    console.close()
    keys = tmp_path / "approvers"
    keys.write_text("dave:dave-has-a-long-key\n")
    console = gate.serve_console(so.ConsoleOptions(approver_keys_file=str(keys), session_ttl_ms=3_600_000))
    browser = Browser(console)
    assert browser.request("POST", "/login", {"approver": "dave", "key": "dave-has-a-long-key"}, {"Origin": browser.origin})[0] == 200
    console.close()
    gate.close()


def test_configuration_errors():
    with pytest.raises(so.SignoffError.Config) as e:
        so.Gate().serve_console()
    assert "token keys" in str(e.value)
    gate = keyed_gate()
    for bad in (
        so.ConsoleOptions(bind="localhost"),
        so.ConsoleOptions(bind="0.0.0.0:0"),
        so.ConsoleOptions(public_origin="approve.example.com"),
        so.ConsoleOptions(sign_in_ttl_ms=0),
        so.ConsoleOptions(approver_keys={"erin": "short"}),
        so.ConsoleOptions(approver_keys={"erin": "erin-has-a-long-key"}, approver_keys_file="/nonexistent"),
        so.ConsoleOptions(approver_keys_file="/nonexistent/approvers"),
    ):
        with pytest.raises(so.SignoffError.Config):
            gate.serve_console(bad)
    console = gate.serve_console()
    with pytest.raises(so.SignoffError.Malformed):
        console.sign_in_link("")
    console.close()
    gate.close()


def test_close_releases_the_port_and_is_idempotent():
    gate = keyed_gate()
    console = gate.serve_console()
    port = console.port()
    assert not refused(port)
    console.close()
    assert console.is_closed() and refused(port)
    console.close()
    assert console.is_closed()
    # The last reference going away stops it too.
    other = gate.serve_console()
    port = other.port()
    del other
    assert refused(port)
    gate.close()
