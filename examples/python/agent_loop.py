#!/usr/bin/env python3
"""An OpenAI-style tool-calling loop with a person approving risky calls in the terminal.

The "model" is scripted (no network, no API key): it asks to read a file, delete two files and
send an email, reads the tool results it gets back, and finishes. Every tool call goes through a
signoff gate: `read_file` runs at once, `delete_file` and `send_email` wait for a person.

    python examples/python/agent_loop.py                  # answer in the terminal
    python examples/python/agent_loop.py --auto approve   # CI: approve everything
    python examples/python/agent_loop.py --auto deny      # CI: deny everything

Keys: a = approve, d = deny (asks for a reason), e = edit the arguments (JSON) and approve,
s = approve this tool for the rest of the session.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any, Dict, List, Optional

import signoff

SESSION = "demo-session"

# ---- the tools ---------------------------------------------------------------------------------

FILES: Dict[str, str] = {"/tmp/report.txt": "Q3 numbers: up 4%", "/tmp/old.log": "...", "/tmp/notes.txt": "todo"}
OUTBOX: List[Dict[str, str]] = []

TOOLS: List[Dict[str, Any]] = [
    {
        "name": "read_file",
        "description": "Reads a text file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        "read_only": True,
    },
    {
        "name": "delete_file",
        "description": "Deletes a file",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
            "additionalProperties": False,
        },
        "editable": True,
    },
    {
        "name": "send_email",
        "description": "Sends an email",
        "parameters": {
            "type": "object",
            "properties": {"to": {"type": "string"}, "subject": {"type": "string"}, "body": {"type": "string"}},
            "required": ["to", "subject", "body"],
        },
        "editable": True,
        "prompt_template": "Send an email on your behalf?",
    },
]


def read_file(args: Dict[str, Any]) -> str:
    return FILES.get(args["path"], "(no such file)")


async def delete_file(args: Dict[str, Any]) -> Dict[str, Any]:
    await asyncio.sleep(0)  # an async executor: runs on this event loop
    return {"deleted": FILES.pop(args["path"], None) is not None, "path": args["path"]}


def send_email(args: Dict[str, Any]) -> str:
    OUTBOX.append(dict(args))
    return f"sent to {args['to']}"


EXECUTORS = {"read_file": read_file, "delete_file": delete_file, "send_email": send_email}

# ---- a scripted stand-in for the model -------------------------------------------------------


def tool_call(call_id: str, name: str, arguments: Dict[str, Any]) -> Dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


class ScriptedModel:
    """Answers like a chat completions endpoint, from a script."""

    def __init__(self) -> None:
        self.turn = 0

    def complete(self, messages: List[Dict[str, Any]], tools: List[Dict[str, Any]]) -> Dict[str, Any]:
        self.turn += 1
        if self.turn == 1:
            return {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    tool_call("call_1", "read_file", {"path": "/tmp/report.txt"}),
                    tool_call("call_2", "delete_file", {"path": "/tmp/old.log"}),
                    tool_call("call_3", "delete_file", {"path": "/tmp/notes.txt"}),
                ],
            }
        if self.turn == 2:
            report = next(m["content"] for m in messages if m.get("tool_call_id") == "call_1")
            return {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    tool_call("call_4", "send_email",
                              {"to": "boss@example.com", "subject": "Report", "body": report}),
                ],
            }
        results = [m for m in messages if m["role"] == "tool"]
        lines = [f"- {m['tool_call_id']}: {m['content']}" for m in results]
        return {"role": "assistant", "content": "Done. What happened:\n" + "\n".join(lines)}


# ---- the person --------------------------------------------------------------------------------


def show(req: signoff.PendingRequest) -> None:
    left = max(0.0, req.deadline_ms / 1000 - time.time())
    print("\n" + "=" * 64)
    print(f"  {req.prompt}")
    print(f"  tool:        {req.tool}  (call {req.tool_call_id})")
    print(f"  description: {req.description}")
    print(f"  why asked:   {'; '.join(req.reasons)}")
    print("  arguments:")
    for line in req.display_arguments.splitlines():
        print(f"    {line}")
    print(f"  deadline:    {left:.0f} s left" + ("  (editable)" if req.editable else ""))


def terminal_approver(req: signoff.PendingRequest) -> None:
    """A sync handler: runs on its own thread, so it may block on input()."""
    show(req)
    while True:
        key = input("  [a]pprove  [d]eny  [e]dit  [s]ession > ").strip().lower()
        try:
            if key == "a":
                req.approve(responder="terminal")
            elif key == "s":
                req.approve(scope="session", responder="terminal")
            elif key == "d":
                req.deny(input("  reason (for the model): ").strip() or None, responder="terminal")
            elif key == "e":
                if not req.editable:
                    print("  this tool does not allow edits")
                    continue
                text = input("  new arguments (JSON): ")
                try:
                    edited = json.loads(text)
                except ValueError as e:
                    print(f"  not JSON: {e}")
                    continue
                req.approve(arguments=edited, responder="terminal")
            else:
                continue
            return
        except (signoff.InvalidArgumentsError, signoff.EditsNotAllowedError) as e:
            print(f"  refused: {e}")  # the request is still pending: try again
        except (signoff.ExpiredError, signoff.AlreadyResolvedError, signoff.ClosedError) as e:
            print(f"  too late: {e}")
            return


def auto_approver(answer: str) -> signoff.Handler:
    def approve_or_deny(req: signoff.PendingRequest) -> None:
        show(req)
        if answer == "approve":
            print("  -> approved (--auto approve)")
            req.approve(responder="auto")
        else:
            print("  -> denied (--auto deny)")
            req.deny("the automatic approver denies everything", responder="auto")

    return approve_or_deny


# ---- the loop ----------------------------------------------------------------------------------


async def agent(auto: Optional[str]) -> List[signoff.ToolResult]:
    async with signoff.Gate(default_timeout=120) as gate:
        for spec in TOOLS:
            gate.register_spec(spec, executor=EXECUTORS[spec["name"]])
        gate.on_request(auto_approver(auto) if auto else terminal_approver)

        model = ScriptedModel()
        tools = [{"type": "function", "function": {k: t[k] for k in ("name", "description", "parameters")}}
                 for t in gate.tools()]
        messages: List[Dict[str, Any]] = [{"role": "user", "content": "Tidy up /tmp and mail the report."}]
        every: List[signoff.ToolResult] = []
        while True:
            reply = model.complete(messages, tools)
            messages.append(reply)
            if not reply.get("tool_calls"):
                print("\nassistant:", reply["content"])
                return every
            calls = [signoff.ToolCall.from_openai(tc, session_id=SESSION) for tc in reply["tool_calls"]]
            results = await gate.execute_batch(calls)  # in order; each call runs at most once
            for r in results:
                print(f"\n[{r.call_id}] {r.tool}: {r.status}")
            messages.extend(r.to_openai() for r in results)
            every.extend(results)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--auto", choices=["approve", "deny"], help="answer every request automatically")
    a = ap.parse_args()
    if a.auto is None and not sys.stdin.isatty():
        print("stdin is not a terminal: pass --auto approve or --auto deny", file=sys.stderr)
        return 2
    results = asyncio.run(agent(a.auto))
    statuses = {r.call_id: r.status for r in results}
    if a.auto == "approve":
        ok = all(s == "executed" for s in statuses.values()) and "/tmp/old.log" not in FILES and len(OUTBOX) == 1
    elif a.auto == "deny":
        ok = (statuses == {"call_1": "executed", "call_2": "denied", "call_3": "denied", "call_4": "denied"}
              and len(FILES) == 3 and not OUTBOX)
    else:
        ok = True
    print("\nresult:", "ok" if ok else f"UNEXPECTED {statuses}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
