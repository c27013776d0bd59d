"""The API surface: registration, decisions, responses, errors, events, results."""

from __future__ import annotations

import asyncio
import json
import typing
from typing import Any, List

import pytest

import signoff
from conftest import Collector, wait_until
from helpers import PATH_SCHEMA, Recorder, gate_with_tools, spec_by_name


def test_every_core_error_kind_has_its_class() -> None:
    assert len(signoff.ERROR_KINDS) == 21
    # The `ErrorKind` type names exactly the kinds the core has (the native list is generated).
    assert set(typing.get_args(signoff.ErrorKind)) == set(signoff.ERROR_KINDS)
    assert issubclass(signoff.IoError, OSError) and signoff.IoError.kind == "io"
    assert set(signoff.ERROR_CLASSES) == set(signoff.ERROR_KINDS)
    for kind in signoff.ERROR_KINDS:
        cls = signoff.error_class(kind)
        assert issubclass(cls, signoff.SignoffError)
        assert cls.kind == kind
        assert cls.__name__ == "".join(p.capitalize() for p in kind.split("_")) + "Error"
        assert getattr(signoff, cls.__name__) is cls
        assert cls.__module__ == "signoff"
    with pytest.raises(KeyError):
        signoff.error_class("nope")


def test_gate_options_name_every_option_the_core_reads() -> None:
    """`GateOptions` (the typed keyword arguments of `Gate`) and the `Gate` docstring list the
    core's options, and the ones given in seconds: an option the core adds fails here until it is
    typed and described."""
    core = set(signoff._native.gate_option_names())
    assert {"bus_capacity", "store_url", "audit_in_store", "token_ttl_ms"} <= core
    seconds = {"default_timeout", "token_ttl"}
    assert set(signoff.GateOptions.__annotations__) == core | seconds
    doc = signoff.Gate.__doc__ or ""
    for name in (core - {"default_timeout_ms", "token_ttl_ms"}) | seconds:
        assert f"        {name}: " in doc, f"the Gate docstring does not describe `{name}`"


def test_register_builds_the_core_tool_spec() -> None:
    gate = signoff.Gate()
    gate.register(
        "write_file",
        description="Writes",
        parameters=PATH_SCHEMA,
        approval="not_required",
        editable=True,
        prompt_template="Write {tool}?",
        rules=[signoff.path_outside("/path", ["/tmp"])],
        source=signoff.external("fs"),
        read_only=False,
        destructive=True,
        timeout=1.5,
    )
    spec = spec_by_name(gate)["write_file"]
    assert spec == {
        "name": "write_file",
        "description": "Writes",
        "parameters": PATH_SCHEMA,
        "approval": "not_required",
        "prompt_template": "Write {tool}?",
        "editable": True,
        "source": {"kind": "external", "server": "fs"},
        "read_only": False,
        "destructive": True,
        "timeout_ms": 1500,
        "rules": [{"kind": "path_outside", "pointer": "/path", "prefixes": ["/tmp"]}],
    }
    assert signoff.normalize_tool_spec({"name": "x"})["approval"] == "default"


def test_bad_tool_definitions_are_typed_errors() -> None:
    gate = signoff.Gate()
    with pytest.raises(signoff.MalformedError):
        gate.register_spec({"name": "x", "aproval": "required"})  # typo: refused, never ignored
    with pytest.raises(signoff.InvalidToolError) as e:
        gate.register("x", parameters={"type": 12})
    assert e.value.kind == "invalid_tool"
    with pytest.raises(signoff.InvalidToolError):
        gate.register("a\u202eb")
    with pytest.raises(signoff.InvalidToolError):
        gate.register("x", rules=[signoff.path_outside("path", ["/tmp"])])
    # A tool's timeout has the gate default's bounds, checked by the core: 1 ms to 30 days.
    for timeout in (0, 30 * 24 * 3600 + 1, 1e11):
        with pytest.raises(signoff.InvalidToolError, match="timeout_ms"):
            gate.register("slow", timeout=timeout)
    for bad in (-1, float("nan"), float("inf"), "5", True):  # no duration at all: malformed, as in Node
        with pytest.raises(signoff.MalformedError, match="timeout"):
            gate.register("slow", timeout=bad)  # type: ignore[arg-type]
    with pytest.raises(signoff.MalformedError):
        gate.register("x", approval="sometimes")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        gate.register("x", executor=42)  # type: ignore[arg-type]
    assert gate.tools() == []


def test_policy_through_evaluate() -> None:
    gate = signoff.Gate(keywords=["frobnicate"])
    gate.register("frobnicate_it")
    gate.register("delete_file")
    assert gate.evaluate("frobnicate_it")["required"] is True
    assert gate.evaluate("delete_file") == {"required": False, "forced_by_rule": False, "reasons": []}
    with pytest.raises(signoff.UnknownToolError):
        gate.evaluate("nope")
    default = signoff.Gate()
    default.register("delete_file")
    assert default.evaluate("delete_file")["required"] is True
    assert "delete" in signoff.default_keywords()


def test_confirm_approve_edit_and_session_grant(run: Any) -> None:
    async def body() -> None:
        gate = gate_with_tools()
        events = Collector(gate.events())
        task = asyncio.ensure_future(
            gate.confirm("delete_file", {"path": "/a"}, session_id="s1", call_id="c1", metadata={"turn": 1})
        )
        req = await events.wait_for(lambda e: e.type == "confirmation-request")
        assert isinstance(req, signoff.ConfirmationRequest)
        assert (req.tool, req.arguments, req.session_id, req.tool_call_id) == ("delete_file", {"path": "/a"}, "s1", "c1")
        assert req.metadata == {"turn": 1} and req.editable and req.description == "Deletes a file"
        assert req.display_arguments == '{\n  "path": "/a"\n}'
        assert req.arguments_digest.startswith("sha256:") and req.deadline_ms > req.created_at_ms
        assert gate.pending() == [req] and gate.pending_request(req.id) == req and gate.pending_count == 1
        # Edited, for the session.
        assert gate.approve(req, arguments={"path": "/b"}, scope="session", responder="alice") == "approved"
        d = await task
        assert d.approved and d.outcome == "approved" and d.edited and d.by == "person"
        assert d.arguments == {"path": "/b"} and d.scope == "session" and d.responder == "alice"
        assert d.request_id == req.id and d.reason is None and d.cancel_reason is None
        assert gate.grants("s1") == ["delete_file"]
        # The grant covers the next call in that session, not in another.
        d2 = await gate.confirm("delete_file", {"path": "/c"}, session_id="s1")
        assert d2.by == "session-grant" and d2.request_id is None
        other = asyncio.ensure_future(gate.confirm("delete_file", {"path": "/c"}, session_id="s2"))
        req2 = await events.wait_for(lambda e: e.type == "confirmation-request" and e.session_id == "s2")
        assert gate.deny(req2.id, "no") == "denied"
        d3 = await other
        assert (d3.outcome, d3.reason, d3.approved, d3.arguments) == ("denied", "no", False, None)
        assert gate.revoke_grant("s1", "delete_file") and gate.grants("s1") == []
        await events.close()
        gate.close()

    run(body())


def test_respond_by_id_dict_and_json_and_rejections(run: Any) -> None:
    async def body() -> None:
        gate = gate_with_tools()
        events = Collector(gate.events())
        task = asyncio.ensure_future(gate.confirm("delete_file", {"path": "/a"}))
        req = await events.wait_for(lambda e: e.type == "confirmation-request")
        with pytest.raises(TypeError):
            gate.respond(req.id)
        with pytest.raises(signoff.MismatchError) as e:
            gate.respond(req.id, "approve", tool="read_file")
        assert e.value.kind == "mismatch" and "tool" in str(e.value)
        with pytest.raises(signoff.UnknownRequestError):
            gate.respond("00000000-0000-4000-8000-000000000000", "approve")
        with pytest.raises(signoff.MalformedError):
            gate.respond(req.id, "deny", scope="session")
        with pytest.raises(signoff.MalformedError):
            gate.respond({"id": req.id, "decision": "approve", "extra": 1})
        with pytest.raises(signoff.UnknownRequestError, match="no such confirmation request"):
            gate.approve("not-a-uuid")  # names no request: not a malformed payload (issue 14)
        assert not task.done() and gate.pending_count == 1  # rejections leave it untouched
        text = json.dumps({"type": "confirmation-response", "id": req.id, "decision": "approve",
                           "arguments_digest": req.arguments_digest, "responder": "ui"})
        assert gate.respond_json(text) == "approved"
        with pytest.raises(signoff.AlreadyResolvedError):
            gate.respond_json(text)
        d = await task
        assert d.responder == "ui" and not d.edited
        resp = await events.wait_for(lambda e: e.type == "confirmation-response")
        assert isinstance(resp, signoff.ConfirmationResponse)
        assert (resp.decision, resp.responder, resp.scope, resp.request_id) == ("approve", "ui", "once", req.id)
        assert resp.at_ms is not None
        await events.close()
        gate.close()

    run(body())


def test_events_round_trip_from_a_live_gate(run: Any) -> None:
    async def body() -> List[Any]:
        gate = gate_with_tools(default_timeout=0.05)
        events = Collector(gate.events())
        d = await gate.confirm("delete_file", {"path": "/a"})
        assert d.outcome == "timed-out" and d.timeout_ms == 50 and not d.approved
        await events.wait_for(lambda e: e.type == "confirmation-resolved")
        await events.close()
        return events.items

    items = run(body())
    assert [i.type for i in items] == ["confirmation-request", "confirmation-timeout", "confirmation-resolved"]
    for item in items:
        assert signoff.parse_event(item.to_json()) == item
        assert type(item).from_json(item.to_dict()) == item
        assert json.loads(item.to_json(indent=2)) == item.to_dict()
    resolved = items[-1]
    assert isinstance(resolved, signoff.ConfirmationResolved)
    assert resolved.outcome == "timed-out" and resolved.cancel_reason is None
    with pytest.raises(signoff.MalformedError):
        signoff.parse_event({"type": "confirmation-nonsense"})


def test_execute_results_and_message_helpers(run: Any) -> None:
    rec = Recorder(result={"deleted": True})

    async def body() -> None:
        gate = gate_with_tools(rec)
        gate.register("no_exec", approval="not_required")
        gate.register("boom", approval="not_required", executor=lambda a: 1 / 0)
        gate.register("weird", approval="not_required", executor=lambda a: object())
        ok = await gate.execute("read_file", {"path": "/x"}, call_id="c1")
        assert (ok.status, ok.output, ok.content, ok.is_error, ok.ran) == ("executed", {"deleted": True},
                                                                            '{"deleted":true}', False, True)
        assert ok.decision is not None and ok.decision.by == "not-gated"
        assert ok.to_openai() == {"role": "tool", "tool_call_id": "c1", "content": '{"deleted":true}'}
        assert ok.to_anthropic() == {"type": "tool_result", "tool_use_id": "c1", "content": '{"deleted":true}',
                                     "is_error": False}
        assert signoff.ToolResult.from_json(ok.to_json()) == ok
        unknown = await gate.execute("nope", call_id="c2")
        assert (unknown.status, unknown.error_kind, unknown.ran) == ("rejected", "unknown_tool", False)
        assert "refused" in unknown.content and unknown.to_anthropic()["is_error"] is True
        bad = await gate.execute("read_file", {"path": 1})
        assert (bad.status, bad.error_kind) == ("rejected", "invalid_arguments")
        none = await gate.execute("no_exec")
        assert (none.status, none.error_kind) == ("rejected", "no_executor")
        failed = await gate.execute("boom")
        assert failed.status == "failed" and "ZeroDivisionError" in (failed.error or "") and failed.ran
        weird = await gate.execute("weird")
        assert weird.status == "failed" and "not JSON-compatible" in (weird.error or "")
        # Nobody listening: the gated call is cancelled and its tool does not run.
        gated = await gate.execute("delete_file", {"path": "/x"}, call_id="c3")
        assert (gated.status, gated.call_id, gated.ran) == ("cancelled", "c3", False)
        assert gated.decision is not None and gated.decision.cancel_reason == "no-approver"
        gate.close()

    run(body())
    assert rec.calls == [{"path": "/x"}]  # the cancelled call never ran


def test_tool_decorator_and_tool_call_parsing(run: Any) -> None:
    async def body() -> None:
        gate = signoff.Gate()

        @gate.tool(parameters=PATH_SCHEMA, approval="not_required")
        def read_file(path: str) -> str:
            """Reads a file."""
            return f"read {path}"

        @gate.tool("fetch", approval="not_required")
        async def fetch_url(url: str) -> str:
            await asyncio.sleep(0)
            return f"got {url}"

        assert read_file("/q") == "read /q"  # returned unchanged
        assert spec_by_name(gate)["read_file"]["description"] == "Reads a file."
        call = signoff.ToolCall.from_openai(
            {"id": "call_9", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "/p"}'}}
        )
        assert call == signoff.ToolCall("read_file", {"path": "/p"}, call_id="call_9")
        r = await gate.execute(call)
        assert (r.content, r.call_id) == ("read /p", "call_9")
        block = {"type": "tool_use", "id": "tu_1", "name": "fetch", "input": {"url": "u"}}
        r2 = await gate.execute(signoff.ToolCall.from_anthropic(block))
        assert (r2.content, r2.call_id) == ("got u", "tu_1")
        broken = signoff.ToolCall.from_openai({"id": "c", "function": {"name": "read_file", "arguments": "{oops"}})
        # Read as strictly as the core reads JSON: a repeated key or NaN is not taken apart here
        # (the gate refuses the raw text and tells the model), never "last one wins" or a crash.
        for text in ('{"path": "/a", "path": "/b"}', '{"path": NaN}'):
            assert signoff.ToolCall.from_openai({"id": "c", "function": {"name": "read_file", "arguments": text}}).arguments == text
        r3 = await gate.execute(broken)
        assert (r3.status, r3.error_kind) == ("rejected", "invalid_arguments")
        assert signoff.ToolCall.from_dict(call.to_dict()) == call
        gate.close()

    run(body())


def test_audit_trail_is_written(tmp_path: Any) -> None:
    path = tmp_path / "audit.jsonl"
    gate = gate_with_tools(audit_path=path)
    gate.on_request(lambda r: r.deny("audited"))
    d = gate.confirm_blocking("delete_file", {"path": "/a"})
    assert d.outcome == "denied" and d.reason == "audited"
    gate.flush_audit()
    kinds = [json.loads(line)["kind"] for line in path.read_text().splitlines()]
    assert kinds[:3] == ["request", "response", "outcome"]
    gate.close()


def test_gating_disabled_runs_everything() -> None:
    gate = gate_with_tools(dangerously_disable_gating=True)
    assert gate.gating_disabled
    d = gate.confirm_blocking("delete_file", {"path": "/a"})
    assert d.by == "gating-disabled"


def test_gate_properties_and_close() -> None:
    gate = signoff.Gate(default_timeout=2.5)
    assert gate.default_timeout.total_seconds() == 2.5 and not gate.closed
    assert gate.approver_count == 0
    stream = gate.events()
    assert gate.approver_count == 1
    stream.close()
    assert gate.approver_count == 0 and stream.closed
    with gate:
        pass
    assert gate.closed
    with pytest.raises(signoff.ClosedError):
        gate.respond("00000000-0000-4000-8000-000000000000", "approve")
    # Every error signoff raises is a SignoffError with its kind (issue 14 item 6).
    for bad in (-1, float("nan"), float("inf"), 1e300, "10"):
        with pytest.raises(signoff.ConfigError):
            signoff.Gate(default_timeout=bad)  # type: ignore[arg-type]


def test_gate_options_are_the_cores_and_errors_name_them() -> None:
    # Seconds (Pythonic) or the core's milliseconds; paths as os.PathLike; objects or their JSON.
    with signoff.Gate(default_timeout_ms=1500, token_keys=f"k1:{'A' * 43}=", token_ttl=2,
                      approvers={"*": ["alice"]}, forbid_self_approval=True) as gate:
        assert gate.default_timeout.total_seconds() == 1.5
    cases = [
        ({"bus_capacity": 10**9}, "`bus_capacity`"),
        ({"bus_capacity": float("nan")}, "bus_capacity is NaN"),
        ({"remember_resolved": float("inf")}, "remember_resolved is Infinity"),
        ({"bus_capacity": 2**70}, "bus_capacity is an int outside"),
        ({"bus_capacity": 1.5}, "`bus_capacity`"),
        ({"keywords": {"delete"}}, None),  # a set is an iterable: accepted
        ({"bus_capcity": 8}, "did you mean `bus_capacity`?"),
        ({"default_timeout": 0}, "given as `default_timeout`"),
        ({"default_timeout": 1, "default_timeout_ms": 1000}, "either `default_timeout` or `default_timeout_ms`"),
        ({"store_path": b"/tmp/x.db"}, "store_path is a bytes"),
    ]
    for options, message in cases:
        if message is None:
            signoff.Gate(**options).close()
            continue
        with pytest.raises(signoff.ConfigError) as e:
            signoff.Gate(**options)
        assert message in str(e.value) and e.value.kind == "config", (options, str(e.value))


def test_an_audit_log_that_cannot_be_opened_is_an_io_error(tmp_path: Any) -> None:
    with pytest.raises(signoff.IoError) as e:
        signoff.Gate(audit_path=tmp_path)  # a directory
    assert isinstance(e.value, OSError) and e.value.errno is not None and str(tmp_path) in str(e.value)


def test_an_observer_sees_everything_but_is_no_approver(run: Any) -> None:
    async def body() -> None:
        gate = gate_with_tools()
        watch = Collector(gate.events(observe=True))
        assert gate.approver_count == 0
        d = await gate.confirm("delete_file", {"path": "/a"})
        assert (d.outcome, d.cancel_reason) == ("cancelled", "no-approver")
        gate.on_request(lambda r: r.approve())
        assert gate.approver_count == 1 and (await gate.confirm("delete_file", {"path": "/b"})).approved
        gate.close()  # ends every stream, after what was published before
        await asyncio.wait_for(watch.task, 5)
        assert [e.type for e in watch.items] == ["confirmation-request", "confirmation-resolved"] + [
            "confirmation-request", "confirmation-response", "confirmation-resolved"]

    run(body())


def test_a_schema_given_as_text_is_an_invalid_tool_not_a_value_error() -> None:
    with signoff.Gate() as gate:
        # `True` / `False` are JSON Schemas (any value / none), as in every language.
        gate.register("anything", parameters=True, approval="not_required")
        gate.register("nothing", parameters=False, approval="not_required")
        assert gate.confirm_blocking("anything", {"x": 1}).approved
        with pytest.raises(signoff.InvalidArgumentsError):
            gate.confirm_blocking("nothing", {})
        with pytest.raises(signoff.InvalidToolError, match="parameters must be a JSON Schema given as a dict"):
            gate.register("t", parameters='{"type": "object"}')  # type: ignore[arg-type]
