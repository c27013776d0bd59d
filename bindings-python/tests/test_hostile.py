"""Hostile input (issue 15): values a model or a remote client controls -- nested far too deep,
referencing themselves, NaN or Infinity, ints past 64 bits, types JSON does not have -- are
refused as ``malformed`` with a message naming where, before anything is asked or run. They
never crash the interpreter, and are never silently changed (NaN is not sent as ``null``).

Inputs that crashed the interpreter before the fix run in a subprocess, so a regression fails
one test instead of killing pytest.
"""

from __future__ import annotations

import asyncio
import collections
import datetime
import enum
import json
import math
import os
import subprocess
import sys
import time
import types
from typing import Any, Callable, Dict, List, Tuple

import pytest

import signoff
from conftest import wait_until
from helpers import Recorder

MAX = 64  # signoff::json::MAX_NESTING
NAN_TAIL = "JSON has no NaN or Infinity; refusing instead of sending null"
TOO_DEEP = f"arrays and objects nest deeper than {MAX} levels"
TEXT_TOO_DEEP = f"nest deeper than {MAX} levels inside it"

# ---- in a subprocess: deep and cyclic values through every entry point ---------------------

SCRIPT = r'''
import asyncio, json, sys, time
import signoff

ENTRY = sys.argv[1]
CALLS = []


def executor(args):
    CALLS.append(args)
    return "ran"


def new_gate():
    keys = signoff.TokenKeys("k1", signoff.Secret.from_base64("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="))
    gate = signoff.Gate(deny_when_unobserved=False, default_timeout=30, token_keys=keys)
    gate.register("gated", parameters={"type": "object"}, approval="required", editable=True, executor=executor)
    gate.register("free", parameters={"type": "object"}, approval="not_required", executor=executor)
    return gate


def deep_list(levels):
    v = []
    for _ in range(levels - 1):
        v = [v]
    return v


def deep_dict(levels):
    v = {}
    for _ in range(levels - 1):
        v = {"a": v}
    return v


def cyclic_list():
    v = [1]
    v.append(v)
    return v


def cyclic_dict():
    v = {"a": 1}
    v["self"] = v
    return v


VALUES = {
    "deep_list": lambda: deep_list(20_000),
    "deep_dict": lambda: deep_dict(20_000),
    "cyclic_list": cyclic_list,
    "cyclic_dict": cyclic_dict,
    "cyclic_nested": lambda: {"x": [1, {"y": cyclic_list()}]},
    "deep_million": lambda: deep_list(1_000_000),
}


def error_of(e):
    return [type(e).__name__, getattr(e, "kind", None), str(e)[:400]]


def attempt(fn):
    try:
        fn()
    except Exception as e:
        return error_of(e)
    return None


async def attempt_async(make):
    try:
        await make()
    except Exception as e:
        return error_of(e)
    return None


# Each entry: (value) -> observations. "error" is the refusal; "calls" how often a tool ran.

def sync_entry(call):
    def entry(v):
        gate = new_gate()
        err = attempt(lambda: call(gate, v))
        gate.close()
        return {"error": err, "calls": len(CALLS)}
    return entry


def async_entry(call):
    def entry(v):
        async def body():
            gate = new_gate()
            err = await attempt_async(lambda: call(gate, v))
            gate.close()
            return {"error": err, "calls": len(CALLS)}
        return asyncio.run(body())
    return entry


def pending_entry(answer):
    """A gated call waits; `answer(gate, request, v)` tries a hostile answer. The request must
    still be pending afterwards, and answerable: approved as shown, its tool runs once."""
    def entry(v):
        async def body():
            gate = new_gate()
            task = asyncio.ensure_future(gate.execute("gated", {"path": "/a"}))
            while gate.pending_count == 0:
                await asyncio.sleep(0.001)
            req = gate.pending()[0]
            err = attempt(lambda: answer(gate, req, v))
            calls_before = len(CALLS)
            still_pending = gate.pending_count == 1 and gate.pending_request(req.id) is not None
            outcome = gate.approve(req) if still_pending else None
            result = await task
            gate.close()
            return {"error": err, "calls": calls_before, "pending_after": still_pending, "outcome": outcome,
                    "status": result.status, "ran_with": CALLS}
        return asyncio.run(body())
    return entry


def handler_entry(v):
    """`PendingRequest.approve(arguments=...)` in an `on_request` handler."""
    seen = {}

    def handler(req):
        seen["error"] = attempt(lambda: req.approve(arguments=v))
        seen["calls"] = len(CALLS)
        seen["pending_after"] = req.is_pending
        seen["outcome"] = req.approve() if req.is_pending else None

    async def body():
        gate = new_gate()
        gate.on_request(handler)
        result = await gate.execute("gated", {"path": "/a"})
        gate.close()
        return dict(seen, status=result.status, ran_with=CALLS)
    return asyncio.run(body())


def token_answer(gate, req, v):
    token = gate.issue_token(req, "alice")
    gate.respond_token(token, "approve", approver="alice", arguments=v)


def executor_return(v):
    async def body():
        gate = new_gate()
        gate.register("ret", approval="not_required", executor=lambda a: v)
        result = await gate.execute("ret")
        gate.close()
        return {"status": result.status, "error": result.error, "calls": len(CALLS)}
    return asyncio.run(body())


def register_parameters(v):
    gate = new_gate()
    err = attempt(lambda: gate.register("p", parameters={"type": "object", "properties": v}, executor=executor))
    return {"error": err, "calls": len(CALLS), "registered": "p" in [t["name"] for t in gate.tools()]}


def parse_event(v):
    return {"error": attempt(lambda: signoff.parse_event({"type": "confirmation-response", "id": "x", "arguments": v})),
            "calls": 0}


ENTRIES = {
    "evaluate": sync_entry(lambda g, v: g.evaluate("free", v)),
    "confirm": async_entry(lambda g, v: g.confirm("free", v)),
    "confirm_blocking": sync_entry(lambda g, v: g.confirm_blocking("free", v)),
    "execute": async_entry(lambda g, v: g.execute("free", v)),
    "execute_blocking": sync_entry(lambda g, v: g.execute_blocking("free", v)),
    "execute_nested": async_entry(lambda g, v: g.execute("free", {"path": "/a", "more": [v]})),
    "execute_batch": async_entry(lambda g, v: g.execute_batch([{"tool": "free", "arguments": v}])),
    "metadata_confirm": async_entry(lambda g, v: g.confirm("free", {"path": "/a"}, metadata=v)),
    "metadata_execute": async_entry(lambda g, v: g.execute("free", {"path": "/a"}, metadata=v)),
    "approve": pending_entry(lambda g, r, v: g.approve(r, arguments=v)),
    "approve_by_id": pending_entry(lambda g, r, v: g.approve(r.id, arguments=v)),
    "respond_dict": pending_entry(lambda g, r, v: g.respond({"id": r.id, "decision": "approve", "arguments": v})),
    "respond_by_id": pending_entry(lambda g, r, v: g.respond(r.id, "approve", arguments=v)),
    "respond_token": pending_entry(token_answer),
    "pending_request_approve": handler_entry,
    "executor_return": executor_return,
    "register_parameters": register_parameters,
    "parse_event": parse_event,
}

TEXTS = {
    "deep_list": lambda: "[" * 20_000 + "]" * 20_000,
    "deep_dict": lambda: '{"a":' * 20_000 + "{}" + "}" * 20_000,
    "deep_million": lambda: "[" * 1_000_000 + "]" * 1_000_000,
}


def text_entry(kind):
    """The strict parser for JSON text: respond_json, and the native respond with str and bytes."""
    def entry(text):
        async def body():
            gate = new_gate()
            task = asyncio.ensure_future(gate.execute("gated", {"path": "/a"}))
            while gate.pending_count == 0:
                await asyncio.sleep(0.001)
            req = gate.pending()[0]
            body = '{"id": "%s", "decision": "approve", "arguments": %s}' % (req.id, text)
            if kind == "respond_json":
                err = attempt(lambda: gate.respond_json(body))
            elif kind == "native_respond_str":
                err = attempt(lambda: gate._native.respond(body))
            else:
                err = attempt(lambda: gate._native.respond(body.encode()))
            calls_before = len(CALLS)
            still_pending = gate.pending_count == 1
            outcome = gate.approve(req) if still_pending else None
            result = await task
            gate.close()
            return {"error": err, "calls": calls_before, "pending_after": still_pending, "outcome": outcome,
                    "status": result.status, "ran_with": CALLS}
        return asyncio.run(body())
    return entry


if ENTRY in ("respond_json", "native_respond_str", "native_respond_bytes"):
    entry, values = text_entry(ENTRY), TEXTS
else:
    entry, values = ENTRIES[ENTRY], VALUES
for name, make in values.items():
    value = make()
    CALLS.clear()
    t0 = time.perf_counter()
    out = entry(value)
    out["case"] = name
    out["seconds"] = time.perf_counter() - t0
    print(json.dumps(out), flush=True)
'''

VALUE_ENTRIES = [
    "evaluate", "confirm", "confirm_blocking", "execute", "execute_blocking", "execute_nested", "execute_batch",
    "metadata_confirm", "metadata_execute", "approve", "approve_by_id", "respond_dict", "respond_by_id",
    "respond_token", "pending_request_approve", "executor_return", "register_parameters", "parse_event",
]
TEXT_ENTRIES = ["respond_json", "native_respond_str", "native_respond_bytes"]
PENDING_ENTRIES = {"approve", "approve_by_id", "respond_dict", "respond_by_id", "respond_token",
                   "pending_request_approve", *TEXT_ENTRIES}


def run_script(entry: str) -> List[Dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, entry],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=os.path.dirname(__file__),
    )
    assert proc.returncode == 0, f"{entry}: exit code {proc.returncode} (negative: killed by a signal)\n{proc.stderr[-3000:]}"
    return [json.loads(line) for line in proc.stdout.splitlines()]


@pytest.mark.parametrize("entry", VALUE_ENTRIES + TEXT_ENTRIES)
def test_deep_and_cyclic_values_are_refused_not_crashed(entry: str) -> None:
    cases = run_script(entry)
    expected = ["deep_list", "deep_dict", "deep_million"]
    if entry not in TEXT_ENTRIES:
        expected[2:2] = ["cyclic_list", "cyclic_dict", "cyclic_nested"]
    assert [c["case"] for c in cases] == expected
    for c in cases:
        what = f"{entry}/{c['case']}"
        if entry == "executor_return":
            # The tool ran; what it returned cannot be reported: a failure, never a crash.
            assert c["status"] == "failed", what
            error = c["error"]
        else:
            assert c["error"] is not None, f"{what}: accepted"
            cls, kind, error = c["error"]
            assert (cls, kind) == ("MalformedError", "malformed"), f"{what}: {c['error']}"
            assert c["calls"] == 0, f"{what}: a tool ran"
        if c["case"].startswith("cyclic"):
            assert "contains a reference cycle" in error, f"{what}: {error}"
        else:  # the walk of Python values says it as the core's too_deep(); the JSON parser, its own way
            assert (TEXT_TOO_DEEP if entry in TEXT_ENTRIES else TOO_DEEP) in error, f"{what}: {error}"
        assert c["seconds"] < 10, f"{what}: took {c['seconds']:.1f} s"
        if entry in PENDING_ENTRIES:
            # Refused before the gate saw it: still pending, still answerable, runs as shown.
            assert c["pending_after"] is True and c["outcome"] == "approved", what
            assert c["status"] == "executed" and c["ran_with"] == [{"path": "/a"}], what
        if entry == "register_parameters":
            assert c["registered"] is False, what


# ---- in process: NaN and Infinity ----------------------------------------------------------

NON_FINITE = [(float("nan"), "NaN"), (float("inf"), "Infinity"), (float("-inf"), "-Infinity")]


def new_gate(recorder: Recorder) -> signoff.Gate:
    gate = signoff.Gate(deny_when_unobserved=False, default_timeout=30)
    gate.register("gated", parameters={"type": "object"}, approval="required", editable=True, executor=recorder)
    gate.register("free", parameters={"type": "object"}, approval="not_required", executor=recorder)
    return gate


def malformed(fn: Callable[[], Any]) -> str:
    with pytest.raises(signoff.MalformedError) as e:
        fn()
    assert e.value.kind == "malformed" and isinstance(e.value, signoff.SignoffError)
    return str(e.value)


async def malformed_async(fn: Callable[[], Any]) -> str:
    with pytest.raises(signoff.MalformedError) as e:
        await fn()
    assert e.value.kind == "malformed"
    return str(e.value)


async def pending(gate: signoff.Gate) -> Tuple["asyncio.Future[signoff.ToolResult]", signoff.ConfirmationRequest]:
    task = asyncio.ensure_future(gate.execute("gated", {"path": "/a"}))
    await wait_until(lambda: gate.pending_count == 1, what="a pending request")
    return task, gate.pending()[0]


def placements(x: float) -> List[Tuple[Any, str]]:
    """`x` at the top level and nested, with the location the message must name."""
    return [
        (x, "arguments"),
        ({"a": x}, 'arguments["a"]'),
        ({"a": [0, 1, 2, x]}, 'arguments["a"][3]'),
        ({"a": ({"b": x},)}, 'arguments["a"][0]["b"]'),
    ]


@pytest.mark.parametrize("x,name", NON_FINITE, ids=[n for _, n in NON_FINITE])
def test_non_finite_arguments_are_refused_with_where(x: float, name: str, run: Any) -> None:
    rec = Recorder()

    async def body() -> None:
        with new_gate(rec) as gate:
            for value, where in placements(x):
                expected = f"{where} is {name}: {NAN_TAIL}"
                assert malformed(lambda: gate.evaluate("free", value)) == expected
                assert await malformed_async(lambda: gate.confirm("free", value)) == expected
                assert await malformed_async(lambda: gate.execute("free", value)) == expected
                assert malformed(lambda: gate.execute_blocking("free", value)) == expected
                msg = await malformed_async(lambda: gate.confirm("free", {"path": "/a"}, metadata=value))
                assert msg == expected.replace("arguments", "metadata", 1)
                msg = await malformed_async(lambda: gate.execute_batch([{"tool": "free", "arguments": value}]))
                assert msg == expected.replace("arguments", 'tool call["arguments"]', 1)
            assert rec.calls == []

    run(body())


@pytest.mark.parametrize("x,name", NON_FINITE, ids=[n for _, n in NON_FINITE])
def test_non_finite_edits_are_refused_and_the_request_stays_pending(x: float, name: str, run: Any) -> None:
    rec = Recorder()

    async def body() -> None:
        with new_gate(rec) as gate:
            task, req = await pending(gate)
            for value, where in placements(x):
                expected = f"{where} is {name}: {NAN_TAIL}"
                assert malformed(lambda: gate.approve(req, arguments=value)) == expected
                assert malformed(lambda: gate.approve(req.id, arguments=value)) == expected
                msg = malformed(lambda: gate.respond(req.id, "approve", arguments=value))
                assert msg == expected.replace("arguments", 'response["arguments"]', 1)
                msg = malformed(lambda: gate.respond({"id": req.id, "decision": "approve", "arguments": value}))
                assert msg == expected.replace("arguments", 'response["arguments"]', 1)
            # JSON text has no NaN; a number too large for a double is refused too, not made null.
            for literal in ("NaN", "Infinity", "-Infinity", "1e999", "-1e999", "[1e400]"):
                text = json.dumps({"id": req.id, "decision": "approve"})[:-1] + f', "arguments": {{"a": {literal}}}}}'
                assert "not acceptable JSON" in malformed(lambda: gate.respond_json(text))
                malformed(lambda: gate._native.respond(text))
                malformed(lambda: gate._native.respond(text.encode()))
            assert gate.pending_count == 1 and rec.calls == [] and not task.done()
            assert gate.approve(req) == "approved"
            result = await task
            assert result.status == "executed" and rec.calls == [{"path": "/a"}]

    run(body())


def test_non_finite_edit_in_a_handler_leaves_the_request_pending(run: Any) -> None:
    rec = Recorder()
    seen: Dict[str, Any] = {}

    def handler(req: signoff.PendingRequest) -> None:
        try:
            req.approve(arguments={"path": float("nan")})
        except signoff.MalformedError as e:
            seen["error"] = str(e)
        seen["pending"] = req.is_pending
        req.approve(arguments={"path": "/edited"})

    async def body() -> None:
        with new_gate(rec) as gate:
            gate.on_request(handler)
            result = await gate.execute("gated", {"path": "/a"})
            assert result.status == "executed" and rec.calls == [{"path": "/edited"}]
            assert result.decision is not None and result.decision.edited

    run(body())
    assert seen == {"error": f'arguments["path"] is NaN: {NAN_TAIL}', "pending": True}


def test_non_finite_tool_output_fails_the_call_instead_of_returning_null(run: Any) -> None:
    async def body() -> None:
        with signoff.Gate() as gate:
            gate.register("ret", approval="not_required", executor=lambda a: {"score": float("nan")})
            result = await gate.execute("ret")
            assert result.status == "failed" and result.ran
            assert f'the tool\'s return value["score"] is NaN: {NAN_TAIL}' in (result.error or "")

    run(body())


def test_non_finite_values_elsewhere() -> None:
    gate = signoff.Gate()
    msg = malformed(lambda: gate.register("x", parameters={"type": "number", "maximum": float("inf")}))
    assert msg == f'tool definition["parameters"]["maximum"] is Infinity: {NAN_TAIL}'
    assert gate.tools() == []
    msg = malformed(lambda: gate.register("x", rules=[signoff.greater_than("/n", float("nan"))]))
    assert msg == f'tool definition["rules"][0]["value"] is NaN: {NAN_TAIL}'


# ---- in process: types and numbers JSON does not have ---------------------------------------


class Model:
    """Looks like a pydantic model."""

    def model_dump(self) -> Dict[str, Any]:
        return {"a": 1}


class Color(enum.Enum):
    RED = "red"


REFUSED: List[Tuple[Any, List[str]]] = [
    (2**70, ["an int", "64-bit", "float"]),
    (-(2**63) - 1, ["an int", "64-bit"]),
    (2**64, ["an int", "64-bit"]),
    ({1, 2}, ["set", "list("]),
    (frozenset({1}), ["frozenset", "list("]),
    (b"abc", ["bytes", ".decode()"]),
    (bytearray(b"abc"), ["bytearray", ".decode()"]),
    (datetime.datetime(2024, 1, 2), ["datetime.datetime", ".isoformat()"]),
    (datetime.date(2024, 1, 2), ["datetime.date", ".isoformat()"]),
    (Model(), ["test_hostile.Model", ".model_dump()"]),
    (Color.RED, ["test_hostile.Color", ".value"]),
    (object(), ["object", "not JSON-compatible"]),
    (collections.abc.KeysView({}), ["KeysView"]),
    (complex(1, 2), ["complex"]),
    (types.MappingProxyType({"a": 1}), ["mappingproxy", "dict("]),
]


@pytest.mark.parametrize("value,words", REFUSED, ids=[type(v).__name__ + str(i) for i, (v, _) in enumerate(REFUSED)])
def test_values_json_does_not_have_are_refused(value: Any, words: List[str]) -> None:
    rec = Recorder()
    with new_gate(rec) as gate:
        for args, where in [(value, "arguments"), ({"a": [value]}, 'arguments["a"][0]')]:
            msg = malformed(lambda: gate.evaluate("free", args))
            assert msg.startswith(f"{where} is "), msg
            for w in words:
                assert w in msg, (w, msg)
            malformed(lambda: gate.execute_blocking("free", args))
        assert rec.calls == []


@pytest.mark.parametrize("key", [1, 1.5, None, True, ("a", 1), b"k"], ids=repr)
def test_dict_keys_must_be_str_and_are_never_stringified(key: Any) -> None:
    with new_gate(Recorder()) as gate:
        msg = malformed(lambda: gate.evaluate("free", {"ok": {key: 1}}))
        assert msg.startswith('arguments["ok"] has a key of type ') and type(key).__name__ in msg, msg
        assert "str" in msg


def test_str_keys_that_collide_are_refused_not_last_one_wins() -> None:
    class Sneaky(str):
        """A str whose hash differs from the plain str's, so a dict can hold both."""

        def __hash__(self) -> int:
            return 1

        def __eq__(self, other: object) -> bool:
            return other is self

    args = {"path": "/tmp/x", Sneaky("path"): "/etc/passwd"}
    assert len(args) == 2
    with new_gate(Recorder()) as gate:
        msg = malformed(lambda: gate.evaluate("free", args))
        assert 'duplicate key "path"' in msg and msg.startswith("arguments "), msg


def test_lone_surrogates_are_refused() -> None:
    with new_gate(Recorder()) as gate:
        assert "arguments[0] is a str" in malformed(lambda: gate.evaluate("free", ["\ud800"]))
        assert "arguments has a key" in malformed(lambda: gate.evaluate("free", {"\udfff": 1}))
    assert malformed(lambda: signoff.parse_event('"\ud800"')).startswith("event is not valid Unicode")


def test_what_json_has_is_accepted_exactly(run: Any) -> None:
    class Tag(str):
        pass

    class Level(enum.IntEnum):
        HIGH = 3

    class Ratio(float):
        pass

    shared = [1, 2]
    value = {
        "s": Tag("t"), "i": -(2**63), "u": 2**64 - 1, "f": 1.5, "neg0": -0.0, "t": True, "n": None,
        "tuple": (1, "a", (False,)), "ordered": collections.OrderedDict(b=1, a=2),
        "default": collections.defaultdict(list, x=[1]), "enum": Level.HIGH, "ratio": Ratio(0.25),
        "shared": [shared, shared], "big": 1e308, "tiny": 5e-324, "unicode": "\u202e\U0001f600",
    }
    expected = {
        "s": "t", "i": -(2**63), "u": 2**64 - 1, "f": 1.5, "neg0": -0.0, "t": True, "n": None,
        "tuple": [1, "a", [False]], "ordered": {"b": 1, "a": 2}, "default": {"x": [1]}, "enum": 3,
        "ratio": 0.25, "shared": [[1, 2], [1, 2]], "big": 1e308, "tiny": 5e-324, "unicode": "\u202e\U0001f600",
    }

    def exact(v: Any) -> None:
        assert v == expected
        assert type(v["t"]) is bool and type(v["enum"]) is int
        assert type(v["i"]) is int and type(v["u"]) is int
        assert math.copysign(1, v["neg0"]) == -1

    async def body() -> None:
        with new_gate(Recorder()) as gate:
            d = await gate.confirm("free", value, metadata=value)
            assert d.approved
            exact(d.arguments)
            # A request's arguments as an approver reads them (kept as JSON text by the core).
            seen: List[Any] = []
            gate.on_request(lambda r: (seen.append(r.arguments), r.approve()))
            d = await gate.confirm("gated", value)
            assert d.approved and len(seen) == 1
            exact(seen[0])
            exact(d.arguments)

    run(body())


# ---- nesting: the exact boundary ------------------------------------------------------------


def levels(n: int) -> Dict[str, Any]:
    """A dict nesting `n` levels of objects and arrays (the dict itself is level 1)."""
    inner: Any = []
    for _ in range(n - 2):
        inner = [inner]
    return {"a": inner} if n > 1 else {}


def test_levels_helper() -> None:
    assert levels(1) == {} and levels(2) == {"a": []} and levels(3) == {"a": [[]]}


def test_nesting_boundary_is_exact(run: Any) -> None:
    rec = Recorder()

    async def body() -> None:
        with new_gate(rec) as gate:
            # 64 levels: accepted everywhere arguments go, and kept exactly.
            ok = levels(MAX)
            assert gate.evaluate("free", ok)["required"] is False
            d = await gate.confirm("free", ok, metadata=ok)
            assert d.approved and d.arguments == ok
            # 65: refused with the core's message, the same in every language.
            deep = levels(MAX + 1)
            too_deep = f"arguments: {TOO_DEEP} (or contain a cycle)"
            assert malformed(lambda: gate.evaluate("free", deep)) == too_deep
            assert await malformed_async(lambda: gate.execute("free", deep)) == too_deep
            assert TOO_DEEP in await malformed_async(lambda: gate.confirm("free", {}, metadata=deep))
            assert rec.calls == []
            # Edits: 64 accepted, 65 refused (and the request stays pending).
            task, req = await pending(gate)
            assert malformed(lambda: gate.approve(req, arguments=deep)) == too_deep
            assert gate.pending_count == 1
            assert gate.approve(req, arguments=ok) == "approved"
            result = await task
            assert result.status == "executed" and rec.calls == [ok]
            # A bare list counts its own level too.
            bare: Any = []
            for _ in range(MAX - 1):
                bare = [bare]
            d = await gate.confirm("free", {}, metadata=bare)
            assert d.approved
            msg = await malformed_async(lambda: gate.confirm("free", {}, metadata=[bare]))
            assert msg == f"metadata: {TOO_DEEP} (or contain a cycle)"

    run(body())


def test_json_text_nesting_and_speed() -> None:
    with signoff.Gate() as gate:
        spec = '{"name": "x", "parameters": {"type": "object", "properties": %s}}'
        t0 = time.perf_counter()
        msg = malformed(lambda: gate.register_spec(spec % ('{"a":' * 1_000_000 + "{}" + "}" * 1_000_000)))
        assert TEXT_TOO_DEEP in msg and time.perf_counter() - t0 < 5
        t0 = time.perf_counter()
        deep: Any = []
        for _ in range(1_000_000):
            deep = [deep]
        assert TOO_DEEP in malformed(lambda: gate.evaluate("x", deep))
        assert time.perf_counter() - t0 < 5
        # A tool definition is a document: like a response, it may nest one level more than a
        # value (65 levels in all), given as text or as a dict.
        gate.register_spec(spec % ('{"a":' * 62 + "{}" + "}" * 62))
        assert TEXT_TOO_DEEP in malformed(lambda: gate.register_spec(spec % ('{"a":' * 63 + "{}" + "}" * 63)))
        as_dict = json.loads(spec % ('{"a":' * 62 + "{}" + "}" * 62))
        gate.register_spec(as_dict)
        as_dict["parameters"]["properties"] = {"b": as_dict["parameters"]["properties"]}
        assert TOO_DEEP in malformed(lambda: gate.register_spec(as_dict))


# ---- strict JSON text: duplicate keys -------------------------------------------------------


def test_duplicate_key_response_is_refused_and_the_request_stays_pending(run: Any) -> None:
    rec = Recorder()

    async def body() -> None:
        with new_gate(rec) as gate:
            task, req = await pending(gate)
            text = '{"id": "%s", "decision": "deny", "decision": "approve"}' % req.id
            for answer in (gate.respond_json, gate._native.respond, lambda t: gate._native.respond(t.encode())):
                msg = malformed(lambda: answer(text))
                assert 'duplicate key "decision"' in msg, msg
            nested = '{"id": "%s", "decision": "approve", "arguments": {"path": "/a", "path": "/etc"}}' % req.id
            assert 'duplicate key "path"' in malformed(lambda: gate.respond_json(nested))
            assert gate.pending_count == 1 and not task.done() and rec.calls == []
            assert gate.deny(req, "no") == "denied"
            result = await task
            assert result.status == "denied" and rec.calls == []

    run(body())


def test_duplicate_keys_in_other_json_text_are_refused() -> None:
    with pytest.raises(signoff.MalformedError, match='duplicate key "name"'):
        signoff.normalize_tool_spec('{"name": "a", "name": "b"}')
    with pytest.raises(signoff.MalformedError, match='duplicate key "type"'):
        signoff.parse_event('{"type": "confirmation-timeout", "type": "confirmation-request"}')
    with pytest.raises(signoff.MalformedError, match="duplicate key"):
        signoff.Decision.from_json(b'{"outcome": "denied", "outcome": "approved"}')
