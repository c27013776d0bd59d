"""The Task an async tool runs in.

Its body (:func:`run_then`) hands the tool's outcome to the native layer at the end of the Task's
last step, so the waiting call resumes in the next turn of the loop instead of after a
done-callback that would take a turn of its own. Before Python 3.12, :func:`start_eagerly` runs
the Task's first step at once, as ``eager_start=True`` does from 3.12 on.
"""

from __future__ import annotations

import asyncio
from asyncio import events as _events
from asyncio import tasks as _tasks
from collections import deque
from typing import Any, Awaitable, Callable, Coroutine, Optional


async def run_then(aw: Awaitable[Any], done: Callable[[Any, Optional[BaseException]], None]) -> None:
    """Awaits ``aw`` and calls ``done(result, None)`` or ``done(None, exception)``."""
    try:
        result = await aw
    except GeneratorExit:
        # Closed unfinished (its loop went away): nothing is called from a finalizer; the call
        # learns that its loop closed when the done-callback's hold on it goes.
        raise
    except BaseException as exc:  # every other outcome goes to `done`
        done(None, exc)
        if not isinstance(exc, Exception):
            # Cancellation, KeyboardInterrupt, SystemExit: the Task ends as asyncio would end it.
            raise
    else:
        done(result, None)


def start_eagerly(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any]) -> "asyncio.Task[Any]":
    """A Task for ``coro`` on ``loop`` whose first step has already run (Python < 3.12).

    What ``asyncio.Task(coro, eager_start=True)`` does on 3.12: a tool that finishes without
    waiting is done on return, and its call completes without a turn of the loop. The Task is
    created as usual (its context, its registration, ``current_task()`` inside it), then the step
    it scheduled is taken off the loop's ready queue and run now, with the running task set aside
    meanwhile. Only on the standard event loops (a ``deque`` of ready handles) without a task
    factory; anywhere else the Task starts in the next turn, as before.
    """
    if loop.get_task_factory() is not None:
        return loop.create_task(coro)
    ready = getattr(loop, "_ready", None)
    task: "asyncio.Task[Any]" = loop.create_task(coro)
    if type(ready) is not deque or not ready:
        return task
    handle = ready.pop()
    owner: object = getattr(getattr(handle, "_callback", None), "__self__", None)
    if type(handle) is not _events.Handle or owner is not task:
        # Not the step it scheduled (another thread's callback came after it): put it back, and
        # the Task starts in the next turn.
        ready.append(handle)
        return task
    current = _tasks.current_task(loop)
    if current is not None:
        _tasks._leave_task(loop, current)
    try:
        handle._run()
    finally:
        if current is not None:
            _tasks._enter_task(loop, current)
    return task
