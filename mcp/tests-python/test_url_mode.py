"""URL-mode elicitation: with an approval console configured, a client that can open a URL is sent
to the console's page for the request (`<console>/#request-<id>`), where a signed-in approver
decides over the console's real HTTP API; the client's `accept` only says the person went there.
Clients that cannot be asked at all are told approval is pending elsewhere, and the same console
approves them."""
import http.client
import json
import re
import socket
import urllib.parse

import anyio
import mcp_types as types
import pytest

from conftest import MODES, text
from test_proxy import write

pytestmark = pytest.mark.anyio

KEY = "alice-approval-key-0123"
CONSOLE = {"console": {"approver_keys": {"alice": KEY}}}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Page:
    """The approval console, as a signed-in approver's browser speaks to it (cookie, the page key
    from the sign-in's answer, same-origin headers), answering one request."""

    def __init__(self, url):
        parts = urllib.parse.urlsplit(url)
        self.host, self.origin = parts.netloc, f"{parts.scheme}://{parts.netloc}"
        self.request_id = parts.fragment.removeprefix("request-")
        self.cookie = None
        self.key = None

    def call(self, method, path, body=None, headers=None):
        conn = http.client.HTTPConnection(self.host, timeout=10)
        h = {"Origin": self.origin, **(headers or {})}
        if self.cookie:
            h["Cookie"] = self.cookie
            h["X-Signoff-Key"] = self.key
        data = None
        if body is not None:
            data = json.dumps(body)
            h["Content-Type"] = "application/json"
        conn.request(method, path, data, h)
        res = conn.getresponse()
        out = res.status, res.msg.get_all("Set-Cookie") or [], res.read().decode()
        conn.close()
        return out

    def sign_in(self):
        status, cookies, body = self.call("POST", "/login", {"approver": "alice", "key": KEY})
        assert status == 200, body
        self.cookie = cookies[0].split(";", 1)[0]
        self.key = json.loads(body)["key"]

    def snapshot(self):
        """What the page shows: the first event of the console's stream (a snapshot)."""
        conn = http.client.HTTPConnection(self.host, timeout=10)
        conn.request("GET", "/events", headers={"Cookie": self.cookie, "X-Signoff-Key": self.key})
        res = conn.getresponse()
        assert res.status == 200, res.read()
        try:
            event = None
            while True:
                line = res.readline().decode().rstrip("\r\n")
                if line.startswith("event:"):
                    event = line[len("event:"):].strip()
                elif line.startswith("data:") and event == "snapshot":
                    return json.loads(line[len("data:"):].strip())
        finally:
            conn.close()

    def listed(self):
        """Whether the request is on the page, waiting for a decision."""
        self.sign_in()
        return any(c["id"] == self.request_id for c in self.snapshot()["pending"])

    def decide(self, decision, reason=None, arguments=None, expect=200):
        self.sign_in()
        cards = [c for c in self.snapshot()["pending"] if c["id"] == self.request_id]
        assert cards, f"request {self.request_id} is not on the page"
        card = re.search(rf'data-id="{self.request_id}" data-digest="([^"]+)"', cards[0]["html"])
        assert card, cards[0]["html"]
        answer = {"id": self.request_id, "digest": card.group(1), "decision": decision}
        if reason:
            answer["reason"] = reason
        if arguments is not None:
            answer["arguments"] = arguments
        status, _, body = self.call("POST", "/api/decide", answer)
        assert status == expect, body
        return json.loads(body)


async def gone_from(page):
    """Waits (up to 2.5 s) until the page no longer lists its request as waiting."""
    for _ in range(50):
        if not await anyio.to_thread.run_sync(page.listed):
            return
        await anyio.sleep(0.05)
    raise AssertionError("the abandoned request is still waiting on the page")


class Person:
    """An elicitation callback: goes to the URL, decides on the page, then tells the client it
    went (`accept`), or refuses to open the URL at all."""

    def __init__(self, decision="approve", reason=None, action="accept", edit=None, expect=200):
        self.decision, self.reason, self.action, self.edit, self.expect = decision, reason, action, edit, expect
        self.asked = []
        self.answers = []

    async def __call__(self, ctx, params):
        self.asked.append(params)
        assert params.mode == "url", params
        if self.action != "accept":
            return types.ElicitResult(action=self.action if self.action != "went" else "accept")
        page = Page(params.url)
        answer = await anyio.to_thread.run_sync(
            lambda: page.decide(self.decision, self.reason, self.edit, self.expect)
        )
        self.answers.append(answer)
        if self.expect != 200:
            # The page refused the answer: the person gives up on it.
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept")


@pytest.mark.parametrize("mode", MODES)
async def test_approved_on_the_page_runs_the_call(proxy, sandbox, mode):
    person = Person("approve")
    async with proxy(mode, person, extra=CONSOLE) as c:
        r = await c.call_tool("fs__write_file", write(sandbox / "a.txt"))
    assert not r.is_error, text(r)
    assert (sandbox / "a.txt").read_text() == "hello"
    assert len(person.asked) == 1
    url = person.asked[0].url
    assert re.match(r"^http://127\.0\.0\.1:\d+/#request-[0-9a-f-]{36}$", url), url
    assert "fs__write_file" in person.asked[0].message
    records = proxy.records()
    approved = [r for r in records if r.get("kind") == "outcome" and r.get("decision") == "approved"]
    assert approved and approved[0]["responder"] == "alice", records


@pytest.mark.parametrize("mode", MODES)
async def test_denied_on_the_page_runs_nothing_and_tells_the_reason(proxy, sandbox, mode):
    async with proxy(mode, Person("deny", reason="not this file"), extra=CONSOLE) as c:
        r = await c.call_tool("fs__write_file", write(sandbox / "a.txt"))
    assert r.is_error and "not this file" in text(r), text(r)
    assert not (sandbox / "a.txt").exists()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_a_refused_url_cancels_the_request(proxy, sandbox, mode, action):
    async with proxy(mode, Person(action=action), extra=CONSOLE) as c:
        r = await c.call_tool("fs__write_file", write(sandbox / "a.txt"))
    assert r.is_error and "did not run" in text(r), text(r)
    assert not (sandbox / "a.txt").exists()
    records = proxy.records()
    assert any(r.get("kind") == "outcome" and r.get("decision") == "cancelled" for r in records), records


async def test_a_replayed_url_state_runs_nothing_twice(proxy, sandbox):
    a = write(sandbox / "a.txt")
    async with proxy("2026-07-28", Person(), extra=CONSOLE) as c:
        first = await c.session.call_tool("fs__write_file", a, allow_input_required=True)
        assert type(first).__name__ == "InputRequiredResult", first
        asked = first.input_requests["signoff_approval"]
        url = asked.params.url if hasattr(asked, "params") else asked["params"]["url"]
        await anyio.to_thread.run_sync(lambda: Page(url).decide("approve"))
        # Approved on the page, but nothing runs until the client retries.
        await anyio.sleep(0.3)
        assert not (sandbox / "a.txt").exists()
        went = {"signoff_approval": {"action": "accept"}}
        state = first.request_state
        r = await c.session.call_tool(
            "fs__write_file", a, input_responses=went, request_state=state, allow_input_required=True
        )
        assert not r.is_error, text(r)
        (sandbox / "a.txt").unlink()
        replay = await c.session.call_tool(
            "fs__write_file", a, input_responses=went, request_state=state, allow_input_required=True
        )
    assert replay.is_error and "refused" in text(replay), text(replay)
    assert not (sandbox / "a.txt").exists()


@pytest.mark.parametrize("mode", MODES)
async def test_a_client_that_cannot_be_asked_is_approved_on_the_console(proxy, sandbox, mode):
    """Pending elsewhere, approved by a person on the console (not by a token in the test), then
    the identical retry runs once."""
    args = write(sandbox / "a.txt")
    port = free_port()
    console = {"console": {**CONSOLE["console"], "bind": f"127.0.0.1:{port}"}}
    async with proxy(mode, extra=console) as c:
        r = await c.call_tool("fs__write_file", args)
        assert r.is_error and "pending elsewhere" in text(r), text(r)
        request = text(r).split("(request ")[1].split(")")[0]
        page = Page(f"http://127.0.0.1:{port}/#request-{request}")
        await anyio.to_thread.run_sync(lambda: page.decide("approve"))
        assert not (sandbox / "a.txt").exists()
        again = await c.call_tool("fs__write_file", args)
        assert not again.is_error, text(again)
        assert (sandbox / "a.txt").read_text() == "hello"
        (sandbox / "a.txt").unlink()
        third = await c.call_tool("fs__write_file", args)
    # The approval ran one call; the next identical call is a new request.
    assert third.is_error and "pending elsewhere" in text(third)
    assert request not in text(third)
    assert not (sandbox / "a.txt").exists()


@pytest.mark.parametrize("mode", MODES)
async def test_arguments_edited_on_the_page_are_what_runs(proxy, sandbox, mode):
    edited = {"path": str(sandbox / "a.txt"), "content": "edited on the page"}
    person = Person("approve", edit=edited)
    async with proxy(mode, person, tools={"fs__write_file": {"editable": True}}, extra=CONSOLE) as c:
        r = await c.call_tool("fs__write_file", write(sandbox / "a.txt"))
    assert not r.is_error, text(r)
    assert (sandbox / "a.txt").read_text() == "edited on the page"
    records = proxy.records()
    responses = [r for r in records if r.get("kind") == "response" and r.get("edited_arguments")]
    assert responses and responses[0]["edited_arguments"] == edited, records


@pytest.mark.parametrize("mode", MODES)
async def test_edits_are_refused_unless_the_tool_is_configured_editable(proxy, sandbox, mode):
    person = Person("approve", edit={"path": str(sandbox / "b.txt"), "content": "x"}, expect=422)
    async with proxy(mode, person, extra=CONSOLE) as c:
        r = await c.call_tool("fs__write_file", write(sandbox / "a.txt"))
    assert person.answers and person.answers[0].get("kind") == "edits_not_allowed", person.answers
    assert r.is_error and "did not run" in text(r), text(r)
    assert not (sandbox / "a.txt").exists() and not (sandbox / "b.txt").exists()


async def test_a_client_that_gives_up_after_opening_the_page_cancels_the_request(proxy, sandbox):
    # Legacy: the person opened the page (accept) but has not decided; the client abandons the call.
    person = Person(action="went")
    async with proxy("legacy", person, extra=CONSOLE) as c:
        with pytest.raises(TimeoutError):
            with anyio.fail_after(1.0):
                await c.call_tool("fs__write_file", write(sandbox / "a.txt"))
        page = Page(person.asked[0].url)
        await gone_from(page)
    assert not (sandbox / "a.txt").exists()
    records = proxy.records()
    assert any(r.get("kind") == "outcome" and r.get("decision") == "cancelled" for r in records), records


async def test_a_declining_retry_after_the_page_approved_ends_at_once_and_runs_nothing(proxy, sandbox):
    """2026-07-28, URL mode: the page approves, then the client's retry says the person did not go
    (decline): nothing runs, and the call ends at once (not at its deadline, told it was never
    retried)."""
    a = write(sandbox / "a.txt")
    async with proxy("2026-07-28", Person(), extra=CONSOLE) as c:
        first = await c.session.call_tool("fs__write_file", a, allow_input_required=True)
        asked = first.input_requests["signoff_approval"]
        url = asked.params.url if hasattr(asked, "params") else asked["params"]["url"]
        await anyio.to_thread.run_sync(lambda: Page(url).decide("approve"))
        declined = {"signoff_approval": {"action": "decline"}}
        with anyio.fail_after(5):  # the request's deadline is 20 s away
            r = await c.session.call_tool(
                "fs__write_file", a, input_responses=declined, request_state=first.request_state,
                allow_input_required=True,
            )
    assert r.is_error and "did not run" in text(r), text(r)
    assert "not retried" not in text(r), text(r)
    assert not (sandbox / "a.txt").exists()
    runs = [r for r in proxy.records() if r.get("kind") == "execution" and r.get("tool") == "fs__write_file"]
    assert len(runs) == 1 and runs[0]["decision"] == "error", runs
    assert "upstream was not contacted" in runs[0]["reason"], runs


async def test_a_retry_abandoned_before_the_page_decides_runs_nothing(proxy, sandbox):
    a = write(sandbox / "a.txt")
    async with proxy("2026-07-28", Person(), extra=CONSOLE) as c:
        first = await c.session.call_tool("fs__write_file", a, allow_input_required=True)
        asked = first.input_requests["signoff_approval"]
        url = asked.params.url if hasattr(asked, "params") else asked["params"]["url"]
        went = {"signoff_approval": {"action": "accept"}}
        with pytest.raises(TimeoutError):
            with anyio.fail_after(1.0):
                await c.session.call_tool(
                    "fs__write_file", a, input_responses=went, request_state=first.request_state,
                    allow_input_required=True,
                )
        page = Page(url)
        await gone_from(page)
    assert not (sandbox / "a.txt").exists()


@pytest.fixture
def form_only(monkeypatch):
    """The client declares form elicitation only (no URL mode), as many clients do: with a
    console configured, it is still asked with a form."""
    from mcp.client.session import ClientSession

    build = ClientSession._build_capabilities

    def form_only_capabilities(self, version):
        caps = build(self, version)
        if caps.elicitation is None:
            return caps
        return caps.model_copy(update={"elicitation": types.ElicitationCapability(form=types.FormElicitationCapability())})

    monkeypatch.setattr(ClientSession, "_build_capabilities", form_only_capabilities)


def waiting_on(port):
    """The console's page for the one request waiting on it."""
    page = Page(f"http://127.0.0.1:{port}/")
    page.sign_in()
    ids = [c["id"] for c in page.snapshot()["pending"]]
    assert len(ids) == 1, ids
    page.request_id = ids[0]
    return page


@pytest.mark.parametrize("client_answer", ["accept", "decline"])
async def test_2026_approved_on_the_console_between_the_rounds_runs_only_on_an_agreeing_retry(
    proxy, sandbox, form_only, client_answer
):
    """2026-07-28, form flow: the person approves on the console while the client holds the
    form. Nothing runs until the client's retry; a retry that approves runs the call once, a retry
    that declines runs nothing (and the approval elsewhere is not used later)."""
    from test_proxy import APPROVE

    a = write(sandbox / "a.txt")
    port = free_port()
    console = {"console": {**CONSOLE["console"], "bind": f"127.0.0.1:{port}"}}
    async with proxy("2026-07-28", Person(), extra=console) as c:
        first = await c.session.call_tool("fs__write_file", a, allow_input_required=True)
        assert type(first).__name__ == "InputRequiredResult", first
        asked = first.input_requests["signoff_approval"]
        params = asked.params if hasattr(asked, "params") else asked["params"]
        mode = params.mode if hasattr(params, "mode") else params.get("mode")
        assert mode in (None, "form"), asked  # a form in the client, not the console's URL
        state = first.request_state
        page = await anyio.to_thread.run_sync(lambda: waiting_on(port))
        decided = await anyio.to_thread.run_sync(lambda: page.decide("approve"))
        assert decided["outcome"] == "approved", decided
        await anyio.sleep(0.3)
        assert not (sandbox / "a.txt").exists(), "approved elsewhere, but the client has not retried"
        answer = APPROVE if client_answer == "accept" else {"signoff_approval": {"action": "decline"}}
        r = await c.session.call_tool(
            "fs__write_file", a, input_responses=answer, request_state=state, allow_input_required=True
        )
        if client_answer == "accept":
            assert not r.is_error, text(r)
            assert (sandbox / "a.txt").read_text() == "hello"
            (sandbox / "a.txt").unlink()
        else:
            assert r.is_error and "refused" in text(r), text(r)
        # The same state again runs nothing, whatever it says.
        replay = await c.session.call_tool(
            "fs__write_file", a, input_responses=APPROVE, request_state=state, allow_input_required=True
        )
        assert replay.is_error and "refused" in text(replay), text(replay)
        await anyio.sleep(0.3)
    assert not (sandbox / "a.txt").exists()
    records = proxy.records()
    runs = [r for r in records if r.get("kind") == "execution" and r.get("tool") == "fs__write_file"]
    assert len(runs) == 1, records
    if client_answer == "accept":
        assert runs[0]["decision"] == "ok", runs
    else:
        # The approved call was released: the record says it failed before reaching the upstream.
        assert runs[0]["decision"] == "error" and "client declined" in runs[0]["reason"], runs
        assert "upstream was not contacted" in runs[0]["reason"], runs
    approved = [r for r in records if r.get("kind") == "outcome" and r.get("decision") == "approved"]
    assert [r.get("responder") for r in approved] == ["alice"], records
