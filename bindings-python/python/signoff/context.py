"""What a running tool knows about its call: :class:`CallContext`, from the core.

A tool reads it without changing its signature::

    @gate.tool(approval="required")
    def send_email(to: str) -> str:
        call = signoff.current_call()   # None outside a tool
        log.info("sending for request %s in session %s", call.request_id, call.session_id)
        ...

or asks for it by annotation: a parameter annotated :class:`CallContext` (the one rule; its
name is yours) receives it as a keyword argument, also when the annotation is a string
(``from __future__ import annotations``)::

    @gate.tool()
    async def long_job(steps: int, call: signoff.CallContext) -> str:
        for i in range(steps):
            if call.gate_closed:            # the gate closed meanwhile: stop early, say so
                return f"stopped after {i} steps: shutting down"
            await asyncio.sleep(1)
        return "done"

:func:`current_call` is a :class:`contextvars.ContextVar` set around the tool's execution: an
async tool runs as its own Task, with the variable set in that Task's context; a sync tool runs
in a worker thread, in a copy of that thread's context with the variable set. Code the tool
calls (and Tasks it starts) inherits it as any context variable; it is never set anywhere else.
"""

from __future__ import annotations

import contextvars
import inspect
import typing
from typing import Any, Callable, Optional

from ._native import CallContext

_CURRENT: contextvars.ContextVar[Optional[CallContext]] = contextvars.ContextVar("signoff.current_call", default=None)

def current_call() -> Optional[CallContext]:
    """The :class:`CallContext` of the tool running now (in this Task or worker thread), or
    ``None`` outside a tool."""
    return _CURRENT.get()


def _is_call_context(annotation: Any) -> bool:
    if isinstance(annotation, str):
        return annotation in ("CallContext", "signoff.CallContext")
    return annotation is CallContext


def context_parameter(fn: Callable[..., Any]) -> Optional[str]:
    """The name of ``fn``'s parameter annotated :class:`CallContext`, or ``None``.

    Raises:
        TypeError: the parameter is positional-only (the context is passed by keyword).
    """
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        return None
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # an annotation that does not resolve: read them as written
        hints = {}
    for name, p in params.items():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or not _is_call_context(hints.get(name, p.annotation)):
            continue
        if p.kind is p.POSITIONAL_ONLY:
            raise TypeError(f"the CallContext parameter {name!r} of {fn!r} is positional-only: it is passed by keyword")
        return name
    return None


__all__ = ["CallContext", "current_call", "context_parameter"]
