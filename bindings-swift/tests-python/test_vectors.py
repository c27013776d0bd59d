"""The shared vectors (tests/vectors/*.json, format in tests/vectors/README.md), run through the
uniffi surface the Swift package wraps. Typed records are used wherever the Swift API uses them
(tool specs, calls, decisions, events), so the vectors also exercise the conversions.
A field this runner does not understand fails the case."""

import asyncio
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from conftest import async_test
import signoff_ffi as so

VECTORS = Path(os.environ.get("SIGNOFF_VECTORS_DIR", Path(__file__).resolve().parents[2] / "tests" / "vectors"))


def load(name):
    path = VECTORS / name
    assert path.is_file(), f"missing shared vector file {path}"
    return json.loads(path.read_text(encoding="utf-8"))


def strict(obj, allowed, what):
    unknown = set(obj) - set(allowed)
    assert not unknown, f"{what}: fields this runner does not understand: {sorted(unknown)}"


def kind(err):
    return so.error_kind_name(err.kind())


def event_type(ev):
    return json.loads(so.event_to_json(ev))["type"]


OUTCOME = {so.Outcome.APPROVED: "approved", so.Outcome.DENIED: "denied", so.Outcome.TIMED_OUT: "timed-out",
           so.Outcome.CANCELLED: "cancelled"}
BY = {so.ApprovedBy.PERSON: "person", so.ApprovedBy.NOT_GATED: "not-gated", so.ApprovedBy.SESSION_GRANT: "session-grant",
      so.ApprovedBy.GATING_DISABLED: "gating-disabled"}
CANCEL = {so.CancelReason.NO_APPROVER: "no-approver", so.CancelReason.SHUTDOWN: "shutdown",
          so.CancelReason.ABORTED: "aborted", so.CancelReason.SESSION_ENDED: "session-ended",
          so.CancelReason.APPROVAL_FAILED: "approval-failed"}


def test_cancel_reason_mapping_covers_every_reason():
    assert set(CANCEL) == set(so.CancelReason)


def decision_fields(d):
    """The typed Decision, in the vector's field names."""
    if isinstance(d, so.Decision.APPROVED):
        return {"outcome": "approved", "by": BY[d.by], "arguments": json.loads(d.arguments_json), "edited": d.edited,
                "responder": d.responder}
    if isinstance(d, so.Decision.DENIED):
        return {"outcome": "denied", "reason": d.reason, "responder": d.responder}
    if isinstance(d, so.Decision.TIMED_OUT):
        return {"outcome": "timed-out"}
    if isinstance(d, so.Decision.CANCELLED):
        return {"outcome": "cancelled", "cancel_reason": CANCEL[d.reason]}
    raise AssertionError(f"unexpected decision {d!r}")


def check_decision(actual, expected, what):
    strict(expected, ["outcome", "by", "arguments", "edited", "reason", "responder", "cancel_reason"], f"{what}.decision")
    for k, v in expected.items():
        assert k in actual, f"{what}: decision {actual['outcome']} has no field {k!r}"
        assert actual[k] == v, f"{what}: decision.{k} is {actual[k]!r}, expected {v!r}"


# --------------------------------------------------------------------------------------------
# events.json

EVENTS = load("events.json")
strict(EVENTS, ["events", "description"], "events.json")


@pytest.mark.parametrize("event", EVENTS["events"], ids=lambda e: f"{e.get('type')}")
def test_event_round_trip(event):
    ev = so.event_from_json(json.dumps(event))
    assert event_type(ev) == event["type"]
    assert json.loads(so.event_to_json(ev)) == event


# --------------------------------------------------------------------------------------------
# malformed_responses.json

MALFORMED = load("malformed_responses.json")
strict(MALFORMED, ["cases", "description"], "malformed_responses.json")


@pytest.mark.parametrize("case", MALFORMED["cases"], ids=lambda c: c["name"])
@async_test
async def test_malformed_response(case):
    strict(case, ["name", "json", "error"], case["name"])
    gate = so.Gate()
    gate.register_tool(so.ToolSpec(name="delete_file"))
    # no request pending
    with pytest.raises(so.SignoffError) as e:
        gate.respond_json(case["json"])
    assert kind(e.value) == case["error"]
    # a request pending: still rejected, and the request is untouched
    sub = gate.subscribe()
    pending = gate.confirm_cancellable(so.ToolCall(tool="delete_file"))
    ev = await asyncio.wait_for(sub.next(), 5)
    assert ev.is_request()
    with pytest.raises(so.SignoffError) as e:
        gate.respond_json(case["json"])
    assert kind(e.value) == case["error"]
    assert gate.pending_count() == 1
    pending.cancel()


def test_parsing_a_malformed_response_fails_too():
    for case in MALFORMED["cases"]:
        with pytest.raises(so.SignoffError) as e:
            so.response_from_json(case["json"])
        assert kind(e.value) == case["error"], case["name"]


# --------------------------------------------------------------------------------------------
# flows.json

FLOWS = load("flows.json")
strict(FLOWS, ["cases", "tools", "description"], "flows.json")
CASE_FIELDS = ["name", "tools", "gate", "subscribe", "call", "confirm_error", "expect_request", "request", "steps",
               "decision", "events_after", "after_decision"]


# The gate options of the vectors (the core's GateConfig JSON, snake_case) and the JSON type each
# one has in Swift's `GateConfig` record; a value of another type cannot be written in Swift.
CONFIG_FIELDS = {
    "default_timeout_ms": "u64", "keywords": "strings", "deny_when_unobserved": "bool",
    "dangerously_disable_gating": "bool", "bus_capacity": "u64", "remember_resolved": "u64",
    "allowed_responders": "strings", "approvers": "approvers", "forbid_self_approval": "bool",
    "store_path": "string", "synchronous_full": "bool", "audit_path": "string", "audit_rotate_bytes": "u64",
    "token_keys": "string", "token_ttl_ms": "u64",
}
U64_MAX = 2**64 - 1


def swift_value(kind, v):
    """`v` as the Swift field of `kind` holds it, or raise TypeError when Swift cannot hold it
    (a compile error there)."""
    ok = {
        "u64": lambda: (isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= U64_MAX)
        or (isinstance(v, float) and v.is_integer() and 0 <= v <= U64_MAX),
        "bool": lambda: isinstance(v, bool),
        "string": lambda: isinstance(v, str),
        "strings": lambda: isinstance(v, list) and all(isinstance(x, str) for x in v),
        "approvers": lambda: isinstance(v, dict)
        and all(isinstance(w, list) and all(isinstance(x, str) for x in w) for w in v.values()),
    }[kind]()
    if not ok:
        raise TypeError(f"{v!r} is not a Swift {kind}")
    return int(v) if kind == "u64" else v


def gate_config(opts, what):
    """The typed `GateConfig` for the vector's options. TypeError when an option cannot be written
    in Swift at all (an unknown name, a value of another type): the compiler refuses it there."""
    fields = {}
    for k, v in opts.items():
        if k not in CONFIG_FIELDS:
            raise TypeError(f"{what}: GateConfig has no field {k!r}")
        if v is not None:
            fields[k] = swift_value(CONFIG_FIELDS[k], v)
    return so.GateConfig(**fields)


def camel(snake):
    head, *rest = snake.split("_")
    return head + "".join(w.capitalize() for w in rest)


def tool_call(c, what):
    strict(c, ["tool", "arguments", "session_id", "call_id", "metadata"], f"{what}.call")
    return so.ToolCall(
        tool=c["tool"],
        arguments_json=json.dumps(c.get("arguments", {})),
        session_id=c.get("session_id", "default"),
        call_id=c.get("call_id"),
        metadata_json=json.dumps(c["metadata"]) if "metadata" in c else None,
    )


def substitute(response, request_json):
    out = dict(response)
    for k in ("id", "tool", "arguments_digest", "session_id"):
        if out.get(k) == "$request":
            out[k] = request_json[k]
    return out


async def no_event(sub, seconds=0.1):
    try:
        ev = await asyncio.wait_for(sub.next(), seconds)
    except asyncio.TimeoutError:
        return True
    return ev is None


def tamper(token):
    parts = token.split(".")
    parts[3] = ("B" if parts[3][0] == "A" else "A") + parts[3][1:]
    return ".".join(parts)


def after_decision(gate, decision, case, req):
    """A flow case's `after_decision` steps: approval markers for the typed `decision`."""
    name = case["name"]
    marker = None
    for i, step in enumerate(case.get("after_decision", [])):
        what = f"{name}: after_decision {i}"
        if "approval_marker" in step:
            strict(step, ["approval_marker", "error"], what)
            if "error" in step:
                with pytest.raises(so.SignoffError) as e:
                    gate.approval_marker(step["approval_marker"], decision)
                assert kind(e.value) == step["error"], f"{what}: {e.value}"
            else:
                marker = gate.approval_marker(step["approval_marker"], decision)
        elif "tamper_marker" in step:
            strict(step, ["tamper_marker"], what)
            assert step["tamper_marker"] is True and marker is not None, what
            marker = tamper(marker)
        elif "rekey_marker" in step:
            strict(step, ["rekey_marker"], what)
            parts = marker.split(".")
            parts[1] = step["rekey_marker"]
            marker = ".".join(parts)
        elif "accept_approval_marker" in step:
            strict(step, ["accept_approval_marker", "error", "claims"], what)
            call = step["accept_approval_marker"]
            strict(call, ["tool", "arguments"], f"{what}.accept_approval_marker")
            accept = lambda: gate.accept_approval_marker(marker, call["tool"], json.dumps(call["arguments"]))  # noqa: E731
            if "error" in step:
                assert "claims" not in step, f"{what}: claims with an error"
                with pytest.raises(so.SignoffError) as e:
                    accept()
                assert kind(e.value) == step["error"], f"{what}: {e.value}"
                continue
            claims = accept()
            expected = step.get("claims", {})
            strict(expected, ["tool", "arguments_digest", "approver", "request_id"], f"{what}.claims")
            for k, v in expected.items():
                got = getattr(claims, k)
                if k == "request_id":
                    got, v = str(got), (req.id if v == "$request" else v)
                assert got == v, f"{what}: claims.{k} is {got!r}, expected {v!r}"
        else:
            raise AssertionError(f"{what}: unknown step {step}")


@pytest.mark.parametrize("case", FLOWS["cases"], ids=lambda c: c["name"])
@async_test
async def test_flow(case):
    name = case["name"]
    strict(case, CASE_FIELDS, name)
    gate = so.Gate.open(config=gate_config(case.get("gate", {}), name))
    for t in case.get("tools", FLOWS.get("tools", [])):
        # through the typed ToolSpec record, as a Swift app registers tools
        gate.register_tool(so.tool_spec_from_json(json.dumps(t)))
    subscribe = case.get("subscribe", True)
    assert subscribe in (True, False, "observer"), f"{name}: subscribe {subscribe!r}"
    sub = gate.observe() if subscribe == "observer" else gate.subscribe() if subscribe else None
    pending = gate.confirm_cancellable(tool_call(case["call"], name))

    if "confirm_error" in case:
        for k in ("steps", "decision", "request", "events_after"):
            assert k not in case, f"{name}: {k} with confirm_error"
        with pytest.raises(so.SignoffError) as e:
            await pending.wait()
        assert kind(e.value) == case["confirm_error"]
        assert gate.pending_count() == 0
        if sub is not None:
            assert await no_event(sub), f"{name}: a refused call published an event"
        return

    expect_request = case.get("expect_request", True)
    req = req_json = None
    if expect_request and sub is not None:
        ev = await asyncio.wait_for(sub.next(), 5)
        assert ev is not None and ev.is_request(), f"{name}: expected a confirmation-request, got {ev!r}"
        req = ev.request
        req_json = json.loads(so.event_to_json(ev))
        for k, v in case.get("request", {}).items():
            assert k in req_json, f"{name}: request has no field {k!r}"
            assert req_json[k] == v, f"{name}: request.{k} is {req_json[k]!r}, expected {v!r}"
    else:
        assert "request" not in case and "events_after" not in case or subscribe, name

    cancelled_here = False
    token = None
    steps = case.get("steps", [])
    if steps:
        assert req is not None, f"{name}: steps but no request was received"
    for i, step in enumerate(steps):
        what = f"{name}: step {i}"
        actions = [k for k in step if k not in ("error", "outcome")]
        assert len(actions) == 1, f"{what}: exactly one action expected, got {actions}"
        action = actions[0]
        if action == "respond":
            strict(step, ["respond", "error", "outcome"], what)
            body = json.dumps(substitute(step["respond"], req_json))
            if "error" in step:
                with pytest.raises(so.SignoffError) as e:
                    gate.respond_json(body)
                assert kind(e.value) == step["error"], f"{what}: {e.value}"
            else:
                outcome = gate.respond_json(body)
                assert OUTCOME[outcome] == step["outcome"], what
            continue
        if action in ("issue_token", "respond_token"):
            strict(step, [action, "error", "outcome"], what)
            if action == "issue_token":
                assert "outcome" not in step, what
                issue = lambda: gate.issue_token(req.id, step[action])  # noqa: E731
            else:
                tr = step[action]
                strict(tr, ["approver", "decision", "reason", "scope", "arguments"], f"{what}.respond_token")
                decision = {"approve": so.ResponseDecision.APPROVE, "deny": so.ResponseDecision.DENY}[tr["decision"]]
                scope = {None: None, "once": so.Scope.ONCE, "session": so.Scope.SESSION}[tr.get("scope")]
                arguments = json.dumps(tr["arguments"]) if "arguments" in tr else None
                issue = lambda: gate.respond_token(  # noqa: E731
                    token, tr["approver"], decision, arguments_json=arguments, scope=scope, reason=tr.get("reason"))
            if "error" in step:
                with pytest.raises(so.SignoffError) as e:
                    issue()
                assert kind(e.value) == step["error"], f"{what}: {e.value}"
            elif action == "issue_token":
                token = issue()
            else:
                assert OUTCOME[issue()] == step["outcome"], what
            continue
        strict(step, [action], what)
        if action == "tamper_token":
            assert step[action] is True and token is not None, what
            parts = token.split(".")
            parts[3] = ("B" if parts[3][0] == "A" else "A") + parts[3][1:]
            token = ".".join(parts)
        elif action == "rekey_token":
            parts = token.split(".")
            parts[1] = step[action]
            token = ".".join(parts)
        elif action == "sleep_ms":
            await asyncio.sleep(step[action] / 1000)
        elif action == "wait_past_deadline":
            assert step[action] is True
            delay = req.deadline_ms / 1000 - time.time() + 0.05
            await asyncio.sleep(max(delay, 0))
            # the deadline passed: the core resolves the request as timed out
            for _ in range(200):
                if gate.pending_count() == 0:
                    break
                await asyncio.sleep(0.01)
        elif action == "close":
            assert step[action] is True
            gate.close()
        elif action == "unsubscribe":
            assert step[action] is True
            sub.close()
        elif action == "cancel":
            assert step[action] is True
            pending.cancel()
            cancelled_here = True
            # wait for the core to resolve it
            for _ in range(200):
                if gate.pending_count() == 0:
                    break
                await asyncio.sleep(0.01)
        elif action == "end_session":
            gate.end_session(step[action])
        else:
            raise AssertionError(f"{what}: unknown step {action!r}")

    decision = await pending.wait()
    if not expect_request:
        assert isinstance(decision, so.Decision.APPROVED) and decision.request_id is None, f"{name}: a request was made"
        if sub is not None:
            assert await no_event(sub), f"{name}: an event was published"
    actual = decision_fields(decision)
    if cancelled_here:
        assert "after_decision" not in case, f"{name}: a cancelled call has no decision for after_decision"
        # The cancelled call's own decision says cancelled/aborted (no request id: the
        # binding cancelled it from outside); the vector is checked against the resolved event.
        assert actual == {"outcome": "cancelled", "cancel_reason": "aborted"}
        events = []
        while True:
            ev = await asyncio.wait_for(sub.next(), 5)
            events.append(ev)
            if ev.is_resolved() and ev.resolved.id == req.id:
                break
        r = events[-1].resolved
        actual = {"outcome": OUTCOME[r.outcome]}
        if r.cancel_reason is not None:
            actual["cancel_reason"] = CANCEL[r.cancel_reason]
        check_decision(actual, case["decision"], name)
        return
    check_decision(actual, case["decision"], name)
    after_decision(gate, decision, case, req)

    if "events_after" in case:
        seen = []
        while True:
            ev = await asyncio.wait_for(sub.next(), 5)
            assert ev is not None, f"{name}: subscription ended"
            seen.append(event_type(ev))
            if ev.is_resolved() and ev.resolved.id == req.id:
                break
        assert seen == case["events_after"], name


# --------------------------------------------------------------------------------------------
# config.json

CONFIG = load("config.json")
strict(CONFIG, ["cases", "description"], "config.json")


# --------------------------------------------------------------------------------------------
# subscriptions.json

SUBSCRIPTIONS = load("subscriptions.json")
strict(SUBSCRIPTIONS, ["cases", "description", "tools"], "subscriptions.json")
OUTCOME_OF = {so.Decision.APPROVED: "approved", so.Decision.DENIED: "denied", so.Decision.TIMED_OUT: "timed-out",
              so.Decision.CANCELLED: "cancelled"}


@pytest.mark.parametrize("case", SUBSCRIPTIONS["cases"], ids=lambda c: c["name"])
@async_test
async def test_subscription(case):
    name = case["name"]
    strict(case, ["name", "gate", "types", "calls", "expect", "error"], name)
    gate = so.Gate.open(config=gate_config(case.get("gate", {}), name))
    for t in SUBSCRIPTIONS["tools"]:
        gate.register_tool(so.tool_spec_from_json(json.dumps(t)))
    if "error" in case:
        # Swift's types are an enum: a name from elsewhere is read with `EventType(named:)`.
        strict(case, ["name", "types", "error"], name)
        with pytest.raises(so.SignoffError) as e:
            [so.event_type_named(t) for t in case["types"]]
        assert kind(e.value) == case["error"], name
        return
    sub = gate.subscribe_only([so.event_type_named(t) for t in case["types"]])
    for c in case["calls"]:
        strict(c, ["call", "answer", "outcome"], f"{name}: call")
        pending = gate.confirm_cancellable(tool_call(c["call"], name))
        for _ in range(500):
            if gate.pending_count() == 1:
                break
            await asyncio.sleep(0.01)
        [request] = gate.pending()
        if c["answer"] == "approve":
            gate.respond_json(json.dumps({"id": request.id, "decision": "approve"}))
        elif c["answer"] == "deny":
            gate.respond_json(json.dumps({"id": request.id, "decision": "deny", "reason": "no"}))
        else:
            assert c["answer"] == "wait", f"{name}: answer {c['answer']!r}"
        decision = await asyncio.wait_for(pending.wait(), 5)
        assert OUTCOME_OF[type(decision)] == c["outcome"], f"{name}: {decision!r}"
    gate.close()
    seen = []
    while (ev := await asyncio.wait_for(sub.next(), 5)) is not None:
        seen.append("lagged" if ev.is_lagged() else event_type(ev))
    assert seen == case["expect"], f"{name}: {seen}"


@pytest.mark.parametrize("case", CONFIG["cases"], ids=lambda c: c["name"])
def test_config(case):
    name = case["name"]
    strict(case, ["name", "options", "error", "mentions"], name)
    try:
        config = gate_config(case["options"], name)
    except TypeError as e:
        # Not expressible in Swift (an option GateConfig does not have, or a value of another type):
        # the compiler refuses it, before the core could. Only a configuration error may be such.
        assert case.get("error") == "config", f"{name}: a valid configuration cannot be written in Swift: {e}"
        return
    if "error" not in case:
        so.Gate.open(config=config).close()
        return
    with pytest.raises(so.SignoffError) as e:
        so.Gate.open(config=config)
    assert kind(e.value) == case["error"], f"{name}: {e.value}"
    if "mentions" in case:
        # Named as Swift spells the option.
        assert camel(case["mentions"]) in str(e.value), f"{name}: {e.value}"


# --------------------------------------------------------------------------------------------
# execute.json

EXECUTE = load("execute.json")
strict(EXECUTE, ["cases", "description"], "execute.json")


class Transfer(so.ToolExecutor):
    """Counts a run, signals that it started, waits to be released, counts a finish."""

    def __init__(self):
        self.runs = self.finished = 0
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def execute(self, arguments_json, context):
        self.runs += 1
        self.started.set()
        await self.release.wait()
        self.finished += 1
        return json.dumps({"sent": True})


class ApproveAll(so.ApprovalHandler):
    async def handle(self, request):
        request.approve()


@pytest.mark.parametrize("case", EXECUTE["cases"], ids=lambda c: c["name"])
@async_test
async def test_execute_cancellation(case, tmp_path):
    name = case["name"]
    strict(case, ["name", "approve", "cancel", "close", "runs", "finished", "resolved", "execution", "result"], name)
    assert ("cancel" in case) != ("close" in case), f"{name}: exactly one of cancel and close"
    close = "close" in case
    when = case["close"] if close else case["cancel"]
    log = tmp_path / "audit.jsonl"
    gate = so.Gate.open(config=so.GateConfig(audit_path=str(log)))
    tool = Transfer()
    gate.register_executable_tool(so.ToolSpec(name="transfer", approval=so.ApprovalMode.REQUIRED), tool)
    watch = gate.observe()
    approver = gate.on_request(ApproveAll()) if case["approve"] else gate.subscribe()
    handle = gate.execute_cancellable(so.ToolCall(tool="transfer"))
    assert when in ("while_waiting", "while_running"), name
    if when == "while_waiting":
        for _ in range(500):
            if gate.pending_count() == 1:
                break
            await asyncio.sleep(0.01)
        assert gate.pending_count() == 1, name
    else:
        await asyncio.wait_for(tool.started.wait(), 5)
    if close:
        # The caller keeps waiting: it gets the tool's own result.
        gate.close()
        tool.release.set()
        result = await asyncio.wait_for(handle.wait(), 5)
        assert result is not None, f"{name}: no result"
        assert result.status.name.lower().replace("_", "-") == case["result"], f"{name}: {result!r}"
        if case["result"] == "executed":
            assert json.loads(result.output_json) == {"sent": True}, name
    else:
        handle.cancel()  # the Swift extension's task cancellation
        assert await handle.wait() is None, f"{name}: the cancelled caller still got a result"
        tool.release.set()
    resolved = None
    while resolved is None:
        ev = await asyncio.wait_for(watch.next(), 5)
        if ev.is_resolved():
            resolved = ev.resolved
    expected = dict(case["resolved"])
    strict(expected, ["outcome", "cancel_reason"], f"{name}.resolved")
    assert OUTCOME[resolved.outcome] == expected["outcome"], name
    if "cancel_reason" in expected:
        assert CANCEL[resolved.cancel_reason] == expected["cancel_reason"], name
    for _ in range(300):
        if tool.finished >= case["finished"] and (case["execution"] is None or "execution" in log.read_text()):
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    await gate.flush_audit()
    assert (tool.runs, tool.finished) == (case["runs"], case["finished"]), name
    executions = [r for r in map(json.loads, log.read_text().splitlines()) if r["kind"] == "execution"]
    if case["execution"] is None:
        assert executions == [], name
    else:
        assert [r["decision"] for r in executions] == [case["execution"]], name
    approver.stop() if case["approve"] else approver.close()
    watch.close()
    gate.close()


# --------------------------------------------------------------------------------------------
# durable.json

DURABLE = load("durable.json")
strict(DURABLE, ["cases", "tools", "description"], "durable.json")
DURABLE_FIELDS = ["name", "call", "before_restart", "down_past_deadline", "register_after_restart", "recovered_as",
                  "found_state", "steps", "record", "runs"]
RECOVERY_LISTS = ("restored", "timed_out", "interrupted", "not_restored")


def record_state(state):
    """RecordState as the core spells it (`timed-out`)."""
    return state.name.lower().replace("_", "-")


class Counting(so.ToolExecutor):
    """Counts its runs; with `hold`, a run waits until released."""

    def __init__(self, hold):
        self.runs = 0
        self.hold = hold
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def execute(self, arguments_json, context):
        self.runs += 1
        self.started.set()
        if self.hold:
            await self.release.wait()
        return json.dumps({"sent": True})


def snapshot(src, dst):
    """The database as it is on disk now (with its write-ahead log): what a new process finds."""
    shutil.copyfile(src, dst)
    if Path(f"{src}-wal").exists():
        shutil.copyfile(f"{src}-wal", f"{dst}-wal")


async def past(deadline_ms):
    await asyncio.sleep(max(0.0, deadline_ms / 1000 - time.time()) + 0.05)


def request_fields(r):
    """A typed ConfirmationRequest, in the vectors' names."""
    return {"id": r.id, "tool": r.tool, "arguments": json.loads(r.arguments_json),
            "arguments_digest": r.arguments_digest, "session_id": r.session_id, "deadline_ms": r.deadline_ms}


async def next_request(sub):
    while True:
        ev = await asyncio.wait_for(sub.next(), 5)
        assert ev is not None, "the subscription ended"
        if ev.is_request():
            return ev.request


@pytest.mark.parametrize("case", DURABLE["cases"], ids=lambda c: c["name"])
@async_test
async def test_durable_restart(case, tmp_path):
    name = case["name"]
    strict(case, DURABLE_FIELDS, name)
    strict(case["record"], ["state", "responder", "arguments"], f"{name}.record")
    assert case["recovered_as"] in RECOVERY_LISTS, name
    assert case.get("down_past_deadline", False) in (True, False), name
    assert case.get("register_after_restart", True) in (True, False), name
    specs = [so.tool_spec_from_json(json.dumps(t)) for t in DURABLE["tools"]]

    # Before the restart: the call is left pending, or approved and running.
    before = Counting(hold=True)
    a = so.Gate.open(config=so.GateConfig(store_path=str(tmp_path / "a.db")))
    for spec in specs:
        a.register_executable_tool(spec, before)
    sub_a = a.subscribe()
    handle = a.execute_cancellable(tool_call(case["call"], name))
    req = await next_request(sub_a)
    shown = request_fields(req)
    assert case["before_restart"] in ("pending", "executing"), name
    executing = case["before_restart"] == "executing"
    if executing:
        a.respond_json(json.dumps({"id": req.id, "decision": "approve", "responder": "alice"}))
        await asyncio.wait_for(before.started.wait(), 5)
    # It goes away: what is on disk now is what the next process finds.
    snapshot(tmp_path / "a.db", tmp_path / "b.db")
    before.release.set()
    a.close()
    await asyncio.wait_for(handle.wait(), 5)
    sub_a.close()
    assert before.runs == int(executing), f"{name}: runs before the restart"
    if case.get("down_past_deadline", False):
        await past(req.deadline_ms)

    # After the restart.
    after = Counting(hold=False)
    b = so.Gate.open(config=so.GateConfig(store_path=str(tmp_path / "b.db")))
    if case.get("register_after_restart", True):
        for spec in specs:
            b.register_executable_tool(spec, after)
    sub_b = b.subscribe()
    recovery = b.recover()
    for lst in RECOVERY_LISTS:
        assert len(getattr(recovery, lst)) == int(lst == case["recovered_as"]), f"{name}: recovery.{lst}"
    entry = getattr(recovery, case["recovered_as"])[0]
    found = entry if case["recovered_as"] in ("restored", "timed_out") else entry.request
    if case["recovered_as"] == "interrupted":
        assert record_state(entry.state) == case["found_state"], f"{name}: found in {entry.state}"
    else:
        assert "found_state" not in case, name
    if case["recovered_as"] == "not_restored":
        assert entry.reason, name
    assert request_fields(found) == shown, f"{name}: the recovered request"
    if case["recovered_as"] == "restored":
        again = await next_request(sub_b)
        assert again.id == req.id, f"{name}: the restored request is published again"
    req_json = {"id": req.id, "tool": req.tool, "arguments_digest": req.arguments_digest, "session_id": req.session_id}
    for i, step in enumerate(case["steps"]):
        what = f"{name}: step {i}"
        if "respond" in step:
            strict(step, ["respond", "error", "outcome"], what)
            body = json.dumps(substitute(step["respond"], req_json))
            if "error" in step:
                with pytest.raises(so.SignoffError) as e:
                    b.respond_json(body)
                assert kind(e.value) == step["error"], f"{what}: {e.value}"
            else:
                assert OUTCOME[b.respond_json(body)] == step["outcome"], what
        elif "wait_past_deadline" in step:
            strict(step, ["wait_past_deadline"], what)
            assert step["wait_past_deadline"] is True, what
            await past(req.deadline_ms)
        else:
            raise AssertionError(f"{what}: unknown step {step}")
    for _ in range(500):
        record = b.record(req.id)
        assert record is not None, f"{name}: no record"
        if record.is_final:
            break
        await asyncio.sleep(0.01)
    assert record.is_final, f"{name}: the record stays {record.state}"
    await asyncio.sleep(0.05)
    record = b.record(req.id)
    got = {"state": record_state(record.state), "responder": record.responder,
           "arguments": json.loads(record.arguments_json) if record.arguments_json is not None else None}
    for k, v in case["record"].items():
        assert got[k] == v, f"{name}: record.{k} is {got[k]!r}, expected {v!r}"
    assert after.runs == case["runs"], f"{name}: runs after the restart: {after.runs}"
    assert before.runs == int(executing), f"{name}: runs before the restart"
    sub_b.close()
    b.close()

    # Another restart: a settled request is never picked up again.
    later = Counting(hold=False)
    c = so.Gate.open(config=so.GateConfig(store_path=str(tmp_path / "b.db")))
    for spec in specs:
        c.register_executable_tool(spec, later)
    again = c.recover()
    for lst in RECOVERY_LISTS:
        assert getattr(again, lst) == [], f"{name}: recovery.{lst} after another restart"
    assert c.record(req.id).state == record.state, f"{name}: the record after another restart"
    await asyncio.sleep(0.05)
    assert later.runs == 0, f"{name}: runs after another restart"
    c.close()
