# Type stubs for the native module. Checked against the built module in CI with
# `python -m mypy.stubtest signoff._native` (bindings-python/test.sh).
import asyncio
import os
from collections.abc import Mapping, Sequence
from typing import Any, Callable, ClassVar, Literal, Optional, Union, final

from typing_extensions import Self, disjoint_base

__all__ = [
    "Approvers",
    "CallContext",
    "ChainProblem",
    "ChainReport",
    "ConfirmationRequest",
    "ConfirmationResolved",
    "ConfirmationResponse",
    "ConfirmationTimeout",
    "Console",
    "DEFAULT_SESSION",
    "Decision",
    "ERROR_KINDS",
    "EventStream",
    "Gate",
    "HANDLER_RESPONDER",
    "HandlerRegistration",
    "Lagged",
    "MARKER_META_KEY",
    "NotRestored",
    "PendingRequest",
    "Recovery",
    "Secret",
    "SignoffError",
    "StoredRecord",
    "TokenClaims",
    "TokenKeys",
    "ToolResult",
    "__version__",
    "default_keywords",
    "gate_option_names",
    "normalize_tool_spec",
    "parse_event_json",
    "verify_audit_chain",
]
__all__ += [
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

__version__: str
DEFAULT_SESSION: str
HANDLER_RESPONDER: str
ERROR_KINDS: tuple[str, ...]

_Outcome = Literal["approved", "denied"]
_RecordState = Literal[
    "pending", "approved", "executing", "done", "released", "denied", "timed-out", "cancelled", "interrupted"
]
_JSONInput = Union[str, bytes, Mapping[str, Any]]
_CancelReason = Literal["no-approver", "shutdown", "aborted", "session-ended", "approval-failed"]

def default_keywords() -> list[str]: ...
def gate_option_names() -> list[str]: ...
def normalize_tool_spec(spec: _JSONInput) -> dict[str, Any]: ...
def verify_audit_chain(
    path: Union[str, os.PathLike[str]], *, store_path: Union[str, os.PathLike[str], None] = None
) -> ChainReport:
    """Verifies a hash-chained audit log (its rotated files ``<path>.1``, ``<path>.2``, ...
    then ``path``, as one chain) and reports the first edited, missing, reordered or malformed
    record. With ``store_path`` (the gate's durable store, after the gate closed), also checks
    the log against the head that store anchored: records cut from the end are ``truncated``.
    ``IoError`` (an ``OSError``; ``errno`` ``ENOENT``) when there is no log or database, or the
    log cannot be read; ``StoreError`` when the database cannot be read (a running gate holds
    it locked)."""

def parse_event_json(
    data: _JSONInput,
) -> Union[ConfirmationRequest, ConfirmationResponse, ConfirmationTimeout, ConfirmationResolved]: ...

# ---- errors ----------------------------------------------------------------------------------

class SignoffError(Exception):
    kind: ClassVar[str]

# @generated begin error-classes (core/tests/sourcegen.rs, one per core `ErrorKind`)
class UnknownToolError(SignoffError):
    """The call names a tool that is not registered."""
class InvalidToolError(SignoffError):
    """A tool definition is invalid (bad schema, empty or deceptive name, bad rule)."""
class InvalidArgumentsError(SignoffError):
    """Arguments (original or edited) do not satisfy the tool's JSON Schema."""
class UnknownRequestError(SignoffError):
    """A response names a request id the gate has never seen (or has long forgotten)."""
class AlreadyResolvedError(SignoffError):
    """A response arrived for a request that has already been resolved."""
class ExpiredError(SignoffError):
    """A response arrived after the request's deadline."""
class EditsNotAllowedError(SignoffError):
    """A response carried edited arguments for a tool that does not allow edits."""
class MismatchError(SignoffError):
    """A response names another tool, argument digest or session than the request it answers."""
class MalformedError(SignoffError):
    """A payload could not be parsed or is missing required fields."""
class UnauthorizedError(SignoffError):
    """The response authenticator refused the response."""
class ClosedError(SignoffError):
    """The gate has been shut down."""
class StoreError(SignoffError):
    """A store failed (the pending-request store, or a database audit table)."""
class NoExecutorError(SignoffError):
    """``execute`` was asked to run a tool that has no executor."""
class BadSignatureError(SignoffError):
    """An approval token's signature does not verify: it was tampered with or forged."""
class UnknownKeyError(SignoffError):
    """An approval token names a key id the gate does not hold."""
class TokenExpiredError(SignoffError):
    """An approval token is past its expiry."""
class WrongApproverError(SignoffError):
    """An approval token was presented by someone other than the approver it was issued to."""
class AlreadyUsedError(SignoffError):
    """An approval token was already used (tokens are single use)."""
class NotPendingError(SignoffError):
    """An approval token names a request that is not pending (resolved, expired, or unknown)."""
class ConfigError(SignoffError):
    """A feature was used without its configuration (e.g. tokens without keys), or the
    configuration is invalid.
    """
class IoError(SignoffError, OSError):
    """A file could not be read or written (an audit log, a key file): the path and the
    operating system's reason are in the message.
    """
# @generated end error-classes

# ---- events ----------------------------------------------------------------------------------

@disjoint_base
class ConfirmationRequest:
    @property
    def type(self) -> Literal["confirmation-request"]: ...
    @property
    def request_id(self) -> str:
        """The request's id (as ``id``): the request this event is about."""
    @property
    def display_arguments(self) -> str:
        """Pretty JSON of the arguments with control, bidi and zero-width characters escaped: show
        this, not a rendering of the arguments of your own.
        """
    # @generated begin request-fields (core/tests/sourcegen.rs, from the core's `ConfirmationRequest`)
    @property
    def id(self) -> str:
        """The request's id (a UUID); a response carries it back."""
    @property
    def tool(self) -> str:
        """The tool's name."""
    @property
    def description(self) -> str:
        """The tool's description, escaped for display."""
    @property
    def arguments(self) -> Any:
        """The arguments that run if the request is approved unchanged."""
    @property
    def prompt(self) -> str:
        """The rendered prompt, escaped for display."""
    @property
    def arguments_digest(self) -> str:
        """``sha256:<hex>`` of the canonical JSON of the arguments; a response may echo it."""
    @property
    def session_id(self) -> str:
        """The agent session the call belongs to."""
    @property
    def tool_call_id(self) -> Optional[str]:
        """The model's id for this tool call, if it gave one."""
    @property
    def editable(self) -> bool:
        """Whether the person may edit the arguments."""
    @property
    def reasons(self) -> list[str]:
        """Why approval is needed."""
    @property
    def timeout_ms(self) -> int:
        """How long the request waits, in milliseconds."""
    @property
    def deadline_ms(self) -> int:
        """When it stops waiting, in Unix epoch milliseconds."""
    @property
    def created_at_ms(self) -> int:
        """When it was made, in Unix epoch milliseconds."""
    @property
    def metadata(self) -> Any:
        """Free metadata from the caller (absent when none was given)."""
    # @generated end request-fields
    def to_dict(self) -> dict[str, Any]: ...
    def to_json(self, *, indent: Optional[int] = None) -> str: ...
    @staticmethod
    def from_json(data: _JSONInput) -> ConfirmationRequest: ...
    def __eq__(self, value: object, /) -> bool: ...

@final
class ConfirmationResponse:
    @property
    def type(self) -> Literal["confirmation-response"]: ...
    @property
    def request_id(self) -> str: ...
    # @generated begin response-fields (core/tests/sourcegen.rs, from the core's `ConfirmationResponse`)
    @property
    def id(self) -> str:
        """The request's id."""
    @property
    def decision(self) -> Literal["approve", "deny"]:
        """Approve or deny."""
    @property
    def scope(self) -> Literal["once", "session"]:
        """Once (default) or for the rest of the session."""
    @property
    def arguments(self) -> Any:
        """Edited arguments (approve only; the tool must be editable). Validated against the
        tool's schema before they can run. ``null`` is no edit, as when absent.
        """
    @property
    def reason(self) -> Optional[str]:
        """The person's reason, passed to the model on a denial."""
    @property
    def responder(self) -> Optional[str]:
        """Who answered."""
    @property
    def tool(self) -> Optional[str]:
        """The tool the person saw; checked against the request when present."""
    @property
    def arguments_digest(self) -> Optional[str]:
        """The digest of the arguments the person saw; checked against the request when present."""
    @property
    def session_id(self) -> Optional[str]:
        """The request's session; checked against the request when present."""
    @property
    def at_ms(self) -> Optional[int]:
        """When the person answered, in Unix epoch milliseconds; filled in by the gate when absent."""
    # @generated end response-fields
    def to_dict(self) -> dict[str, Any]: ...
    def to_json(self, *, indent: Optional[int] = None) -> str: ...
    @staticmethod
    def from_json(data: _JSONInput) -> ConfirmationResponse: ...
    def __eq__(self, value: object, /) -> bool: ...

@final
class ConfirmationTimeout:
    @property
    def type(self) -> Literal["confirmation-timeout"]: ...
    @property
    def request_id(self) -> str: ...
    # @generated begin timeout-fields (core/tests/sourcegen.rs, from the core's `ConfirmationTimeout`)
    @property
    def id(self) -> str:
        """The request's id."""
    @property
    def tool(self) -> str:
        """The request's tool."""
    @property
    def session_id(self) -> str:
        """The request's session."""
    @property
    def deadline_ms(self) -> int:
        """The request's deadline, in Unix epoch milliseconds."""
    @property
    def at_ms(self) -> int:
        """When the timeout was detected, in Unix epoch milliseconds."""
    # @generated end timeout-fields
    def to_dict(self) -> dict[str, Any]: ...
    def to_json(self, *, indent: Optional[int] = None) -> str: ...
    @staticmethod
    def from_json(data: _JSONInput) -> ConfirmationTimeout: ...
    def __eq__(self, value: object, /) -> bool: ...

@final
class ConfirmationResolved:
    @property
    def type(self) -> Literal["confirmation-resolved"]: ...
    @property
    def request_id(self) -> str: ...
    # @generated begin resolved-fields (core/tests/sourcegen.rs, from the core's `ConfirmationResolved`)
    @property
    def id(self) -> str:
        """The request's id."""
    @property
    def tool(self) -> str:
        """The request's tool."""
    @property
    def session_id(self) -> str:
        """The request's session."""
    @property
    def outcome(self) -> Literal["approved", "denied", "timed-out", "cancelled"]:
        """How the request ended."""
    @property
    def cancel_reason(self) -> Optional[_CancelReason]:
        """Why it was cancelled (outcome ``cancelled`` only)."""
    @property
    def responder(self) -> Optional[str]:
        """Who decided (approved or denied only)."""
    @property
    def reason(self) -> Optional[str]:
        """The reason given with a denial."""
    @property
    def scope(self) -> Literal["once", "session"]:
        """``session`` when the approval also granted later calls of the tool in the session, else
        ``once``.
        """
    @property
    def edited(self) -> bool:
        """The person changed the arguments."""
    @property
    def at_ms(self) -> int:
        """When the request resolved, in Unix epoch milliseconds."""
    # @generated end resolved-fields
    def to_dict(self) -> dict[str, Any]: ...
    def to_json(self, *, indent: Optional[int] = None) -> str: ...
    @staticmethod
    def from_json(data: _JSONInput) -> ConfirmationResolved: ...
    def __eq__(self, value: object, /) -> bool: ...

@final
class Lagged:
    @property
    def type(self) -> Literal["lagged"]: ...
    @property
    def missed(self) -> int: ...
    @property
    def pending(self) -> list[ConfirmationRequest]: ...
    @property
    def more(self) -> Optional[str]: ...
    def to_dict(self) -> dict[str, Any]: ...
    def to_json(self, *, indent: Optional[int] = None) -> str: ...

_StreamItem = Union[ConfirmationRequest, ConfirmationResponse, ConfirmationTimeout, ConfirmationResolved, Lagged]

@final
class EventStream:
    def __aiter__(self) -> Self: ...
    def __anext__(self) -> asyncio.Future[_StreamItem]: ...
    def __iter__(self) -> Self: ...
    def __next__(self) -> _StreamItem: ...
    def next_blocking(self, timeout: Optional[float] = None) -> Optional[_StreamItem]: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *_args: object) -> bool: ...
    def __aenter__(self) -> asyncio.Future[Self]: ...
    def __aexit__(self, *_args: object) -> asyncio.Future[bool]: ...
    def aclose(self) -> asyncio.Future[None]: ...

# ---- handlers --------------------------------------------------------------------------------

@final
class PendingRequest(ConfirmationRequest):
    """A request waiting for a handler, with the means to answer it."""

    @property
    def request(self) -> ConfirmationRequest: ...
    @property
    def is_pending(self) -> bool: ...
    def approve(
        self, arguments: Any = None, scope: Literal["once", "session"] = "once", responder: Optional[str] = None
    ) -> _Outcome: ...
    def deny(self, reason: Optional[str] = None, responder: Optional[str] = None) -> _Outcome: ...

@final
class HandlerRegistration:
    def stop(self) -> None: ...
    @property
    def active(self) -> bool: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *_args: object) -> bool: ...

# ---- results ---------------------------------------------------------------------------------

@final
class Decision:
    @property
    def outcome(self) -> Literal["approved", "denied", "timed-out", "cancelled"]: ...
    @property
    def approved(self) -> bool: ...
    @property
    def arguments(self) -> Any: ...
    @property
    def edited(self) -> bool: ...
    @property
    def by(self) -> Optional[Literal["person", "not-gated", "session-grant", "gating-disabled"]]: ...
    @property
    def scope(self) -> Optional[Literal["once", "session"]]: ...
    @property
    def responder(self) -> Optional[str]: ...
    @property
    def reason(self) -> Optional[str]: ...
    @property
    def cancel_reason(self) -> Optional[_CancelReason]: ...
    @property
    def request_id(self) -> Optional[str]: ...
    @property
    def timeout_ms(self) -> Optional[int]: ...
    def to_dict(self) -> dict[str, Any]: ...
    def to_json(self, *, indent: Optional[int] = None) -> str: ...
    @staticmethod
    def from_json(data: _JSONInput) -> Decision: ...
    def __eq__(self, value: object, /) -> bool: ...

@final
class CallContext:
    """What a running tool knows about its call, from the core (``signoff.current_call()``)."""

    @property
    def tool(self) -> str:
        """The tool's name."""
    @property
    def call_id(self) -> Optional[str]:
        """The model's id for the call."""
    @property
    def request_id(self) -> Optional[str]:
        """The confirmation request a person answered; ``None`` when the call was not gated."""
    @property
    def session_id(self) -> str:
        """The agent session."""
    @property
    def edited(self) -> bool:
        """A person changed the arguments before approving."""
    @property
    def gate_closed(self) -> bool:
        """True once the gate that runs this call has closed: a long tool may stop early."""

@final
class ToolResult:
    @property
    def call_id(self) -> Optional[str]: ...
    @property
    def tool(self) -> str: ...
    @property
    def status(self) -> Literal["executed", "failed", "denied", "timed-out", "cancelled", "rejected"]: ...
    @property
    def output(self) -> Any: ...
    @property
    def error(self) -> Optional[str]: ...
    @property
    def error_kind(self) -> Optional[str]: ...
    @property
    def arguments(self) -> Any: ...
    @property
    def edited(self) -> bool: ...
    @property
    def request_id(self) -> Optional[str]: ...
    @property
    def decision(self) -> Optional[Decision]: ...
    @property
    def content(self) -> str: ...
    @property
    def is_error(self) -> bool: ...
    @property
    def ran(self) -> bool: ...
    def to_openai(self) -> dict[str, Any]: ...
    def to_openai_responses(self) -> dict[str, Any]: ...
    def to_anthropic(self) -> dict[str, Any]: ...
    def to_dict(self) -> dict[str, Any]: ...
    def to_json(self, *, indent: Optional[int] = None) -> str: ...
    @staticmethod
    def from_json(data: _JSONInput) -> ToolResult: ...
    def __eq__(self, value: object, /) -> bool: ...

# ---- tokens, store, audit --------------------------------------------------------------------

@final
class Secret:
    """A token signing key (at least 32 bytes). ``repr()`` shows its length only."""

    def __new__(cls, key: bytes) -> Secret:
        """Wraps raw key bytes (``ConfigError`` when shorter than 32)."""
    @staticmethod
    def from_base64(text: str) -> Secret:
        """Decodes base64 key material (standard or URL-safe, padded or not)."""
    @staticmethod
    def generate() -> Secret:
        """32 random bytes from the operating system (tests and development)."""
    def to_base64(self) -> str:
        """The base64 form, to store in configuration (this reveals the key)."""

@final
class TokenKeys:
    """The keys approval tokens are signed and verified with: the current key signs, older keys
    still verify. Immutable; ``repr()`` shows the key ids only."""

    def __new__(cls, key_id: str, secret: Secret) -> TokenKeys:
        """One key, which signs and verifies (ids: 1-64 characters of ``[A-Za-z0-9_-]``)."""
    def rotate(self, key_id: str, secret: Secret) -> TokenKeys:
        """A new key set where ``key_id`` is the current key; the previous keys keep verifying."""
    def with_verify_only(self, key_id: str, secret: Secret) -> TokenKeys:
        """A new key set with a key that verifies but does not sign (a retired key)."""
    @staticmethod
    def parse(text: str) -> TokenKeys:
        """Parses ``key_id:base64secret`` entries (comma- or newline-separated, current first)."""
    @staticmethod
    def from_env(var: str) -> TokenKeys:
        """Reads :meth:`parse`'s format from an environment variable."""
    @staticmethod
    def from_file(path: Union[str, os.PathLike[str]]) -> TokenKeys:
        """Reads :meth:`parse`'s format from a file (e.g. a mounted secret)."""
    @property
    def current_key_id(self) -> str:
        """The id of the key new tokens are signed with."""
    @property
    def key_ids(self) -> list[str]:
        """Every key id, current first."""

MARKER_META_KEY: str

@final
class TokenClaims:
    """What a verified approval token says."""

    @property
    def request_id(self) -> str:
        """The request the token answers."""
    @property
    def tool(self) -> str:
        """The request's tool."""
    @property
    def arguments_digest(self) -> str:
        """``sha256:<hex>`` of the request's arguments."""
    @property
    def session_id(self) -> str:
        """The request's session."""
    @property
    def approver(self) -> str:
        """The only approver who may present the token."""
    @property
    def issued_at_ms(self) -> int:
        """When it was issued (epoch ms)."""
    @property
    def expires_at_ms(self) -> int:
        """When it stops being accepted (epoch ms)."""
    @property
    def key_id(self) -> str:
        """The id of the key that signed it."""
    def to_dict(self) -> dict[str, Any]:
        """As a dict."""
    def to_json(self, *, indent: Optional[int] = None) -> str:
        """As JSON text."""
    def __eq__(self, value: object, /) -> bool: ...

@final
class Approvers:
    """Who may approve which tools. Immutable: each method returns a new ``Approvers``.
    Approvals must name their approver; denials are accepted from anyone."""

    def __new__(cls) -> Approvers:
        """No rules yet: any named approver may approve until a rule or check is added."""
    def allow(self, tool: str, approvers: Sequence[str]) -> Approvers:
        """``approvers`` may approve calls to ``tool``."""
    def allow_all_tools(self, approvers: Sequence[str]) -> Approvers:
        """``approvers`` may approve calls to any tool."""
    def forbid_self_approval(self, forbid: bool = True) -> Approvers:
        """Refuse an approval whose approver is the request's own session id."""
    def check(self, check: Callable[[ConfirmationRequest, str], Union[bool, str]]) -> Approvers:
        """A callback ``check(request, approver)`` that must also agree: ``True`` allows, a
        string is a refusal reason, anything else (or raising) refuses. It runs on the thread
        that answers; never from a tool executor (refused there)."""

@final
class StoredRecord:
    """A request as the durable store keeps it."""

    @property
    def request(self) -> ConfirmationRequest:
        """The request as it was published."""
    @property
    def id(self) -> str:
        """The request id."""
    @property
    def state(self) -> _RecordState:
        """Where the request is now."""
    @property
    def is_final(self) -> bool:
        """True when no further change will happen."""
    @property
    def arguments(self) -> Any:
        """The arguments approved to run, once approved (else ``None``)."""
    @property
    def responder(self) -> Optional[str]:
        """Who answered."""
    @property
    def token(self) -> Optional[str]:
        """The fingerprint of the approval token that answered (never the token)."""
    @property
    def result(self) -> Any:
        """``done``: the tool's result (the ``ToolResult`` JSON form); ``interrupted``,
        ``cancelled``: a note; else ``None``."""
    @property
    def updated_at_ms(self) -> int:
        """When the state last changed (epoch ms)."""
    def to_dict(self) -> dict[str, Any]:
        """The stable JSON form, as a dict."""
    def to_json(self, *, indent: Optional[int] = None) -> str:
        """The stable JSON form, as text."""
    def __eq__(self, value: object, /) -> bool: ...

@final
class NotRestored:
    """A stored pending request ``Gate.recover()`` cancelled instead of restoring."""

    @property
    def request(self) -> ConfirmationRequest:
        """The request."""
    @property
    def reason(self) -> str:
        """Why (tool missing or without executor, arguments no longer valid)."""

@final
class Recovery:
    """What ``Gate.recover()`` found and did."""

    @property
    def restored(self) -> list[ConfirmationRequest]:
        """Waiting again until their original deadlines; approving one runs its tool once."""
    @property
    def timed_out(self) -> list[ConfirmationRequest]:
        """Their deadline passed while the process was down."""
    @property
    def interrupted(self) -> list[StoredRecord]:
        """Approved or executing when the process stopped: never run again."""
    @property
    def not_restored(self) -> list[NotRestored]:
        """Pending but not restorable: cancelled, never run."""
    def to_dict(self) -> dict[str, Any]:
        """As a dict (the core's JSON form)."""

@final
class ChainProblem:
    """The first problem ``verify_audit_chain`` found."""

    @property
    def kind(self) -> Literal["edited", "missing", "reordered", "malformed", "truncated"]:
        """What is wrong."""
    @property
    def file(self) -> str:
        """The file the record is in."""
    @property
    def line(self) -> int:
        """1-based line number in ``file``."""
    @property
    def seq(self) -> Optional[int]:
        """The record's ``seq``, when readable."""
    @property
    def message(self) -> str:
        """In words."""

@final
class ChainReport:
    """What ``verify_audit_chain`` checked and found."""

    @property
    def files(self) -> list[str]:
        """The files checked, oldest first."""
    @property
    def records(self) -> int:
        """Records checked (up to the first problem)."""
    @property
    def head(self) -> str:
        """The last good record's hash."""
    @property
    def problem(self) -> Optional[ChainProblem]:
        """The first problem, or ``None``."""
    @property
    def anchored_seq(self) -> Optional[int]:
        """The anchored record the log was checked against, or ``None`` when no anchor was checked."""
    @property
    def intact(self) -> bool:
        """True when no problem was found."""
    def to_dict(self) -> dict[str, Any]:
        """As a dict."""

# ---- the gate --------------------------------------------------------------------------------

_RequestLike = Union[ConfirmationRequest, PendingRequest, str]

@final
class Gate:
    def __new__(cls, **options: Any) -> Gate:
        """A gate from the core's gate options (snake_case), validated by the core."""
    def register(
        self,
        spec: _JSONInput,
        executor: Optional[Callable[..., Any]] = None,
        executor_is_async: Optional[bool] = None,
        context_param: Optional[str] = None,
        keywords: bool = False,
    ) -> None:
        """Registers a tool. ``executor`` is the tool function, called with the approved
        arguments (as keywords with ``keywords``) and the call's context as the keyword argument
        ``context_param`` when given, with :func:`signoff.current_call` set: an async one as its
        own Task on the caller's loop, a sync one in a worker thread."""
    def unregister(self, name: str) -> bool: ...
    def tools(self) -> list[dict[str, Any]]: ...
    def evaluate(self, tool: str, arguments: Any = None, session_id: Optional[str] = None) -> dict[str, Any]: ...
    def confirm(
        self,
        tool: str,
        arguments: Any = None,
        session_id: Optional[str] = None,
        call_id: Optional[str] = None,
        metadata: Any = None,
    ) -> asyncio.Future[Decision]: ...
    def confirm_blocking(
        self,
        tool: str,
        arguments: Any = None,
        session_id: Optional[str] = None,
        call_id: Optional[str] = None,
        metadata: Any = None,
    ) -> Decision: ...
    def execute(
        self,
        tool: str,
        arguments: Any = None,
        session_id: Optional[str] = None,
        call_id: Optional[str] = None,
        metadata: Any = None,
    ) -> asyncio.Future[ToolResult]: ...
    def execute_blocking(
        self,
        tool: str,
        arguments: Any = None,
        session_id: Optional[str] = None,
        call_id: Optional[str] = None,
        metadata: Any = None,
    ) -> ToolResult: ...
    def execute_batch(self, calls: Sequence[Mapping[str, Any]]) -> asyncio.Future[list[ToolResult]]: ...
    def execute_batch_blocking(self, calls: Sequence[Mapping[str, Any]]) -> list[ToolResult]: ...
    def respond(self, response: _JSONInput) -> _Outcome: ...
    def respond_async(self, response: _JSONInput) -> asyncio.Future[_Outcome]:
        """`respond`, resolved once a durable store recorded the answer."""
    def respond_json(self, json: str) -> _Outcome: ...
    def approve(
        self,
        request: _RequestLike,
        arguments: Any = None,
        scope: Literal["once", "session"] = "once",
        responder: Optional[str] = None,
    ) -> _Outcome: ...
    def deny(self, request: _RequestLike, reason: Optional[str] = None, responder: Optional[str] = None) -> _Outcome: ...
    def issue_token(self, request: _RequestLike, approver: str) -> str:
        """Issues a signed approval token for a pending request, for ``approver`` only."""
    def approval_marker(self, tool: str, decision: Decision) -> str:
        """An approval marker for a call this gate approved by a person."""
    def accept_approval_marker(self, marker: str, tool: str, arguments: Any) -> dict[str, Any]:
        """Accepts an approval marker once for this call; returns its claims."""
    def inspect_token(self, token: str) -> TokenClaims:
        """Verifies a token's key and signature and returns its claims."""
    def respond_token(
        self,
        token: str,
        decision: Literal["approve", "deny"],
        approver: str,
        arguments: Any = None,
        scope: Literal["once", "session"] = "once",
        reason: Optional[str] = None,
    ) -> _Outcome:
        """Answers the token's request, presented by ``approver``."""
    def respond_token_async(
        self,
        token: str,
        decision: Literal["approve", "deny"],
        approver: str,
        arguments: Any = None,
        scope: Literal["once", "session"] = "once",
        reason: Optional[str] = None,
    ) -> asyncio.Future[_Outcome]:
        """`respond_token`, resolved once a durable store recorded the answer."""
    def record(self, request: _RequestLike) -> Optional[StoredRecord]:
        """A request's stored record in any state, or ``None``."""
    def recover(self) -> Recovery:
        """Picks up what an earlier process left in the durable store."""
    def pending(self) -> list[ConfirmationRequest]: ...
    def pending_page(self, after: Optional[str] = None, limit: int = 1000) -> tuple[list[ConfirmationRequest], Optional[str]]: ...
    def pending_request(self, request_id: str) -> Optional[ConfirmationRequest]: ...
    @property
    def pending_count(self) -> int: ...
    def cancel_request(self, request_id: _RequestLike) -> bool: ...
    def end_session(self, session_id: str) -> int: ...
    def revoke_grant(self, session_id: str, tool: str) -> bool: ...
    def grants(self, session_id: str) -> list[str]: ...
    def events(self, observe: bool = False, types: Optional[list[str]] = None) -> EventStream: ...
    def on_request(self, handler: Callable[[PendingRequest], Any], is_async: Optional[bool] = None) -> HandlerRegistration: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def approver_count(self) -> int: ...
    @property
    def gating_disabled(self) -> bool: ...
    @property
    def default_timeout_ms(self) -> int: ...
    @property
    def keywords(self) -> list[str]: ...
    def flush_audit(self) -> None: ...

# ---- the approval console (crate signoff-console) --------------------------------------------

@final
class Console:
    """A running browser approval console (use ``signoff.Gate.serve_console``)."""

    def __new__(cls, gate: Gate, **options: Any) -> Console:
        """Starts a console for ``gate`` from the console's options in snake_case (``bind``,
        ``allow_remote``, ``public_origin``, ``approver_keys``, ``approver_keys_file``,
        ``sign_in_ttl_ms``, ``session_ttl_ms``, ``history``, ``title``; ``None`` is the default);
        returns once it listens (``ConfigError`` otherwise)."""
    @property
    def url(self) -> str:
        """The console's address, ending in ``/``."""
    @property
    def address(self) -> tuple[str, int]:
        """The address it listens on: ``(host, port)``."""
    def sign_in_link(self, approver: str) -> str:
        """A single-use sign-in link for ``approver``."""
    def close(self) -> None:
        """Stops the server and releases the port. Idempotent."""
    @property
    def closed(self) -> bool:
        """True once closed."""
