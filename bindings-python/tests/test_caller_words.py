"""What the gate says names Python's own API, and OpenAI tool calls in either API's shape (issue 42,
items 6 and 8)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

import signoff
from helpers import Recorder, gate_with_tools

RUST_ONLY = ("GateBuilder", "Gate::", "on_request_inline", "deny_when_unobserved(false)", "subscribe()")


def test_the_no_approver_warning_names_pythons_api(run: Any, capfd: Any) -> None:
    async def body() -> None:
        gate = gate_with_tools()
        d = await gate.confirm("delete_file", {"path": "/a"})
        assert (d.outcome, d.cancel_reason) == ("cancelled", "no-approver")
        gate.close()

    run(body())
    err = capfd.readouterr().err
    assert "no approver is attached" in err, err
    assert "`Gate(deny_when_unobserved=False)`" in err, err
    assert "`gate.on_request(handler)`" in err and "`gate.events()`" in err, err
    assert "`gate.serve_console()`" in err, err
    for rust in RUST_ONLY:
        assert rust not in err, (rust, err)


def test_recovery_and_token_errors_name_pythons_api() -> None:
    with signoff.Gate() as gate:
        gate.recover()
        with pytest.raises(signoff.ConfigError) as e:
            gate.recover()
        assert "`gate.recover()` runs once per gate" in str(e.value), str(e.value)
        with pytest.raises(signoff.ConfigError) as e:
            gate.issue_token(str(uuid.uuid4()), "alice")
        assert "this gate has no token keys (`Gate(token_keys=...)`)" in str(e.value), str(e.value)
        for text in (str(e.value),):
            for rust in RUST_ONLY:
                assert rust not in text, (rust, text)


@pytest.mark.parametrize(
    "options, suggestion",
    [
        ({"default_timout": 5}, "default_timeout"),
        ({"token_tll": 5}, "token_ttl"),
        ({"default_timeout_m": 5000}, "default_timeout_ms"),
        ({"bus_capcity": 8}, "bus_capacity"),
    ],
)
def test_a_misspelt_option_suggests_the_python_spelling(options: Any, suggestion: str) -> None:
    with pytest.raises(signoff.ConfigError) as e:
        signoff.Gate(**options)
    (key,) = options
    assert str(e.value) == f"configuration error: unknown gate option `{key}` (did you mean `{suggestion}`?)"


def test_an_unknown_option_lists_the_python_names() -> None:
    with pytest.raises(signoff.ConfigError) as e:
        signoff.Gate(colour="blue")
    text = str(e.value)
    assert text.startswith("configuration error: unknown gate option `colour`; the options are: "), text
    names = text.split("the options are: ")[1].split(", ")
    assert {"default_timeout", "token_ttl", "default_timeout_ms", "token_ttl_ms", "bus_capacity"} <= set(names), text


def test_option_errors_have_one_prefix() -> None:
    # The Python layer's own checks read as the core's do: the kind's prefix, the option in backticks.
    with pytest.raises(signoff.ConfigError) as e:
        signoff.Gate(default_timeout="soon")  # type: ignore[typeddict-item]
    assert str(e.value).startswith("configuration error: `default_timeout` must be a number of seconds"), str(e.value)
    with pytest.raises(signoff.ConfigError) as e:
        signoff.Gate(default_timeout=-1)
    assert str(e.value).startswith("configuration error: `default_timeout` must be a non-negative number"), str(e.value)
    with pytest.raises(signoff.MalformedError) as m:
        signoff.tool_spec("t", timeout="soon")  # type: ignore[arg-type]
    assert str(m.value).startswith("malformed payload: tool `t`: timeout must be a number of seconds"), str(m.value)
    with pytest.raises(signoff.MalformedError) as m:
        signoff.Gate().events(types="confirmation-request")  # type: ignore[arg-type]
    assert str(m.value).startswith("malformed payload: types must be a list"), str(m.value)
    with pytest.raises(signoff.InvalidToolError) as t:
        signoff.tool_spec("t", parameters="{}")  # type: ignore[arg-type]
    assert str(t.value).startswith("invalid tool definition `t`: parameters must be a JSON Schema"), str(t.value)


def test_from_openai_takes_chat_completions_and_responses_items(run: Any) -> None:
    chat = {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "/p"}'}}
    responses = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_2",
        "name": "read_file",
        "arguments": '{"path": "/q"}',
        "status": "completed",
    }
    assert signoff.ToolCall.from_openai(chat) == signoff.ToolCall("read_file", {"path": "/p"}, call_id="call_1")
    call = signoff.ToolCall.from_openai(responses, session_id="s1")
    assert call == signoff.ToolCall("read_file", {"path": "/q"}, session_id="s1", call_id="call_2")
    # Empty arguments are no arguments; text that is not strict JSON is kept for the gate to refuse.
    assert signoff.ToolCall.from_openai({**responses, "arguments": ""}).arguments == {}
    assert signoff.ToolCall.from_openai({**responses, "arguments": '{"a": 1, "a": 2}'}).arguments == '{"a": 1, "a": 2}'

    class Model:  # an SDK object (pydantic): `model_dump()`
        def model_dump(self) -> Any:
            return responses

    assert signoff.ToolCall.from_openai(Model()).call_id == "call_2"  # type: ignore[arg-type]

    async def body() -> None:
        recorder = Recorder("read it")
        gate = gate_with_tools(executor=recorder)
        r = await gate.execute(call)
        assert (r.status, recorder.calls) == ("executed", [{"path": "/q"}]), r.content
        assert r.to_openai_responses() == {"type": "function_call_output", "call_id": "call_2", "output": r.content}
        assert r.to_openai() == {"role": "tool", "tool_call_id": "call_2", "content": r.content}
        gate.close()

    run(body())


@pytest.mark.parametrize(
    "bad, problem",
    [
        ({"id": "c", "type": "function"}, "`function` is missing"),
        ({"id": "c", "function": "read_file"}, "`function` is str 'read_file'"),
        ({"id": "c", "function": {"arguments": "{}"}}, "`function.name` is missing"),
        ({"type": "function_call", "call_id": "c", "arguments": "{}"}, "`name` is missing"),
        ({"type": "function_call", "call_id": 7, "name": "f"}, "`call_id` is int 7"),
        (["read_file"], "got list"),
        (None, "got NoneType"),
    ],
)
def test_from_openai_names_what_is_missing(bad: Any, problem: str) -> None:
    with pytest.raises(signoff.MalformedError) as e:
        signoff.ToolCall.from_openai(bad)
    text = str(e.value)
    assert text.startswith("malformed payload: ToolCall.from_openai: expected a Chat Completions tool call"), text
    assert "Responses API item" in text and problem in text, text


def test_from_anthropic_names_what_is_missing() -> None:
    with pytest.raises(signoff.MalformedError, match="`name` is missing"):
        signoff.ToolCall.from_anthropic({"type": "tool_use", "id": "tu", "input": {}})
