"""Tool calls and tool definitions.

A tool is described by the core's ``ToolSpec`` JSON form; :meth:`signoff.Gate.register` builds
that dict from keyword arguments and the core parses it (unknown fields are refused, so a typo
never silently weakens the policy). The rule helpers below build the core's ``ArgRule`` dicts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Dict, Iterable, List, Literal, Mapping, NoReturn, Optional, Sequence, Tuple, Union

from ._native import ConfigError, InvalidToolError, MalformedError, normalize_tool_spec

#: Whether calls to a tool need approval: decided by the gate's policy (``"default"``),
#: always (``"required"``) or never, argument rules aside (``"not_required"``).
ApprovalMode = Literal["default", "required", "not_required"]

#: ``"once"`` (this call) or ``"session"`` (this tool for the rest of the session).
Scope = Literal["once", "session"]

#: A JSON-compatible value: ``dict`` with ``str`` keys, ``list``, ``tuple``, ``str``, ``bool``, an
#: ``int`` from ``-2**63`` to ``2**64 - 1``, a finite ``float``, ``None``, nested at most 64 levels of
#: dicts and lists (a top-level dict is 1). Anything else -- NaN or Infinity, a larger int, a key
#: that is not a ``str``, a set, bytes, a datetime, a model object, a reference cycle, deeper
#: nesting -- raises :class:`~signoff.MalformedError` naming where it is
#: (``arguments["a"][3] is NaN: ...``); nothing is rounded, stringified or sent as ``null``.
JSON = Any

Seconds = Union[float, int, timedelta]


def _no_repeated_keys(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
    d = dict(pairs)
    if len(d) != len(pairs):
        raise ValueError("a repeated key")
    return d


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def to_ms(value: Seconds, what: str = "timeout", error: type = ConfigError) -> int:
    """Seconds (or a ``timedelta``) as whole milliseconds; what is no such duration raises
    ``error`` (an option's: ``ConfigError``; a tool definition's: ``MalformedError``, its range
    being the core's)."""
    # The core's prefix for the kind, as every other error of that kind has it.
    prefix = "configuration error: " if error is ConfigError else "malformed payload: "
    if isinstance(value, bool) or not isinstance(value, (int, float, timedelta)):
        raise error(f"{prefix}{what} must be a number of seconds or a timedelta, not {type(value).__name__} {value!r}")
    secs = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if not 0 <= secs <= 1e12:  # also NaN and Infinity; 1e12 s is some 31,000 years
        raise error(f"{prefix}{what} must be a non-negative number of seconds (at most 1e12), got {value!r}")
    return int(round(secs * 1000))


@dataclass(frozen=True)
class ToolCall:
    """A tool call from the model (the core ``ToolCall``).

    ``session_id`` defaults to the gate's default session; grants never cross sessions.
    """

    tool: str
    arguments: JSON = field(default_factory=dict)
    session_id: Optional[str] = None
    call_id: Optional[str] = None
    metadata: JSON = None

    def to_dict(self) -> Dict[str, Any]:
        """The core ``ToolCall`` JSON form (absent fields left out)."""
        d: Dict[str, Any] = {"tool": self.tool, "arguments": self.arguments}
        if self.session_id is not None:
            d["session_id"] = self.session_id
        if self.call_id is not None:
            d["call_id"] = self.call_id
        if self.metadata is not None:
            d["metadata"] = self.metadata
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ToolCall":
        """From the core ``ToolCall`` JSON form."""
        return cls(
            tool=data["tool"],
            arguments=data.get("arguments", {}),
            session_id=data.get("session_id"),
            call_id=data.get("call_id"),
            metadata=data.get("metadata"),
        )

    @classmethod
    def from_openai(cls, tool_call: Mapping[str, Any], *, session_id: Optional[str] = None) -> "ToolCall":
        """From an OpenAI tool call, in either API's shape:

        - a Chat Completions ``tool_calls`` item:
          ``{"id", "type": "function", "function": {"name", "arguments": "<json>"}}``;
        - a Responses API ``function_call`` output item (what the OpenAI Agents SDK hands over
          too): ``{"type": "function_call", "call_id", "name", "arguments": "<json>"}``.

        The SDKs' objects are taken too (anything with ``model_dump()``). Arguments that are not
        valid JSON as signoff reads it (also: a repeated key, NaN or Infinity) are passed on as
        the raw string, so the gate refuses the call with ``invalid_arguments`` and tells the
        model why, instead of raising here or keeping one of two values. Answer with
        :meth:`ToolResult.to_openai` (Chat Completions) or :meth:`ToolResult.to_openai_responses`.

        Raises :class:`~signoff.MalformedError` naming what is missing or of the wrong type
        when ``tool_call`` is neither shape.

        >>> ToolCall.from_openai({"type": "function_call", "call_id": "c1", "name": "f", "arguments": '{"a": 1}'})
        ToolCall(tool='f', arguments={'a': 1}, session_id=None, call_id='c1', metadata=None)
        """
        tc = _model_dict(tool_call, "ToolCall.from_openai", _OPENAI_SHAPES)
        if tc.get("type") == "function_call" or ("function" not in tc and "call_id" in tc):
            # The Responses API: the name and arguments on the item itself, its id as `call_id`.
            name, raw, call_id = tc.get("name"), tc.get("arguments"), tc.get("call_id")
            where, id_field = "", "call_id"
        else:
            fn = tc.get("function")
            if not isinstance(fn, Mapping):
                _not_a("ToolCall.from_openai", _OPENAI_SHAPES, f"`function` is {_show(fn)}")
            name, raw, call_id = fn.get("name"), fn.get("arguments"), tc.get("id")
            where, id_field = "function.", "id"
        if not isinstance(name, str) or not name:
            _not_a("ToolCall.from_openai", _OPENAI_SHAPES, f"`{where}name` is {_show(name)}")
        if call_id is not None and not isinstance(call_id, str):
            _not_a("ToolCall.from_openai", _OPENAI_SHAPES, f"`{id_field}` is {_show(call_id)}")
        args: Any
        if raw is None or (isinstance(raw, str) and raw.strip() == ""):
            args = {}
        elif isinstance(raw, str):
            try:
                args = json.loads(raw, object_pairs_hook=_no_repeated_keys, parse_constant=_no_constant)
            except ValueError:
                args = raw
        else:
            args = raw
        return cls(tool=name, arguments=args, session_id=session_id, call_id=call_id)

    @classmethod
    def from_anthropic(cls, block: Mapping[str, Any], *, session_id: Optional[str] = None) -> "ToolCall":
        """From an Anthropic Messages ``tool_use`` content block (``{"type": "tool_use", "id", "name", "input"}``).

        Raises :class:`~signoff.MalformedError` naming what is missing when ``block`` is no such block.
        """
        shape = '{"type": "tool_use", "id", "name", "input"}'
        b = _model_dict(block, "ToolCall.from_anthropic", shape)
        name = b.get("name")
        if not isinstance(name, str) or not name:
            _not_a("ToolCall.from_anthropic", shape, f"`name` is {_show(name)}")
        return cls(tool=name, arguments=b.get("input", {}), session_id=session_id, call_id=b.get("id"))


_OPENAI_SHAPES = (
    'a Chat Completions tool call {"id", "type": "function", "function": {"name", "arguments"}} or '
    'a Responses API item {"type": "function_call", "call_id", "name", "arguments"}'
)


def _show(v: Any) -> str:
    return "missing" if v is None else f"{type(v).__name__} {v!r}"[:120]


def _not_a(converter: str, shape: str, problem: str) -> "NoReturn":
    raise MalformedError(f"malformed payload: {converter}: expected {shape}: {problem}")


def _model_dict(v: Any, converter: str, shape: str) -> Mapping[str, Any]:
    """A mapping as given, or an SDK model object's ``model_dump()``."""
    if isinstance(v, Mapping):
        return v
    dump = getattr(v, "model_dump", None)
    if callable(dump):
        d = dump()
        if isinstance(d, Mapping):
            return d
    _not_a(converter, shape, f"got {type(v).__name__} {v!r}"[:200])


def tool_spec(
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
) -> Dict[str, Any]:
    """The core ``ToolSpec`` dict for these options (only what differs from the defaults).

    ``source`` is ``"built_in"`` (default) or :func:`external` ``(server)``; ``timeout`` is the
    approval timeout in seconds (the gate's default when ``None``).
    """
    spec: Dict[str, Any] = {"name": name}
    if description:
        spec["description"] = description
    if isinstance(parameters, bool):  # `true` / `false` are JSON Schemas too (any / no value)
        spec["parameters"] = parameters
    elif parameters is not None:
        if not isinstance(parameters, Mapping):
            raise InvalidToolError(
                f"invalid tool definition `{name}`: parameters must be a JSON Schema given as a dict, not {type(parameters).__name__} "
                f"(for JSON text, use json.loads(...) or Gate.register_spec)"
            )
        spec["parameters"] = dict(parameters)
    if approval != "default":
        spec["approval"] = approval
    if editable:
        spec["editable"] = True
    if prompt_template is not None:
        spec["prompt_template"] = prompt_template
    rules = [dict(r) for r in rules]
    if rules:
        spec["rules"] = rules
    if source is not None:
        spec["source"] = {"kind": "built_in"} if source == "built_in" else dict(source)
    if read_only:
        spec["read_only"] = True
    if destructive:
        spec["destructive"] = True
    if timeout is not None:
        # What is no duration is malformed, as in Node; the range (1 ms to 30 days) is the core's.
        spec["timeout_ms"] = to_ms(timeout, f"tool `{name}`: timeout", MalformedError)
    return spec


def external(server: str) -> Dict[str, str]:
    """``source`` for a tool provided by an external server (e.g. an MCP server)."""
    return {"kind": "external", "server": server}


# Argument rules: when a rule holds, the call needs approval whatever the approval mode or session
# grants say. A missing value or one of the wrong type holds too (rules fail safe). ``pointer`` is
# a JSON Pointer into the arguments, e.g. "/path".


def path_outside(pointer: str, prefixes: Sequence[str]) -> Dict[str, Any]:
    """Holds when the path at ``pointer`` (normalized) is outside every prefix; relative paths hold."""
    return {"kind": "path_outside", "pointer": pointer, "prefixes": list(prefixes)}


def greater_than(pointer: str, value: float) -> Dict[str, Any]:
    """Holds when the number at ``pointer`` is greater than ``value``."""
    return {"kind": "greater_than", "pointer": pointer, "value": value}


def one_of(pointer: str, values: Sequence[JSON]) -> Dict[str, Any]:
    """Holds when the value at ``pointer`` equals one of ``values``."""
    return {"kind": "one_of", "pointer": pointer, "values": list(values)}


def not_one_of(pointer: str, values: Sequence[JSON]) -> Dict[str, Any]:
    """Holds when the value at ``pointer`` is not one of ``values``."""
    return {"kind": "not_one_of", "pointer": pointer, "values": list(values)}


def contains(pointer: str, substring: str) -> Dict[str, Any]:
    """Holds when the string at ``pointer`` contains ``substring`` (case-insensitive)."""
    return {"kind": "contains", "pointer": pointer, "substring": substring}


__all__ = [
    "ApprovalMode",
    "Scope",
    "ToolCall",
    "contains",
    "external",
    "greater_than",
    "normalize_tool_spec",
    "not_one_of",
    "one_of",
    "path_outside",
    "tool_spec",
    "to_ms",
]
