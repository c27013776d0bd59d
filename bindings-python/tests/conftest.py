"""Shared fixtures: every async test runs under asyncio and, when installed, uvloop."""

from __future__ import annotations

import asyncio
import os
from typing import Any, Awaitable, Callable, Coroutine, List

import pytest

try:
    import uvloop
except ImportError:  # pragma: no cover - test.sh installs it
    uvloop = None  # type: ignore[assignment]
    if os.environ.get("SIGNOFF_REQUIRE_UVLOOP") == "1":
        raise

LOOPS: List[str] = ["asyncio"] + (["uvloop"] if uvloop is not None else [])


def new_loop(kind: str) -> asyncio.AbstractEventLoop:
    if kind == "uvloop":
        assert uvloop is not None
        return uvloop.new_event_loop()  # type: ignore[no-any-return]
    return asyncio.new_event_loop()


def run_in(kind: str, coro: Coroutine[Any, Any, Any]) -> Any:
    loop = new_loop(kind)
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(asyncio.wait_for(coro, 60))
    finally:
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        asyncio.set_event_loop(None)
        loop.close()


@pytest.fixture(params=LOOPS)
def run(request: Any) -> Callable[[Coroutine[Any, Any, Any]], Any]:
    """`run(coro)`: runs a coroutine to completion on a fresh loop of the parametrized kind."""
    kind = request.param
    return lambda coro: run_in(kind, coro)


async def wait_until(pred: Callable[[], bool], timeout: float = 5.0, what: str = "condition") -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not pred():
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.002)


class Collector:
    """Collects every item of an event stream in a background task."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.items: List[Any] = []
        self.task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        async for item in self.stream:
            self.items.append(item)

    def of_type(self, t: str) -> List[Any]:
        return [i for i in self.items if i.type == t]

    async def wait_for(self, pred: Callable[[Any], bool], what: str = "event", timeout: float = 5.0) -> Any:
        await wait_until(lambda: any(pred(i) for i in self.items), timeout, what)
        return next(i for i in self.items if pred(i))

    async def close(self) -> None:
        self.stream.close()
        await asyncio.wait_for(self.task, 5)


AwaitableFactory = Callable[[], Awaitable[Any]]
