"""Concurrency: many confirmations at once, batches, lagging streams, blocking calls and the GIL."""

from __future__ import annotations

import asyncio
import contextvars
import random
import sys
import threading
import time
from typing import Any, Dict, List

import pytest

import signoff
from conftest import Collector, wait_until
from helpers import Recorder, gate_with_tools

N = 1000


def test_1000_concurrent_confirmations_answered_in_random_order(run: Any) -> None:
    async def body() -> None:
        gate = gate_with_tools(bus_capacity=8192)
        events = Collector(gate.events())
        tasks = [
            asyncio.ensure_future(gate.confirm("delete_file", {"path": f"/f/{i}"}, session_id=f"s{i % 7}",
                                               call_id=f"c{i}"))
            for i in range(N)
        ]
        await wait_until(lambda: len(events.of_type("confirmation-request")) == N, 20, "1000 requests")
        requests = events.of_type("confirmation-request")
        assert gate.pending_count == N
        rng = random.Random(1234)
        rng.shuffle(requests)
        for n, req in enumerate(requests):
            i = int(req.tool_call_id[1:])
            assert req.arguments == {"path": f"/f/{i}"}
            if i % 3 == 0:
                assert gate.approve(req, responder=f"r{i}") == "approved"
            elif i % 3 == 1:
                assert gate.deny(req, f"no {i}", responder=f"r{i}") == "denied"
            else:
                assert gate.approve(req, arguments={"path": f"/edited/{i}"}, responder=f"r{i}") == "approved"
            if n % 100 == 0:
                await asyncio.sleep(0)  # let some decisions land while others are still pending
        decisions = await asyncio.gather(*tasks)
        for i, d in enumerate(decisions):
            assert d.responder == f"r{i}"
            if i % 3 == 0:
                assert d.approved and d.arguments == {"path": f"/f/{i}"} and not d.edited
            elif i % 3 == 1:
                assert d.outcome == "denied" and d.reason == f"no {i}"
            else:
                assert d.approved and d.edited and d.arguments == {"path": f"/edited/{i}"}
        assert gate.pending_count == 0
        await events.close()
        gate.close()

    run(body())


def test_1000_concurrent_executes_with_a_handler(run: Any) -> None:
    rec = Recorder()

    async def body() -> None:
        gate = gate_with_tools(rec)

        def approver(req: signoff.PendingRequest) -> None:
            i = int(req.arguments["path"].rsplit("/", 1)[1])
            if i % 2:
                req.deny(f"odd {i}")
            else:
                req.approve()

        gate.on_request(approver)
        results = await asyncio.gather(*(gate.execute("delete_file", {"path": f"/f/{i}"}, call_id=f"c{i}")
                                         for i in range(N)))
        for i, r in enumerate(results):
            assert r.call_id == f"c{i}"
            assert r.status == ("denied" if i % 2 else "executed")
        gate.close()

    run(body())
    assert sorted(int(c["path"].rsplit("/", 1)[1]) for c in rec.calls) == list(range(0, N, 2))


def test_execute_batch_keeps_order_and_runs_each_call_at_most_once(run: Any) -> None:
    rec = Recorder()

    async def body() -> None:
        gate = gate_with_tools(rec)
        events = Collector(gate.events())
        calls: List[Any] = [
            signoff.ToolCall("delete_file", {"path": "/1"}, call_id="a"),
            {"tool": "read_file", "arguments": {"path": "/2"}, "call_id": "b"},
            signoff.ToolCall("delete_file", {"path": "/3"}, call_id="c"),
            signoff.ToolCall("nope", {}, call_id="d"),
        ]
        task = asyncio.ensure_future(gate.execute_batch(calls))
        await wait_until(lambda: len(events.of_type("confirmation-request")) == 2)
        # The ungated call runs while the gated ones wait.
        await wait_until(lambda: len(rec.calls) == 1, what="the ungated call")
        assert rec.calls == [{"path": "/2"}] and not task.done()
        reqs = {r.tool_call_id: r for r in events.of_type("confirmation-request")}
        gate.deny(reqs["c"], "not /3")  # answered in reverse order
        gate.approve(reqs["a"])
        results = await task
        assert [r.call_id for r in results] == ["a", "b", "c", "d"]
        assert [r.status for r in results] == ["executed", "executed", "denied", "rejected"]
        with pytest.raises(signoff.AlreadyResolvedError):
            gate.approve(reqs["a"])  # a second answer cannot run it twice
        await events.close()
        gate.close()

    run(body())
    assert sorted(c["path"] for c in rec.calls) == ["/1", "/2"]


def test_execute_batch_blocking() -> None:
    rec = Recorder()
    gate = gate_with_tools(rec)
    gate.on_request(lambda r: r.approve() if r.arguments["path"] == "/ok" else r.deny())
    results = gate.execute_batch_blocking([signoff.ToolCall("delete_file", {"path": p}, call_id=p)
                                           for p in ("/ok", "/no", "/ok")])
    assert [(r.call_id, r.status) for r in results] == [("/ok", "executed"), ("/no", "denied"), ("/ok", "executed")]
    assert rec.calls == [{"path": "/ok"}, {"path": "/ok"}]
    # A misspelt field is refused before anything runs, not dropped: the call would otherwise run
    # in the default session (whose grants are not alice's) or with no arguments.
    for call in ({"tool": "delete_file", "arguments": {"path": "/ok"}, "sessionId": "alice"},
                 {"tool": "delete_file", "args": {"path": "/ok"}}):
        with pytest.raises(signoff.MalformedError, match="unknown field"):
            gate.execute_batch_blocking([call])
    assert len(rec.calls) == 2
    gate.close()


def test_a_lagging_stream_gets_a_lagged_marker_with_the_pending_snapshot(run: Any) -> None:
    async def body() -> None:
        gate = gate_with_tools(bus_capacity=4, deny_when_unobserved=False)
        stream = gate.events()
        tasks = [asyncio.ensure_future(gate.confirm("delete_file", {"path": f"/{i}"})) for i in range(10)]
        await wait_until(lambda: gate.pending_count == 10)
        items: List[Any] = []
        async for item in stream:
            items.append(item)
            if isinstance(item, signoff.Lagged) or len(items) > 20:
                break
        lagged = items[0]
        assert isinstance(lagged, signoff.Lagged), items
        assert lagged.missed == 6 and lagged.type == "lagged"
        assert len(lagged.pending) == 10 and {r.arguments["path"] for r in lagged.pending} == {f"/{i}" for i in range(10)}
        assert lagged.to_dict()["pending"][0]["type"] == "confirmation-request"
        # The stream goes on with the newest events after the marker.
        rest = [await stream.__anext__() for _ in range(4)]
        assert all(e.type == "confirmation-request" for e in rest)
        for r in gate.pending():
            gate.deny(r)
        assert [d.outcome for d in await asyncio.gather(*tasks)] == ["denied"] * 10
        stream.close()
        gate.close()

    run(body())


def test_a_stream_for_some_types_yields_only_those_and_lags_are_still_reported(run: Any) -> None:
    async def body() -> None:
        gate = gate_with_tools(deny_when_unobserved=False)
        every = gate.events(observe=True)
        requests = gate.events(types=["confirmation-request"])
        answered = []
        for path in ("/a", "/b"):
            call = asyncio.ensure_future(gate.confirm("delete_file", {"path": path}))
            req = await requests.__anext__()
            assert isinstance(req, signoff.ConfirmationRequest) and req.arguments == {"path": path}
            gate.approve(req) if path == "/a" else gate.deny(req, "no")
            answered.append((await call).outcome)
        assert answered == ["approved", "denied"]
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(requests.__anext__(), 0.05)
        kinds = [(await every.__anext__()).type for _ in range(6)]
        assert kinds == ["confirmation-request", "confirmation-response", "confirmation-resolved"] * 2
        for bad, match in (
            (["confirmation-request", "lagged"], '"lagged"'),
            ("confirmation-request", "not the string"),
            ([signoff.ConfirmationRequest], "names \\(str\\)"),
        ):
            with pytest.raises(signoff.MalformedError, match=match):
                gate.events(types=bad)  # type: ignore[arg-type]
        every.close()
        requests.close()
        gate.close()

        # A lag is reported whatever the types asked for.
        gate = gate_with_tools(bus_capacity=4, deny_when_unobserved=False)
        only_timeouts = gate.events(observe=True, types=["confirmation-timeout"])
        tasks = [asyncio.ensure_future(gate.confirm("delete_file", {"path": f"/{i}"})) for i in range(10)]
        await wait_until(lambda: gate.pending_count == 10)
        lagged = await asyncio.wait_for(only_timeouts.__anext__(), 5)
        assert isinstance(lagged, signoff.Lagged) and len(lagged.pending) == 10
        for r in gate.pending():
            gate.deny(r)
        await asyncio.gather(*tasks)
        only_timeouts.close()
        gate.close()

    run(body())


def test_lag_recovery_is_bounded_and_pending_pages_give_every_request_once(run: Any) -> None:
    # Issue 15 item 8: a lagging stream used to receive every pending request at once.
    n = 2_500

    async def body() -> None:
        gate = gate_with_tools(bus_capacity=4, deny_when_unobserved=False)
        stream = gate.events()
        tasks = [asyncio.ensure_future(gate.confirm("delete_file", {"path": f"/{i}"})) for i in range(n)]
        await wait_until(lambda: gate.pending_count == n)
        lagged = None
        async for item in stream:
            if isinstance(item, signoff.Lagged):
                lagged = item
                break
        assert lagged is not None
        assert len(lagged.pending) == 1000 and lagged.more is not None
        assert lagged.to_dict()["more"] == lagged.more
        seen = [r.id for r in lagged.pending]
        after: Any = lagged.more
        while after is not None:
            page, after = gate.pending_page(after=after, limit=700)
            assert len(page) <= 700
            seen.extend(r.id for r in page)
        assert len(seen) == len(set(seen)) == n
        assert seen == [r.id for r in gate.pending()], "oldest first, as the whole list"
        assert [r.id for r in gate.iter_pending(page_size=333)] == seen
        page, nxt = gate.pending_page(limit=n)
        assert len(page) == n and nxt is not None and gate.pending_page(after=nxt) == ([], None)
        with pytest.raises(signoff.MalformedError, match="cursor"):
            gate.pending_page(after="not-a-cursor")
        assert gate.pending_page(limit=2**32 - 1)[0] == page  # the same rule in every language
        for bad in (0, -1, 2**32, 2**80, 10**400, 1.5):
            with pytest.raises(signoff.MalformedError, match="limit"):
                gate.pending_page(limit=bad)
        stream.close()
        gate.close()
        assert {d.outcome for d in await asyncio.gather(*tasks)} == {"cancelled"}

    run(body())


def test_leaving_the_loop_unsubscribes(run: Any) -> None:
    async def body() -> None:
        gate = gate_with_tools()
        task = None

        async def watch() -> str:
            async for event in gate.events():
                return event.type
            return "ended"

        watcher = asyncio.ensure_future(watch())
        await wait_until(lambda: gate.approver_count == 1)
        task = asyncio.ensure_future(gate.confirm("delete_file", {"path": "/a"}))
        assert await watcher == "confirmation-request"
        # The watcher returned from inside `async for`: its subscription is gone, so with nobody
        # observing, the pending request is cancelled.
        d = await asyncio.wait_for(task, 5)
        assert (d.outcome, d.cancel_reason) == ("cancelled", "no-approver")
        assert gate.approver_count == 0
        # `async with` closes too, and a pending __anext__ ends.
        async with gate.events() as stream:
            nxt = asyncio.ensure_future(stream.__anext__())
            await asyncio.sleep(0.01)
            assert gate.approver_count == 1
        with pytest.raises(StopAsyncIteration):
            await asyncio.wait_for(nxt, 5)
        assert gate.approver_count == 0 and stream.closed
        gate.close()

    run(body())


def test_a_cancelled_anext_does_not_lose_events(run: Any) -> None:
    async def body() -> None:
        gate = gate_with_tools(deny_when_unobserved=False)
        stream = gate.events()
        seen: List[str] = []

        def note(e: Any) -> None:
            if e.type == "confirmation-request":
                seen.append(e.arguments["path"])

        for i in range(200):
            nxt = asyncio.ensure_future(stream.__anext__())
            t = asyncio.ensure_future(gate.confirm("delete_file", {"path": f"/{i}"}))
            for _ in range(i % 4):
                await asyncio.sleep(0)
            nxt.cancel()  # races with the event arriving
            try:
                note(await nxt)
            except asyncio.CancelledError:
                pass
            await wait_until(lambda: gate.pending_count == 1)
            gate.deny(gate.pending()[0])
            await t
        with pytest.raises(asyncio.TimeoutError):
            while True:
                note(await asyncio.wait_for(stream.__anext__(), 0.2))
        assert sorted(seen) == sorted(f"/{i}" for i in range(200))
        stream.close()
        gate.close()

    run(body())


def test_blocking_waits_release_the_gil() -> None:
    gate = gate_with_tools(deny_when_unobserved=False)
    counter = [0]
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            counter[0] += 1

    def answer_later() -> None:
        while gate.pending_count == 0:
            time.sleep(0.001)
        time.sleep(0.2)
        gate.approve(gate.pending()[0])

    threads = [threading.Thread(target=spin), threading.Thread(target=answer_later)]
    for t in threads:
        t.start()
    before = counter[0]
    d = gate.confirm_blocking("delete_file", {"path": "/a"})
    during = counter[0] - before
    stop.set()
    for t in threads:
        t.join()
    assert d.approved
    assert during > 10_000  # the spinning thread ran while we waited
    gate.close()


def test_blocking_api_from_many_threads() -> None:
    rec = Recorder()
    gate = gate_with_tools(rec)
    gate.on_request(lambda r: r.approve())
    results: Dict[int, str] = {}

    def worker(i: int) -> None:
        results[i] = gate.execute_blocking("delete_file", {"path": f"/{i}"}).status

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: "executed" for i in range(32)} and len(rec.calls) == 32
    gate.close()


def test_async_executor_from_the_blocking_api_and_on_the_callers_loop(run: Any) -> None:
    loops: List[Any] = []

    async def executor(args: Any) -> Dict[str, Any]:
        loops.append(asyncio.get_running_loop())
        await asyncio.sleep(0.001)
        return {"echo": args}

    gate = signoff.Gate()
    gate.register("echo", approval="not_required", executor=executor)
    r = gate.execute_blocking("echo", {"x": 1})  # no loop here: runs under asyncio.run
    assert (r.status, r.output) == ("executed", {"echo": {"x": 1}})

    async def body() -> None:
        r2 = await gate.execute("echo", {"y": 2})
        assert r2.output == {"echo": {"y": 2}}
        assert loops[-1] is asyncio.get_running_loop()

    run(body())
    gate.close()


def test_sync_executor_returning_an_awaitable(run: Any) -> None:
    async def inner(args: Any) -> str:
        return "awaited"

    async def body() -> None:
        gate = signoff.Gate()
        gate.register("lazy", approval="not_required", executor=lambda a: inner(a))
        assert (await gate.execute("lazy")).output == "awaited"
        gate.close()

    run(body())


def test_threadsafe_wakeup_mode_works_too(tmp_path: Any) -> None:
    """The bridge's fallback for loops without add_reader (e.g. Windows' proactor loop)."""
    import subprocess
    import sys
    import textwrap

    script = tmp_path / "t.py"
    script.write_text(textwrap.dedent("""
        import asyncio, signoff
        async def main():
            gate = signoff.Gate(deny_when_unobserved=False)
            gate.register("delete_file", executor=lambda a: "ran")
            reg = gate.on_request(lambda r: r.approve())
            rs = await asyncio.gather(*(gate.execute("delete_file", {"i": i}) for i in range(200)))
            assert [r.content for r in rs] == ["ran"] * 200
            reg.stop()
            t = asyncio.ensure_future(gate.confirm("delete_file", {}))
            await asyncio.sleep(0.01)
            gate.close()
            assert (await t).cancel_reason == "shutdown"
            print("ok")
        asyncio.run(main())
    """))
    env = dict(__import__("os").environ, SIGNOFF_PY_BRIDGE="threadsafe")
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


class _CountingLoop(asyncio.SelectorEventLoop):
    """Counts the turns of the loop (asyncio's own `_run_once`)."""

    turns = 0

    def _run_once(self) -> None:  # type: ignore[override]
        _CountingLoop.turns += 1
        super()._run_once()  # type: ignore[misc]


def test_an_async_tool_that_returns_at_once_costs_its_call_no_turn_of_the_loop() -> None:
    # The tool runs in a Task of its own (so that cancelling the caller does not interrupt it),
    # started eagerly: its first step runs inside `execute` (`eager_start` on 3.12+, the same by
    # hand before), so a tool that returns without waiting completes the call at once.
    async def noop(args: Any) -> str:
        return "ok"

    async def body() -> int:
        gate = signoff.Gate()
        gate.register("free", approval="not_required", executor=noop)
        gate.register("gated", executor=noop)
        gate.on_request(lambda r: r.approve())
        await gate.execute("free", {})
        before = _CountingLoop.turns
        for tool in ["free", "gated"] * 50:
            result = await gate.execute(tool, {})
            assert result.status == "executed" and result.output == "ok"
        gate.close()
        return _CountingLoop.turns - before

    loop = _CountingLoop()
    try:
        turns = loop.run_until_complete(body())
    finally:
        loop.close()
    # A few to spare for a stray wake-up. The Task's own first turn made it 200; a done-callback's
    # turn of its own 300.
    assert turns <= 10, f"{turns} turns of the loop for 100 calls"


def test_a_loops_task_factory_makes_the_tools_task_on_every_python() -> None:
    # A task factory (tracing, `asyncio.eager_task_factory`) is the loop's way to make Tasks: the
    # tool's Task is made with it, as `loop.create_task` would, and the call still completes.
    made: List[Any] = []

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kw: Any) -> "asyncio.Task[Any]":
        task = asyncio.Task(coro, loop=loop, **kw)
        made.append(task)
        return task

    async def tool(args: Any) -> str:
        assert asyncio.current_task() in made
        return "ok"

    async def body() -> None:
        asyncio.get_running_loop().set_task_factory(factory)
        gate = signoff.Gate()
        gate.register("free", approval="not_required", executor=tool)
        before = len(made)
        r = await gate.execute("free", {})
        assert r.status == "executed" and r.output == "ok", r
        assert len(made) == before + 1
        gate.close()

    asyncio.run(body())


def test_a_task_factory_that_shares_one_context_keeps_no_current_call() -> None:
    # A factory may hand every Task one context of its own instead of a copy of the caller's:
    # current_call() is set for the tool's run only, and put back after it in that context.
    shared = contextvars.Context()

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kw: Any) -> "asyncio.Task[Any]":
        return asyncio.Task(coro, loop=loop, context=shared)

    async def tool(args: Any) -> str:
        call = signoff.current_call()
        assert call is not None and call.tool == "free"
        await asyncio.sleep(0)
        return "ok"

    async def body() -> None:
        asyncio.get_running_loop().set_task_factory(factory)
        gate = signoff.Gate()
        gate.register("free", approval="not_required", executor=tool)
        for _ in range(2):
            r = await gate.execute("free", {})
            assert r.status == "executed" and r.output == "ok", r
            assert shared.run(signoff.current_call) is None
        gate.close()

    asyncio.run(body())


def test_a_tool_started_eagerly_is_still_a_task_of_its_own(run: Any) -> None:
    # What the first step sees is what a Task's step sees: its own Task as `current_task()`, a
    # copy of the caller's context, and timeouts and task groups that act on the tool's Task.
    var: "contextvars.ContextVar[str]" = contextvars.ContextVar("var", default="caller's")
    seen: Dict[str, Any] = {}

    async def first_step(args: Any) -> str:
        seen["task"] = asyncio.current_task()
        seen["var"] = var.get()
        var.set("tool's")
        return "ok"

    async def times_out(args: Any) -> str:
        async with asyncio.timeout(0.05):  # type: ignore[attr-defined]
            await asyncio.sleep(10)
        return "not reached"

    async def waits(args: Any) -> str:
        seen["waiting"] = asyncio.current_task()
        await asyncio.sleep(0.01)
        assert asyncio.current_task() is seen["waiting"]
        return "woke"

    async def body() -> None:
        gate = signoff.Gate()
        for name, fn in (("first_step", first_step), ("times_out", times_out), ("waits", waits)):
            gate.register(name, approval="not_required", executor=fn)
        caller = asyncio.current_task()
        var.set("caller's own")
        r = await gate.execute("first_step", {})
        assert r.output == "ok"
        assert seen["task"] is not None and seen["task"] is not caller and seen["task"].done()
        assert seen["var"] == "caller's own" and var.get() == "caller's own"
        assert asyncio.current_task() is caller
        if sys.version_info >= (3, 11):
            r = await gate.execute("times_out", {})
            assert r.status == "failed" and "TimeoutError" in (r.error or ""), r
            assert not caller.cancelling()  # type: ignore[union-attr]
        r = await gate.execute("waits", {})
        assert r.output == "woke" and seen["waiting"] is not caller
        gate.close()

    run(body())
