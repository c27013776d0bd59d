"""The body of the Task an async tool runs in: :func:`signoff.current_call` is set in the Task's
own context, and the tool's outcome goes to the native layer at the end of the Task's last step,
so the waiting call resumes at once instead of after a done-callback that would take a turn of the
loop of its own."""

from __future__ import annotations

import inspect
from typing import Any, Awaitable, Callable, Optional

from .context import _CURRENT, CallContext


async def run_then(
    aw: Awaitable[Any],
    done: Callable[[Any, Optional[BaseException]], None],
    current: Optional[CallContext] = None,
) -> None:
    """Awaits ``aw`` and calls ``done(result, None)`` or ``done(None, exception)``; with
    ``current``, :func:`signoff.current_call` is ``current`` meanwhile. (The Task's context is
    its own copy, unless a task factory gave it another: it is put back as it was either way.)"""
    token = None if current is None else _CURRENT.set(current)
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
    finally:
        if token is not None:
            _CURRENT.reset(token)


async def with_current(aw: Any, current: CallContext) -> Any:
    """Awaits ``aw`` (a value that is not awaitable is the result) with
    :func:`signoff.current_call` set to ``current``: the body of an async tool's Task under
    ``asyncio.run``, for the blocking API."""
    token = _CURRENT.set(current)
    try:
        return await aw if inspect.isawaitable(aw) else aw
    finally:
        _CURRENT.reset(token)
