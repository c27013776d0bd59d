"""signoff mcp-proxy over @modelcontextprotocol/server-filesystem, driven by the official Python SDK
(mcp 2.3.0) in both protocol eras: the upstream is contacted only after an explicit approval."""
import os
import re
import signal

import anyio
import mcp_types as types
import pytest

from conftest import EVERYTHING, MODES, RawClient, text

pytestmark = pytest.mark.anyio


class Person:
    """An elicitation callback that answers as told and counts how often it was asked."""

    def __init__(self, decision="approve", reason=None, action="accept", delay=0):
        self.decision, self.reason, self.action, self.delay = decision, reason, action, delay
        self.asked = []

    async def __call__(self, ctx, params):
        self.asked.append(params.message)
        if self.delay:
            await anyio.sleep(self.delay)
        if self.action != "accept":
            return types.ElicitResult(action=self.action)
        content = {"decision": self.decision}
        if self.reason:
            content["reason"] = self.reason
        return types.ElicitResult(action="accept", content=content)


def write(path, content="hello"):
    return {"path": str(path), "content": content}


@pytest.mark.parametrize("mode", MODES)
async def test_tools_are_namespaced(proxy, mode):
    async with proxy(mode, Person()) as c:
        tools = await c.list_tools()
    names = {t.name for t in tools.tools}
    assert "fs__write_file" in names and "fs__read_text_file" in names
    assert all(n.startswith("fs__") for n in names)


@pytest.mark.parametrize("mode", MODES)
async def test_approve_writes_the_file(proxy, sandbox, mode):
    person = Person("approve")
    async with proxy(mode, person) as c:
        r = await c.call_tool("fs__write_file", write(sandbox / "a.txt"))
    assert not r.is_error, text(r)
    assert (sandbox / "a.txt").read_text() == "hello"
    assert len(person.asked) == 1 and "fs__write_file" in person.asked[0]


@pytest.mark.parametrize("mode", MODES)
async def test_deny_with_reason_leaves_the_file_untouched(proxy, sandbox, mode):
    person = Person("deny", reason="not on a Friday")
    async with proxy(mode, person) as c:
        r = await c.call_tool("fs__write_file", write(sandbox / "a.txt"))
    assert r.is_error
    assert "not on a Friday" in text(r) and "did not run" in text(r)
    assert not (sandbox / "a.txt").exists()


@pytest.mark.parametrize("mode", MODES)
async def test_decline_denies(proxy, sandbox, mode):
    async with proxy(mode, Person(action="decline")) as c:
        r = await c.call_tool("fs__write_file", write(sandbox / "a.txt"))
    assert r.is_error and "declined" in text(r)
    assert not (sandbox / "a.txt").exists()


@pytest.mark.parametrize("mode", MODES)
async def test_cancel_cancels_the_request(proxy, sandbox, mode):
    # The person dismisses the form (`action: cancel`): in the legacy era the answer to the
    # nested elicitation/create, in 2026-07-28 the retry's inputResponses. Nobody decided, so
    # neither the model nor the audit is told of a denial.
    person = Person(action="cancel")
    async with proxy(mode, person) as c:
        r = await c.call_tool("fs__write_file", write(sandbox / "a.txt"))
    assert r.is_error and "did not run" in text(r), text(r)
    assert "cancelled" in text(r) and "declined" not in text(r), text(r)
    assert len(person.asked) == 1
    assert not (sandbox / "a.txt").exists()
    records = proxy.records()
    request = [r["request_id"] for r in records if r.get("kind") == "request" and r["tool"] == "fs__write_file"]
    assert len(request) == 1, records
    decisions = [r.get("decision") for r in records if r.get("request_id") == request[0]]
    assert "cancelled" in decisions and not {"approved", "deny", "denied"} & set(decisions), records


@pytest.mark.parametrize("mode", MODES)
async def test_a_client_without_elicitation_is_told_approval_is_pending_elsewhere(proxy, sandbox, mode):
    async with proxy(mode, extra={"console": {}}) as c:
        r = await c.call_tool("fs__write_file", write(sandbox / "a.txt"))
        # The same call again: still pending, still not run (no second request either).
        again = await c.call_tool("fs__write_file", write(sandbox / "a.txt"))
    assert r.is_error and "pending elsewhere" in text(r), text(r)
    assert again.is_error and "pending elsewhere" in text(again)
    request = text(r).split("(request ")[1].split(")")[0]
    assert request in text(again)
    # The model is told where a person approves it: the console's page for that request.
    assert re.search(r"on the signoff console: http://127\.0\.0\.1:\d+/#request-" + request, text(r)), text(r)
    assert not (sandbox / "a.txt").exists()


@pytest.mark.parametrize("mode", MODES)
async def test_with_nowhere_to_approve_a_client_without_elicitation_is_refused(proxy, sandbox, mode):
    """No console, approval URL or shared store: nobody could ever decide the call, so it is
    refused at once in words the model does not retry, and nothing is left pending (it used to say
    "pending elsewhere" with nowhere to approve; issue 42)."""
    async with proxy(mode) as c:
        r = await c.call_tool("fs__write_file", write(sandbox / "a.txt"))
    assert r.is_error and "no approval console configured" in text(r) and "Do not retry" in text(r), text(r)
    assert "pending" not in text(r)
    assert not (sandbox / "a.txt").exists()
    records = proxy.records()
    assert not [x for x in records if x.get("kind") == "request"], records
    assert [x for x in records if x.get("decision") == "call-refused" and x.get("tool") == "fs__write_file"], records


@pytest.mark.parametrize("mode", MODES)
async def test_read_only_tools_run_without_asking(proxy, sandbox, mode):
    (sandbox / "r.txt").write_text("contents")
    person = Person("deny")
    async with proxy(mode, person) as c:
        r = await c.call_tool("fs__read_text_file", {"path": str(sandbox / "r.txt")})
        d = await c.call_tool("fs__list_allowed_directories", {})
    assert not r.is_error and "contents" in text(r)
    assert not d.is_error
    assert person.asked == []


@pytest.mark.parametrize("mode", MODES)
async def test_an_override_gates_a_read_only_tool(proxy, sandbox, mode):
    (sandbox / "r.txt").write_text("contents")
    person = Person("deny", reason="private")
    async with proxy(mode, person, tools={"fs__read_text_file": {"approval": "required"}}) as c:
        r = await c.call_tool("fs__read_text_file", {"path": str(sandbox / "r.txt")})
    assert r.is_error and "private" in text(r)
    assert len(person.asked) == 1


@pytest.mark.parametrize("mode", MODES)
async def test_approve_for_the_session_asks_once(proxy, sandbox, mode):
    person = Person("approve_session")
    async with proxy(mode, person) as c:
        for name in ("a.txt", "b.txt"):
            r = await c.call_tool("fs__write_file", write(sandbox / name))
            assert not r.is_error, text(r)
    assert len(person.asked) == 1
    assert (sandbox / "b.txt").exists()


async def test_client_cancellation_denies(proxy, sandbox):
    # The person takes too long; the client abandons the call (notifications/cancelled).
    person = Person("approve", delay=2)
    async with proxy("legacy", person) as c:
        with pytest.raises(TimeoutError):
            with anyio.fail_after(0.7):
                await c.call_tool("fs__write_file", write(sandbox / "a.txt"))
        await anyio.sleep(2.5)  # the late approval arrives, and must not run anything
        # The connection still works afterwards.
        d = await c.call_tool("fs__list_allowed_directories", {})
        assert not d.is_error
    assert not (sandbox / "a.txt").exists()
    records = proxy.records()
    decisions = [r.get("decision") for r in records if r.get("tool") == "fs__write_file"]
    assert "cancelled" in decisions and "approved" not in decisions, records


async def test_timeout_denies(proxy, sandbox):
    person = Person("approve", delay=2)
    async with proxy("legacy", person, timeout_ms=500) as c:
        r = await c.call_tool("fs__write_file", write(sandbox / "a.txt"))
        await anyio.sleep(2)
    assert r.is_error and "did not run" in text(r), text(r)
    assert not (sandbox / "a.txt").exists()


APPROVE = {"signoff_approval": {"action": "accept", "content": {"decision": "approve"}}}


async def first_round(c, args, tool="fs__write_file"):
    r = await c.session.call_tool(tool, args, allow_input_required=True)
    assert type(r).__name__ == "InputRequiredResult", r
    assert list(r.input_requests) == ["signoff_approval"]
    return r.request_state


async def test_a_replayed_request_state_is_refused(proxy, sandbox):
    a = write(sandbox / "a.txt")
    async with proxy("2026-07-28", Person()) as c:
        state = await first_round(c, a)
        r = await c.session.call_tool(
            "fs__write_file", a, input_responses=APPROVE, request_state=state, allow_input_required=True
        )
        assert not r.is_error, text(r)
        (sandbox / "a.txt").unlink()
        replay = await c.session.call_tool(
            "fs__write_file", a, input_responses=APPROVE, request_state=state, allow_input_required=True
        )
    assert replay.is_error and "refused" in text(replay), text(replay)
    assert not (sandbox / "a.txt").exists()


async def test_swapped_arguments_on_retry_are_refused(proxy, sandbox):
    a, b = write(sandbox / "a.txt", "benign"), write(sandbox / "b.txt", "evil")
    async with proxy("2026-07-28", Person()) as c:
        state = await first_round(c, a)
        swapped = await c.session.call_tool(
            "fs__write_file", b, input_responses=APPROVE, request_state=state, allow_input_required=True
        )
        assert swapped.is_error and "refused" in text(swapped), text(swapped)
        assert not (sandbox / "b.txt").exists()
        # The honest retry still works: the refused one consumed nothing.
        honest = await c.session.call_tool(
            "fs__write_file", a, input_responses=APPROVE, request_state=state, allow_input_required=True
        )
    assert not honest.is_error, text(honest)
    assert (sandbox / "a.txt").read_text() == "benign"
    assert not (sandbox / "b.txt").exists()


async def test_a_tampered_request_state_is_refused(proxy, sandbox):
    a = write(sandbox / "a.txt")
    async with proxy("2026-07-28", Person()) as c:
        state = await first_round(c, a)
        bad = state[:-2] + ("AA" if not state.endswith("AA") else "BB")
        r = await c.session.call_tool(
            "fs__write_file", a, input_responses=APPROVE, request_state=bad, allow_input_required=True
        )
    assert r.is_error and "refused" in text(r)
    assert not (sandbox / "a.txt").exists()


@pytest.mark.parametrize("mode", MODES)
async def test_the_audit_records_the_client_and_its_era(proxy, sandbox, mode):
    async with proxy(mode, Person("deny", reason="no")) as c:
        await c.call_tool("fs__write_file", write(sandbox / "a.txt"))
    records = proxy.records()
    requests = [r for r in records if r.get("kind") == "request"]
    assert len(requests) == 1, records
    req = requests[0]
    assert req["tool"] == "fs__write_file"
    era = "2026-07-28" if mode == "2026-07-28" else "2025-"
    assert req["tool_call_id"].startswith(f"mcp {era}"), req
    # The client's identity and era are fields of the request's record, not only words in its id.
    mcp_meta = req["metadata"]["mcp"]
    assert mcp_meta["era"].startswith(era) and mcp_meta["client"], req
    assert (mcp_meta["server"], mcp_meta["tool"]) == ("fs", "write_file")
    # Each upstream definition is pinned (by hash) in the same chain when first seen.
    pinned = [r for r in records if r.get("decision") == "definition-pinned" and r.get("tool") == "fs__write_file"]
    assert len(pinned) == 1 and "sha256:" in pinned[0]["reason"], records
    outcome = [r for r in records if r.get("request_id") == req["request_id"] and r.get("decision") == "denied"]
    assert outcome and outcome[0]["reason"] == "no", records


def test_a_hand_rolled_2025_06_18_client_is_asked_by_elicitation(proxy, sandbox, children):
    """The 2025-06-18 era, spoken by hand over the proxy's stdio: the nested elicitation/create
    comes before the upstream is contacted; approving writes the file."""
    proxy("legacy")  # writes the configuration
    c = RawClient(proxy.config, children)
    assert c.init["result"]["protocolVersion"] == "2025-06-18"
    target = sandbox / "0618.txt"
    c.call_tool(2, "fs__write_file", {"path": str(target), "content": "x"})
    asked = 0
    while True:
        m = c.receive()
        if m.get("method") == "elicitation/create":
            asked += 1
            assert not target.exists(), "the upstream ran before the approval"
            assert "decision" in m["params"]["requestedSchema"]["properties"]
            c.send({"jsonrpc": "2.0", "id": m["id"], "result": {"action": "accept", "content": {"decision": "approve"}}})
        elif m.get("id") == 2:
            result = m["result"]
            break
    assert asked == 1
    assert not result.get("isError"), result
    assert target.read_text() == "x"
    c.go_away()


def test_a_client_gone_while_asked_runs_nothing(proxy, sandbox, children):
    """The client's transport goes away (its end of the proxy's stdin closes) while the proxy's
    elicitation/create is outstanding: the proxy ends, the upstream never wrote, and the audit
    closes the request as cancelled or failed, never approved or executed."""
    proxy("legacy")
    c = RawClient(proxy.config, children)
    target = sandbox / "gone.txt"
    c.call_tool(2, "fs__write_file", {"path": str(target), "content": "x"})
    m = c.receive()
    assert m.get("method") == "elicitation/create", m
    c.go_away()
    assert not target.exists()
    records = proxy.records()
    request = [r["request_id"] for r in records if r.get("kind") == "request" and r["tool"] == "fs__write_file"]
    assert len(request) == 1, records
    mine = [r for r in records if r.get("request_id") == request[0]]
    decisions = [r.get("decision") for r in mine]
    assert {"cancelled", "failed"} & set(decisions), mine
    assert "approved" not in decisions and not [r for r in mine if r.get("kind") == "execution"], mine


async def test_an_expired_request_state_is_refused(proxy, sandbox):
    a = write(sandbox / "a.txt")
    async with proxy("2026-07-28", Person(), timeout_ms=400) as c:
        state = await first_round(c, a)
        await anyio.sleep(0.8)
        r = await c.session.call_tool(
            "fs__write_file", a, input_responses=APPROVE, request_state=state, allow_input_required=True
        )
    assert r.is_error and "refused" in text(r), text(r)
    assert not (sandbox / "a.txt").exists()


@pytest.mark.parametrize("mode", MODES)
async def test_two_upstreams_each_gated_by_its_annotations(proxy, sandbox, mode):
    """server-filesystem and server-everything behind one proxy: read-only tools of either run
    without asking; `ev__toggle-simulated-logging` (readOnlyHint false) asks, and a denial runs
    nothing."""
    person = Person("deny", reason="leave logging alone")
    async with proxy(mode, person, everything=True) as c:
        names = {t.name for t in (await c.list_tools()).tools}
        assert {"fs__write_file", "ev__get-sum", "ev__toggle-simulated-logging"} <= names
        s = await c.call_tool("ev__get-sum", {"a": 2, "b": 3})
        assert not s.is_error and "5" in text(s), text(s)
        structured = await c.call_tool("ev__get-structured-content", {"location": "New York"})
        assert not structured.is_error and structured.structured_content, structured
        assert person.asked == []
        t = await c.call_tool("ev__toggle-simulated-logging", {})
    assert t.is_error and "leave logging alone" in text(t), text(t)
    assert len(person.asked) == 1


@pytest.mark.parametrize("mode", MODES)
async def test_a_client_the_gate_does_not_accept_as_approver_cannot_approve(proxy, sandbox, mode):
    person = Person("approve")
    async with proxy(mode, person, gate={"allowed_responders": ["alice"]}) as c:
        r = await c.call_tool("fs__write_file", write(sandbox / "a.txt"))
    assert r.is_error and "did not run" in text(r), text(r)
    assert len(person.asked) == 1
    assert not (sandbox / "a.txt").exists()


SLOW = "ev__trigger-long-running-operation"


@pytest.mark.parametrize("mode", MODES)
async def test_an_upstream_killed_mid_call_gives_an_error_not_a_success(proxy, sandbox, mode):
    """server-everything's slow tool (gated here by configuration) is approved and running when
    its process is killed (SIGKILL, by PID): the client gets an error result, the audit an `error`
    execution record, and the proxy stays up: it still lists tools, serves the other upstream,
    and says clearly that this one cannot be reached."""
    person = Person("approve")
    outcome = {}
    async with proxy(mode, person, everything=True, tools={SLOW: {"approval": "required"}}) as c:
        async def call():
            outcome["result"] = await c.call_tool(SLOW, {"duration": 8, "steps": 1})

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            approved = await proxy.record_where(lambda r: r.get("tool") == SLOW and r.get("decision") == "approved")
            await anyio.sleep(0.5)  # the approved call is forwarded at once; the tool then runs for 8 s
            assert "result" not in outcome, "the slow tool ended before it was killed"
            os.kill(proxy.upstream_pid(EVERYTHING), signal.SIGKILL)
        r = outcome["result"]
        assert r.is_error, text(r)
        # It was delivered and the upstream died with it: whether it ran is unknown, and that is
        # what is said (not that it ran and failed, nor that it did not run).
        said = text(r)
        assert "went away during the call" in said and "whether the tool ran is unknown" in said, said
        assert "ran and failed" not in said and "did not run" not in said and "not delivered" not in said, said
        tools = {t.name for t in (await c.list_tools()).tools}
        assert "fs__write_file" in tools
        d = await c.call_tool("fs__list_allowed_directories", {})
        assert not d.is_error, text(d)
        # A later call to the dead upstream never leaves the proxy: it did not run, and says so.
        gone = await c.call_tool("ev__get-sum", {"a": 1, "b": 2})
        said = text(gone)
        assert gone.is_error and "The call to `ev__get-sum` did not run" in said, said
        assert "could not be reached, so the call was not delivered" in said and "already closed" in said, said
        assert "ran and failed" not in said and "unknown" not in said, said
    assert len(person.asked) == 1
    records = proxy.records()
    mine = [r for r in records if r.get("request_id") == approved["request_id"]]
    executions = [r for r in mine if r.get("kind") == "execution"]
    assert [e.get("decision") for e in executions] == ["error"], mine
    assert "whether the tool ran is unknown" in executions[0]["reason"], mine
    # The later call is audited as what happened: an error execution saying it was not delivered.
    later = [r for r in records if r.get("kind") == "execution" and r.get("tool") == "ev__get-sum"]
    assert [e.get("decision") for e in later] == ["error"], records
    assert "the call was not delivered" in later[0]["reason"], later
