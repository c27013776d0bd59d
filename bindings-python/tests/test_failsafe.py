"""Every fail-safe path across the Python boundary: each cancels the request (or lets it time out),
is reported, and never runs the tool."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import signal
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Dict, List

import pytest

import signoff
from conftest import LOOPS, Collector, run_in, wait_until
from helpers import Recorder, gate_with_tools


def resolved_events(items: List[Any]) -> List[Any]:
    return [i for i in items if i.type == "confirmation-resolved"]


def audit_records(path: Path) -> List[Dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def approval_failures(path: Path) -> List[Dict[str, Any]]:
    """The audit's `notice` records of failed approval steps."""
    return [r for r in audit_records(path) if r["kind"] == "notice" and r.get("decision") == "approval-failed"]


def assert_approval_failed(r: signoff.ToolResult) -> None:
    """The call ended as a failed approval step, not a person's refusal, and did not run."""
    assert (r.status, r.ran, r.is_error) == ("cancelled", False, True)
    assert r.decision is not None
    assert (r.decision.outcome, r.decision.cancel_reason) == ("cancelled", "approval-failed")
    assert r.decision.responder is None and r.decision.reason == "approval-failed"
    assert "the approval step failed" in r.content and "not a person's refusal" in r.content


@pytest.mark.parametrize("style", ["sync", "async"])
def test_handler_that_raises_is_a_failed_approval_step(
    style: str, run: Any, caplog: Any, capfd: Any, tmp_path: Path
) -> None:
    rec = Recorder()
    audit = tmp_path / "audit.jsonl"

    def sync_handler(req: signoff.PendingRequest) -> None:
        raise ValueError(f"cannot show {req.tool}")

    async def async_handler(req: signoff.PendingRequest) -> None:
        await asyncio.sleep(0)
        raise ValueError(f"cannot show {req.tool}")

    async def body() -> None:
        gate = gate_with_tools(rec, audit_path=audit)
        events = Collector(gate.events())
        gate.on_request(sync_handler if style == "sync" else async_handler)
        r = await gate.execute("delete_file", {"path": "/a"})
        assert_approval_failed(r)
        # The model reads that the approval step failed, never the exception.
        for text in (r.content, r.to_openai()["content"], json.dumps(r.to_anthropic())):
            assert "cannot show" not in text and "ValueError" not in text
        resolved = await events.wait_for(lambda e: e.type == "confirmation-resolved", "the resolution")
        assert (resolved.outcome, resolved.cancel_reason) == ("cancelled", "approval-failed")
        await events.close()
        gate.close()

    with caplog.at_level(logging.ERROR, logger="signoff"):
        run(body())
    assert rec.calls == []
    # The detail: in the audit (a notice from signoff's handler guard), on stderr, and logged.
    [notice] = approval_failures(audit)
    assert notice["responder"] == signoff.HANDLER_RESPONDER
    assert notice["reason"] == "the approval handler failed: ValueError: cannot show delete_file"
    outcome = [r for r in audit_records(audit) if r["kind"] == "outcome"]
    assert [(o["decision"], o["reason"]) for o in outcome] == [("cancelled", "approval-failed")]
    assert "ValueError: cannot show delete_file" in capfd.readouterr().err
    logged = [r for r in caplog.records if r.name == "signoff" and r.exc_info]
    assert logged and logged[0].exc_info[0] is ValueError
    # Only that it raised: what became of the request is the core's to report.
    assert logged[0].getMessage() == "signoff: the approval handler raised"


@pytest.mark.parametrize("style", ["sync", "async"])
def test_handler_that_answers_then_raises_keeps_its_answer(style: str, run: Any, caplog: Any, tmp_path: Path) -> None:
    rec = Recorder()
    audit = tmp_path / "audit.jsonl"

    def sync_handler(req: signoff.PendingRequest) -> None:
        req.approve()
        raise ValueError("after answering")

    async def async_handler(req: signoff.PendingRequest) -> None:
        req.approve()
        raise ValueError("after answering")

    async def body() -> None:
        gate = gate_with_tools(rec, audit_path=audit)
        gate.on_request(sync_handler if style == "sync" else async_handler)
        r = await gate.execute("delete_file", {"path": "/a"})
        assert (r.status, r.output) == ("executed", "ok")
        gate.close()

    with caplog.at_level(logging.ERROR, logger="signoff"):
        run(body())
    assert rec.calls == [{"path": "/a"}]
    assert approval_failures(audit) == []
    logged = [r for r in caplog.records if r.name == "signoff" and r.exc_info]
    assert logged and logged[0].exc_info[0] is ValueError
    # The call ran: the log must not say the request was denied.
    assert logged[0].getMessage() == "signoff: the approval handler raised"


class HandlerSecretError(Exception):
    pass


@pytest.mark.parametrize("style", ["sync", "async"])
@pytest.mark.parametrize("restriction", ["allowed_responders", "approvers"])
def test_a_failed_approval_step_ends_the_call_at_once_whoever_may_answer(
    restriction: str, style: str, run: Any, tmp_path: Path
) -> None:
    # Issue 15 item 2: signoff's own fail-safe is not an answer from a responder, so restricting
    # who may answer must not leave the call waiting for its deadline.
    rec = Recorder()
    audit = tmp_path / "audit.jsonl"
    options: Dict[str, Any] = (
        {"allowed_responders": ["alice"]}
        if restriction == "allowed_responders"
        else {"approvers": signoff.Approvers().allow_all_tools(["alice"])}
    )
    secret = "db password is hunter2"

    def sync_handler(req: signoff.PendingRequest) -> None:
        raise HandlerSecretError(secret)

    async def async_handler(req: signoff.PendingRequest) -> None:
        raise HandlerSecretError(secret)

    async def body() -> None:
        gate = gate_with_tools(rec, default_timeout=30, audit_path=audit, **options)
        gate.on_request(sync_handler if style == "sync" else async_handler)
        started = time.monotonic()
        r = await asyncio.wait_for(gate.execute("delete_file", {"path": "/a"}), 20)
        assert time.monotonic() - started < 5, "the call waited for its deadline"
        assert_approval_failed(r)
        # Issue 15 item 7: the exception's text and class stay out of the model's context.
        for text in (r.content, r.to_openai()["content"], r.to_json()):
            assert "hunter2" not in text and "HandlerSecretError" not in text
        assert gate.pending_count == 0
        gate.close()

    run(body())
    assert rec.calls == []
    [notice] = approval_failures(audit)
    assert notice["responder"] == signoff.HANDLER_RESPONDER and notice["tool"] == "delete_file"
    assert f"HandlerSecretError: {secret}" in notice["reason"]


@pytest.mark.parametrize("style", ["sync", "async"])
def test_handler_that_returns_without_answering_is_a_failed_approval_step(
    style: str, run: Any, tmp_path: Path
) -> None:
    rec = Recorder()
    audit = tmp_path / "audit.jsonl"
    seen: List[str] = []

    def sync_handler(req: signoff.PendingRequest) -> None:
        seen.append(req.tool)

    async def async_handler(req: signoff.PendingRequest) -> None:
        seen.append(req.tool)

    async def body() -> None:
        gate = gate_with_tools(rec, audit_path=audit)
        gate.on_request(sync_handler if style == "sync" else async_handler)
        r = await gate.execute("delete_file", {"path": "/a"})
        assert_approval_failed(r)
        gate.close()

    run(body())
    assert seen == ["delete_file"] and rec.calls == []
    [notice] = approval_failures(audit)
    assert notice["reason"] == "the approval handler returned without answering"


def test_cancelling_the_awaiting_task_cancels_the_request(run: Any) -> None:
    rec = Recorder()

    async def body() -> None:
        gate = gate_with_tools(rec)
        events = Collector(gate.events())
        for op in (gate.confirm, gate.execute):
            task = asyncio.ensure_future(op("delete_file", {"path": "/a"}))
            req = await events.wait_for(lambda e: e.type == "confirmation-request" and gate.pending_count == 1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            res = await events.wait_for(lambda e: e.type == "confirmation-resolved" and e.id == req.id)
            assert (res.outcome, res.cancel_reason) == ("cancelled", "aborted")
            with pytest.raises(signoff.AlreadyResolvedError):
                gate.approve(req)
            assert gate.pending_count == 0
        # asyncio.wait_for timing out is a cancellation too.
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(gate.execute("delete_file", {"path": "/b"}), 0.05)
        res = await events.wait_for(
            lambda e: e.type == "confirmation-resolved" and e.cancel_reason == "aborted" and len(
                resolved_events(events.items)) == 3)
        assert res.outcome == "cancelled"
        await events.close()
        gate.close()

    run(body())
    assert rec.calls == []


@pytest.mark.parametrize("style", ["sync", "async"])
def test_an_answer_in_the_same_turn_as_the_cancel_does_not_run_the_tool(style: str, run: Any) -> None:
    # task.cancel() marks the awaited future cancelled at once; what drops the core call runs a
    # turn later. An approval given in between used to wake the call and run the tool for a
    # caller that had already stopped waiting.
    ran: List[str] = []

    async def body() -> None:
        gate = signoff.Gate()

        def sync_tool(args: Any) -> str:
            ran.append("sync")
            return "x"

        async def async_tool(args: Any) -> str:
            ran.append("async")
            return "x"

        gate.register("t", approval="required", executor=sync_tool if style == "sync" else async_tool)
        stream = gate.events()
        task = asyncio.ensure_future(gate.execute("t"))
        req = await stream.__anext__()
        task.cancel()
        try:
            gate.approve(req)  # the core may still take it: the caller has gone either way
        except signoff.SignoffError:
            pass
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.1)
        stream.close()
        gate.close()

    run(body())
    assert ran == []


@pytest.mark.parametrize("style", ["sync", "async"])
def test_cancelling_execute_while_the_tool_runs_lets_it_finish_and_records_it(
    style: str, run: Any, tmp_path: Path
) -> None:
    # The core's cancellation rule: only the caller stops waiting; the tool is not interrupted.
    audit = tmp_path / "audit.jsonl"
    state: List[str] = []
    release = threading.Event()

    async def slow_async(args: Any) -> str:
        state.append("started")
        while not release.is_set():
            await asyncio.sleep(0.005)
        state.append("finished")
        return "done"

    def slow_sync(args: Any) -> str:
        state.append("started")
        release.wait(10)
        state.append("finished")
        return "done"

    async def body() -> None:
        gate = signoff.Gate(audit_path=audit)
        gate.register("slow", approval="not_required", executor=slow_async if style == "async" else slow_sync)
        task = asyncio.ensure_future(gate.execute("slow"))
        await wait_until(lambda: state == ["started"])
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        release.set()
        await wait_until(lambda: state == ["started", "finished"], what="the tool's end")
        gate.flush_audit()
        await wait_until(lambda: any(r["kind"] == "execution" for r in audit_records(audit)), what="the record")
        [execution] = [r for r in audit_records(audit) if r["kind"] == "execution"]
        assert (execution["tool"], execution["decision"]) == ("slow", "ok")
        gate.close()

    run(body())


def test_keyboard_interrupt_in_a_blocking_wait_cancels() -> None:
    rec = Recorder()
    gate = gate_with_tools(rec, deny_when_unobserved=False)
    events = gate.events()
    stop = threading.Event()

    def interrupter() -> None:
        while gate.pending_count == 0 and not stop.is_set():
            time.sleep(0.005)
        os.kill(os.getpid(), signal.SIGINT)

    t = threading.Thread(target=interrupter)
    t.start()
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            gate.execute_blocking("delete_file", {"path": "/a"})
    finally:
        stop.set()
        t.join()
    assert time.monotonic() - started < 5
    assert gate.pending_count == 0  # cancelled before KeyboardInterrupt propagated
    items = []
    while True:
        try:
            items.append(events.next_blocking(timeout=0.2))
        except TimeoutError:
            break
    res = resolved_events(items)
    assert len(res) == 1 and (res[0].outcome, res[0].cancel_reason) == ("cancelled", "aborted")
    assert rec.calls == []
    gate.close()


def test_next_blocking_takes_any_timeout_a_clock_cannot_count_as_none() -> None:
    # 1e19 and 1e30 seconds raised PanicException (a BaseException: `except Exception` missed it).
    gate = gate_with_tools(Recorder())
    stream = gate.events()
    gate.close()  # the stream ends: every wait returns at once
    for timeout in (1e30, 1e19, float("inf"), 0.0, None):
        assert stream.next_blocking(timeout=timeout) is None, timeout
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError):
            stream.next_blocking(timeout=bad)


def test_garbage_collected_gate_cancels_pending(run: Any) -> None:
    rec = Recorder()

    async def body() -> None:
        gate = gate_with_tools(rec)
        stream = gate.events()
        task = asyncio.ensure_future(gate.execute("delete_file", {"path": "/a"}))
        await wait_until(lambda: gate.pending_count == 1)
        ref = weakref.ref(gate)
        del gate
        gc.collect()
        assert ref() is None
        r = await asyncio.wait_for(task, 5)
        assert r.status == "cancelled" and r.decision is not None and r.decision.cancel_reason == "shutdown"
        items = []
        async for item in stream:  # the gate is gone: the stream ends
            items.append(item)
        assert [i.type for i in items] == ["confirmation-request", "confirmation-resolved"]
        assert items[-1].cancel_reason == "shutdown"

    run(body())
    assert rec.calls == []


def test_closing_cancels_pending_and_stops_handlers(run: Any) -> None:
    rec = Recorder()

    async def body() -> None:
        gate = gate_with_tools(rec)
        answered = asyncio.Event()

        async def slow_handler(req: signoff.PendingRequest) -> None:
            await answered.wait()
            req.approve()

        reg = gate.on_request(slow_handler)
        assert reg.active
        task = asyncio.ensure_future(gate.execute("delete_file", {"path": "/a"}))
        await wait_until(lambda: gate.pending_count == 1)
        gate.close()
        r = await task
        assert r.status == "cancelled" and r.decision is not None and r.decision.cancel_reason == "shutdown"
        assert not reg.active
        answered.set()
        await asyncio.sleep(0.01)
        later = await gate.confirm("delete_file", {"path": "/b"})
        assert later.cancel_reason == "shutdown"

    run(body())
    assert rec.calls == []


def test_a_closed_gate_runs_nothing_that_needs_approval_even_under_a_session_grant(run: Any) -> None:
    rec = Recorder()

    async def body() -> None:
        gate = gate_with_tools(rec)
        gate.on_request(lambda req: req.approve(scope="session"))
        assert (await gate.execute("delete_file", {"path": "/a"}, session_id="s1")).status == "executed"
        assert (await gate.confirm("delete_file", {"path": "/b"}, session_id="s1")).by == "session-grant"
        gate.close()
        r = await gate.execute("delete_file", {"path": "/c"}, session_id="s1")
        assert r.status == "cancelled" and r.decision is not None and r.decision.cancel_reason == "shutdown"

    run(body())
    assert rec.calls == [{"path": "/a"}]


def test_handler_answering_on_the_loop_thread_does_not_deadlock(run: Any) -> None:
    async def body() -> None:
        gate = gate_with_tools(Recorder())
        loop_thread = threading.get_ident()
        threads: List[int] = []

        async def handler(req: signoff.PendingRequest) -> None:
            threads.append(threading.get_ident())
            req.approve()  # a synchronous call into the core from the loop thread
            # Another gate call from the loop thread while the first one resolves.
            assert gate.pending_count >= 0

        gate.on_request(handler)
        results = await asyncio.gather(*(gate.execute("delete_file", {"path": f"/{i}"}) for i in range(50)))
        assert [r.status for r in results] == ["executed"] * 50
        assert set(threads) == {loop_thread}
        # A response sent from a plain loop callback, too.
        gate2 = gate_with_tools()
        events = gate2.events()
        task = asyncio.ensure_future(gate2.confirm("delete_file", {"path": "/a"}))
        await wait_until(lambda: gate2.pending_count == 1)
        asyncio.get_running_loop().call_soon(lambda: gate2.approve(gate2.pending()[0]))
        assert (await asyncio.wait_for(task, 5)).approved
        events.close()
        gate.close()
        gate2.close()

    run(body())


def test_sync_handler_runs_inline_on_the_awaiting_thread(run: Any) -> None:
    # Inline dispatch: a sync handler is called inside the `confirm` that made the request, on
    # the loop's thread, and its answer resolves the call with no thread hop or task.
    async def body() -> None:
        gate = gate_with_tools()
        threads: List[int] = []

        def handler(req: signoff.PendingRequest) -> None:
            threads.append(threading.get_ident())
            assert asyncio.current_task() is not None  # inside the caller's own task
            req.approve()

        gate.on_request(handler)
        fut = gate._native.confirm("delete_file", {"path": "/a"})
        assert fut.done() and fut.result().approved  # decided before the first await
        assert threads == [threading.get_ident()]
        gate.close()

    run(body())


def test_sync_handler_of_a_blocking_call_runs_on_the_calling_thread() -> None:
    gate = gate_with_tools()
    threads: List[int] = []
    gate.on_request(lambda req: (threads.append(threading.get_ident()), req.approve()))
    outcomes: List[str] = []
    agent = threading.Thread(target=lambda: outcomes.append(gate.confirm_blocking("delete_file", {"path": "/a"}).outcome))
    agent.start()
    agent.join(10)
    assert outcomes == ["approved"] and threads == [agent.ident]
    gate.close()


def test_async_handler_may_wait_for_a_person_without_stalling_the_loop(run: Any) -> None:
    async def body() -> None:
        gate = gate_with_tools(default_timeout=0.2)
        late: List[str] = []

        async def person(req: signoff.PendingRequest) -> None:
            await asyncio.to_thread(time.sleep, 0.5)  # longer than the deadline: it times out meanwhile
            try:
                req.approve()
            except signoff.SignoffError as e:
                late.append(e.kind)

        gate.on_request(person)
        ticks = 0
        task = asyncio.ensure_future(gate.confirm("delete_file", {"path": "/a"}))
        while not task.done():  # the loop keeps running while the handler waits
            ticks += 1
            await asyncio.sleep(0.01)
        assert task.result().outcome == "timed-out"
        assert ticks >= 10
        await wait_until(lambda: late == ["expired"], what="the late answer")
        gate.close()

    run(body())


@pytest.mark.parametrize("kind", LOOPS)
def test_async_handler_whose_loop_closed_is_a_failed_approval_step(kind: str, tmp_path: Path) -> None:
    rec = Recorder()
    audit = tmp_path / "audit.jsonl"
    gate = gate_with_tools(rec, audit_path=audit)

    async def register() -> None:
        async def handler(req: signoff.PendingRequest) -> None:
            req.approve()

        gate.on_request(handler)

    run_in(kind, register())  # that loop is closed now
    r = gate.execute_blocking("delete_file", {"path": "/a"})
    assert_approval_failed(r)
    gate.close()
    assert rec.calls == []
    [notice] = approval_failures(audit)
    assert "event loop" in notice["reason"]


def test_async_handler_needs_a_running_loop() -> None:
    gate = signoff.Gate()

    async def handler(req: signoff.PendingRequest) -> None:
        req.approve()

    with pytest.raises(RuntimeError, match="event loop"):
        gate.on_request(handler)


def test_blocking_call_inside_a_running_loop_is_refused(run: Any) -> None:
    async def body() -> None:
        gate = gate_with_tools()
        with pytest.raises(RuntimeError, match="block the running event loop"):
            gate.confirm_blocking("read_file", {"path": "/a"})
        gate.close()

    run(body())


def test_a_closed_gate_has_no_approvers(run: Any) -> None:
    # Nothing is asked once the gate is closed: nobody attached before or after counts (the
    # core's count, the same in every language).
    async def body() -> None:
        gate = gate_with_tools()
        gate.on_request(lambda r: r.approve())
        stream = gate.events()
        assert gate.approver_count == 2
        gate.close()
        assert gate.approver_count == 0
        gate.on_request(lambda r: r.approve())
        late = gate.events()
        assert gate.approver_count == 0
        del stream, late

    run(body())


def test_stopped_handler_no_longer_answers(run: Any) -> None:
    async def body() -> None:
        gate = gate_with_tools()
        reg = gate.on_request(lambda r: r.approve())
        assert (await gate.confirm("delete_file", {"path": "/a"})).approved
        reg.stop()
        await wait_until(lambda: gate.approver_count == 0, what="the handler's unsubscription")
        d = await gate.confirm("delete_file", {"path": "/a"})
        assert (d.outcome, d.cancel_reason) == ("cancelled", "no-approver")
        gate.close()

    run(body())


def test_a_forgotten_approver_is_said_once_not_silent(run: Any, capfd: Any) -> None:
    # Issue 14 item 3: with nothing listening, a gated call was cancelled in 0 ms and nothing said why.
    async def body() -> None:
        gate = gate_with_tools()
        for _ in range(2):
            d = await gate.confirm("delete_file", {"path": "/a"})
            assert (d.outcome, d.cancel_reason) == ("cancelled", "no-approver")
        gate.close()

    run(body())
    err = capfd.readouterr().err
    assert err.count("no approver is attached") == 1, err
    assert "`delete_file`" in err and "Attach an approver" in err


@pytest.mark.parametrize("kind", LOOPS)
def test_ctrl_c_under_asyncio_run_cancels_the_pending_request(kind: str, tmp_path: Any) -> None:
    import subprocess
    import sys
    import textwrap

    audit = tmp_path / "audit.jsonl"
    script = tmp_path / "agent.py"
    script.write_text(textwrap.dedent(f"""
        import asyncio, sys, signoff
        ran = []
        async def main():
            gate = signoff.Gate(audit_path={str(audit)!r}, deny_when_unobserved=False)
            gate.register("delete_file", executor=lambda a: ran.append(a))
            fut = asyncio.ensure_future(gate.execute("delete_file", {{"path": "/a"}}))
            while gate.pending_count == 0:
                await asyncio.sleep(0.001)
            print("waiting", flush=True)
            await fut
        try:
            if {kind!r} == "uvloop":
                import uvloop
                uvloop.run(main())
            else:
                asyncio.run(main())
        except KeyboardInterrupt:
            print("interrupted", ran, flush=True)
            sys.exit(3)
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "waiting"
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 3 and out.strip() == "interrupted []"
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    outcome = [r for r in records if r["kind"] == "outcome"]
    assert len(outcome) == 1 and outcome[0]["decision"] == "cancelled" and outcome[0]["reason"] == "aborted"
    assert not [r for r in records if r["kind"] == "execution"]


def test_a_call_left_waiting_on_a_closed_loop_ends_by_its_deadline() -> None:
    # A loop closed while a call waits never polls it again: the call's deadline used to pass with
    # the request still pending (until the gate closed), and no resolved event came.
    gate = signoff.Gate()
    gate.register("t", approval="required", timeout=0.3, executor=lambda a: "ran")
    approver = gate.events()
    watch = gate.events(observe=True)
    loop = asyncio.new_event_loop()

    async def start() -> None:
        asyncio.ensure_future(gate.execute("t"))
        await asyncio.sleep(0.05)

    loop.run_until_complete(start())
    assert gate.pending_count == 1
    loop.close()
    deadline = time.monotonic() + 5
    while gate.pending_count and time.monotonic() < deadline:
        time.sleep(0.02)
    assert gate.pending_count == 0
    seen = [watch.next_blocking(timeout=2), watch.next_blocking(timeout=2)]
    assert [e.type for e in seen] == ["confirmation-request", "confirmation-resolved"]
    assert seen[1].outcome == "cancelled" and seen[1].cancel_reason == "aborted"
    approver.close()
    gate.close()
