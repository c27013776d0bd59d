"""The body of the Task an async tool runs in: the tool's outcome goes to the native layer at the
end of the Task's last step, so the waiting call resumes at once instead of after a done-callback
that would take a turn of the loop of its own."""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Optional


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

