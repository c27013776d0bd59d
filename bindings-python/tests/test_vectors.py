"""The shared test vectors (tests/vectors/*.json, format in tests/vectors/README.md), through
the Python API. A field the runner does not understand fails the test."""

from __future__ import annotations

import asyncio
import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

import pytest

import signoff
from conftest import Collector, wait_until

VECTORS = Path(__file__).resolve().parents[2] / "tests" / "vectors"


def load(name: str) -> Any:
    return json.loads((VECTORS / name).read_text(encoding="utf-8"))


EVENTS = load("events.json")
MALFORMED = load("malformed_responses.json")
FLOWS = load("flows.json")
CONFIG = load("config.json")
EXECUTE = load("execute.json")
DURABLE = load("durable.json")
SUBSCRIPTIONS = load("subscriptions.json")


def test_vector_files_have_only_known_top_level_fields() -> None:
    assert set(EVENTS) == {"events"}
    assert set(MALFORMED) == {"cases"}
    assert set(FLOWS) <= {"description", "tools", "cases"}
    assert set(CONFIG) <= {"description", "cases"} and set(EXECUTE) <= {"description", "cases"}
    assert set(DURABLE) <= {"description", "tools", "cases"}
    assert EVENTS["events"] and MALFORMED["cases"] and FLOWS["cases"] and CONFIG["cases"] and EXECUTE["cases"]
    assert DURABLE["cases"] and DURABLE["tools"]
    assert set(SUBSCRIPTIONS) <= {"description", "tools", "cases"} and SUBSCRIPTIONS["cases"]


# ---- events.json ----------------------------------------------------------------------------

CLASSES = {
    "confirmation-request": signoff.ConfirmationRequest,
    "confirmation-response": signoff.ConfirmationResponse,
    "confirmation-timeout": signoff.ConfirmationTimeout,
    "confirmation-resolved": signoff.ConfirmationResolved,
}


@pytest.mark.parametrize("index", range(len(EVENTS["events"])))
def test_event_round_trip(index: int) -> None:
    raw = EVENTS["events"][index]
    event = signoff.parse_event(raw)
    assert isinstance(event, CLASSES[raw["type"]])
    assert event.type == raw["type"]
    assert event.to_dict() == raw
    assert json.loads(event.to_json()) == raw
    # Text in, the class's own parser, and equality.
    again = type(event).from_json(json.dumps(raw))
    assert again == event
    assert again.request_id == raw["id"]


def test_event_from_json_refuses_another_type() -> None:
    raw = EVENTS["events"][0]
    other = next(c for t, c in CLASSES.items() if t != raw["type"])
    with pytest.raises(signoff.MalformedError) as e:
        other.from_json(raw)
    assert e.value.kind == "malformed"


# ---- malformed_responses.json ---------------------------------------------------------------

MALFORMED_TOOLS = [{"name": "delete_file", "parameters": {"type": "object"}}]


@pytest.mark.parametrize("case", MALFORMED["cases"], ids=[c["name"] for c in MALFORMED["cases"]])
def test_malformed_response(case: Dict[str, Any], run: Any) -> None:
    assert set(case) == {"name", "json", "error"}
    kind = case["error"]

    async def body() -> None:
        with signoff.Gate() as gate:
            gate.register_spec(MALFORMED_TOOLS[0])
            # No request pending.
            with pytest.raises(signoff.error_class(kind)) as e:
                gate.respond_json(case["json"])
            assert e.value.kind == kind
            # A request pending: still refused, and the request is untouched.
            events = gate.events()
            task = asyncio.ensure_future(gate.confirm("delete_file", {}))
            await wait_until(lambda: gate.pending_count == 1, what="the request")
            with pytest.raises(signoff.error_class(kind)) as e:
                gate.respond_json(case["json"])
            assert e.value.kind == kind
            assert gate.pending_count == 1 and not task.done()
            gate.deny(gate.pending()[0])
            assert (await task).outcome == "denied"
            events.close()

    run(body())


# ---- flows.json -----------------------------------------------------------------------------

CASE_FIELDS = {
    "name", "tools", "gate", "subscribe", "call", "confirm_error", "expect_request", "request", "steps",
    "decision", "events_after", "after_decision",
}
STEP_ACTIONS = {"respond", "wait_past_deadline", "close", "unsubscribe", "cancel", "end_session", "issue_token",
                "tamper_token", "rekey_token", "respond_token", "sleep_ms"}
#: Steps that may carry an expected `error` (or, answering, an `outcome`).
ANSWERS = {"respond", "respond_token", "issue_token"}
TOKEN_RESPONSE_FIELDS = {"approver", "decision", "reason", "scope", "arguments"}


def expect(step: Dict[str, Any], name: str, act: Callable[[], Any]) -> None:
    """Runs `act`: it must fail with the step's `error` kind, or succeed with its `outcome`."""
    if "error" in step:
        kind = step["error"]
        with pytest.raises(signoff.error_class(kind)) as e:
            act()
        assert e.value.kind == kind, f"{name}: {e.value}"
    else:
        got = act()
        if "outcome" in step:
            assert got == step["outcome"], f"{name}: outcome {got!r}"


def retoken(token: str, part: int, value: Callable[[str], str]) -> str:
    parts = token.split(".")
    parts[part] = value(parts[part])
    return ".".join(parts)
DECISION_FIELDS = {"outcome", "by", "arguments", "edited", "reason", "responder", "cancel_reason"}
SUBSCRIBE = {True: "approver", False: None, "observer": "observer"}


def substitute(resp: Dict[str, Any], req: signoff.ConfirmationRequest) -> Dict[str, Any]:
    out = dict(resp)
    for field in ("id", "tool", "arguments_digest", "session_id"):
        if out.get(field) == "$request":
            out[field] = getattr(req, field)
    return out


def check_decision(expected: Dict[str, Any], got: Dict[str, Any], name: str, event: bool = False) -> None:
    """`got` is a Decision's JSON, or (`event`) a confirmation-resolved event's."""
    unknown = set(expected) - DECISION_FIELDS
    assert not unknown, f"{name}: unknown decision fields {unknown}"
    for k, v in expected.items():
        key = "reason" if k == "cancel_reason" and not event else k
        assert got.get(key) == v, f"{name}: decision {k} is {got.get(key)!r}, expected {v!r} (in {got})"


async def run_flow(case: Dict[str, Any]) -> None:
    name = case["name"]
    unknown = set(case) - CASE_FIELDS
    assert not unknown, f"{name}: unknown fields {unknown}"
    subscribe = case.get("subscribe", True)
    assert subscribe in SUBSCRIBE, f"{name}: unknown subscribe {subscribe!r}"
    gate = signoff.Gate(**case.get("gate", {}))  # the core's gate options, as keyword arguments
    try:
        for spec in case.get("tools", FLOWS.get("tools", [])):
            gate.register_spec(spec)
        stream = SUBSCRIBE[subscribe]
        collector = Collector(gate.events(observe=stream == "observer")) if stream else None
        call = signoff.ToolCall.from_dict(case["call"])

        if "confirm_error" in case:
            kind = case["confirm_error"]
            with pytest.raises(signoff.error_class(kind)) as e:
                await gate.confirm(call)
            assert e.value.kind == kind
            assert gate.pending_count == 0
            assert set(case) <= {"name", "tools", "gate", "subscribe", "call", "confirm_error"}
            return

        task = asyncio.ensure_future(gate.confirm(call))
        expect_request = case.get("expect_request", True)
        cancelled = False
        request = None
        tokens: List[str] = []
        if expect_request and collector is not None:
            request = await collector.wait_for(lambda e: e.type == "confirmation-request", "the request")
            shown = request.to_dict()
            for k, v in case.get("request", {}).items():
                assert shown.get(k) == v, f"{name}: request {k} is {shown.get(k)!r}, expected {v!r}"
            for step in case.get("steps", []):
                actions = set(step) & STEP_ACTIONS
                assert len(actions) == 1, f"{name}: step {step} needs exactly one action"
                action = actions.pop()
                extra = set(step) - {action, "error", "outcome"}
                assert not extra and (action in ANSWERS or set(step) == {action}), f"{name}: bad step {step}"
                assert action != "issue_token" or "outcome" not in step, f"{name}: bad step {step}"
                if action == "respond":
                    body = substitute(step["respond"], request)
                    expect(step, name, lambda: gate.respond(body))
                elif action == "issue_token":
                    req, approver = request, step["issue_token"]
                    expect(step, name, lambda: tokens.append(gate.issue_token(req, approver)))
                elif action == "tamper_token":
                    tokens.append(retoken(tokens[-1], 3, lambda sig: ("B" if sig[0] == "A" else "A") + sig[1:]))
                elif action == "rekey_token":
                    tokens.append(retoken(tokens[-1], 1, lambda _: step["rekey_token"]))
                elif action == "respond_token":
                    tr = dict(step["respond_token"])
                    assert set(tr) <= TOKEN_RESPONSE_FIELDS, f"{name}: unknown token response fields {set(tr)}"
                    token, decision, approver = tokens[-1], tr.pop("decision"), tr.pop("approver")
                    expect(step, name, lambda: gate.respond_token(token, decision, approver=approver, **tr))
                elif action == "sleep_ms":
                    await asyncio.sleep(step["sleep_ms"] / 1000)
                elif action == "wait_past_deadline":
                    await asyncio.sleep(max(0.0, request.deadline_ms / 1000 - time.time()) + 0.05)
                    await wait_until(lambda: gate.pending_count == 0, what="the timeout")
                elif action == "close":
                    gate.close()
                elif action == "unsubscribe":
                    await collector.close()
                elif action == "cancel":
                    task.cancel()
                    with pytest.raises(asyncio.CancelledError):
                        await task
                    cancelled = True
                    # The core cancels once the dropped future reaches it.
                    await collector.wait_for(lambda e: e.type == "confirmation-resolved", "the cancellation")
                elif action == "end_session":
                    gate.end_session(step["end_session"])
        elif expect_request:
            assert not case.get("steps"), f"{name}: steps need a subscriber to see the request"

        if cancelled:
            assert collector is not None
            assert "after_decision" not in case, f"{name}: a cancelled call has no decision for after_decision"
            resolved = collector.of_type("confirmation-resolved")[0].to_dict()
            check_decision(case["decision"], resolved, name, event=True)
        else:
            decision = await asyncio.wait_for(task, 10)
            assert isinstance(decision, signoff.Decision)
            check_decision(case["decision"], decision.to_dict(), name)
            assert signoff.Decision.from_json(decision.to_json()) == decision
            after_decision(gate, decision, case, request)

        if collector is not None and not collector.task.done():
            if expect_request:
                await collector.wait_for(lambda e: e.type == "confirmation-resolved", "the resolution")
            else:
                await asyncio.sleep(0.01)
                assert not collector.of_type("confirmation-request"), f"{name}: unexpected request"
        if "events_after" in case:
            assert collector is not None and request is not None
            types: List[str] = [e.type for e in collector.items]
            after = types[types.index("confirmation-request") + 1:]
            assert after == case["events_after"], f"{name}: events after the request: {after}"
        if collector is not None:
            await collector.close()
    finally:
        gate.close()


MARKER_CLAIMS = {"tool", "arguments_digest", "approver", "request_id"}


def after_decision(gate: signoff.Gate, decision: signoff.Decision, case: Dict[str, Any], request: Any) -> None:
    """A flow case's `after_decision` steps: approval markers for `decision`."""
    name = case["name"]
    markers: List[str] = []
    for step in case.get("after_decision", []):
        if "approval_marker" in step:
            assert set(step) <= {"approval_marker", "error"}, f"{name}: bad step {step}"
            tool = step["approval_marker"]
            expect(step, name, lambda: markers.append(gate.approval_marker(tool, decision)))
        elif "tamper_marker" in step:
            assert step == {"tamper_marker": True}, f"{name}: bad step {step}"
            markers.append(retoken(markers[-1], 3, lambda sig: ("B" if sig[0] == "A" else "A") + sig[1:]))
        elif "rekey_marker" in step:
            assert set(step) == {"rekey_marker"}, f"{name}: bad step {step}"
            markers.append(retoken(markers[-1], 1, lambda _: step["rekey_marker"]))
        elif "accept_approval_marker" in step:
            assert set(step) <= {"accept_approval_marker", "error", "claims"}, f"{name}: bad step {step}"
            call = step["accept_approval_marker"]
            assert set(call) == {"tool", "arguments"}, f"{name}: bad step {step}"
            if "error" in step:
                assert "claims" not in step, f"{name}: claims with an error"
                expect(step, name, lambda: gate.accept_approval_marker(markers[-1], call["tool"], call["arguments"]))
                continue
            claims = gate.accept_approval_marker(markers[-1], call["tool"], call["arguments"])
            expected = dict(step.get("claims", {}))
            assert set(expected) <= MARKER_CLAIMS, f"{name}: unknown claims {set(expected) - MARKER_CLAIMS}"
            if expected.get("request_id") == "$request":
                expected["request_id"] = request.id
            for k, v in expected.items():
                assert claims[k] == v, f"{name}: claims {k} is {claims[k]!r}, expected {v!r}"  # type: ignore[literal-required]
        else:
            raise AssertionError(f"{name}: unknown after_decision step {step}")


@pytest.mark.parametrize("case", FLOWS["cases"], ids=[c["name"] for c in FLOWS["cases"]])
def test_flow(case: Dict[str, Any], run: Any) -> None:
    run(run_flow(case))


# ---- subscriptions.json ---------------------------------------------------------------------


async def run_subscription(case: Dict[str, Any]) -> None:
    name = case["name"]
    unknown = set(case) - {"name", "gate", "types", "calls", "expect", "error"}
    assert not unknown, f"{name}: unknown fields {unknown}"
    gate = signoff.Gate(**case.get("gate", {}))
    try:
        for spec in SUBSCRIPTIONS["tools"]:
            gate.register_spec(spec)
        if "error" in case:
            kind = case["error"]
            with pytest.raises(signoff.error_class(kind)) as e:
                gate.events(types=case["types"])
            assert e.value.kind == kind, f"{name}: {e.value}"
            assert set(case) == {"name", "types", "error"}, name
            return
        with gate.events(types=case["types"]) as stream:
            for c in case["calls"]:
                assert set(c) == {"call", "answer", "outcome"}, f"{name}: bad call {c}"
                task = asyncio.ensure_future(gate.confirm(signoff.ToolCall.from_dict(c["call"])))
                await wait_until(lambda: gate.pending_count == 1, what=f"{name}: the request")
                request_id = gate.pending()[0].id
                if c["answer"] == "approve":
                    gate.respond({"id": request_id, "decision": "approve"})
                elif c["answer"] == "deny":
                    gate.respond({"id": request_id, "decision": "deny", "reason": "no"})
                else:
                    assert c["answer"] == "wait", f"{name}: answer {c['answer']!r}"
                decision = await asyncio.wait_for(task, 5)
                assert decision.outcome == c["outcome"], f"{name}: {decision.to_dict()}"
            gate.close()
            seen = [item.type async for item in stream]
        assert seen == case["expect"], f"{name}: {seen}"
    finally:
        gate.close()


@pytest.mark.parametrize("case", SUBSCRIPTIONS["cases"], ids=[c["name"] for c in SUBSCRIPTIONS["cases"]])
def test_subscription(case: Dict[str, Any], run: Any) -> None:
    run(run_subscription(case))


# ---- config.json ----------------------------------------------------------------------------


@pytest.mark.parametrize("case", CONFIG["cases"], ids=[c["name"] for c in CONFIG["cases"]])
def test_config(case: Dict[str, Any]) -> None:
    assert set(case) <= {"name", "options", "error", "mentions"}, case
    assert ("error" in case) == ("mentions" in case), case
    if "error" not in case:
        signoff.Gate(**case["options"]).close()
        return
    with pytest.raises(signoff.error_class(case["error"])) as e:
        signoff.Gate(**case["options"])
    assert e.value.kind == case["error"]
    assert case["mentions"] in str(e.value), str(e.value)


# ---- execute.json ---------------------------------------------------------------------------

EXECUTE_FIELDS = {"name", "approve", "cancel", "close", "runs", "finished", "resolved", "execution", "result"}


async def run_execute(case: Dict[str, Any], style: str, audit: Path) -> None:
    name = case["name"]
    unknown = set(case) - EXECUTE_FIELDS
    assert not unknown, f"{name}: unknown fields {unknown}"
    assert ("cancel" in case) != ("close" in case), f"{name}: exactly one of cancel and close"
    close = "close" in case
    when = case["close"] if close else case["cancel"]
    assert when in ("while_waiting", "while_running"), name
    assert set(case["resolved"]) <= {"outcome", "cancel_reason"}, name
    counts = {"runs": 0, "finished": 0}
    started, release = threading.Event(), threading.Event()

    async def transfer_async(args: Any) -> Any:
        counts["runs"] += 1
        started.set()
        while not release.is_set():
            await asyncio.sleep(0.002)
        counts["finished"] += 1
        return {"sent": True}

    def transfer_sync(args: Any) -> Any:
        counts["runs"] += 1
        started.set()
        release.wait(10)
        counts["finished"] += 1
        return {"sent": True}

    gate = signoff.Gate(audit_path=audit)
    try:
        gate.register("transfer", approval="required", executor=transfer_async if style == "async" else transfer_sync)
        approver = gate.events()  # an approver subscription

        async def answer() -> None:
            async for event in approver:
                if isinstance(event, signoff.ConfirmationRequest) and case["approve"]:
                    gate.approve(event)

        answering = asyncio.ensure_future(answer())
        watch = Collector(gate.events(observe=True))
        task = asyncio.ensure_future(gate.execute("transfer", {}))
        if when == "while_waiting":
            await watch.wait_for(lambda e: e.type == "confirmation-request", "the request")
        else:
            await wait_until(started.is_set, what="the executor's start")
        if close:
            # The caller keeps waiting: it gets the tool's own result.
            gate.close()
            release.set()
            result = await asyncio.wait_for(task, 5)
            assert result.status == case["result"], f"{name}: {result!r}"
            if result.status == "executed":
                assert result.output == {"sent": True}, name
        else:
            task.cancel()
            release.set()
            with pytest.raises(asyncio.CancelledError):
                await task
        resolved = await watch.wait_for(lambda e: e.type == "confirmation-resolved", "the resolution")
        for k, v in case["resolved"].items():
            assert getattr(resolved, k) == v, f"{name}: resolved {k} is {getattr(resolved, k)!r}"
        if case["runs"]:
            await wait_until(lambda: counts["finished"] == case["finished"], what="the tool's end")
        await asyncio.sleep(0.05)  # time for anything that should not happen
        assert (counts["runs"], counts["finished"]) == (case["runs"], case["finished"]), name

        def executions() -> List[Any]:
            gate.flush_audit()
            records = [json.loads(line) for line in audit.read_text(encoding="utf-8").splitlines()]
            return [r.get("decision") for r in records if r["kind"] == "execution"]

        if case["execution"] is None:
            assert executions() == [], name
        else:
            await wait_until(lambda: executions() == [case["execution"]], what="the execution record")
        approver.close()
        await asyncio.wait_for(answering, 5)
        await watch.close()
    finally:
        gate.close()


@pytest.mark.parametrize("style", ["async", "sync"])
@pytest.mark.parametrize("case", EXECUTE["cases"], ids=[c["name"] for c in EXECUTE["cases"]])
def test_execute_cancellation(case: Dict[str, Any], style: str, run: Any, tmp_path: Path) -> None:
    run(run_execute(case, style, tmp_path / "audit.jsonl"))


# ---- durable.json ---------------------------------------------------------------------------

DURABLE_FIELDS = {"name", "call", "before_restart", "down_past_deadline", "register_after_restart", "recovered_as",
                  "found_state", "steps", "record", "runs"}
RECOVERY_LISTS = ("restored", "timed_out", "interrupted", "not_restored")


def snapshot(src: Path, dst: Path) -> None:
    """The database as it is on disk now (with its write-ahead log): what a new process finds
    if this one goes away at this moment."""
    shutil.copyfile(src, dst)
    wal = Path(str(src) + "-wal")
    if wal.exists():
        shutil.copyfile(wal, Path(str(dst) + "-wal"))


async def past(deadline_ms: int) -> None:
    await asyncio.sleep(max(0.0, deadline_ms / 1000 - time.time()) + 0.05)


async def run_durable(case: Dict[str, Any], tmp: Path) -> None:
    name = case["name"]
    unknown = set(case) - DURABLE_FIELDS
    assert not unknown, f"{name}: unknown fields {unknown}"
    assert case["recovered_as"] in RECOVERY_LISTS, name
    assert ("found_state" in case) == (case["recovered_as"] == "interrupted"), name
    assert set(case["record"]) <= {"state", "responder", "arguments"}, name
    assert case.get("down_past_deadline", False) in (True, False), name
    assert case.get("register_after_restart", True) in (True, False), name
    before, after = {"runs": 0}, {"runs": 0}
    started, release = asyncio.Event(), asyncio.Event()

    async def held(args: Any) -> Any:
        before["runs"] += 1
        started.set()
        await release.wait()
        return {"sent": True}

    async def quick(args: Any) -> Any:
        after["runs"] += 1
        return {"sent": True}

    # Before the restart: the call is left pending, or approved and running.
    gate_a = signoff.Gate(store_path=tmp / "a.db")
    try:
        for spec in DURABLE["tools"]:
            gate_a.register_spec(spec, held)
        events_a = Collector(gate_a.events())
        task = asyncio.ensure_future(gate_a.execute(signoff.ToolCall.from_dict(case["call"])))
        request = await events_a.wait_for(lambda e: e.type == "confirmation-request", "the request")
        assert case["before_restart"] in ("pending", "executing"), name
        executing = case["before_restart"] == "executing"
        if executing:
            gate_a.respond({"id": request.id, "decision": "approve", "responder": "alice"})
            await asyncio.wait_for(started.wait(), 5)
        # It goes away: what is on disk now is what the next process finds.
        snapshot(tmp / "a.db", tmp / "b.db")
        release.set()
        gate_a.close()
        await asyncio.wait_for(task, 5)
        await events_a.close()
    finally:
        gate_a.close()
    assert before["runs"] == int(executing), f"{name}: runs before the restart"
    if case.get("down_past_deadline", False):
        await past(request.deadline_ms)

    # After the restart.
    gate_b = signoff.Gate(store_path=tmp / "b.db")
    try:
        if case.get("register_after_restart", True):
            for spec in DURABLE["tools"]:
                gate_b.register_spec(spec, quick)
        events_b = Collector(gate_b.events())
        recovery = gate_b.recover()
        shown = request.to_dict()
        for lst in RECOVERY_LISTS:
            assert len(getattr(recovery, lst)) == int(lst == case["recovered_as"]), f"{name}: recovery.{lst}"
        entry = getattr(recovery, case["recovered_as"])[0]
        found = entry if case["recovered_as"] in ("restored", "timed_out") else entry.request
        if case["recovered_as"] == "interrupted":
            assert entry.state == case["found_state"], f"{name}: found in {entry.state}"
        if case["recovered_as"] == "not_restored":
            assert entry.reason, name
        got = found.to_dict()
        for k in ("id", "tool", "arguments", "arguments_digest", "session_id", "deadline_ms"):
            assert got[k] == shown[k], f"{name}: the recovered request's {k}: {got[k]!r} != {shown[k]!r}"
        if case["recovered_as"] == "restored":
            again = await events_b.wait_for(lambda e: e.type == "confirmation-request", "the request again")
            assert again.id == request.id, name
        for step in case["steps"]:
            if "respond" in step:
                assert set(step) <= {"respond", "error", "outcome"}, f"{name}: bad step {step}"
                body = substitute(step["respond"], request)
                expect(step, name, lambda: gate_b.respond(body))
            elif step == {"wait_past_deadline": True}:
                await past(request.deadline_ms)
            else:
                raise AssertionError(f"{name}: unknown step {step}")

        def final() -> bool:
            record = gate_b.record(request.id)
            assert record is not None, f"{name}: no record"
            return record.is_final

        await wait_until(final, what="a final record")
        await asyncio.sleep(0.05)
        record = gate_b.record(request.id).to_dict()  # type: ignore[union-attr]
        for k, v in case["record"].items():
            assert record.get(k) == v, f"{name}: record {k} is {record.get(k)!r}, expected {v!r} (in {record})"
        assert after["runs"] == case["runs"], f"{name}: runs after the restart: {after['runs']}"
        assert before["runs"] == int(executing), f"{name}: runs before the restart"
        await events_b.close()
    finally:
        gate_b.close()

    # Another restart: a settled request is never picked up again.
    later = {"runs": 0}

    async def counted(args: Any) -> Any:
        later["runs"] += 1
        return {"sent": True}

    gate_c = signoff.Gate(store_path=tmp / "b.db")
    try:
        for spec in DURABLE["tools"]:
            gate_c.register_spec(spec, counted)
        again = gate_c.recover()
        for lst in RECOVERY_LISTS:
            assert getattr(again, lst) == [], f"{name}: recovery.{lst} after another restart"
        assert gate_c.record(request.id).to_dict()["state"] == record["state"], name  # type: ignore[union-attr]
        await asyncio.sleep(0.05)
        assert later["runs"] == 0, f"{name}: runs after another restart"
    finally:
        gate_c.close()


@pytest.mark.parametrize("case", DURABLE["cases"], ids=[c["name"] for c in DURABLE["cases"]])
def test_durable_restart(case: Dict[str, Any], run: Any, tmp_path: Path) -> None:
    run(run_durable(case, tmp_path))
