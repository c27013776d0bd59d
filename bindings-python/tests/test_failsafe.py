"""Every fail-safe path across the Python boundary: each denies or cancels, is reported, and never
runs the tool."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import threading
import time
import weakref
from typing import Any, List

import pytest

import signoff
from conftest import LOOPS, Collector, run_in, wait_until
from helpers import Recorder, gate_with_tools


def resolved_events(items: List[Any]) -> List[Any]:
    return [i for i in items if i.type == "confirmation-resolved"]


@pytest.mark.parametrize("style", ["sync", "async"])
def test_handler_that_raises_denies_and_is_logged(style: str, run: Any, caplog: Any) -> None:
    rec = Recorder()

    def sync_handler(req: signoff.PendingRequest) -> None:
        raise ValueError(f"cannot show {req.tool}")

    async def async_handler(req: signoff.PendingRequest) -> None:
        await asyncio.sleep(0)
        raise ValueError(f"cannot show {req.tool}")

    async def body() -> None:
        gate = gate_with_tools(rec)
        gate.on_request(sync_handler if style == "sync" else async_handler)
        r = await gate.execute("delete_file", {"path": "/a"})
        assert r.status == "denied" and not r.ran
        assert r.decision is not None and r.decision.responder == signoff.HANDLER_RESPONDER
        assert r.decision.reason == "the approval handler failed: ValueError: cannot show delete_file"
        assert "ValueError: cannot show delete_file" in r.content
        gate.close()

    with caplog.at_level(logging.ERROR, logger="signoff"):
        run(body())
    assert rec.calls == []
    logged = [r for r in caplog.records if r.name == "signoff" and r.exc_info]
    assert logged and logged[0].exc_info[0] is ValueError


@pytest.mark.parametrize("style", ["sync", "async"])
def test_handler_that_returns_without_answering_denies(style: str, run: Any) -> None:
    rec = Recorder()
    seen: List[str] = []

    def sync_handler(req: signoff.PendingRequest) -> None:
        seen.append(req.tool)

    async def async_handler(req: signoff.PendingRequest) -> None:
        seen.append(req.tool)

    async def body() -> None:
        gate = gate_with_tools(rec)
        gate.on_request(sync_handler if style == "sync" else async_handler)
        r = await gate.execute("delete_file", {"path": "/a"})
        assert r.status == "denied"
        assert r.decision is not None and r.decision.reason == "the approval handler returned without answering"
        gate.close()

    run(body())
    assert seen == ["delete_file"] and rec.calls == []


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


def test_cancelling_execute_cancels_a_running_async_executor(run: Any) -> None:
    state: List[str] = []

    async def slow(args: Any) -> str:
        state.append("started")
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            state.append("cancelled")
            raise
        return "done"

    async def body() -> None:
        gate = signoff.Gate()
        gate.register("slow", approval="not_required", executor=slow)
        task = asyncio.ensure_future(gate.execute("slow"))
        await wait_until(lambda: state == ["started"])
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await wait_until(lambda: state == ["started", "cancelled"], what="the executor's cancellation")
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


def test_sync_handler_runs_off_the_loop_and_may_block(run: Any) -> None:
    async def body() -> None:
        gate = gate_with_tools(default_timeout=0.2)
        loop_thread = threading.get_ident()
        threads: List[int] = []
        late: List[str] = []

        def blocking_handler(req: signoff.PendingRequest) -> None:
            threads.append(threading.get_ident())
            time.sleep(0.5)  # longer than the deadline: the request times out meanwhile
            try:
                req.approve()
            except signoff.SignoffError as e:
                late.append(e.kind)

        gate.on_request(blocking_handler)
        ticks = 0
        task = asyncio.ensure_future(gate.confirm("delete_file", {"path": "/a"}))
        while not task.done():  # the loop keeps running while the handler blocks
            ticks += 1
            await asyncio.sleep(0.01)
        assert task.result().outcome == "timed-out"
        assert ticks >= 10 and threads and threads[0] != loop_thread
        await wait_until(lambda: late == ["expired"], what="the late answer")
        gate.close()

    run(body())


@pytest.mark.parametrize("kind", LOOPS)
def test_async_handler_whose_loop_closed_denies(kind: str) -> None:
    gate = gate_with_tools(Recorder())

    async def register() -> None:
        async def handler(req: signoff.PendingRequest) -> None:
            req.approve()

        gate.on_request(handler)

    run_in(kind, register())  # that loop is closed now
    r = gate.execute_blocking("delete_file", {"path": "/a"})
    assert r.status == "denied" and r.decision is not None
    assert "event loop" in (r.decision.reason or "")
    gate.close()


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


def test_stopped_handler_no_longer_answers(run: Any) -> None:
    async def body() -> None:
        gate = gate_with_tools()
        reg = gate.on_request(lambda r: r.approve())
        assert (await gate.confirm("delete_file", {"path": "/a"})).approved
        reg.stop()
        await wait_until(lambda: gate.subscriber_count == 0, what="the handler's unsubscription")
        d = await gate.confirm("delete_file", {"path": "/a"})
        assert (d.outcome, d.cancel_reason) == ("cancelled", "no-subscribers")
        gate.close()

    run(body())


@pytest.mark.parametrize("kind", LOOPS)
def test_ctrl_c_under_asyncio_run_cancels_the_pending_request(kind: str, tmp_path: Any) -> None:
    import json
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
