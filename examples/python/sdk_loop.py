#!/usr/bin/env python3
"""The tool loop you write with the OpenAI or the Anthropic SDK, with signoff between the model
and the tools.

The same task runs twice, once per message format, against a scripted model: no network, no SDK,
no API key. The model's responses are plain dicts shaped like the APIs' JSON (with the real SDKs,
``response.model_dump(exclude_none=True)`` gives such a dict, and the loops stay the same).

- OpenAI Chat Completions: the assistant message has ``tool_calls``, and their ``arguments`` are
  JSON *text*. Each result goes back as its own ``{"role": "tool", "tool_call_id", "content"}``
  message, in the order of the calls.
- Anthropic Messages: the assistant's ``content`` has ``tool_use`` blocks, and their ``input`` is an
  object. All the results go back in one user message of ``tool_result`` blocks, with ``is_error``.

In its first turn the model asks for three calls: it reads a file (not gated, so it runs at
once), deletes a file (gated, so the approver is asked) and makes a mistake that must not get
through. For OpenAI the mistake is arguments that are not JSON; for Anthropic it is arguments that
do not match the schema. The model then reacts to what it reads back. If it may go on, it fixes
its mistake. If the user declined, it stops.

    python examples/python/sdk_loop.py                   # the approver approves (the default)
    python examples/python/sdk_loop.py --auto deny       # the approver denies every gated call
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any, Awaitable, Callable, Dict, List, Optional, Tuple, Union

import signoff

TASK = "Delete /tmp/old.log and /tmp/cache.bin, and tell me what /tmp/notes.txt says."
NOTES = "Standup moved to 10:00."
MAX_TURNS = 8
Message = Dict[str, Any]


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def say(who: str, text: str) -> None:
    print(f"{who:<11} {text}")


# ---- the tools: an in-memory file system -------------------------------------------------------

PATH_ONLY = {
    "type": "object",
    "properties": {"path": {"type": "string"}},
    "required": ["path"],
    "additionalProperties": False,
}


def register_tools(gate: signoff.Gate, files: Dict[str, str]) -> None:
    def read_file(args: Dict[str, Any]) -> str:
        if args["path"] not in files:
            raise FileNotFoundError(f"no such file: {args['path']}")
        return files[args["path"]]

    def delete_file(args: Dict[str, Any]) -> str:
        if files.pop(args["path"], None) is None:
            raise FileNotFoundError(f"no such file: {args['path']}")
        return f"deleted {args['path']}"

    # read_only: runs without asking. destructive (and "delete" in the name): gated.
    gate.register("read_file", description="Reads a text file", parameters=PATH_ONLY, read_only=True,
                  executor=read_file)
    gate.register("delete_file", description="Deletes a file permanently", parameters=PATH_ONLY,
                  destructive=True, executor=delete_file)


def auto_approver(answer: str) -> signoff.Handler:
    def approve_or_deny(req: signoff.PendingRequest) -> None:
        # Print before answering: once answered, the loop goes on and prints the results.
        done = "approved" if answer == "approve" else "denied"
        say("approver", f"{req.tool} {compact(req.arguments)} -> {done} (--auto {answer})")
        if answer == "approve":
            req.approve(responder="auto")
        else:
            req.deny("--auto deny: no files are deleted today", responder="auto")

    return approve_or_deny


# ---- OpenAI Chat Completions -------------------------------------------------------------------


def strict_json(text: str) -> Any:
    """``json.loads`` under signoff's JSON rules: a repeated key, NaN or Infinity is an error (not
    "the last one wins", not a float that the gate would refuse for the whole batch)."""

    def no_repeats(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise ValueError(f"repeated key {key!r}")
            out[key] = value
        return out

    def no_constants(name: str) -> Any:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, object_pairs_hook=no_repeats, parse_constant=no_constants)


def from_openai(tool_call: Message, session_id: str) -> Union[signoff.ToolCall, signoff.ToolResult]:
    """A call for the gate or, when the arguments are not JSON, the refusal to send back instead.
    Nobody can review arguments that do not parse, so such a call never reaches an approver."""
    name = tool_call["function"]["name"]
    try:
        strict_json(tool_call["function"]["arguments"] or "{}")
    except ValueError as e:
        problem = f"its arguments are not valid JSON ({e})"
        return signoff.ToolResult.from_json({
            "call_id": tool_call["id"], "tool": name, "status": "rejected", "error": problem,
            "error_kind": "malformed",
            "content": f"The call to `{name}` was refused and did not run: {problem}. "
                       "Send it again with the arguments as one JSON object.",
        })
    return signoff.ToolCall.from_openai(tool_call, session_id=session_id)


def tool_call(call_id: str, name: str, arguments: str) -> Message:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def completion(content: Optional[str], tool_calls: Optional[List[Message]] = None) -> Message:
    message: Message = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-scripted", "object": "chat.completion", "model": "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else "stop"}],
    }


class ScriptedOpenAI:
    """Answers like ``client.chat.completions.create``. It reads only the tool messages it is sent,
    as a model would."""

    def __init__(self) -> None:
        self.turn = 0

    def create(self, *, model: str, messages: List[Message], tools: List[Message]) -> Message:
        self.turn += 1
        said = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
        if self.turn == 1:
            return completion(None, [
                tool_call("call_01", "read_file", '{"path": "/tmp/notes.txt"}'),
                tool_call("call_02", "delete_file", '{"path": "/tmp/old.log"}'),
                tool_call("call_03", "delete_file", '{"path": "/tmp/cache.bin"'),  # cut short: not JSON
            ])
        if self.turn == 2:
            if "Do not retry" in said["call_02"]:
                return completion("You declined deleting /tmp/old.log, so I did not retry it and left "
                                  f"/tmp/cache.bin alone too. /tmp/notes.txt says: {said['call_01']}")
            return completion(None, [tool_call("call_04", "delete_file", '{"path": "/tmp/cache.bin"}')])
        if "Do not retry" in said["call_04"]:
            return completion(f"Deleted /tmp/old.log; you declined /tmp/cache.bin. /tmp/notes.txt says: {said['call_01']}")
        return completion("Deleted /tmp/old.log and /tmp/cache.bin (my first call for it had broken "
                          f"arguments, so I sent it again). /tmp/notes.txt says: {said['call_01']}")


async def openai_loop(gate: signoff.Gate) -> List[signoff.ToolResult]:
    client = ScriptedOpenAI()
    tools = [{"type": "function", "function": {"name": t["name"], "description": t["description"],
                                               "parameters": t["parameters"]}} for t in gate.tools()]
    messages: List[Message] = [{"role": "user", "content": TASK}]
    say("user", compact(TASK))
    every: List[signoff.ToolResult] = []
    for _ in range(MAX_TURNS):
        response = client.create(model="scripted", messages=messages, tools=tools)
        message = response["choices"][0]["message"]
        messages.append(message)
        if not message.get("tool_calls"):
            say("assistant", compact(message["content"]))
            return every
        for i, tc in enumerate(message["tool_calls"]):
            say("assistant" if i == 0 else "", f"tool_call {tc['id']} {tc['function']['name']} {tc['function']['arguments']}")
        prepared = [from_openai(tc, session_id="openai-demo") for tc in message["tool_calls"]]
        # One batch, in order: the read runs at once, each gated call waits for its own answer.
        ran = iter(await gate.execute_batch([p for p in prepared if isinstance(p, signoff.ToolCall)]))
        results = [p if isinstance(p, signoff.ToolResult) else next(ran) for p in prepared]
        for r in results:
            messages.append(r.to_openai())  # {"role": "tool", "tool_call_id", "content"}
            say("tool", compact(messages[-1]))
        every.extend(results)
    raise RuntimeError("the model did not finish")


# ---- Anthropic Messages ------------------------------------------------------------------------


def tool_use(block_id: str, name: str, arguments: Message) -> Message:
    return {"type": "tool_use", "id": block_id, "name": name, "input": arguments}


def message(content: List[Message]) -> Message:
    stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
    return {"id": "msg_scripted", "type": "message", "role": "assistant", "model": "scripted",
            "content": content, "stop_reason": stop}


def text(s: str) -> Message:
    return {"type": "text", "text": s}


class ScriptedAnthropic:
    """Answers like ``client.messages.create``. It reads only the ``tool_result`` blocks it is sent."""

    def __init__(self) -> None:
        self.turn = 0

    def create(self, *, model: str, max_tokens: int, messages: List[Message], tools: List[Message]) -> Message:
        self.turn += 1
        got = {b["tool_use_id"]: b for m in messages if m["role"] == "user" and isinstance(m["content"], list)
               for b in m["content"] if b["type"] == "tool_result"}
        if self.turn == 1:
            return message([
                text("I'll read your notes and delete the two files."),
                tool_use("toolu_01", "read_file", {"path": "/tmp/notes.txt"}),
                tool_use("toolu_02", "delete_file", {"path": "/tmp/old.log"}),
                tool_use("toolu_03", "delete_file", {"file": "/tmp/cache.bin"}),  # wrong key: not the schema
            ])
        notes = got["toolu_01"]["content"]
        if self.turn == 2:
            if got["toolu_02"]["is_error"] and "Do not retry" in got["toolu_02"]["content"]:
                return message([text("You declined deleting /tmp/old.log, so I did not retry it and left "
                                     f"/tmp/cache.bin alone too. /tmp/notes.txt says: {notes}")])
            return message([text("My call for /tmp/cache.bin did not match the schema; fixing it."),
                            tool_use("toolu_04", "delete_file", {"path": "/tmp/cache.bin"})])
        if got["toolu_04"]["is_error"]:
            return message([text(f"Deleted /tmp/old.log, but not /tmp/cache.bin. /tmp/notes.txt says: {notes}")])
        return message([text("Deleted /tmp/old.log and /tmp/cache.bin (my first call for it did not match "
                             f"the schema, so I sent it again). /tmp/notes.txt says: {notes}")])


async def anthropic_loop(gate: signoff.Gate) -> List[signoff.ToolResult]:
    client = ScriptedAnthropic()
    tools = [{"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
             for t in gate.tools()]
    messages: List[Message] = [{"role": "user", "content": TASK}]
    say("user", compact(TASK))
    every: List[signoff.ToolResult] = []
    for _ in range(MAX_TURNS):
        response = client.create(model="scripted", max_tokens=1024, messages=messages, tools=tools)
        messages.append({"role": "assistant", "content": response["content"]})
        for i, block in enumerate(response["content"]):
            shown = compact(block["text"]) if block["type"] == "text" else \
                f"{block['id']} {block['name']} {compact(block['input'])}"
            say("assistant" if i == 0 else "", f"{block['type']} {shown}")
        if response["stop_reason"] != "tool_use":
            return every
        uses = [b for b in response["content"] if b["type"] == "tool_use"]
        results = await gate.execute_batch(
            [signoff.ToolCall.from_anthropic(b, session_id="anthropic-demo") for b in uses])
        # All the results in one user message; is_error is true when the tool did not run (or failed).
        messages.append({"role": "user", "content": [r.to_anthropic() for r in results]})
        for i, block in enumerate(messages[-1]["content"]):
            say("user" if i == 0 else "", compact(block))
        every.extend(results)
    raise RuntimeError("the model did not finish")


# ---- main --------------------------------------------------------------------------------------


Loop = Callable[[signoff.Gate], Awaitable[List[signoff.ToolResult]]]


async def run(title: str, auto: str, loop: Loop) -> Tuple[List[signoff.ToolResult], List[str]]:
    print(f"\n== {title} (--auto {auto}) ==")
    files = {"/tmp/notes.txt": NOTES, "/tmp/old.log": "old log lines", "/tmp/cache.bin": "cache"}
    async with signoff.Gate(default_timeout=30) as gate:
        register_tools(gate, files)
        gate.on_request(auto_approver(auto))
        results = await loop(gate)
    left = sorted(files)
    say("files left", ", ".join(left))
    return results, left


def statuses(results: List[signoff.ToolResult]) -> List[Tuple[Optional[str], str]]:
    return [(r.call_id, r.status) for r in results]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--auto", choices=["approve", "deny"], default="approve",
                    help="how the automatic approver answers every gated call (default: approve)")
    auto: str = ap.parse_args().auto

    openai, openai_left = asyncio.run(run("OpenAI Chat Completions", auto, openai_loop))
    anthropic, anthropic_left = asyncio.run(run("Anthropic Messages", auto, anthropic_loop))

    gated = "executed" if auto == "approve" else "denied"
    expected = [("01", "executed"), ("02", gated), ("03", "rejected")] + ([("04", "executed")] if auto == "approve" else [])
    kept = ["/tmp/notes.txt"] if auto == "approve" else ["/tmp/cache.bin", "/tmp/notes.txt", "/tmp/old.log"]
    ok = (statuses(openai) == [(f"call_{n}", s) for n, s in expected]
          and statuses(anthropic) == [(f"toolu_{n}", s) for n, s in expected]
          and openai[2].error_kind == "malformed" and anthropic[2].error_kind == "invalid_arguments"
          and openai_left == kept and anthropic_left == kept)
    deleted = 6 - len(openai_left) - len(anthropic_left)

    def listed(results: List[signoff.ToolResult]) -> str:
        return ", ".join(f"{r.call_id} {r.status}" for r in results)

    print(f"\nsummary: --auto {auto} | openai: {listed(openai)} | anthropic: {listed(anthropic)}"
          f" | files deleted: {deleted} | {'ok' if ok else 'UNEXPECTED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
