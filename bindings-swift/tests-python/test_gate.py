"""Behaviour of the uniffi surface the Swift package wraps, driven from Python over the same C ABI.

The XCTest suite (Tests/SignoffTests/SignoffTests.swift) covers the same cases in Swift.
"""

import asyncio
import gc
import json
import threading
import time
import uuid

import pytest

from conftest import async_test
import signoff_ffi as so

PATH_SCHEMA = json.dumps(
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"], "additionalProperties": False}
)


def delete_spec(**kw):
    kw.setdefault("parameters_json", PATH_SCHEMA)
    return so.ToolSpec(name="delete_file", description="Deletes a file", **kw)


def call(tool="delete_file", args=None, **kw):
    return so.ToolCall(tool=tool, arguments_json=json.dumps({"path": "/tmp/x"} if args is None else args), **kw)


def kind(err):
    return so.error_kind_name(err.kind())


def ev_kind(ev):
    return next(k for k in ("request", "response", "timeout", "resolved", "lagged") if getattr(ev, "is_" + k)())


def compact(v):
    """JSON text as the core writes it (the binding hands JSON back in serde_json's compact form)."""
    return json.dumps(v, separators=(",", ":"))


def fields(record):
    return vars(record)


async def next_event(sub, timeout=5.0):
    ev = await asyncio.wait_for(sub.next(), timeout)
    assert ev is not None, "subscription ended"
    return ev


async def published_pending(gate, n):
    """Waits until `n` requests are pending and published (a request is stored just before)."""
    for _ in range(200):
        if gate.pending_count() == n:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)


async def next_request(sub):
    while True:
        ev = await next_event(sub)
        if ev.is_request():
            return ev.request


async def events_until_resolved(sub, request_id):
    """Event kinds (after the request) up to and including this request's resolved event."""
    seen = []
    while True:
        ev = await next_event(sub)
        seen.append(ev)
        if ev.is_resolved() and ev.resolved.id == request_id:
            return seen


def gate_with_delete(**opts):
    gate = so.Gate.open(config=so.GateConfig(**opts)) if opts else so.Gate()
    gate.register_tool(delete_spec())
    return gate


class OnSettled(so.SettledListener):
    """A `SettledListener` from a function (the Swift extension's `OnSettled`)."""

    def __init__(self, body):
        self.body = body

    def settled(self):
        self.body()


class Sink(so.SettledSink):
    """The Swift extension's `Settlements`: one sink for the process, told each waiting call's
    token; here each token maps to a function."""

    def __init__(self):
        self.lock = threading.Lock()
        self.next = 0
        self.waiting = {}
        self.told = []

    def register(self, body):
        with self.lock:
            self.next += 1
            self.waiting[self.next] = body
            return self.next

    def settled(self, token):
        with self.lock:
            self.told.append(token)
            body = self.waiting.pop(token, None)
        if body is not None:
            body()


SINK = Sink()
SINK_ID = so.register_settled_sink(SINK)


async def confirm(gate, c):
    """What the Swift extension's `confirm(_:)` does: a continuation resumed through the
    process's `SettledSink` by token, then `decision()`; and cancel when the task is cancelled
    (Swift: withTaskCancellationHandler)."""
    pending = gate.confirm_cancellable(c)
    loop = asyncio.get_running_loop()
    settled = loop.create_future()

    def resume():
        if not settled.done():
            settled.set_result(None)

    pending.when_settled_token(SINK_ID, SINK.register(lambda: loop.call_soon_threadsafe(resume)))
    try:
        await settled
    except asyncio.CancelledError:
        pending.cancel()
        raise
    return pending.decision()


class Counter:
    """Counts `settled()` calls, from any thread; `wait_for(n)` until there were n."""

    def __init__(self):
        self.calls = 0
        self.listener = OnSettled(self._settled)

    def _settled(self):
        self.calls += 1

    async def wait_for(self, n, timeout=5.0):
        deadline = time.monotonic() + timeout
        while self.calls < n:
            assert time.monotonic() < deadline, f"settled() called {self.calls} times, expected {n}"
            await asyncio.sleep(0.005)


# --------------------------------------------------------------------------------------------
# confirm / respond


@async_test
async def test_confirm_approve():
    gate = gate_with_delete()
    sub = gate.subscribe()
    pending = gate.confirm_cancellable(call(call_id="call_1", session_id="s1"))
    req = await next_request(sub)
    assert req.tool == "delete_file"
    assert json.loads(req.arguments_json) == {"path": "/tmp/x"}
    assert req.tool_call_id == "call_1" and req.session_id == "s1"
    assert req.arguments_digest.startswith("sha256:")
    assert "delete_file" in req.prompt and req.reasons
    assert [r.id for r in gate.pending()] == [req.id]
    assert gate.approve(req, responder="alice") == so.Outcome.APPROVED
    d = await pending.wait()
    assert d.is_approved() and d.outcome() == so.Outcome.APPROVED
    assert isinstance(d, so.Decision.APPROVED)
    assert d.request_id == req.id and d.by == so.ApprovedBy.PERSON and d.responder == "alice"
    assert json.loads(d.arguments_json) == {"path": "/tmp/x"} and d.edited is False
    assert gate.pending_count() == 0
    # wait() can be called again and gives the same decision
    assert await pending.wait() == d


@async_test
async def test_deny_with_reason():
    gate = gate_with_delete()
    sub = gate.subscribe()
    pending = gate.confirm_cancellable(call())
    req = await next_request(sub)
    assert gate.deny(req, reason="not that file", responder="bob") == so.Outcome.DENIED
    d = await pending.wait()
    assert isinstance(d, so.Decision.DENIED) and not d.is_approved()
    assert d.reason == "not that file" and d.responder == "bob" and d.request_id == req.id
    kinds = [ev_kind(e) for e in await events_until_resolved(sub, req.id)]
    assert kinds == ["response", "resolved"]


@async_test
async def test_decision_accessors_are_the_cores():
    gate = gate_with_delete()
    sub = gate.subscribe()
    p = gate.confirm_cancellable(call())
    req = await next_request(sub)
    gate.approve(req, scope=so.Scope.SESSION, responder="alice")
    d = await p.wait()
    # In Python a variant's fields shadow the enum's methods of the same name, so they are called
    # through the class here; Swift calls them on the value (`decision.responder()`).
    D = so.Decision
    assert D.is_approved(d) and D.outcome(d) == so.Outcome.APPROVED and D.request_id(d) == req.id
    assert D.responder(d) == "alice" and D.scope(d) == so.Scope.SESSION and D.approved_by(d) == so.ApprovedBy.PERSON
    assert D.reason(d) is None and D.cancel_reason(d) is None and D.timeout_ms(d) is None and D.edited(d) is False
    # Every variant, also made up on the Swift side (ids that are no UUIDs, arguments that are no
    # JSON): the accessors never fail.
    denied = D.DENIED(request_id="r1", reason="no", responder="bob")
    assert (D.outcome(denied), D.request_id(denied), D.reason(denied), D.responder(denied)) == (
        so.Outcome.DENIED, "r1", "no", "bob")
    assert D.scope(denied) == so.Scope.ONCE and D.approved_by(denied) is None and not D.is_approved(denied)
    timed_out = D.TIMED_OUT(request_id="r2", timeout_ms=5)
    assert (D.outcome(timed_out), D.timeout_ms(timed_out), D.responder(timed_out)) == (so.Outcome.TIMED_OUT, 5, None)
    cancelled = D.CANCELLED(request_id=None, reason=so.CancelReason.ABORTED)
    assert D.cancel_reason(cancelled) == so.CancelReason.ABORTED and D.request_id(cancelled) is None
    assert D.outcome(cancelled) == so.Outcome.CANCELLED and D.reason(cancelled) is None
    made_up = D.APPROVED(request_id="x", arguments_json="not json", edited=True, by=so.ApprovedBy.SESSION_GRANT,
                         scope=so.Scope.ONCE, responder=None)
    assert D.edited(made_up) and D.request_id(made_up) == "x" and D.approved_by(made_up) == so.ApprovedBy.SESSION_GRANT


@async_test
async def test_typed_response_and_respond_json():
    gate = gate_with_delete()
    sub = gate.subscribe()
    p1 = gate.confirm_cancellable(call(args={"path": "/a"}))
    r1 = await next_request(sub)
    p2 = gate.confirm_cancellable(call(args={"path": "/b"}))
    r2 = await next_request(sub)
    resp = so.approve_response(r1)
    assert (resp.id, resp.tool, resp.arguments_digest, resp.session_id) == (r1.id, r1.tool, r1.arguments_digest, r1.session_id)
    assert gate.respond(resp) == so.Outcome.APPROVED
    assert gate.respond_json(json.dumps({"type": "confirmation-response", "id": r2.id, "decision": "deny", "reason": "no"})) == so.Outcome.DENIED
    assert (await p1.wait()).is_approved()
    d2 = await p2.wait()
    assert isinstance(d2, so.Decision.DENIED) and d2.reason == "no"


@async_test
async def test_not_gated_runs_without_request():
    gate = so.Gate()
    gate.register_tool(so.ToolSpec(name="read_file"))
    sub = gate.subscribe()
    d = await gate.confirm_cancellable(call("read_file")).wait()
    assert isinstance(d, so.Decision.APPROVED) and d.by == so.ApprovedBy.NOT_GATED and d.request_id is None
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(sub.next(), 0.2)


@async_test
async def test_edited_arguments():
    gate = so.Gate()
    gate.register_tool(delete_spec(editable=True))
    sub = gate.subscribe()
    pending = gate.confirm_cancellable(call(args={"path": "/etc/passwd"}))
    req = await next_request(sub)
    assert req.editable
    # edits are validated against the schema; the request stays pending after a rejection
    with pytest.raises(so.SignoffError.InvalidArguments):
        gate.approve(req, arguments_json=json.dumps({"path": 3}))
    assert gate.approve(req, arguments_json=json.dumps({"path": "/tmp/safe"})) == so.Outcome.APPROVED
    d = await pending.wait()
    assert d.edited and json.loads(d.arguments_json) == {"path": "/tmp/safe"}


@async_test
async def test_session_grant_and_end_session():
    gate = gate_with_delete()
    sub = gate.subscribe()
    p = gate.confirm_cancellable(call(session_id="s1"))
    req = await next_request(sub)
    gate.approve(req, scope=so.Scope.SESSION)
    d = await p.wait()
    assert d.scope == so.Scope.SESSION
    assert gate.grants("s1") == ["delete_file"]
    d2 = await gate.confirm_cancellable(call(session_id="s1")).wait()
    assert d2.by == so.ApprovedBy.SESSION_GRANT
    # another session is asked again
    p3 = gate.confirm_cancellable(call(session_id="s2"))
    req3 = await next_request(sub)
    assert req3.session_id == "s2"
    assert gate.end_session("s2") == 1
    d3 = await p3.wait()
    assert isinstance(d3, so.Decision.CANCELLED) and d3.reason == so.CancelReason.SESSION_ENDED
    assert gate.revoke_grant("s1", "delete_file") is True
    assert gate.grants("s1") == []


# --------------------------------------------------------------------------------------------
# every rejection error kind


def test_error_kind_names_cover_the_core():
    names = {so.error_kind_name(k) for k in so.ErrorKind}
    assert names == {
        "unknown_tool", "invalid_tool", "invalid_arguments", "unknown_request", "already_resolved",
        "expired", "edits_not_allowed", "mismatch", "malformed", "unauthorized", "closed", "store",
        "no_executor", "bad_signature", "unknown_key", "token_expired", "wrong_approver", "already_used",
        "not_pending", "config", "io",
    }


@async_test
async def test_unknown_tool():
    gate = so.Gate()
    with pytest.raises(so.SignoffError.UnknownTool) as e:
        await gate.confirm_cancellable(call("nope")).wait()
    assert kind(e.value) == "unknown_tool" and "nope" in str(e.value)
    with pytest.raises(so.SignoffError.UnknownTool):
        gate.evaluate(call("nope"))


def test_invalid_tool():
    gate = so.Gate()
    with pytest.raises(so.SignoffError.InvalidTool) as e:
        gate.register_tool(so.ToolSpec(name="x", parameters_json=json.dumps({"type": 12})))
    assert kind(e.value) == "invalid_tool"
    with pytest.raises(so.SignoffError.InvalidTool):
        gate.register_tool(so.ToolSpec(name="  "))
    with pytest.raises(so.SignoffError.InvalidTool):
        gate.register_tool(so.ToolSpec(name="x", parameters_json="{not json"))
    with pytest.raises(so.SignoffError.InvalidTool):
        gate.register_tool(so.ToolSpec(name="x", rules=[so.ArgRule.PATH_OUTSIDE(pointer="/p", prefixes=["relative"])]))
    # A tool's timeout has the gate default's bounds, checked by the core: 1 ms to 30 days.
    for timeout_ms in (0, 30 * 24 * 3600 * 1000 + 1):
        with pytest.raises(so.SignoffError.InvalidTool, match="timeout_ms"):
            gate.register_tool(so.ToolSpec(name="slow", timeout_ms=timeout_ms))
    # A threshold no amount exceeds would never ask for approval: refused, as JSON refuses it elsewhere.
    for value in (float("nan"), float("inf"), float("-inf")):
        with pytest.raises(so.SignoffError.InvalidTool, match="finite"):
            gate.register_tool(so.ToolSpec(name="pay", rules=[so.ArgRule.GREATER_THAN(pointer="/amount", value=value)]))
    with pytest.raises(so.SignoffError.Malformed):
        gate.register_tool_json(json.dumps({"name": "x", "aproval": "required"}))
    assert gate.tools() == []


@async_test
async def test_invalid_arguments():
    gate = gate_with_delete()
    sub = gate.subscribe()
    with pytest.raises(so.SignoffError.InvalidArguments) as e:
        await gate.confirm_cancellable(call(args={"path": 42})).wait()
    assert kind(e.value) == "invalid_arguments"
    with pytest.raises(so.SignoffError.Malformed):
        gate.confirm_cancellable(so.ToolCall(tool="delete_file", arguments_json="{oops"))
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(sub.next(), 0.2)  # nobody was asked


def test_unknown_request():
    gate = gate_with_delete()
    resp = so.ConfirmationResponse(id=str(uuid.uuid4()), decision=so.ResponseDecision.APPROVE, scope=so.Scope.ONCE)
    with pytest.raises(so.SignoffError.UnknownRequest) as e:
        gate.respond(resp)
    assert kind(e.value) == "unknown_request"
    assert gate.cancel_request(str(uuid.uuid4())) is False


@async_test
async def test_already_resolved():
    gate = gate_with_delete()
    sub = gate.subscribe()
    p = gate.confirm_cancellable(call())
    req = await next_request(sub)
    gate.approve(req)
    with pytest.raises(so.SignoffError.AlreadyResolved) as e:
        gate.deny(req)
    assert kind(e.value) == "already_resolved"
    assert (await p.wait()).is_approved()


@async_test
async def test_expired_and_timeout():
    gate = so.Gate()
    gate.register_tool(delete_spec(timeout_ms=150))
    sub = gate.subscribe()
    p = gate.confirm_cancellable(call())
    req = await next_request(sub)
    assert req.timeout_ms == 150 and req.deadline_ms - req.created_at_ms == 150
    d = await p.wait()
    assert isinstance(d, so.Decision.TIMED_OUT) and d.timeout_ms == 150 and d.request_id == req.id
    kinds = [ev_kind(e) for e in await events_until_resolved(sub, req.id)]
    assert kinds == ["timeout", "resolved"]
    with pytest.raises(so.SignoffError.Expired) as e:
        gate.approve(req)
    assert kind(e.value) == "expired"


@async_test
async def test_edits_not_allowed():
    gate = gate_with_delete()
    sub = gate.subscribe()
    p = gate.confirm_cancellable(call())
    req = await next_request(sub)
    assert not req.editable
    with pytest.raises(so.SignoffError.EditsNotAllowed) as e:
        gate.approve(req, arguments_json=json.dumps({"path": "/other"}))
    assert kind(e.value) == "edits_not_allowed"
    # the same arguments are not an edit
    assert gate.approve(req, arguments_json=req.arguments_json) == so.Outcome.APPROVED
    assert not (await p.wait()).edited


@async_test
async def test_mismatch():
    gate = gate_with_delete()
    sub = gate.subscribe()
    p = gate.confirm_cancellable(call(session_id="s1"))
    req = await next_request(sub)
    base = so.approve_response(req)
    for field, value in [("tool", "other_tool"), ("arguments_digest", "sha256:00"), ("session_id", "s2")]:
        resp = so.approve_response(req)
        setattr(resp, field, value)
        with pytest.raises(so.SignoffError.Mismatch) as e:
            gate.respond(resp)
        assert kind(e.value) == "mismatch" and field in str(e.value)
    assert gate.respond(base) == so.Outcome.APPROVED
    assert (await p.wait()).is_approved()


@async_test
async def test_malformed():
    gate = gate_with_delete()
    sub = gate.subscribe()
    p = gate.confirm_cancellable(call())
    req = await next_request(sub)
    for bad in ["not json", "[]", json.dumps({"id": req.id}), json.dumps({"id": req.id, "decision": "approve", "extra": 1}),
                json.dumps({"type": "confirmation-request", "id": req.id, "decision": "approve"})]:
        with pytest.raises(so.SignoffError.Malformed) as e:
            gate.respond_json(bad)
        assert kind(e.value) == "malformed"
    with pytest.raises(so.SignoffError.Malformed):  # a denial cannot carry edited arguments
        gate.respond_json(json.dumps({"id": req.id, "decision": "deny", "arguments": {"path": "/x"}}))
    with pytest.raises(so.SignoffError.UnknownRequest, match="no such confirmation request"):  # not a UUID: no such request
        gate.respond(so.ConfirmationResponse(id="nope", decision=so.ResponseDecision.DENY, scope=so.Scope.ONCE))
    assert gate.pending_count() == 1
    gate.deny(req)
    assert isinstance(await p.wait(), so.Decision.DENIED)


@async_test
async def test_unauthorized():
    gate = gate_with_delete(allowed_responders=["alice"])
    sub = gate.subscribe()
    p = gate.confirm_cancellable(call())
    req = await next_request(sub)
    with pytest.raises(so.SignoffError.Unauthorized) as e:
        gate.approve(req, responder="mallory")
    assert kind(e.value) == "unauthorized"
    with pytest.raises(so.SignoffError.Unauthorized):
        gate.approve(req)
    assert gate.approve(req, responder="alice") == so.Outcome.APPROVED
    assert (await p.wait()).responder == "alice"


@async_test
async def test_closed():
    gate = gate_with_delete()
    sub = gate.subscribe()
    p = gate.confirm_cancellable(call())
    req = await next_request(sub)
    gate.close()
    assert gate.is_closed()
    d = await p.wait()
    assert isinstance(d, so.Decision.CANCELLED) and d.reason == so.CancelReason.SHUTDOWN
    with pytest.raises(so.SignoffError.Closed) as e:
        gate.approve(req)
    assert kind(e.value) == "closed"
    d2 = await gate.confirm_cancellable(call()).wait()
    assert isinstance(d2, so.Decision.CANCELLED) and d2.reason == so.CancelReason.SHUTDOWN


@async_test
async def test_a_closed_gate_runs_nothing_that_needs_approval_even_under_a_session_grant():
    gate = gate_with_delete()
    sub = gate.subscribe()
    p = gate.confirm_cancellable(call(session_id="s1"))
    gate.approve(await next_request(sub), scope=so.Scope.SESSION)
    assert (await p.wait()).scope == so.Scope.SESSION
    assert (await gate.confirm_cancellable(call(session_id="s1")).wait()).by == so.ApprovedBy.SESSION_GRANT
    gate.close()
    d = await gate.confirm_cancellable(call(session_id="s1")).wait()
    assert isinstance(d, so.Decision.CANCELLED) and d.reason == so.CancelReason.SHUTDOWN


@async_test
async def test_no_executor():
    gate = gate_with_delete()
    r = await gate.execute_cancellable(call(call_id="c1")).wait()
    assert r.status == so.ToolStatus.REJECTED and r.error_kind == so.ErrorKind.NO_EXECUTOR
    assert r.is_error and r.call_id == "c1" and "did not run" in r.content


# --------------------------------------------------------------------------------------------
# cancellation, unobserved requests


@async_test
async def test_cancel_handle():
    gate = gate_with_delete()
    sub = gate.subscribe()
    p = gate.confirm_cancellable(call())
    req = await next_request(sub)
    p.cancel()
    d = await p.wait()
    assert isinstance(d, so.Decision.CANCELLED) and d.reason == so.CancelReason.ABORTED
    events = await events_until_resolved(sub, req.id)
    assert events[-1].resolved.outcome == so.Outcome.CANCELLED
    assert events[-1].resolved.cancel_reason == so.CancelReason.ABORTED
    assert gate.pending_count() == 0 and p.is_finished()
    with pytest.raises(so.SignoffError.AlreadyResolved):
        gate.approve(req)


@async_test
async def test_task_cancel_cancels_confirmation():
    gate = gate_with_delete()
    sub = gate.subscribe()
    task = asyncio.create_task(confirm(gate, call()))
    req = await next_request(sub)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    resolved = (await events_until_resolved(sub, req.id))[-1].resolved
    assert resolved.cancel_reason == so.CancelReason.ABORTED
    assert gate.pending_count() == 0


@async_test
async def test_dropping_the_handle_cancels():
    gate = gate_with_delete()
    sub = gate.subscribe()
    p = gate.confirm_cancellable(call())
    req = await next_request(sub)
    del p
    gc.collect()
    resolved = (await events_until_resolved(sub, req.id))[-1].resolved
    assert resolved.cancel_reason == so.CancelReason.ABORTED


@async_test
async def test_when_settled_tells_each_listener_once_then_decision_is_in():
    gate = gate_with_delete()
    sub = gate.subscribe()
    p = gate.confirm_cancellable(call())
    req = await next_request(sub)
    first, second = Counter(), Counter()
    p.when_settled(first.listener)
    p.when_settled(second.listener)
    await asyncio.sleep(0.05)
    assert first.calls == 0 and p.decision() is None and not p.is_finished()
    gate.approve(req, responder="alice")
    await first.wait_for(1)
    await second.wait_for(1)
    d = p.decision()
    assert d.is_approved() and d.request_id == req.id and d.responder == "alice"
    # Already settled: told at once, from this call.
    late = Counter()
    p.when_settled(late.listener)
    assert late.calls == 1
    await asyncio.sleep(0.05)
    assert (first.calls, second.calls, late.calls) == (1, 1, 1)
    assert (await p.wait()).is_approved()


@async_test
async def test_settled_sink_is_told_each_token_once():
    gate = gate_with_delete()
    sub = gate.subscribe()
    p = gate.confirm_cancellable(call())
    req = await next_request(sub)
    first, second = Counter(), Counter()
    t1, t2 = SINK.register(first.listener.settled), SINK.register(second.listener.settled)
    p.when_settled_token(SINK_ID, t1)
    p.when_settled_token(SINK_ID, t2)
    await asyncio.sleep(0.05)
    assert first.calls == 0 and second.calls == 0 and p.decision() is None
    gate.deny(req, reason="no")
    await first.wait_for(1)
    await second.wait_for(1)
    d = p.decision()
    assert isinstance(d, so.Decision.DENIED) and d.request_id == req.id
    # Already settled: told at once, from this call.
    late = Counter()
    t3 = SINK.register(late.listener.settled)
    p.when_settled_token(SINK_ID, t3)
    assert late.calls == 1
    await asyncio.sleep(0.05)
    assert (first.calls, second.calls, late.calls) == (1, 1, 1)
    assert [SINK.told.count(t) for t in (t1, t2, t3)] == [1, 1, 1]
    # Executions and batches too, including one cancelled while it waits.
    gate = so.Gate()
    ex = Exec(lambda a: "ran")
    gate.register_executable_tool(delete_spec(), ex)
    sub = gate.subscribe()
    ran, cancelled, batch = Counter(), Counter(), Counter()
    x = gate.execute_cancellable(call(call_id="c1"))
    x.when_settled_token(SINK_ID, SINK.register(ran.listener.settled))
    gate.approve(await next_request(sub))
    await ran.wait_for(1)
    assert x.result().status == so.ToolStatus.EXECUTED and len(ex.calls) == 1
    q = gate.execute_cancellable(call())
    q.when_settled_token(SINK_ID, SINK.register(cancelled.listener.settled))
    await next_request(sub)
    q.cancel()
    await cancelled.wait_for(1)
    assert q.is_finished() and q.result() is None and len(ex.calls) == 1
    b = gate.execute_batch_cancellable([call(call_id="b1")])
    b.when_settled_token(SINK_ID, SINK.register(batch.listener.settled))
    gate.approve(await next_request(sub))
    await batch.wait_for(1)
    assert [r.call_id for r in b.results()] == ["b1"] and len(ex.calls) == 2


@async_test
async def test_many_confirms_resume_their_own_calls():
    # The extension's `confirm` waits through one sink for the process: each call must be
    # resumed with its own decision.
    gate = gate_with_delete()
    sub = gate.subscribe()
    paths = [f"/tmp/{i}" for i in range(40)]
    calls = [asyncio.ensure_future(confirm(gate, call(args={"path": p}))) for p in paths]
    for _ in paths:
        req = await next_request(sub)
        path = json.loads(req.arguments_json)["path"]
        if path.endswith("7"):
            gate.deny(req, reason=path)
        else:
            gate.approve(req)
    for path, d in zip(paths, await asyncio.gather(*calls)):
        if path.endswith("7"):
            assert isinstance(d, so.Decision.DENIED) and d.reason == path
        else:
            assert d.is_approved(), path


def test_settled_sink_ids_are_checked_and_registrations_bounded():
    gate = gate_with_delete()
    p = gate.confirm_cancellable(call())
    with pytest.raises(so.SignoffError.Config):
        p.when_settled_token(SINK_ID + 1000, 1)
    # Registering one per call would leak: the library stops at 64 per process.
    ids = []
    with pytest.raises(so.SignoffError.Config):
        for _ in range(65):
            ids.append(so.register_settled_sink(Sink()))
    assert len(ids) < 64 and ids == sorted(set(ids)) and SINK_ID not in ids
    p.cancel()


@async_test
async def test_waits_given_up_leave_the_call_waiting():
    gate = gate_with_delete()
    sub = gate.subscribe()
    p = gate.confirm_cancellable(call())
    req = await next_request(sub)
    for _ in range(5):
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(p.wait(), 0.01)
    assert gate.pending_count() == 1 and not p.is_finished()
    waiting = asyncio.ensure_future(p.wait())
    gate.approve(req)
    assert (await asyncio.wait_for(waiting, 5)).is_approved()


@async_test
async def test_when_settled_on_cancel_close_and_refusal():
    gate = gate_with_delete()
    sub = gate.subscribe()
    cancelled, closed, refused = Counter(), Counter(), Counter()
    p1 = gate.confirm_cancellable(call())
    p1.when_settled(cancelled.listener)
    req1 = await next_request(sub)
    p1.cancel()
    await cancelled.wait_for(1)
    d = p1.decision()
    assert isinstance(d, so.Decision.CANCELLED) and d.reason == so.CancelReason.ABORTED and d.request_id is None
    assert (await events_until_resolved(sub, req1.id))[-1].resolved.cancel_reason == so.CancelReason.ABORTED
    # Refused before anyone is asked: settled too, and decision() raises what wait() would.
    p3 = gate.confirm_cancellable(call(args={"path": 7}))
    p3.when_settled(refused.listener)
    await refused.wait_for(1)
    with pytest.raises(so.SignoffError.InvalidArguments):
        p3.decision()
    p2 = gate.confirm_cancellable(call())
    p2.when_settled(closed.listener)
    await next_request(sub)
    gate.close()
    await closed.wait_for(1)
    d = p2.decision()
    assert isinstance(d, so.Decision.CANCELLED) and d.reason == so.CancelReason.SHUTDOWN


@async_test
async def test_cancel_after_decision_keeps_decision():
    gate = gate_with_delete()
    sub = gate.subscribe()
    p = gate.confirm_cancellable(call())
    req = await next_request(sub)
    gate.approve(req)
    (await events_until_resolved(sub, req.id))
    await asyncio.sleep(0.05)
    p.cancel()
    assert (await p.wait()).is_approved()


@async_test
async def test_a_closed_gate_has_no_approvers():
    # nothing is asked once closed: nobody attached before or after counts (the core's count)
    gate = gate_with_delete()
    sub = gate.subscribe()
    assert gate.approver_count() == 1
    gate.close()
    assert gate.approver_count() == 0
    late = gate.subscribe()
    assert gate.approver_count() == 0
    sub.close()
    late.close()


@async_test
async def test_no_subscribers_cancels():
    gate = gate_with_delete()
    d = await gate.confirm_cancellable(call()).wait()
    assert isinstance(d, so.Decision.CANCELLED) and d.reason == so.CancelReason.NO_APPROVER
    # the last subscriber going away cancels what is pending
    sub = gate.subscribe()
    p = gate.confirm_cancellable(call())
    await next_request(sub)
    assert gate.approver_count() == 1
    sub.close()
    assert gate.approver_count() == 0
    d = await p.wait()
    assert isinstance(d, so.Decision.CANCELLED) and d.reason == so.CancelReason.NO_APPROVER
    assert await sub.next() is None


@async_test
async def test_unobserved_requests_wait_when_configured():
    gate = gate_with_delete(deny_when_unobserved=False)
    p = gate.confirm_cancellable(call())
    for _ in range(100):
        if gate.pending_count():
            break
        await asyncio.sleep(0.01)
    [req] = gate.pending()
    assert gate.approve(req) == so.Outcome.APPROVED
    assert (await p.wait()).is_approved()


# --------------------------------------------------------------------------------------------
# event stream


@async_test
async def test_event_stream_order_and_close():
    gate = gate_with_delete()
    sub = gate.subscribe()
    other = gate.subscribe()
    p = gate.confirm_cancellable(call())
    req = await next_request(sub)
    gate.approve(req, responder="alice")
    await p.wait()
    evs = await events_until_resolved(sub, req.id)
    assert [ev_kind(e) for e in evs] == ["response", "resolved"]
    assert evs[0].response.responder == "alice" and evs[0].response.at_ms is not None
    assert evs[1].resolved.outcome == so.Outcome.APPROVED and evs[1].resolved.responder == "alice"
    # the other subscriber saw the same events, in order
    seen = [await next_event(other) for _ in range(3)]
    assert [ev_kind(e) for e in seen] == ["request", "response", "resolved"]
    # close() ends a next() that is waiting
    waiter = asyncio.create_task(other.next())
    await asyncio.sleep(0.05)
    other.close()
    assert await asyncio.wait_for(waiter, 2) is None
    assert gate.approver_count() == 1


@async_test
async def test_a_subscription_for_some_types_gets_only_those_and_still_hears_of_a_lag():
    gate = gate_with_delete()
    every = gate.observe()
    requests = gate.subscribe_only([so.EventType.REQUEST])
    assert gate.approver_count() == 1
    for path in ("/a", "/b"):
        p = gate.confirm_cancellable(call(args={"path": path}))
        ev = await next_event(requests)  # the second request comes right after the first
        assert ev.is_request() and json.loads(ev.request.arguments_json) == {"path": path}
        assert gate.approve(ev.request) == so.Outcome.APPROVED
        assert (await p.wait()).is_approved()
    kinds = [ev_kind(await next_event(every)) for _ in range(6)]
    assert kinds == ["request", "response", "resolved"] * 2
    requests.close()
    every.close()
    gate.close()

    gate = gate_with_delete(bus_capacity=2, deny_when_unobserved=False)
    nothing = gate.observe_only([])
    handles = [gate.confirm_cancellable(call(args={"path": f"/{i}"})) for i in range(4)]
    await published_pending(gate, 4)
    ev = await next_event(nothing)
    assert ev.is_lagged() and len(ev.pending) == 4
    for h in handles:
        h.cancel()
    gate.close()


@async_test
async def test_observers_are_not_approvers_and_subscriptions_end_with_the_gate():
    gate = gate_with_delete()
    watch = gate.observe()
    assert gate.approver_count() == 0
    d = await gate.confirm_cancellable(call()).wait()  # only an observer: nobody can approve
    assert isinstance(d, so.Decision.CANCELLED) and d.reason == so.CancelReason.NO_APPROVER
    assert (await next_event(watch)).is_request()  # but it saw the request
    sub = gate.subscribe()
    assert gate.approver_count() == 1
    watch.close()
    watch.close()  # idempotent
    assert gate.approver_count() == 1 and await watch.next() is None  # an observer detaches no approver
    p = gate.confirm_cancellable(call())
    req = await next_request(sub)
    late = gate.subscribe()
    gate.close()
    # A subscription delivers what was published before the close, then ends.
    kinds = []
    while (ev := await asyncio.wait_for(sub.next(), 2)) is not None:
        kinds.append(ev_kind(ev))
    assert kinds == ["resolved"]
    assert await asyncio.wait_for(late.next(), 2) is not None  # the same cancellation ...
    assert await asyncio.wait_for(late.next(), 2) is None  # ... then the end
    assert await asyncio.wait_for(gate.subscribe().next(), 2) is None  # subscribed after the close
    d = await p.wait()
    assert isinstance(d, so.Decision.CANCELLED) and d.reason == so.CancelReason.SHUTDOWN and d.request_id == req.id


@async_test
async def test_lagged_subscriber_gets_pending_snapshot():
    gate = gate_with_delete(bus_capacity=2, deny_when_unobserved=False)
    sub = gate.subscribe()
    handles = [gate.confirm_cancellable(call(args={"path": f"/{i}"})) for i in range(4)]
    await published_pending(gate, 4)
    ev = await next_event(sub)
    assert ev.is_lagged() and ev.missed >= 1
    assert sorted(json.loads(r.arguments_json)["path"] for r in ev.pending) == ["/0", "/1", "/2", "/3"]
    assert ev.more is None  # the snapshot holds every pending request
    for h in handles:
        h.cancel()


async def wait_pending(gate, n):
    for _ in range(1000):
        if gate.pending_count() == n:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{gate.pending_count()} pending, expected {n}")


@async_test
async def test_lagged_snapshot_is_bounded_and_continues_in_pages():
    gate = gate_with_delete(bus_capacity=2, deny_when_unobserved=False)
    sub = gate.subscribe()
    handles = [gate.confirm_cancellable(call(args={"path": f"/{i}"})) for i in range(1100)]
    await wait_pending(gate, 1100)
    await asyncio.sleep(0.05)  # a request is stored just before it is published
    ev = await next_event(sub)
    assert ev.is_lagged() and ev.missed >= 1
    assert len(ev.pending) == 1000 and ev.more is not None
    assert ev.more == f"{ev.pending[-1].created_at_ms}-{ev.pending[-1].id}"
    rest = gate.pending_page(after=ev.more, limit=1000)
    assert len(rest.requests) == 100 and rest.next is None
    seen = [r.id for r in ev.pending] + [r.id for r in rest.requests]
    assert seen == [r.id for r in gate.pending()]
    gate.close()
    del handles


# --------------------------------------------------------------------------------------------
# pending requests in pages


@async_test
async def test_pending_page_walks_every_request_once_oldest_first():
    gate = gate_with_delete(deny_when_unobserved=False)
    handles = [gate.confirm_cancellable(call(args={"path": f"/{i}"})) for i in range(2500)]
    await wait_pending(gate, 2500)
    pages, after = [], None
    while True:
        page = gate.pending_page(after=after, limit=1000)
        pages.append(page.requests)
        if page.next is None:
            break
        assert page.next == f"{page.requests[-1].created_at_ms}-{page.requests[-1].id}"
        after = page.next
    assert [len(p) for p in pages] == [1000, 1000, 500]
    walked = [r for p in pages for r in p]
    assert len({r.id for r in walked}) == 2500
    assert [r.id for r in walked] == [r.id for r in gate.pending()]
    order = [(r.created_at_ms, uuid.UUID(r.id)) for r in walked]
    assert order == sorted(order)
    # defaults: from the oldest, 1,000 at a time; a limit of 0 is refused, as in every language
    first = gate.pending_page()
    assert [r.id for r in first.requests] == [r.id for r in pages[0]]
    with pytest.raises(so.SignoffError.Malformed, match="limit"):
        gate.pending_page(limit=0)
    assert len(gate.pending_page(limit=2**32 - 1).requests) == 2500
    # a request answered between pages is simply not there; nothing is skipped or repeated
    gate.approve(pages[1][0])
    second = gate.pending_page(after=first.next, limit=1000)
    assert [r.id for r in second.requests] == [r.id for r in pages[1][1:]] + [pages[2][0].id]
    gate.close()
    del handles


def test_pending_page_refuses_a_bad_cursor():
    gate = gate_with_delete(deny_when_unobserved=False)
    for bad in ["garbage", "", "123", "123-not-a-uuid", f"x-{uuid.uuid4()}", f"-1-{uuid.uuid4()}"]:
        with pytest.raises(so.SignoffError.Malformed) as e:
            gate.pending_page(after=bad, limit=10)
        assert kind(e.value) == "malformed"
    # a well-formed cursor past every request: an empty last page
    page = gate.pending_page(after=f"{2**63}-{uuid.uuid4()}", limit=10)
    assert page.requests == [] and page.next is None


# --------------------------------------------------------------------------------------------
# foreign handler


class Approver(so.ApprovalHandler):
    def __init__(self):
        self.seen = []

    async def handle(self, request):
        self.seen.append(request.request().id)
        await asyncio.sleep(0.01)  # a real await on the Python loop
        assert request.is_pending()
        request.approve_with(responder="py-handler")


class Silent(so.ApprovalHandler):
    async def handle(self, request):
        return None


class Raises(so.ApprovalHandler):
    async def handle(self, request):
        raise ValueError("ui crashed")


class RaisesCallbackError(so.ApprovalHandler):
    async def handle(self, request):
        raise so.CallbackError.Failed("window closed")


@async_test
async def test_foreign_handler_approves():
    gate = gate_with_delete()
    handler = Approver()
    reg = gate.on_request(handler)
    assert reg.is_active()
    d = await gate.confirm_cancellable(call()).wait()
    assert d.is_approved() and d.responder == "py-handler"
    assert handler.seen == [d.request_id]
    reg.stop()
    assert not reg.is_active()
    # without the handler (its subscription is gone) nobody observes: cancelled
    d2 = await gate.confirm_cancellable(call()).wait()
    assert isinstance(d2, so.Decision.CANCELLED) and d2.reason == so.CancelReason.NO_APPROVER


async def resolved_for(sub, request_id):
    return (await events_until_resolved(sub, request_id))[-1].resolved


@async_test
async def test_foreign_handler_that_does_not_answer_fails_the_approval():
    gate = gate_with_delete()
    sub = gate.subscribe()
    reg = gate.on_request(Silent())
    d = await gate.confirm_cancellable(call()).wait()
    assert isinstance(d, so.Decision.CANCELLED) and d.reason == so.CancelReason.APPROVAL_FAILED
    assert d.request_id is not None
    resolved = await resolved_for(sub, d.request_id)
    assert resolved.outcome == so.Outcome.CANCELLED and resolved.cancel_reason == so.CancelReason.APPROVAL_FAILED
    assert resolved.reason is None  # the detail goes to the audit log, not to the events or the model
    reg.stop()


@async_test
async def test_foreign_handler_that_throws_fails_the_approval():
    gate = so.Gate()
    ex = Exec(lambda a: "ran")
    gate.register_executable_tool(delete_spec(), ex)
    reg = gate.on_request(Raises())
    d = await gate.confirm_cancellable(call()).wait()
    assert isinstance(d, so.Decision.CANCELLED) and d.reason == so.CancelReason.APPROVAL_FAILED
    r = await gate.execute_cancellable(call()).wait()
    assert r.status == so.ToolStatus.CANCELLED and r.is_error and ex.calls == []
    assert isinstance(r.decision, so.Decision.CANCELLED) and r.decision.reason == so.CancelReason.APPROVAL_FAILED
    assert "approval step failed" in r.content and "ui crashed" not in r.content
    reg.stop()
    reg2 = gate.on_request(RaisesCallbackError())
    r = await gate.execute_cancellable(call()).wait()
    assert r.status == so.ToolStatus.CANCELLED and r.decision.reason == so.CancelReason.APPROVAL_FAILED
    assert "window closed" not in r.content and "window closed" not in (r.error or "")
    assert ex.calls == []
    reg2.stop()


@async_test
async def test_throwing_handler_with_allowed_responders_fails_at_once():
    # The handler's failure is not a response: the authenticator (only "alice" may answer) does
    # not hold it back, so the call ends at once instead of waiting for its deadline.
    gate = so.Gate.open(config=so.GateConfig(allowed_responders=["alice"]))
    ex = Exec(lambda a: "ran")
    gate.register_executable_tool(delete_spec(timeout_ms=5000), ex)
    reg = gate.on_request(Raises())
    t0 = time.monotonic()
    r = await gate.execute_cancellable(call(call_id="c1")).wait()
    assert time.monotonic() - t0 < 2, "the call waited for its deadline"
    assert r.status == so.ToolStatus.CANCELLED and r.call_id == "c1"
    assert isinstance(r.decision, so.Decision.CANCELLED) and r.decision.reason == so.CancelReason.APPROVAL_FAILED
    assert ex.calls == []
    assert "ui crashed" not in r.content and "ui crashed" not in (r.error or "")
    assert "approval step failed" in r.content
    assert gate.pending_count() == 0
    reg.stop()


@async_test
async def test_foreign_handler_sees_already_pending_requests():
    gate = gate_with_delete(deny_when_unobserved=False)
    p = gate.confirm_cancellable(call())
    for _ in range(100):
        if gate.pending_count():
            break
        await asyncio.sleep(0.01)
    reg = gate.on_request(Approver())
    assert (await p.wait()).is_approved()
    reg.stop()


# --------------------------------------------------------------------------------------------
# executor, batch


class Exec(so.ToolExecutor):
    def __init__(self, fn):
        self.fn = fn
        self.calls = []

    async def execute(self, arguments_json, context):
        args = json.loads(arguments_json)
        self.calls.append(args)
        await asyncio.sleep(0.01)
        return json.dumps(self.fn(args))


@async_test
async def test_executor_runs_once_after_approval():
    gate = so.Gate()
    ex = Exec(lambda a: {"deleted": a["path"]})
    gate.register_executable_tool(delete_spec(), ex)
    sub = gate.subscribe()
    p = gate.execute_cancellable(call(call_id="c1"))
    req = await next_request(sub)
    assert ex.calls == []  # nothing runs before the approval
    gate.approve(req)
    r = await p.wait()
    assert r.status == so.ToolStatus.EXECUTED and not r.is_error
    assert json.loads(r.output_json) == {"deleted": "/tmp/x"}
    assert r.call_id == "c1" and r.request_id == req.id and r.decision.is_approved()
    assert json.loads(r.content) == {"deleted": "/tmp/x"}
    assert ex.calls == [{"path": "/tmp/x"}]


@async_test
async def test_executor_denied_does_not_run():
    gate = so.Gate()
    ex = Exec(lambda a: "ran")
    gate.register_executable_tool(delete_spec(), ex)
    sub = gate.subscribe()
    p = gate.execute_cancellable(call())
    req = await next_request(sub)
    gate.deny(req, reason="no way")
    r = await p.wait()
    assert r.status == so.ToolStatus.DENIED and r.is_error and ex.calls == []
    assert "no way" in r.content and "did not run" in r.content


@async_test
async def test_executor_edited_arguments_and_failures():
    gate = so.Gate()
    ex = Exec(lambda a: a["path"])
    gate.register_executable_tool(delete_spec(editable=True), ex)

    class Failing(so.ToolExecutor):
        async def execute(self, arguments_json, context):
            raise RuntimeError("disk on fire")

    class NotJson(so.ToolExecutor):
        async def execute(self, arguments_json, context):
            return "plain text"

    class RepeatedKey(so.ToolExecutor):
        async def execute(self, arguments_json, context):
            return '{"ok":true,"ok":false}'

    gate.register_executable_tool(so.ToolSpec(name="fail_tool"), Failing())
    gate.register_executable_tool(so.ToolSpec(name="text_tool"), NotJson())
    gate.register_executable_tool(so.ToolSpec(name="dup_tool"), RepeatedKey())
    sub = gate.subscribe()
    p = gate.execute_cancellable(call(args={"path": "/etc"}))
    req = await next_request(sub)
    gate.approve(req, arguments_json=json.dumps({"path": "/tmp/ok"}))
    r = await p.wait()
    assert r.edited and ex.calls == [{"path": "/tmp/ok"}] and json.loads(r.arguments_json) == {"path": "/tmp/ok"}
    assert "changed the arguments" in r.content
    r = await gate.execute_cancellable(call("fail_tool", {})).wait()
    assert r.status == so.ToolStatus.FAILED and "disk on fire" in r.error
    r = await gate.execute_cancellable(call("text_tool", {})).wait()
    assert r.status == so.ToolStatus.FAILED and "not acceptable JSON" in r.error
    # the output is read strictly too: no value is silently picked for the model
    r = await gate.execute_cancellable(call("dup_tool", {})).wait()
    assert r.status == so.ToolStatus.FAILED and "duplicate key" in r.error and r.output_json is None


# --------------------------------------------------------------------------------------------
# the call context an executor receives (the core's CallContext)


class ContextRecorder(so.ToolExecutor):
    """Records what each call's context says; `hold` makes every call wait until released."""

    def __init__(self, hold=None):
        self.seen = {}
        self.contexts = []
        self.hold = hold

    async def execute(self, arguments_json, context):
        path = json.loads(arguments_json)["path"]
        self.contexts.append(context)
        if self.hold is not None:
            await self.hold(path)
        self.seen[path] = {
            "tool": context.tool,
            "call_id": context.call_id,
            "request_id": context.request_id,
            "session_id": context.session_id,
            "edited": context.edited,
        }
        return json.dumps("ok")


@async_test
async def test_an_approved_call_sees_the_request_the_person_answered():
    gate = so.Gate()
    ex = ContextRecorder()
    gate.register_executable_tool(delete_spec(editable=True, approval=so.ApprovalMode.REQUIRED), ex)
    sub = gate.subscribe()
    for path, edit in (("/a", None), ("/b", "/b-edited")):
        p = gate.execute_cancellable(call(args={"path": path}, session_id="s1", call_id=f"c{path}"))
        req = await next_request(sub)
        gate.approve(req, arguments_json=json.dumps({"path": edit}) if edit else None)
        r = await p.wait()
        assert r.status == so.ToolStatus.EXECUTED, r.content
        assert ex.seen[edit or path] == {
            "tool": "delete_file",
            "call_id": f"c{path}",
            "request_id": req.id,
            "session_id": "s1",
            "edited": edit is not None,
        }
        assert not ex.contexts[-1].gate.is_closed()
    gate.close()


@async_test
async def test_an_ungated_call_has_no_request():
    gate = so.Gate.open(config=so.GateConfig(dangerously_disable_gating=True))
    ex = ContextRecorder()
    gate.register_executable_tool(delete_spec(), ex)
    r = await gate.execute_cancellable(call(args={"path": "/u"})).wait()
    assert r.status == so.ToolStatus.EXECUTED, r.content
    assert ex.seen["/u"] == {"tool": "delete_file", "call_id": None, "request_id": None, "session_id": "default", "edited": False}
    gate.close()


@async_test
async def test_concurrent_calls_each_see_their_own_context():
    both = asyncio.Event()
    started = set()

    async def hold(path):
        started.add(path)
        if len(started) == 2:
            both.set()
        await asyncio.wait_for(both.wait(), 5)  # both run at once

    gate = so.Gate()
    ex = ContextRecorder(hold)
    gate.register_executable_tool(delete_spec(approval=so.ApprovalMode.REQUIRED), ex)
    sub = gate.subscribe()
    pending = [gate.execute_cancellable(call(args={"path": p}, session_id=f"s{p}", call_id=f"c{p}")) for p in ("/a", "/b")]
    reqs = {}
    while len(reqs) < 2:
        r = await next_request(sub)
        reqs[r.tool_call_id] = r
    gate.approve(reqs["c/b"])
    gate.approve(reqs["c/a"])
    results = [await p.wait() for p in pending]
    assert [r.status for r in results] == [so.ToolStatus.EXECUTED] * 2
    for p in ("/a", "/b"):
        assert ex.seen[p] == {
            "tool": "delete_file",
            "call_id": f"c{p}",
            "request_id": reqs[f"c{p}"].id,
            "session_id": f"s{p}",
            "edited": False,
        }
    gate.close()


@async_test
async def test_a_running_tool_learns_that_the_gate_closed():
    release = asyncio.Event()
    closed = []

    class Slow(so.ToolExecutor):
        async def execute(self, arguments_json, context):
            closed.append(context.gate.is_closed())
            await asyncio.wait_for(release.wait(), 5)
            closed.append(context.gate.is_closed())
            return json.dumps("stopped early" if context.gate.is_closed() else "done")

    gate = so.Gate()
    gate.register_executable_tool(delete_spec(approval=so.ApprovalMode.REQUIRED), Slow())
    sub = gate.subscribe()
    p = gate.execute_cancellable(call())
    gate.approve(await next_request(sub))
    while not closed:
        await asyncio.sleep(0.005)
    gate.close()
    release.set()
    r = await p.wait()
    # Not interrupted (its task is not cancelled): it ran to the end and said so.
    assert r.status == so.ToolStatus.EXECUTED and json.loads(r.output_json) == "stopped early"
    assert closed == [False, True]


@async_test
async def test_batch_order():
    gate = so.Gate()
    ex = Exec(lambda a: a["path"])
    gate.register_executable_tool(delete_spec(), ex)
    gate.register_executable_tool(so.ToolSpec(name="read_file"), Exec(lambda a: "contents"))
    sub = gate.subscribe()
    calls = [
        call(args={"path": "/first"}, call_id="a"),
        call("read_file", {}, call_id="b"),
        call(args={"path": "/third"}, call_id="c"),
    ]
    batch = gate.execute_batch_cancellable(calls)
    reqs = {}
    while len(reqs) < 2:
        r = await next_request(sub)
        reqs[r.tool_call_id] = r
    # answer in the opposite order
    gate.deny(reqs["c"], reason="no")
    await asyncio.sleep(0.05)
    gate.approve(reqs["a"])
    results = await batch.wait()
    assert [r.call_id for r in results] == ["a", "b", "c"]
    assert [r.status for r in results] == [so.ToolStatus.EXECUTED, so.ToolStatus.EXECUTED, so.ToolStatus.DENIED]
    assert json.loads(results[1].output_json) == "contents"
    assert ex.calls == [{"path": "/first"}]


@async_test
async def test_cancel_execution():
    gate = so.Gate()
    ex = Exec(lambda a: "ran")
    gate.register_executable_tool(delete_spec(), ex)
    sub = gate.subscribe()
    p = gate.execute_cancellable(call())
    req = await next_request(sub)
    p.cancel()
    assert await p.wait() is None
    resolved = (await events_until_resolved(sub, req.id))[-1].resolved
    assert resolved.cancel_reason == so.CancelReason.ABORTED and ex.calls == []
    b = gate.execute_batch_cancellable([call()])
    await next_request(sub)
    b.cancel()
    assert await b.wait() is None and gate.pending_count() == 0


@async_test
async def test_execution_and_batch_when_settled():
    gate = so.Gate()
    ex = Exec(lambda a: "ran")
    gate.register_executable_tool(delete_spec(), ex)
    sub = gate.subscribe()
    done, cancelled, batch = Counter(), Counter(), Counter()
    p = gate.execute_cancellable(call(call_id="c1"))
    p.when_settled(done.listener)
    req = await next_request(sub)
    assert p.result() is None and not p.is_finished()
    gate.approve(req)
    await done.wait_for(1)
    r = p.result()
    assert r.status == so.ToolStatus.EXECUTED and r.call_id == "c1" and len(ex.calls) == 1
    # Cancelled while waiting for its decision: settled, no result, the tool never runs.
    q = gate.execute_cancellable(call())
    q.when_settled(cancelled.listener)
    await next_request(sub)
    q.cancel()
    await cancelled.wait_for(1)
    assert q.result() is None and q.is_finished() and len(ex.calls) == 1
    b = gate.execute_batch_cancellable([call(call_id="b1"), call(call_id="b2")])
    b.when_settled(batch.listener)
    for _ in range(2):
        gate.approve(await next_request(sub))
    await batch.wait_for(1)
    assert [r.call_id for r in b.results()] == ["b1", "b2"] and len(ex.calls) == 3


# --------------------------------------------------------------------------------------------
# hostile input: JSON text is parsed by the core's strict parser (repeated keys, NaN/Infinity,
# nesting deeper than 64 levels are malformed), and nothing runs


def nested(levels, inner="1"):
    return "[" * levels + inner + "]" * levels


@async_test
async def test_hostile_arguments_are_refused_before_anyone_is_asked():
    gate = so.Gate()
    ex = Exec(lambda a: "ran")
    gate.register_executable_tool(so.ToolSpec(name="delete_file"), ex)
    sub = gate.subscribe()
    hostile = [
        '{"path":' + nested(20_000) + "}",  # far past any stack
        '{"path":' + nested(64) + "}",  # 65 levels with the object
        '{"path":"/tmp/x","path":"/etc/passwd"}',  # which one would run?
        '{"a":{"b":1,"b":2}}',
        '{"n":NaN}',
        '{"n":Infinity}',
        '{"n":-Infinity}',
        '{"n":1e999}',
        '{"path":"/tmp/x"} {"path":"/etc"}',
    ]
    for text in hostile:
        c = so.ToolCall(tool="delete_file", arguments_json=text)
        for start in (gate.confirm_cancellable, gate.execute_cancellable, gate.evaluate):
            with pytest.raises(so.SignoffError.Malformed) as e:
                start(c)  # refused at once: no handle, no request
            assert kind(e.value) == "malformed", text[:40]
        with pytest.raises(so.SignoffError.Malformed):
            gate.execute_batch_cancellable([call("delete_file", {"path": "/ok"}), c])
    with pytest.raises(so.SignoffError.Malformed) as e:
        gate.confirm_cancellable(so.ToolCall(tool="delete_file", arguments_json='{"path":"/a","path":"/b"}'))
    assert "duplicate key" in str(e.value)
    with pytest.raises(so.SignoffError.Malformed):
        gate.confirm_cancellable(so.ToolCall(tool="delete_file", metadata_json='{"k":1,"k":2}'))
    with pytest.raises(so.SignoffError.Malformed):
        gate.confirm_cancellable(so.ToolCall(tool="delete_file", metadata_json=nested(65)))
    # exactly 64 levels is fine
    d = gate.evaluate(so.ToolCall(tool="delete_file", arguments_json='{"path":' + nested(63) + "}"))
    assert d.required
    assert ex.calls == [] and gate.pending_count() == 0
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(sub.next(), 0.2)  # nobody was asked


@async_test
async def test_hostile_responses_and_edits_leave_the_request_pending():
    gate = so.Gate()
    ex = Exec(lambda a: a["path"])
    gate.register_executable_tool(delete_spec(editable=True), ex)
    sub = gate.subscribe()
    p = gate.execute_cancellable(call(args={"path": "/tmp/x"}))
    req = await next_request(sub)
    rid = req.id
    responses = [
        f'{{"id":"{rid}","decision":"deny","decision":"approve"}}',
        f'{{"id":"{rid}","decision":"approve","arguments":{{"path":"/a","path":"/etc/passwd"}}}}',
        f'{{"id":"{rid}","decision":"approve","arguments":{{"path":NaN}}}}',
        f'{{"id":"{rid}","decision":"approve","arguments":{{"path":{nested(20_000, chr(34) + "x" + chr(34))}}}}}',
    ]
    for text in responses:
        with pytest.raises(so.SignoffError.Malformed):
            gate.respond_json(text)
        with pytest.raises(so.SignoffError.Malformed):
            so.response_from_json(text)
    edits = ['{"path":"/a","path":"/etc/passwd"}', '{"path":NaN}', '{"path":Infinity}', '{"path":' + nested(64) + "}",
             '{"path":' + nested(20_000) + "}"]
    for text in edits:
        with pytest.raises(so.SignoffError.Malformed) as e:
            gate.approve(req, arguments_json=text)
        assert kind(e.value) == "malformed"
        resp = so.approve_response(req)
        resp.arguments_json = text
        with pytest.raises(so.SignoffError.Malformed):
            gate.respond(resp)
    assert gate.pending_count() == 1 and ex.calls == []
    # a request the app hands back with tampered arguments text is refused too
    tampered = so.ConfirmationRequest(**dict(vars(req), arguments_json='{"path":"/tmp/x","path":"/etc"}'))
    with pytest.raises(so.SignoffError.Malformed):
        gate.approve(tampered)
    with pytest.raises(so.SignoffError.Malformed):
        gate.deny(tampered)
    assert gate.pending_count() == 1 and ex.calls == []
    # the request is untouched: the original arguments run once approved
    gate.approve(req)
    r = await p.wait()
    assert r.status == so.ToolStatus.EXECUTED and not r.edited and ex.calls == [{"path": "/tmp/x"}]


class EditsHostile(so.ApprovalHandler):
    def __init__(self):
        self.errors = []

    async def handle(self, request):
        for text in ['{"path":"/a","path":"/etc/passwd"}', '{"path":NaN}', '{"path":' + nested(20_000) + "}"]:
            try:
                request.approve_with(arguments_json=text)
            except so.SignoffError as e:
                self.errors.append(kind(e))
        request.deny(reason="refused the edits")


@async_test
async def test_hostile_edits_from_a_handler_are_malformed():
    gate = so.Gate()
    ex = Exec(lambda a: "ran")
    gate.register_executable_tool(delete_spec(editable=True), ex)
    handler = EditsHostile()
    reg = gate.on_request(handler)
    r = await gate.execute_cancellable(call()).wait()
    assert handler.errors == ["malformed"] * 3
    assert r.status == so.ToolStatus.DENIED and ex.calls == []
    reg.stop()


def test_hostile_tool_definitions_and_events():
    gate = so.Gate()
    with pytest.raises(so.SignoffError.InvalidTool) as e:
        gate.register_tool(so.ToolSpec(name="x", parameters_json='{"type":"object","type":"string"}'))
    assert "duplicate key" in str(e.value)
    with pytest.raises(so.SignoffError.InvalidTool):
        gate.register_tool(so.ToolSpec(name="x", rules=[so.ArgRule.ONE_OF(pointer="/a", values_json='[1,NaN]')]))
    with pytest.raises(so.SignoffError.InvalidTool):
        gate.register_tool(so.ToolSpec(name="x", rules=[so.ArgRule.ONE_OF(pointer="/a", values_json=nested(66))]))
    with pytest.raises(so.SignoffError.Malformed):
        gate.register_tool_json('{"name":"x","name":"y"}')
    with pytest.raises(so.SignoffError.Malformed):
        so.tool_spec_from_json('{"name":"x","approval":"required","approval":"not_required"}')
    rid = str(uuid.uuid4())
    with pytest.raises(so.SignoffError.Malformed):
        so.event_from_json(
            json.dumps({"type": "confirmation-resolved", "id": rid, "tool": "t", "session_id": "s", "scope": "once",
                        "edited": False, "at_ms": 5, "outcome": "denied"})[:-1] + ',"outcome":"approved"}'
        )
    assert gate.tools() == []


# --------------------------------------------------------------------------------------------
# tool specs and conversions


def test_tool_spec_round_trip_and_rules():
    gate = so.Gate()
    spec = so.ToolSpec(
        name="transfer_funds",
        description="Moves money",
        parameters_json=compact({"type": "object"}),
        approval=so.ApprovalMode.NOT_REQUIRED,
        prompt_template="Send {args}?",
        source=so.ToolSource.EXTERNAL(server="bank"),
        read_only=False,
        timeout_ms=5000,
        rules=[
            so.ArgRule.GREATER_THAN(pointer="/amount", value=100.0),
            so.ArgRule.ONE_OF(pointer="/to", values_json=compact(["boss@x"])),
            so.ArgRule.NOT_ONE_OF(pointer="/currency", values_json=compact(["EUR", "USD"])),
            so.ArgRule.CONTAINS(pointer="/memo", substring="urgent"),
            so.ArgRule.PATH_OUTSIDE(pointer="/receipt", prefixes=["/tmp"]),
        ],
    )
    gate.register_tool(spec)
    [back] = gate.tools()
    assert fields(back) == fields(spec)
    js = json.loads(so.tool_spec_to_json(spec))
    assert js["approval"] == "not_required" and js["source"] == {"kind": "external", "server": "bank"}
    assert js["rules"][1] == {"kind": "one_of", "pointer": "/to", "values": ["boss@x"]}
    assert fields(so.tool_spec_from_json(json.dumps(js))) == fields(spec)
    ok = {"amount": 5, "to": "me@x", "currency": "EUR", "memo": "lunch", "receipt": "/tmp/r.pdf"}
    ev = gate.evaluate(call("transfer_funds", ok))
    assert not ev.required and not ev.forced_by_rule
    ev = gate.evaluate(call("transfer_funds", dict(ok, amount=500, memo="URGENT pls")))
    assert ev.required and ev.forced_by_rule and len(ev.reasons) == 2
    with pytest.raises(so.SignoffError.InvalidTool):
        gate.register_tool(so.ToolSpec(name="y", rules=[so.ArgRule.ONE_OF(pointer="/a", values_json="{}")]))
    assert gate.unregister_tool("transfer_funds") and gate.tools() == []


def test_defaults_match_the_core():
    gate = so.Gate()
    gate.register_tool(so.ToolSpec(name="x"))
    [spec] = gate.tools()
    assert json.loads(spec.parameters_json) == {"type": "object"}
    assert spec.approval == so.ApprovalMode.DEFAULT and spec.source.is_built_in()
    c = so.ToolCall(tool="x")
    assert c.arguments_json == "{}" and c.session_id == "default"
    assert so.GateConfig().deny_when_unobserved is True
    assert not gate.gating_disabled()
    dev = so.Gate.open(config=so.GateConfig(dangerously_disable_gating=True))
    assert dev.gating_disabled()


def test_one_configuration_path_checked_by_the_core():
    # Gate() cannot fail; every option goes through Gate.open(config:), which the core checks.
    # A bus capacity of 4e9 would make the core's builder allocate billions of slots: refused.
    for bad in (4_000_000_000, 0, 2**64 - 1):
        with pytest.raises(so.SignoffError.Config, match="busCapacity"):
            so.Gate.open(config=so.GateConfig(bus_capacity=bad))
    with pytest.raises(so.SignoffError.Config, match="defaultTimeoutMs"):
        so.Gate.open(config=so.GateConfig(default_timeout_ms=0))
    assert not hasattr(so, "GateOptions")
    gate = so.Gate.open(config=so.GateConfig(bus_capacity=1))
    assert not gate.is_closed() and so.Gate().approver_count() == 0


@async_test
async def test_keywords_and_default_timeout_options():
    gate = so.Gate.open(config=so.GateConfig(keywords=["frobnicate"], default_timeout_ms=100))
    gate.register_tool(so.ToolSpec(name="frobnicate_it"))
    gate.register_tool(so.ToolSpec(name="delete_file"))
    assert gate.evaluate(call("frobnicate_it", {})).required
    assert not gate.evaluate(call("delete_file")).required
    sub = gate.subscribe()
    t0 = time.monotonic()
    d = await gate.confirm_cancellable(call("frobnicate_it", {})).wait()
    assert isinstance(d, so.Decision.TIMED_OUT) and d.timeout_ms == 100
    assert time.monotonic() - t0 < 3
    del sub


def test_event_json_round_trip():
    rid = str(uuid.uuid4())
    resolved = {"type": "confirmation-resolved", "id": rid, "tool": "t", "session_id": "s", "outcome": "cancelled",
                "cancel_reason": "aborted", "scope": "once", "edited": False, "at_ms": 5}
    ev = so.event_from_json(json.dumps(resolved))
    assert ev.is_resolved() and ev.resolved.cancel_reason == so.CancelReason.ABORTED
    assert json.loads(so.event_to_json(ev)) == resolved
    with pytest.raises(so.SignoffError.Malformed):
        so.event_from_json(json.dumps({"type": "nope"}))
    for bad_id in ("nope", "", rid + "x"):  # an event made up with an id that is no UUID
        bad = so.GateEvent.RESOLVED(resolved=so.ConfirmationResolved(**dict(vars(ev.resolved), id=bad_id)))
        with pytest.raises(so.SignoffError.Malformed, match="not a UUID"):
            so.event_to_json(bad)
        with pytest.raises(so.SignoffError.Malformed, match="not a UUID"):
            so.event_to_json(so.GateEvent.TIMEOUT(timeout=so.ConfirmationTimeout(
                id=bad_id, tool="t", session_id="s", deadline_ms=1, at_ms=2)))
    with pytest.raises(so.SignoffError.Malformed):
        so.event_to_json(so.GateEvent.LAGGED(missed=1, pending=[]))
    with pytest.raises(so.SignoffError.Malformed):
        so.event_to_json(so.GateEvent.LAGGED(missed=1, pending=[], more=f"5-{rid}"))
    failed = dict(resolved, cancel_reason="approval-failed")
    ev = so.event_from_json(json.dumps(failed))
    assert ev.resolved.cancel_reason == so.CancelReason.APPROVAL_FAILED
    assert json.loads(so.event_to_json(ev)) == failed
