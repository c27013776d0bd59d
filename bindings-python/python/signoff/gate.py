"""The approval gate: the Pythonic face of the core ``Gate``.

Everything that decides (policy, argument rules, matching a response to its request, timeouts,
fail-safe denials) happens in the Rust core; this module only shapes arguments and results.
"""

from __future__ import annotations

import functools
import inspect
import os
from datetime import timedelta
from typing import (
    TYPE_CHECKING,
    Any,
    Awaitable,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Type,
    TypedDict,
    TypeVar,
    Union,
    cast,
)

from . import _native
from ._closing import Closing
from ._native import (
    Approvers,
    ConfigError,
    ConfirmationRequest,
    Decision,
    EventStream,
    HandlerRegistration,
    MalformedError,
    PendingRequest,
    Recovery,
    StoredRecord,
    TokenClaims,
    TokenKeys,
    ToolResult,
)
from .console import Console
from .context import context_parameter
from .events import EventType
from .tools import JSON, ApprovalMode, Scope, Seconds, ToolCall, to_ms, tool_spec

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .tokens import MarkerClaims

#: How a response ended a request.
Outcome = Literal["approved", "denied"]

#: An executor: called with the approved arguments (a dict for object schemas); sync or async;
#: returns a JSON-compatible value (:data:`signoff.tools.JSON`; anything else makes the call
#: ``failed``). A parameter annotated :class:`~signoff.CallContext` receives the call's context
#: as a keyword argument; :func:`signoff.current_call` returns it too (:mod:`signoff.context`).
Executor = Callable[..., Any]

#: An approval handler: called with each :class:`PendingRequest`; sync or async.
Handler = Callable[[PendingRequest], Union[None, Awaitable[None]]]

RequestLike = Union[ConfirmationRequest, PendingRequest, str]

F = TypeVar("F", bound=Callable[..., Any])


def _is_async_callable(fn: Any) -> bool:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))


def _call_fields(
    tool: Union[str, ToolCall],
    arguments: JSON,
    session_id: Optional[str],
    call_id: Optional[str],
    metadata: JSON,
) -> "tuple[str, JSON, Optional[str], Optional[str], JSON]":
    if isinstance(tool, ToolCall):
        return (
            tool.tool,
            tool.arguments if arguments is None else arguments,
            tool.session_id if session_id is None else session_id,
            tool.call_id if call_id is None else call_id,
            tool.metadata if metadata is None else metadata,
        )
    return tool, arguments, session_id, call_id, metadata


def _call_dict(call: Union[ToolCall, Mapping[str, Any]]) -> Mapping[str, Any]:
    return call.to_dict() if isinstance(call, ToolCall) else call


class GateOptions(TypedDict, total=False):
    """The keyword arguments of :class:`Gate` (see there); ``None`` means not set."""

    default_timeout: Optional[Seconds]
    default_timeout_ms: Optional[int]
    keywords: Optional[Iterable[str]]
    deny_when_unobserved: Optional[bool]
    dangerously_disable_gating: Optional[bool]
    bus_capacity: Optional[int]
    remember_resolved: Optional[int]
    allowed_responders: Optional[Iterable[str]]
    approvers: Union[Approvers, Mapping[str, Sequence[str]], None]
    forbid_self_approval: Optional[bool]
    store_path: Union[str, "os.PathLike[str]", None]
    synchronous_full: Optional[bool]
    store_url: Optional[str]
    store_owner: Optional[str]
    store_schema: Optional[str]
    audit_in_store: Optional[bool]
    audit_path: Union[str, "os.PathLike[str]", None]
    audit_rotate_bytes: Optional[int]
    token_keys: Union[TokenKeys, str, None]
    token_ttl: Optional[Seconds]
    token_ttl_ms: Optional[int]


#: Options given in seconds (or a ``timedelta``), and the core's option in milliseconds.
_SECONDS = {"default_timeout": "default_timeout_ms", "token_ttl": "token_ttl_ms"}


def _native_options(options: Mapping[str, Any]) -> Dict[str, Any]:
    """The core's ``GateConfig`` options: seconds as milliseconds, paths as text, iterables as
    lists. Everything else is passed as given and validated by the core."""
    out: Dict[str, Any] = {}
    for name, value in options.items():
        if name in _SECONDS:
            if _SECONDS[name] in options:
                raise ConfigError(f"configuration error: pass either `{name}` or `{_SECONDS[name]}`")
            name, value = _SECONDS[name], None if value is None else to_ms(value, f"`{name}`")
        elif hasattr(value, "__fspath__"):
            value = os.fspath(value)
        elif not isinstance(value, (str, bytes, Mapping)) and isinstance(value, Iterable):
            value = list(value)
        out[name] = value
    return out


class Gate(Closing):
    """A person between an agent and its tools.

    Register tools, then run each model tool call through :meth:`execute` (or ask with
    :meth:`confirm` and run it yourself). A call that needs approval publishes a
    :class:`~signoff.ConfirmationRequest` on the event bus (:meth:`events`) and to every
    handler (:meth:`on_request`), and waits for an answer (:meth:`approve`, :meth:`deny`,
    :meth:`respond`, or the request object's own ``approve()`` / ``deny()``). Anything but an
    explicit approval -- a denial, the deadline passing, nobody listening, the gate closing, the
    waiting task being cancelled, a handler failing -- means the tool does not run.

    Options (keyword arguments, all optional; see :class:`GateOptions`). They are the core's
    gate options (the same in every signoff language) and are checked there: a wrong type, a
    value out of range (``bus_capacity=10**9``, a negative or fractional count, NaN), an unknown
    or misspelt name (with a suggestion), an option that needs another one, or two that exclude
    each other raise :class:`ConfigError` naming the option.

        default_timeout: seconds (or a ``timedelta``) a request waits when its tool sets no
            timeout; or ``default_timeout_ms``. 60 s by default, at most 30 days.
        keywords: words that make a tool in the default approval mode require approval when
            they appear in its name (the core's list by default: delete, send, pay, ...).
        deny_when_unobserved: cancel a request at once when no approver (an event stream or a
            handler; observers do not count) is attached (default ``True``). ``False`` when
            answers come from elsewhere (a remote UI calling :meth:`respond` after listing
            :meth:`pending`): requests then wait for their deadline. Not applied with
            ``store_url`` (the approvers of a shared store are elsewhere by design).
        audit_path: append an audit trail (JSON Lines) to this file. With ``store_path`` too,
            the store also keeps the trail's head, so records cut from its end are found (see
            :func:`signoff.verify_audit_chain`). :class:`IoError` when it cannot be opened.
        audit_rotate_bytes: with ``audit_path``: rotate the audit log when it reaches this size
            (``<path>.1``, ``<path>.2``, ...; one hash chain across them).
        dangerously_disable_gating: development only: every call runs without approval
            (announced on stderr and in the audit trail).
        bus_capacity: events buffered per event stream before it is told it lagged (4096; at
            most 1,048,576).
        remember_resolved: how many resolved request ids are remembered to classify late
            answers (65,536).
        allowed_responders: only responses whose ``responder`` is in this list are accepted
            (others raise :class:`UnauthorizedError`). Any responder by default.
        approvers: an :class:`~signoff.Approvers` (or a dict ``{tool or "*": [names]}``)
            deciding who may approve which tools, instead of ``allowed_responders``; a refused
            approval raises :class:`UnauthorizedError`.
        forbid_self_approval: also refuse (:class:`UnauthorizedError`) an approval whose
            responder is the request's own session (with ``approvers``, or on its own).
        store_path: keep pending requests and their states in this SQLite file, so they
            survive a restart (see :mod:`signoff.store`); call :meth:`recover` once after
            registering tools. In memory by default.
        synchronous_full: with ``store_path``: every commit also waits for the disk, so state
            survives a power loss too (slower). By default state survives any crash of the
            process.
        store_url: keep requests in this PostgreSQL database (``postgres://user@host/db`` or
            ``host=... user=...``), shared with every gate that connects to it: gates in many
            processes and hosts list (:meth:`pending`) and answer (:meth:`approve`,
            :meth:`respond`, :meth:`respond_token`) each other's requests, and a waiting call
            wakes when another process decides. Deadlines follow the database's clock; the
            ``deny_when_unobserved`` rule does not apply (approvers are elsewhere). Not with
            ``store_path``. The tables are created if missing; an unreachable server raises
            :class:`StoreError` (after the connect timeout, 10 s unless the URL sets
            ``connect_timeout``), a malformed URL :class:`ConfigError`.
        store_owner: with ``store_url``: this process's stable name in the shared store
            (``"billing-agent-1"``). :meth:`recover` picks up only this owner's unfinished
            requests, so give each agent process a name of its own and reuse it after a crash;
            two live processes must never share one. A new random name by default (nothing to
            recover).
        store_schema: with ``store_url``: the PostgreSQL schema the tables are kept in
            (created if missing; 1 to 63 ASCII letters, digits or underscores). The
            connection's search path (normally ``public``) by default.
        audit_in_store: with ``store_url``: keep the audit trail in the same database (the
            table ``signoff_audit``), one hash chain every process sharing the store appends to;
            ``signoff audit verify --postgres <url>`` checks it. Not with ``audit_path``.
        token_keys: the :class:`~signoff.TokenKeys` (or their ``key_id:base64secret`` text)
            approval tokens are signed and verified with (:meth:`issue_token`,
            :meth:`respond_token`).
        token_ttl: with ``token_keys``: seconds (or a ``timedelta``) an issued token is valid;
            or ``token_ttl_ms``. By default until its request's deadline, never beyond it.

    A gate is closed by :meth:`close`, by leaving a ``with`` / ``async with`` block, or when it
    is garbage-collected; closing cancels every pending request.

    >>> Gate(bus_capacity=10**9)
    Traceback (most recent call last):
    ...
    signoff.ConfigError: configuration error: `bus_capacity` must be a whole number from 1 to 1048576, got the number 1000000000
    """

    __slots__ = ("_native", "__weakref__")

    def __init__(self, **options: "Unpack[GateOptions]") -> None:
        native = _native_options(options)
        try:
            self._native = _native.Gate(**native)
        except ConfigError as e:
            # An option given in seconds: name it as the caller did.
            msg = str(e)
            for seconds, ms in _SECONDS.items():
                if seconds in options and f"`{ms}`" in msg:
                    raise ConfigError(f"{msg} (given as `{seconds}`, in seconds)") from None
            raise

    # ---- tools -------------------------------------------------------------------------------

    def register(
        self,
        name: str,
        *,
        description: str = "",
        parameters: Union[Mapping[str, Any], bool, None] = None,
        approval: ApprovalMode = "default",
        editable: bool = False,
        prompt_template: Optional[str] = None,
        rules: Iterable[Mapping[str, Any]] = (),
        source: Union[Literal["built_in"], Mapping[str, Any], None] = None,
        read_only: bool = False,
        destructive: bool = False,
        timeout: Optional[Seconds] = None,
        executor: Optional[Executor] = None,
    ) -> None:
        """Registers (or replaces) a tool.

        Args:
            name: the name the model calls it by.
            description: shown to the person.
            parameters: JSON Schema of the arguments (any object by default). Arguments, and a
                person's edits, are validated against it.
            approval: ``"default"`` (the policy decides: keywords in the name, destructive,
                external and not read-only), ``"required"`` or ``"not_required"``.
            editable: the person may edit the arguments before approving.
            prompt_template: the prompt shown; ``{tool}``, ``{args}``, ``{description}`` are
                substituted (and escaped).
            rules: argument rules (see :mod:`signoff.tools`) that force approval when they hold.
            source: ``"built_in"`` or :func:`signoff.external` ``(server)``.
            read_only, destructive: hints for the policy.
            timeout: approval timeout in seconds for this tool (1 ms to 30 days).
            executor: runs the tool, for :meth:`execute`: a sync or async callable receiving the
                approved arguments (a dict) and returning a JSON-compatible value. While it
                runs, :func:`signoff.current_call` returns the call's :class:`CallContext`; a
                parameter annotated ``CallContext`` receives it as a keyword argument.

        Raises:
            InvalidToolError: bad schema, empty or deceptive name, bad rule.
            MalformedError: a field of the wrong type.
        """
        spec = tool_spec(
            name,
            description=description,
            parameters=parameters,
            approval=approval,
            editable=editable,
            prompt_template=prompt_template,
            rules=rules,
            source=source,
            read_only=read_only,
            destructive=destructive,
            timeout=timeout,
        )
        self.register_spec(spec, executor=executor)

    def register_spec(self, spec: Union[Mapping[str, Any], str], executor: Optional[Executor] = None) -> None:
        """Registers a tool from the core ``ToolSpec`` JSON form (dict or text), e.g. one shared
        with another language. Unknown fields raise :class:`MalformedError`. ``executor`` as in
        :meth:`register`."""
        self._register(spec, executor, keywords=False)

    def _register(self, spec: Union[Mapping[str, Any], str], fn: Optional[Callable[..., Any]], keywords: bool) -> None:
        if fn is None:
            self._native.register(spec, None, None)
            return
        if not callable(fn):
            raise TypeError("the executor must be callable")
        # Called by the native layer, which sets current_call() around the call: an async tool in
        # its own Task, a sync one in a worker thread.
        self._native.register(spec, fn, _is_async_callable(fn), context_parameter(fn), keywords)

    def tool(
        self,
        name: Optional[str] = None,
        *,
        description: Optional[str] = None,
        parameters: Union[Mapping[str, Any], bool, None] = None,
        approval: ApprovalMode = "default",
        editable: bool = False,
        prompt_template: Optional[str] = None,
        rules: Iterable[Mapping[str, Any]] = (),
        source: Union[Literal["built_in"], Mapping[str, Any], None] = None,
        read_only: bool = False,
        destructive: bool = False,
        timeout: Optional[Seconds] = None,
    ) -> Callable[[F], F]:
        """Decorator: registers a function as a tool's executor, called with the arguments as
        keyword arguments (and, to a parameter annotated :class:`CallContext`, the call's
        context; :func:`signoff.current_call` returns it too). The name defaults to the
        function's, the description to its docstring. The function is returned unchanged.

        >>> gate = Gate()
        >>> @gate.tool(parameters={"type": "object", "properties": {"path": {"type": "string"}}})
        ... def delete_file(path: str) -> str:
        ...     '''Deletes a file.'''
        ...     return f"deleted {path}"
        >>> [t["name"] for t in gate.tools()]
        ['delete_file']
        """

        def decorate(fn: F) -> F:
            spec = tool_spec(
                name or fn.__name__,
                description=inspect.cleandoc(fn.__doc__ or "") if description is None else description,
                parameters=parameters,
                approval=approval,
                editable=editable,
                prompt_template=prompt_template,
                rules=rules,
                source=source,
                read_only=read_only,
                destructive=destructive,
                timeout=timeout,
            )
            self._register(spec, fn, keywords=True)
            return fn

        return decorate

    def unregister(self, name: str) -> bool:
        """Removes a tool; later calls to it are ``unknown_tool``. Returns whether it existed."""
        return self._native.unregister(name)

    def tools(self) -> List[Dict[str, Any]]:
        """The spec (core ``ToolSpec`` JSON form) of every registered tool, sorted by name."""
        return self._native.tools()

    def evaluate(
        self, tool: str, arguments: JSON = None, *, session_id: Optional[str] = None
    ) -> Dict[str, Any]:
        """Whether a call would need approval now, and why, without asking:
        ``{"required": bool, "forced_by_rule": bool, "reasons": [str]}``."""
        return self._native.evaluate(tool, arguments, session_id)

    # ---- asking ------------------------------------------------------------------------------

    async def confirm(
        self,
        tool: Union[str, ToolCall],
        arguments: JSON = None,
        *,
        session_id: Optional[str] = None,
        call_id: Optional[str] = None,
        metadata: JSON = None,
    ) -> Decision:
        """Asks for approval when the call needs it, and waits for the decision.

        Returns at once for calls that need no approval. Otherwise publishes a request and waits
        until a person answers, the deadline passes, the gate closes, or every approver goes
        away. Cancelling the awaiting task cancels the request (``aborted``). Only
        ``decision.approved`` means run.

        Raises:
            UnknownToolError, InvalidArgumentsError, StoreError: the call is refused and nobody
                is asked.
            MalformedError: ``arguments`` or ``metadata`` is not JSON (see
                :data:`signoff.tools.JSON`); nobody is asked.
        """
        fut = self._native.confirm(*_call_fields(tool, arguments, session_id, call_id, metadata))
        # The pending wait must not keep the gate alive: a gate that is garbage-collected
        # closes, cancelling what is pending.
        del self
        return await fut

    def confirm_blocking(
        self,
        tool: Union[str, ToolCall],
        arguments: JSON = None,
        *,
        session_id: Optional[str] = None,
        call_id: Optional[str] = None,
        metadata: JSON = None,
    ) -> Decision:
        """:meth:`confirm` for synchronous code: blocks this thread (never the GIL). Ctrl-C
        cancels the request (``aborted``) and raises ``KeyboardInterrupt``. Raises
        ``RuntimeError`` when called on a thread running an event loop."""
        return self._native.confirm_blocking(*_call_fields(tool, arguments, session_id, call_id, metadata))

    # ---- running -----------------------------------------------------------------------------

    async def execute(
        self,
        tool: Union[str, ToolCall],
        arguments: JSON = None,
        *,
        session_id: Optional[str] = None,
        call_id: Optional[str] = None,
        metadata: JSON = None,
    ) -> ToolResult:
        """Confirms a call and, if approved, runs its executor exactly once.

        Never raises for the call itself: an unknown tool, invalid arguments or a missing
        executor give ``status == "rejected"``; a decision not to run gives ``"denied"``,
        ``"timed-out"`` or ``"cancelled"``; an executor that raises gives ``"failed"``.
        ``result.content`` is always ready for the model (see :meth:`ToolResult.to_openai`,
        :meth:`ToolResult.to_anthropic`). Only ``arguments`` or ``metadata`` that are not JSON
        (see :data:`signoff.tools.JSON`) raise :class:`MalformedError`, before anything runs.

        Cancelling the awaiting task (or ``asyncio.wait_for`` timing out) while the call waits
        for a decision cancels the request (``aborted``) and the tool never runs. Once the tool
        has started it is not interrupted: it runs to the end and its result is recorded (audit
        ``execution``, the durable store's ``done``); only the cancelled caller does not get it
        (the end of ``asyncio.run``, which cancels every task left, is the exception: see the
        README).
        """
        fut = self._native.execute(*_call_fields(tool, arguments, session_id, call_id, metadata))
        del self
        return await fut

    def execute_blocking(
        self,
        tool: Union[str, ToolCall],
        arguments: JSON = None,
        *,
        session_id: Optional[str] = None,
        call_id: Optional[str] = None,
        metadata: JSON = None,
    ) -> ToolResult:
        """:meth:`execute` for synchronous code (releases the GIL while it waits)."""
        return self._native.execute_blocking(*_call_fields(tool, arguments, session_id, call_id, metadata))

    async def execute_batch(self, calls: Iterable[Union[ToolCall, Mapping[str, Any]]]) -> List[ToolResult]:
        """Runs the tool calls of one model turn concurrently: ungated calls at once, each gated
        call after its own decision. Results come back in the order of ``calls``; each call runs
        at most once."""
        fut = self._native.execute_batch([_call_dict(c) for c in calls])
        del self
        return await fut

    def execute_batch_blocking(self, calls: Iterable[Union[ToolCall, Mapping[str, Any]]]) -> List[ToolResult]:
        """:meth:`execute_batch` for synchronous code."""
        return self._native.execute_batch_blocking([_call_dict(c) for c in calls])

    # ---- answering ---------------------------------------------------------------------------

    def approve(
        self,
        request: RequestLike,
        *,
        arguments: JSON = None,
        scope: Scope = "once",
        responder: Optional[str] = None,
    ) -> Outcome:
        """Approves a pending request, optionally with edited ``arguments`` (the tool must be
        editable; they are validated against its schema) and for the rest of the session.

        Given a :class:`ConfirmationRequest` or :class:`PendingRequest`, the answer is bound to
        what was shown (tool, argument digest, session); given only an id, it is not.

        Raises a :class:`SignoffError` subclass when the response is rejected (the request is
        then unchanged): ``UnknownRequestError``, ``AlreadyResolvedError``, ``ExpiredError``,
        ``MismatchError``, ``EditsNotAllowedError``, ``InvalidArgumentsError``, ``ClosedError``,
        and ``MalformedError`` for edited ``arguments`` that are not JSON (see
        :data:`signoff.tools.JSON`).
        """
        return self._native.approve(request, arguments, scope, responder)

    def deny(self, request: RequestLike, reason: Optional[str] = None, *, responder: Optional[str] = None) -> Outcome:
        """Denies a pending request; ``reason`` is passed to the model."""
        return self._native.deny(request, reason, responder)

    def respond(
        self,
        response: Union[str, Mapping[str, Any]],
        decision: Optional[Literal["approve", "deny"]] = None,
        *,
        arguments: JSON = None,
        scope: Optional[Scope] = None,
        reason: Optional[str] = None,
        responder: Optional[str] = None,
        tool: Optional[str] = None,
        arguments_digest: Optional[str] = None,
        session_id: Optional[str] = None,
    ) -> Outcome:
        """Answers a request by id: ``respond(request_id, "approve", ...)``, or with a whole
        response dict in the core ``ConfirmationResponse`` JSON form. ``tool``,
        ``arguments_digest`` and ``session_id``, when given, must match the request.

        Returns ``"approved"`` or ``"denied"``; raises a :class:`SignoffError` subclass when the
        response is rejected (see :meth:`approve`).
        """
        return self._native.respond(
            _response_body(
                "respond", response, decision, arguments, scope, reason, responder, tool, arguments_digest, session_id
            )
        )

    async def respond_async(
        self,
        response: Union[str, Mapping[str, Any]],
        decision: Optional[Literal["approve", "deny"]] = None,
        *,
        arguments: JSON = None,
        scope: Optional[Scope] = None,
        reason: Optional[str] = None,
        responder: Optional[str] = None,
        tool: Optional[str] = None,
        arguments_digest: Optional[str] = None,
        session_id: Optional[str] = None,
    ) -> Outcome:
        """:meth:`respond` without holding the event loop while the answer is recorded: with a
        durable store (``store_path``, ``store_url``) the commit or database round trip happens
        off the loop's thread and this returns once the answer is recorded; with the in-memory
        store it answers at once. Same arguments, outcome and errors as :meth:`respond`. The
        answer stands once this was called, even if the awaiting task is cancelled.
        """
        body = _response_body(
            "respond_async", response, decision, arguments, scope, reason, responder, tool, arguments_digest, session_id
        )
        outcome: Outcome = await self._native.respond_async(body)
        return outcome

    def respond_json(self, text: str) -> Outcome:
        """Answers with a response in JSON text (e.g. from a remote UI). Malformed text raises
        :class:`MalformedError`."""
        return self._native.respond_json(text)

    # ---- remote approval ---------------------------------------------------------------------

    def issue_token(self, request: RequestLike, approver: str) -> str:
        """Issues a signed approval token for a pending request, for ``approver`` only: the
        link a remote UI answers with through :meth:`respond_token`. It names the request and
        binds its tool, argument digest and session; it expires at the request's deadline (or
        sooner with ``token_ttl``). Treat it as a credential: the gate never logs it.

        Raises:
            ConfigError: the gate has no ``token_keys``.
            NotPendingError: the request is not pending.
            MalformedError: an empty approver.
        """
        return self._native.issue_token(request, approver)

    def approval_marker(self, tool: str, decision: Decision) -> str:
        """An approval marker for a call a person approved through this gate: send it with the
        call to the next signoff gate it reaches, so the person is not asked twice. For an MCP
        server behind ``signoff mcp-proxy`` (configured with the same ``token_keys``), put it in
        the request's ``_meta`` under :data:`signoff.MARKER_META_KEY`::

            decision = await gate.confirm("fs__write_file", args)
            if decision.approved:
                marker = gate.approval_marker("fs__write_file", decision)
                await session.call_tool("fs__write_file", decision.arguments,
                                        meta={signoff.MARKER_META_KEY: marker})

        It names ``tool`` (as the receiving gate knows it), the digest of the arguments approved to
        run (``decision.arguments``, an edit included), who approved and the request; it is signed
        with the gate's ``token_keys``, accepted once, and expires after a minute. One marker per
        request: asking again raises ``AlreadyUsedError``.

        Raises:
            ConfigError: the gate has no ``token_keys``.
            MalformedError: the decision is not a person's approval (denied, timed out, cancelled,
                not gated), or ``tool`` is empty.
            AlreadyUsedError: a marker was already issued for this request.
            MismatchError: this gate's record of the request names other arguments.
        """
        return self._native.approval_marker(tool, decision)

    def accept_approval_marker(self, marker: str, tool: str, arguments: JSON) -> MarkerClaims:
        """Accepts an approval marker from :meth:`approval_marker` (a gate with the same keys) for
        a call to ``tool`` with ``arguments``, once; returns what it claims (``approver``,
        ``request_id``, ...). On any error, ask a person as if there were no marker. Acceptances
        and refusals are audited. With a durable store (``store_path``, ``store_url``) the
        acceptance is kept in it too: a replay is refused after a restart, and by every gate
        sharing the store.

        Raises ``MalformedError``, ``UnknownKeyError``, ``BadSignatureError``,
        ``TokenExpiredError``, ``MismatchError`` (another tool or other arguments),
        ``AlreadyUsedError``, ``ConfigError``, ``StoreError`` (the store could not record it).
        """
        return cast("MarkerClaims", self._native.accept_approval_marker(marker, tool, arguments))

    def inspect_token(self, token: str) -> TokenClaims:
        """Verifies a token's key and signature and returns what it claims (which request, for
        whom, until when), e.g. to show the request a link is for. Expiry, approver and the
        request's state are checked by :meth:`respond_token`.

        Raises ``MalformedError``, ``UnknownKeyError``, ``BadSignatureError``, ``ConfigError``.
        """
        return self._native.inspect_token(token)

    def respond_token(
        self,
        token: str,
        decision: Literal["approve", "deny"],
        *,
        approver: str,
        arguments: JSON = None,
        scope: Scope = "once",
        reason: Optional[str] = None,
    ) -> Outcome:
        """Answers a pending request with a token from :meth:`issue_token`, presented by
        ``approver`` (who your server authenticated; it must be the token's approver). An
        approval runs exactly the arguments stored with the request; ``arguments`` is an edit
        (editable tools only), validated like any other. A token answers once.

        Raises, in the order checked: ``ClosedError``, ``ConfigError``, ``MalformedError``,
        ``UnknownKeyError``, ``BadSignatureError``, ``TokenExpiredError``,
        ``WrongApproverError``, ``AlreadyUsedError``, ``NotPendingError``, then what
        :meth:`respond` raises (``UnauthorizedError`` from ``approvers``,
        ``EditsNotAllowedError``, ``InvalidArgumentsError``). A rejected token changes nothing.
        """
        return self._native.respond_token(token, decision, approver, arguments, scope, reason)

    async def respond_token_async(
        self,
        token: str,
        decision: Literal["approve", "deny"],
        *,
        approver: str,
        arguments: JSON = None,
        scope: Scope = "once",
        reason: Optional[str] = None,
    ) -> Outcome:
        """:meth:`respond_token` without holding the event loop while the answer is recorded
        (see :meth:`respond_async`). Same arguments, outcome and errors."""
        outcome: Outcome = await self._native.respond_token_async(token, decision, approver, arguments, scope, reason)
        return outcome

    def serve_console(
        self,
        *,
        bind: str = "127.0.0.1:0",
        allow_remote: bool = False,
        public_origin: Optional[str] = None,
        approver_keys: Optional[Mapping[str, str]] = None,
        approver_keys_file: Union[str, "os.PathLike[str]", None] = None,
        sign_in_ttl: Optional[Seconds] = None,
        session_ttl: Optional[Seconds] = None,
        history: Optional[int] = None,
        title: Optional[str] = None,
    ) -> Console:
        """Starts the browser approval console for this gate (see :mod:`signoff.console`) on its
        own thread, and returns once it listens. The gate needs ``token_keys``: every decision
        made in the page is submitted as a signed approval token.

        >>> gate = Gate(token_keys=TokenKeys("k1", _native.Secret.generate()))
        >>> with gate.serve_console(title="approvals") as console:
        ...     console.url.startswith("http://127.0.0.1:"), "#token=" in console.sign_in_link("alice")
        (True, True)

        Args:
            bind: ``"host:port"`` to listen on; ``"127.0.0.1:0"`` (loopback, a free port) by
                default. A non-loopback address needs ``allow_remote=True``.
            allow_remote: allow a non-loopback ``bind`` (put the console behind TLS then).
            public_origin: the origin people reach the console at behind a proxy, e.g.
                ``"https://approve.example.com"``: sign-in links use it, only its host is
                answered, and an ``https`` origin makes the session cookie ``Secure``.
            approver_keys: people who may also sign in with a name and a key: ``{name: key}``
                (keys of at least 16 characters). Sign-in links work either way.
            approver_keys_file: the same from a file of ``name:key`` or ``name:sha256:<hex>``
                lines (``#`` comments); not with ``approver_keys``.
            sign_in_ttl: seconds (or a ``timedelta``) a sign-in link stays valid; 15 minutes by
                default.
            session_ttl: seconds (or a ``timedelta``) a browser stays signed in; 12 hours by
                default.
            history: how many decided requests the page's history keeps (500).
            title: the page title (``"signoff"``).

        Starting and :meth:`Console.close` release the GIL. The console counts as an approver:
        while it runs, gated calls wait for a person until their deadline.

        Raises:
            ConfigError: the gate has no ``token_keys``; ``bind`` is not an address or is not
                loopback without ``allow_remote``; the address cannot be bound; a bad
                ``public_origin``, a zero TTL, short or duplicate approver keys, an unreadable
                keys file.
        """
        native = _native.Console(
            self._native,
            bind=bind,
            allow_remote=allow_remote,
            public_origin=public_origin,
            approver_keys=None if approver_keys is None else dict(approver_keys),
            approver_keys_file=None if approver_keys_file is None else os.fspath(approver_keys_file),
            sign_in_ttl_ms=None if sign_in_ttl is None else to_ms(sign_in_ttl, "`sign_in_ttl`"),
            session_ttl_ms=None if session_ttl is None else to_ms(session_ttl, "`session_ttl`"),
            history=history,
            title=title,
        )
        return Console(native, self)

    # ---- durable store -----------------------------------------------------------------------

    def recover(self) -> Recovery:
        """Picks up what an earlier process left in the durable store (``store_path``, or with
        ``store_url`` the unfinished requests of this gate's ``store_owner``). Call it once,
        after registering tools and before the first call.

        A pending request whose deadline has not passed waits again until that same deadline
        and is re-published (so a UI sees it in :meth:`pending` and on the bus); when approved,
        the gate runs its tool's executor exactly once and stores the result
        (:meth:`record`). One whose deadline passed is resolved as timed out. One that was
        approved or executing is marked ``interrupted`` and never run again.

        With ``deny_when_unobserved=True`` (the default) and no approver attached, restored
        requests are cancelled at once: durable, remotely approved gates use ``False``.

        Raises ``ConfigError`` when called twice or after the first request, ``StoreError``.
        """
        return self._native.recover()

    def record(self, request: RequestLike) -> Optional[StoredRecord]:
        """A request's stored record in any state (``pending`` ... ``done``, with the tool's
        result), or ``None``. Only a durable store (``store_path``, ``store_url``) keeps records
        once a request resolves."""
        return self._native.record(request)

    # ---- watching ----------------------------------------------------------------------------

    def events(self, *, observe: bool = False, types: Optional[Iterable[EventType]] = None) -> EventStream:
        """Subscribes to the event bus, from now on.

        >>> async def show(gate: Gate) -> None:
        ...     async with gate.events(observe=True) as events:
        ...         async for event in events:
        ...             print(event.type)

        Yields :class:`ConfirmationRequest`, :class:`ConfirmationResponse`,
        :class:`ConfirmationTimeout`, :class:`ConfirmationResolved`, and a :class:`Lagged`
        marker (carrying the pending snapshot) if the stream fell behind. Closing the stream
        (``close()``, leaving the ``with`` block, or dropping it) unsubscribes; when the gate
        closes, the stream ends after the events published before.

        A stream is an **approver** by default: it stands for a UI that shows requests to a
        person and answers them (:meth:`approve`, :meth:`deny`), so while it is open, gated calls
        wait for an answer. With ``observe=True`` it is an **observer** (a logger, metrics, an
        audit display): it sees every event but never counts as someone who can answer, so it
        never keeps a call waiting when no approver is attached (the call is then cancelled at
        once, ``no-approver``, unless ``deny_when_unobserved=False``).

        With ``types``, the stream yields only events of those types (and a :class:`Lagged`
        marker, which reports missed events of any type): an approver that reads only
        ``["confirmation-request"]`` is not handed the response and the resolution that follow
        each of its answers. A name that is not an event type raises :class:`MalformedError`.
        """
        if types is None:
            return self._native.events(observe)
        if isinstance(types, (str, bytes)):
            raise MalformedError(f"malformed payload: types must be a list of event types, not the string {types!r}")
        names: List[str] = list(types)
        for name in names:
            if not isinstance(name, str):
                raise MalformedError(f"malformed payload: types must hold event type names (str), not {name!r}")
        return self._native.events(observe, names)

    def on_request(self, handler: Handler) -> HandlerRegistration:
        """Calls ``handler(request)`` for every request from now on (and every one already
        pending). The handler answers through ``request.approve(...)`` / ``request.deny(...)``.
        It is an approver (see :meth:`events`).

        If it raises, or returns without answering, the approval step has failed: the request
        ends at once as ``cancelled`` with ``cancel_reason == "approval-failed"`` (whoever
        ``allowed_responders`` / ``approvers`` admit), and the tool does not run. The model reads
        that the approval step failed, never the exception; the detail goes to the audit trail
        (a ``notice`` record with decision ``approval-failed``, responder
        :data:`~signoff.HANDLER_RESPONDER`) and stderr, and the exception with its traceback to
        the ``signoff`` logger. An answer given before raising stands.

        A **sync** handler is called right where the request is made: inside the
        ``confirm`` / ``execute`` that needs approval, on the thread awaiting it (the event loop,
        or the thread of a ``*_blocking`` call), with no thread hop or task. It must answer
        without blocking; a handler that waits for a person (a terminal, a web page) should be
        **async**: it runs as a Task on the event loop that is running when ``on_request`` is
        called, and may take its time (e.g. ``await asyncio.to_thread(input, "approve? ")``).
        The handler stays registered until ``registration.stop()`` or the gate closes.
        """
        return self._native.on_request(handler, _is_async_callable(handler))

    # ---- state -------------------------------------------------------------------------------

    def pending(self) -> List[ConfirmationRequest]:
        """Every pending request, oldest first. This copies the whole list: where many requests
        may be pending, read them with :meth:`pending_page` or :meth:`iter_pending`."""
        return self._native.pending()

    def pending_page(
        self, *, after: Optional[str] = None, limit: int = 1000
    ) -> Tuple[List[ConfirmationRequest], Optional[str]]:
        """Up to ``limit`` (1 to 2**32 - 1) pending requests, oldest first, after the cursor
        ``after`` (from the oldest when ``None``), and the cursor of the next page (``None`` at
        the end). Each page costs the same however many are pending; paging neither skips nor
        repeats a request that stays pending. A cursor that did not come from this API, or a
        ``limit`` out of that range, is a :class:`MalformedError`.

        >>> gate = Gate()
        >>> gate.pending_page()
        ([], None)
        """
        return self._native.pending_page(after, limit)

    def iter_pending(self, *, page_size: int = 1000) -> Iterator[ConfirmationRequest]:
        """Every pending request, oldest first, read a page at a time (see :meth:`pending_page`)."""
        after: Optional[str] = None
        while True:
            page, after = self.pending_page(after=after, limit=page_size)
            yield from page
            if after is None:
                return

    def pending_request(self, request_id: str) -> Optional[ConfirmationRequest]:
        """One pending request, or ``None``."""
        return self._native.pending_request(request_id)

    @property
    def pending_count(self) -> int:
        """How many requests are pending."""
        return self._native.pending_count

    def cancel_request(self, request: RequestLike) -> bool:
        """Cancels a pending request (``aborted``); returns whether it was pending."""
        return self._native.cancel_request(request)

    def end_session(self, session_id: str) -> int:
        """Ends a session: drops its grants and cancels its pending requests
        (``session-ended``). Returns how many were cancelled."""
        return self._native.end_session(session_id)

    def grants(self, session_id: str) -> List[str]:
        """The tools approved for the rest of a session, sorted."""
        return self._native.grants(session_id)

    def revoke_grant(self, session_id: str, tool: str) -> bool:
        """Revokes a session grant; returns whether one existed."""
        return self._native.revoke_grant(session_id, tool)

    @property
    def approver_count(self) -> int:
        """How many approvers are attached: event streams (:meth:`events`) and handlers
        (:meth:`on_request`). Observers (``events(observe=True)``) do not count. 0 once the gate
        is closed (nothing is asked any more)."""
        return self._native.approver_count

    @property
    def gating_disabled(self) -> bool:
        """True when gating is disabled (development only)."""
        return self._native.gating_disabled

    @property
    def default_timeout(self) -> timedelta:
        """The approval timeout for tools that set none."""
        return timedelta(milliseconds=self._native.default_timeout_ms)

    def flush_audit(self) -> None:
        """Waits until every audit record so far is written and synced."""
        self._native.flush_audit()

    def close(self) -> None:
        """Shuts the gate down: pending requests are cancelled (``shutdown``), handlers stop,
        every later call that needs approval is cancelled at once (a session grant or
        ``dangerously_disable_gating`` no longer lets one through; a tool that needs no approval
        still runs) and later responses raise :class:`ClosedError`. Idempotent."""
        self._native.close()

    @property
    def closed(self) -> bool:
        """True once closed."""
        return self._native.closed

    def __repr__(self) -> str:
        return f"Gate(pending={self.pending_count}, closed={self.closed})"


__all__ = ["Console", "Decision", "Executor", "Gate", "GateOptions", "Handler", "Outcome", "ToolResult"]


def _response_body(
    method: str,
    response: Union[str, Mapping[str, Any]],
    decision: Optional[str],
    arguments: JSON,
    scope: Optional[str],
    reason: Optional[str],
    responder: Optional[str],
    tool: Optional[str],
    arguments_digest: Optional[str],
    session_id: Optional[str],
) -> Mapping[str, Any]:
    """What :meth:`Gate.respond` takes: a response dict, or a request id and a decision."""
    if isinstance(response, Mapping):
        if decision is not None:
            raise TypeError("pass either a response dict or a request id and a decision")
        return response
    if decision is None:
        raise TypeError(f"{method}(request_id, decision): decision is 'approve' or 'deny'")
    body: Dict[str, Any] = {"id": response, "decision": decision}
    for key, value in (
        ("arguments", arguments),
        ("scope", scope),
        ("reason", reason),
        ("responder", responder),
        ("tool", tool),
        ("arguments_digest", arguments_digest),
        ("session_id", session_id),
    ):
        if value is not None:
            body[key] = value
    return body
