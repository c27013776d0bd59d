"""The shared vectors (tests/vectors/*.json, format in tests/vectors/README.md), run through the
uniffi surface the Swift package wraps. Typed records are used wherever the Swift API uses them
(tool specs, calls, decisions, events), so the vectors also exercise the conversions.
A field this runner does not understand fails the case."""

import asyncio
import json
import os
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
CANCEL = {so.CancelReason.NO_SUBSCRIBERS: "no-subscribers", so.CancelReason.SHUTDOWN: "shutdown",
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
               "decision", "events_after"]


def gate_options(opts, what):
    strict(opts, ["default_timeout_ms", "keywords", "dangerously_disable_gating", "allowed_responders",
                  "deny_when_unobserved"], f"{what}.gate")
    return so.GateOptions(
        default_timeout_ms=opts.get("default_timeout_ms"),
        keywords=opts.get("keywords"),
        dangerously_disable_gating=opts.get("dangerously_disable_gating", False),
        allowed_responders=opts.get("allowed_responders"),
        deny_when_unobserved=opts.get("deny_when_unobserved", True),
    )


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


@pytest.mark.parametrize("case", FLOWS["cases"], ids=lambda c: c["name"])
@async_test
async def test_flow(case):
    name = case["name"]
    strict(case, CASE_FIELDS, name)
    gate = so.Gate(gate_options(case.get("gate", {}), name))
    for t in case.get("tools", FLOWS.get("tools", [])):
        # through the typed ToolSpec record, as a Swift app registers tools
        gate.register_tool(so.tool_spec_from_json(json.dumps(t)))
    subscribe = case.get("subscribe", True)
    sub = gate.subscribe() if subscribe else None
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
        strict(step, [action], what)
        if action == "wait_past_deadline":
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

    if "events_after" in case:
        seen = []
        while True:
            ev = await asyncio.wait_for(sub.next(), 5)
            assert ev is not None, f"{name}: subscription ended"
            seen.append(event_type(ev))
            if ev.is_resolved() and ev.resolved.id == req.id:
                break
        assert seen == case["events_after"], name
