"""signoff: a person between an AI agent and the tools it calls.

The gate decides whether a tool call needs approval, asks (an event on its bus, or a handler
you register), waits for the answer, and does not run the call on any other outcome: timeout,
nobody listening, shutdown, cancellation, a failing handler. Approved calls run at most once,
and the model is told in plain words when a call was declined.

Quickstart::

    import asyncio, signoff

    async def main() -> None:
        async with signoff.Gate(default_timeout=30) as gate:
            @gate.tool(parameters={"type": "object", "properties": {"path": {"type": "string"}}})
            def delete_file(path: str) -> str:
                return f"deleted {path}"

            def approver(request: signoff.PendingRequest) -> None:
                if request.tool == "delete_file" and request.arguments["path"].startswith("/tmp/"):
                    request.approve()
                else:
                    request.deny("only files under /tmp")

            gate.on_request(approver)
            result = await gate.execute("delete_file", {"path": "/tmp/x"}, call_id="call_1")
            print(result.status, result.content)   # executed deleted /tmp/x

    asyncio.run(main())

A running tool learns which call it runs (tool, call id, the request a person answered, session,
whether the arguments were edited, whether the gate has closed) from :func:`current_call`, or
from a parameter annotated :class:`CallContext`: see :mod:`signoff.context`.

Remote approval with signed tokens, a durable SQLite store that survives restarts, and a
hash-chained audit log: see :mod:`signoff.tokens`, :mod:`signoff.store` and :mod:`signoff.audit`;
a browser approval console: :meth:`Gate.serve_console` (:mod:`signoff.console`).

This package is a thin layer over the Rust core (``signoff._native``); the core's semantics are
the contract.
"""

from __future__ import annotations

from ._native import (
    DEFAULT_SESSION,
    HANDLER_RESPONDER,
    MARKER_META_KEY,
    Decision,
    HandlerRegistration,
    ToolResult,
    __version__,
    default_keywords,
)
from .audit import ChainProblem, ChainProblemKind, ChainReport, verify_audit_chain
from .console import Console
from .context import CallContext, current_call
from .errors import (
    ERROR_CLASSES,
    ERROR_KINDS,
    ErrorKind,
    SignoffError,
    error_class,
    # @generated begin error-imports (core/tests/sourcegen.rs, one per core `ErrorKind`)
    AlreadyResolvedError,
    AlreadyUsedError,
    BadSignatureError,
    ClosedError,
    ConfigError,
    EditsNotAllowedError,
    ExpiredError,
    InvalidArgumentsError,
    InvalidToolError,
    IoError,
    MalformedError,
    MismatchError,
    NoExecutorError,
    NotPendingError,
    StoreError,
    TokenExpiredError,
    UnauthorizedError,
    UnknownKeyError,
    UnknownRequestError,
    UnknownToolError,
    WrongApproverError,
    # @generated end error-imports
)
from .events import (
    ConfirmationRequest,
    ConfirmationResolved,
    ConfirmationResponse,
    ConfirmationTimeout,
    Event,
    EventStream,
    EventType,
    Lagged,
    PendingRequest,
    StreamItem,
    parse_event,
)
from .gate import Executor, Gate, GateOptions, Handler, Outcome
from .store import Approvers, NotRestored, RecordState, Recovery, StoredRecord
from .tokens import MarkerClaims, Secret, TokenClaims, TokenKeys
from .tools import (
    ApprovalMode,
    Scope,
    ToolCall,
    contains,
    external,
    greater_than,
    normalize_tool_spec,
    not_one_of,
    one_of,
    path_outside,
    tool_spec,
)

__all__ = [
    "DEFAULT_SESSION",
    "ERROR_CLASSES",
    "ERROR_KINDS",
    "HANDLER_RESPONDER",
    "MARKER_META_KEY",
    "MarkerClaims",
    "ApprovalMode",
    "Approvers",
    "CallContext",
    "ChainProblem",
    "ChainProblemKind",
    "ChainReport",
    "ConfirmationRequest",
    "ConfirmationResolved",
    "ConfirmationResponse",
    "ConfirmationTimeout",
    "Console",
    "Decision",
    "ErrorKind",
    "Event",
    "EventStream",
    "EventType",
    "Executor",
    "Gate",
    "GateOptions",
    "Handler",
    "HandlerRegistration",
    "Lagged",
    "NotRestored",
    "Outcome",
    "PendingRequest",
    "RecordState",
    "Recovery",
    "Scope",
    "Secret",
    "SignoffError",
    "StoredRecord",
    "StreamItem",
    "TokenClaims",
    "TokenKeys",
    "ToolCall",
    "ToolResult",
    "__version__",
    "contains",
    "current_call",
    "default_keywords",
    "error_class",
    "external",
    "greater_than",
    "normalize_tool_spec",
    "not_one_of",
    "one_of",
    "parse_event",
    "path_outside",
    "tool_spec",
    "verify_audit_chain",
    # @generated begin error-names (core/tests/sourcegen.rs, one per core `ErrorKind`)
    "AlreadyResolvedError",
    "AlreadyUsedError",
    "BadSignatureError",
    "ClosedError",
    "ConfigError",
    "EditsNotAllowedError",
    "ExpiredError",
    "InvalidArgumentsError",
    "InvalidToolError",
    "IoError",
    "MalformedError",
    "MismatchError",
    "NoExecutorError",
    "NotPendingError",
    "StoreError",
    "TokenExpiredError",
    "UnauthorizedError",
    "UnknownKeyError",
    "UnknownRequestError",
    "UnknownToolError",
    "WrongApproverError",
    # @generated end error-names
]
