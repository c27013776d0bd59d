"""The call context a running tool sees (the core's CallContext): `signoff.current_call()` and a
parameter annotated `signoff.CallContext`, for async and sync tools."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Dict, List, Optional

import pytest

import signoff
from conftest import Collector
from helpers import PATH_SCHEMA


def seen(call: Optional[signoff.CallContext]) -> Dict[str, Any]:
    assert isinstance(call, signoff.CallContext)
    return {
        "tool": call.tool,
        "call_id": call.call_id,
        "request_id": call.request_id,
        "session_id": call.session_id,
        "edited": call.edited,
    }


def register_both(gate: signoff.Gate, contexts: List[Dict[str, Any]]) -> None:
    """`write_async` and `write_sync`, gated and editable, recording `current_call()`."""

    async def write_async(args: Any) -> str:
        await asyncio.sleep(0)
        contexts.append(seen(signoff.current_call()))
        return "ok"

    def write_sync(args: Any) -> str:
        contexts.append(seen(signoff.current_call()))
        return "ok"

    for name, fn in (("write_async", write_async), ("write_sync", write_sync)):
        gate.register(name, parameters=PATH_SCHEMA, approval="required", editable=True, executor=fn)


@pytest.mark.parametrize("tool", ["write_async", "write_sync"])
def test_an_approved_call_sees_the_request_the_person_answered(run: Any, tool: str) -> None:
    async def body() -> None:
        contexts: List[Dict[str, Any]] = []
        gate = signoff.Gate()
        register_both(gate, contexts)
        events = Collector(gate.events())
        assert signoff.current_call() is None
        for edit in (None, {"path": "/b"}):
            task = asyncio.ensure_future(gate.execute(tool, {"path": "/a"}, session_id="s1", call_id=f"c-{edit}"))
            req = await events.wait_for(lambda e: e.type == "confirmation-request" and e.tool_call_id == f"c-{edit}")
            gate.approve(req, arguments=edit)
            r = await task
            assert r.status == "executed", r.content
            assert contexts[-1] == {
                "tool": tool,
                "call_id": f"c-{edit}",
                "request_id": req.id,
                "session_id": "s1",
                "edited": edit is not None,
            }
        assert signoff.current_call() is None  # the caller's context never sees it
        await events.close()
        gate.close()

    run(body())


def test_an_ungated_call_has_no_request(run: Any) -> None:
    async def body() -> None:
        contexts: List[Dict[str, Any]] = []
        gate = signoff.Gate(dangerously_disable_gating=True)
        register_both(gate, contexts)
        for tool in ("write_async", "write_sync"):
            r = await gate.execute(tool, {"path": "/a"}, call_id="c9")
            assert r.status == "executed", r.content
        assert contexts == [
            {"tool": t, "call_id": "c9", "request_id": None, "session_id": signoff.DEFAULT_SESSION, "edited": False}
            for t in ("write_async", "write_sync")
        ]
        gate.close()

    run(body())


def test_the_blocking_api_and_a_sync_callable_returning_a_coroutine_see_it_too() -> None:
    contexts: List[Dict[str, Any]] = []
    gate = signoff.Gate()
    register_both(gate, contexts)

    async def later() -> str:
        contexts.append(seen(signoff.current_call()))
        return "ok"

    gate.register("lazy", approval="not_required", executor=lambda args: later())
    gate.on_request(lambda req: req.approve())
    for tool in ("write_async", "write_sync", "lazy"):
        r = gate.execute_blocking(tool, {"path": "/a"}, call_id="b1")
        assert r.status == "executed", r.content
    assert [c["tool"] for c in contexts] == ["write_async", "write_sync", "lazy"]
    assert [c["request_id"] is not None for c in contexts] == [True, True, False]
    assert signoff.current_call() is None
    gate.close()


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_concurrent_calls_each_see_their_own_context(run: Any, kind: str) -> None:
    async def body() -> None:
        gate = signoff.Gate()
        seen_by: Dict[str, Dict[str, Any]] = {}
        both_async = asyncio.Event()
        both_sync = threading.Barrier(2, timeout=10)

        async def work_async(args: Any) -> str:
            before = signoff.current_call()
            seen_by[args["path"]] = {}
            if len(seen_by) == 2:
                both_async.set()
            await asyncio.wait_for(both_async.wait(), 10)  # both run at once
            assert signoff.current_call() is before
            seen_by[args["path"]] = seen(before)
            return "ok"

        def work_sync(args: Any) -> str:
            before = signoff.current_call()
            both_sync.wait()  # both run at once, in two worker threads
            seen_by[args["path"]] = seen(before)
            return "ok"

        gate.register("work", approval="required", executor=work_async if kind == "async" else work_sync)
        events = Collector(gate.events())
        calls = [
            asyncio.ensure_future(gate.execute("work", {"path": p}, session_id=f"s-{p}", call_id=f"c-{p}"))
            for p in ("a", "b")
        ]
        reqs = {}
        for p in ("a", "b"):
            reqs[p] = await events.wait_for(lambda e, p=p: e.type == "confirmation-request" and e.tool_call_id == f"c-{p}")
        gate.approve(reqs["b"], arguments={"path": "b"})
        gate.approve(reqs["a"])
        results = await asyncio.gather(*calls)
        assert [r.status for r in results] == ["executed", "executed"], [r.content for r in results]
        for p in ("a", "b"):
            assert seen_by[p] == {
                "tool": "work",
                "call_id": f"c-{p}",
                "request_id": reqs[p].id,
                "session_id": f"s-{p}",
                "edited": False,
            }
        await events.close()
        gate.close()

    run(body())


def test_a_parameter_annotated_call_context_receives_it(run: Any) -> None:
    async def body() -> None:
        gate = signoff.Gate()
        got: List[Any] = []

        # Annotations are strings here (`from __future__ import annotations`): resolved, or read as written.
        def plain(args: Any, call: signoff.CallContext) -> str:
            got.append(("plain", args, call is signoff.current_call(), call.call_id))
            return "ok"

        @gate.tool(parameters=PATH_SCHEMA, approval="not_required")
        async def decorated(path: str, *, ctx: signoff.CallContext) -> str:
            got.append(("decorated", path, ctx is signoff.current_call(), ctx.call_id))
            return "ok"

        @gate.tool(approval="not_required")
        def unannotated(context: Any = None) -> str:  # a tool argument named `context`: not the context
            got.append(("unannotated", context))
            return "ok"

        gate.register("plain", approval="not_required", executor=plain)
        for tool, args in (("plain", {"x": 1}), ("decorated", {"path": "/p"}), ("unannotated", {"context": "mine"})):
            r = await gate.execute(tool, args, call_id=f"k-{tool}")
            assert r.status == "executed", r.content
        assert got == [
            ("plain", {"x": 1}, True, "k-plain"),
            ("decorated", "/p", True, "k-decorated"),
            ("unannotated", "mine"),
        ]

        def positional_only(args: Any, call: signoff.CallContext, /) -> str:
            return "never"

        with pytest.raises(TypeError, match="positional-only"):
            gate.register("po", executor=positional_only)
        with pytest.raises(TypeError, match="callable"):
            gate.register("nc", executor=42)  # type: ignore[arg-type]
        gate.close()

    run(body())


def test_an_async_tool_is_called_as_python_would_call_it(run: Any) -> None:
    async def body() -> None:
        gate = signoff.Gate()
        got: List[Any] = []

        async def positional(args: Any, call: signoff.CallContext) -> str:
            got.append(("positional", args, call is signoff.current_call(), call.call_id))
            return "ok"

        # Arguments as keywords, the context among them; a schema that lets the model send a
        # `ctx` of its own, which Python refuses as a second value for that keyword.
        @gate.tool(parameters={"type": "object", "properties": {"path": {"type": "string"}}}, approval="not_required")
        async def keywords(path: str, ctx: signoff.CallContext) -> str:
            got.append(("keywords", path, ctx is signoff.current_call(), ctx.call_id))
            return "ok"

        gate.register("positional", parameters={"type": "array"}, approval="not_required", executor=positional)
        for tool, args in (("positional", [1, "a"]), ("keywords", {"path": "/p"})):
            r = await gate.execute(tool, args, call_id=f"k-{tool}")
            assert r.status == "executed", r.content
        assert got == [("positional", [1, "a"], True, "k-positional"), ("keywords", "/p", True, "k-keywords")]

        r = await gate.execute("keywords", {"path": "/p", "ctx": "the model's"})
        assert r.status == "failed" and len(got) == 2
        assert r.error is not None and "got multiple values for keyword argument 'ctx'" in r.error, r.error
        r = await gate.execute("keywords", {"path": "/p", "other": 1})
        assert r.status == "failed" and "unexpected keyword argument 'other'" in (r.error or ""), r.error
        assert signoff.current_call() is None
        gate.close()

    run(body())


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_a_running_tool_learns_that_the_gate_closed(run: Any, kind: str) -> None:
    async def body() -> None:
        gate = signoff.Gate()
        started = threading.Event()
        release = threading.Event()
        closed: List[bool] = []

        def step() -> None:
            call = signoff.current_call()
            assert call is not None
            closed.append(call.gate_closed)

        async def slow_async(args: Any) -> str:
            step()
            started.set()
            while not release.is_set():
                await asyncio.sleep(0.005)
            step()
            return "stopped early" if signoff.current_call().gate_closed else "done"  # type: ignore[union-attr]

        def slow_sync(args: Any) -> str:
            step()
            started.set()
            assert release.wait(10)
            step()
            return "stopped early" if signoff.current_call().gate_closed else "done"  # type: ignore[union-attr]

        gate.register("slow", approval="required", executor=slow_async if kind == "async" else slow_sync)
        gate.on_request(lambda req: req.approve())
        call = asyncio.ensure_future(gate.execute("slow", {}))
        while not started.is_set():
            await asyncio.sleep(0.005)
        gate.close()
        release.set()
        r = await call
        assert (r.status, r.output) == ("executed", "stopped early")
        assert closed == [False, True]

    run(body())
