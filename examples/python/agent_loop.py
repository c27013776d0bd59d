#!/usr/bin/env python3
"""An OpenAI-style tool-calling loop with a person approving risky calls in the terminal.

The "model" is scripted (no network, no API key): it asks to read a file, delete two files and
send an email, reads the tool results it gets back, and finishes. Every tool call goes through a
signoff gate: `read_file` runs at once, `delete_file` and `send_email` wait for a person.

    python examples/python/agent_loop.py                  # answer in the terminal
    python examples/python/agent_loop.py --timeout 10     # 10 s to answer each request
    python examples/python/agent_loop.py --auto approve   # CI: approve everything
    python examples/python/agent_loop.py --auto deny      # CI: deny everything

Keys: a = approve, d = deny (asks for a reason), e = edit the arguments (JSON) and approve,
s = approve this tool for the rest of the session.

The terminal approver follows the gate's event stream: one request is on screen at a time, the
others wait their turn. When the request on screen times out or is answered elsewhere it is
withdrawn at once and the next one is shown; an answer applies to the request on screen when it
was typed, never to one that has gone. When stdin closes, every waiting request is denied.
"""

from __future__ import annotations

import argparse
import asyncio
import codecs
import json
import math
import os
import sys
import threading
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Union

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


Shown = Union[signoff.PendingRequest, signoff.ConfirmationRequest]


def say(text: str = "", end: str = "\n") -> None:
    print(text, end=end, flush=True)


def seconds_left(req: Shown) -> int:
    """Whole seconds until the request's deadline (``deadline_ms``, epoch ms), never negative."""
    return max(0, math.ceil((req.deadline_ms - time.time() * 1000) / 1000))


def label(req: Shown) -> str:
    return f"{req.tool} (call {req.tool_call_id})"


def show(req: Shown, waiting: int = 0) -> None:
    say("\n" + "=" * 64)
    say(f"  {req.prompt}")
    say(f"  tool:        {req.tool}  (call {req.tool_call_id})")
    say(f"  description: {req.description}")
    say(f"  why asked:   {'; '.join(req.reasons)}")
    say("  arguments:")
    for line in req.display_arguments.splitlines():
        say(f"    {line}")
    deadline = time.strftime("%H:%M:%S", time.localtime(req.deadline_ms / 1000))
    say(f"  deadline:    {deadline} ({seconds_left(req)} s left)" + ("  (editable)" if req.editable else ""))
    if waiting:
        say(f"  ({waiting} more request{'s' if waiting > 1 else ''} waiting)")


class Line(NamedTuple):
    """A line typed on stdin (``text is None``: stdin closed) and when it was read."""

    text: Optional[str]
    at: float  # time.monotonic()


#: What the approver handles, in order: typed lines, the gate's events, a failure of the event stream.
Item = Union[Line, signoff.StreamItem, Exception]


def read_stdin(loop: asyncio.AbstractEventLoop, inbox: asyncio.Queue[Item]) -> None:
    """On its own thread: hands every line to the event loop as soon as it is typed, whatever
    is on screen. Reads the file descriptor, not ``sys.stdin``, so a read still blocked when the
    example ends holds no lock the interpreter needs to exit."""

    def post(line: Line) -> bool:
        try:
            loop.call_soon_threadsafe(inbox.put_nowait, line)
            return True
        except RuntimeError:  # the loop is closed: the example is ending
            return False

    decoder = codecs.getincrementaldecoder(sys.stdin.encoding or "utf-8")(errors="replace")
    fd = sys.stdin.fileno()
    pending = ""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # e.g. EIO: the terminal went away
            chunk = b""
        pending += decoder.decode(chunk, final=not chunk)
        *lines, pending = pending.split("\n")
        for text in lines:
            if not post(Line(text.rstrip("\r"), time.monotonic())):
                return
        if not chunk:
            if pending:
                post(Line(pending, time.monotonic()))
            post(Line(None, time.monotonic()))
            return


EXPIRED = "expired: nobody answered in time; the tool did not run"


class TerminalApprover:
    """Shows one request at a time from the gate's event stream and answers it from the lines
    typed on stdin. Runs as a task on the agent's event loop, so it never blocks: a request that
    times out or is answered elsewhere is withdrawn as soon as the gate says so."""

    RESPONDER = "terminal"

    def __init__(self, gate: signoff.Gate) -> None:
        self.gate = gate
        self.waiting: Dict[str, signoff.ConfirmationRequest] = {}  # arrival order
        self.current: Optional[signoff.ConfirmationRequest] = None
        self.shown_at = 0.0  # time.monotonic() when `current` was shown
        self.expiry: Optional[asyncio.TimerHandle] = None  # fires at `current`'s deadline
        self.step = "key"  # what the next line answers: "key", "reason" or "edit"
        self.stdin_closed = False

    async def run(self, events: signoff.EventStream) -> None:
        """Handles the gate's events and the typed lines, one at a time, in the order they came."""
        inbox: asyncio.Queue[Item] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        threading.Thread(target=read_stdin, args=(loop, inbox), name="stdin", daemon=True).start()

        async def pump() -> None:
            try:
                async for item in events:
                    inbox.put_nowait(item)
            except Exception as e:  # raised by run() below
                inbox.put_nowait(e)

        pumping = asyncio.ensure_future(pump())
        try:
            while True:
                item = await inbox.get()
                if isinstance(item, Exception):
                    raise item
                if isinstance(item, Line):
                    self.on_line(item)
                else:
                    self.on_event(item)
        finally:
            pumping.cancel()
            events.close()  # unsubscribed: if this fails, later requests are cancelled, never run

    # ---- what the gate says ----------------------------------------------------------------

    def on_event(self, event: signoff.StreamItem) -> None:
        if isinstance(event, signoff.ConfirmationRequest):
            if self.stdin_closed:
                self.deny_unanswerable(event)
                return
            self.waiting[event.id] = event
            if self.current is None:
                self.show_next()
        elif isinstance(event, signoff.ConfirmationTimeout):
            self.ended(event.request_id, EXPIRED)
        elif isinstance(event, signoff.ConfirmationResolved):
            self.ended(event.request_id, self.why_ended(event))
        elif isinstance(event, signoff.Lagged):  # events were missed: start again from what is pending
            live = {r.id: r for r in self.gate.iter_pending()}
            for rid in [*self.waiting, *([self.current.id] if self.current else [])]:
                if rid not in live:
                    self.ended(rid, "ended while this terminal was not keeping up")
            for rid, req in live.items():
                if rid not in self.waiting and (self.current is None or self.current.id != rid):
                    self.on_event(req)
        # a ConfirmationResponse is followed by its ConfirmationResolved

    @staticmethod
    def why_ended(event: signoff.ConfirmationResolved) -> str:
        who = f" by {event.responder}" if event.responder else ""
        if event.outcome == "timed-out":
            return EXPIRED
        if event.outcome == "approved":
            return f"answered elsewhere: approved{who}"
        if event.outcome == "denied":
            return f"answered elsewhere: denied{who}; the tool did not run"
        return f"cancelled ({event.cancel_reason}); the tool did not run"

    def ended(self, request_id: str, why: str) -> None:
        """The request is no longer pending: withdraw it if it is on screen, else drop it."""
        if self.current is not None and self.current.id == request_id:
            say(f"\n  {why}")
            self.take_down()
            self.show_next()
        elif request_id in self.waiting:
            req = self.waiting.pop(request_id)
            say(f"\n  {label(req)}, which was waiting its turn: {why}")
            self.prompt()

    def show_next(self) -> None:
        while self.waiting:
            rid = next(iter(self.waiting))
            req = self.waiting.pop(rid)
            if seconds_left(req) == 0 or self.gate.pending_request(rid) is None:
                say(f"\n  {label(req)} ended before it could be shown"
                    + ("; nobody answered in time" if seconds_left(req) == 0 else "") + "; the tool did not run")
                continue
            self.current, self.step = req, "key"
            show(req, len(self.waiting))
            self.shown_at = time.monotonic()
            # Withdraw it at its deadline, even before the gate's timeout event arrives.
            self.expiry = asyncio.get_running_loop().call_later(
                max(0.0, req.deadline_ms / 1000 - time.time()), self.ended, rid, EXPIRED)
            self.prompt()
            return

    def take_down(self) -> None:
        """Nothing on screen any more (the caller shows the next request)."""
        self.current = None
        if self.expiry is not None:
            self.expiry.cancel()
            self.expiry = None

    def prompt(self) -> None:
        if self.current is None:
            return
        if self.step == "reason":
            say("  reason (for the model): ", end="")
        elif self.step == "edit":
            say("  new arguments (JSON): ", end="")
        else:
            say(f"  [a]pprove  [d]eny  [e]dit  [s]ession  (answer within {seconds_left(self.current)} s) > ", end="")

    # ---- what the person types -------------------------------------------------------------

    def on_line(self, line: Line) -> None:
        if line.text is None:
            self.on_stdin_closed()
            return
        req = self.current
        if req is None:
            if line.text.strip():
                say(f"  (no request on screen: ignored {line.text.strip()!r})")
            return
        if line.at < self.shown_at:  # typed for a request that has gone
            if line.text.strip():
                say(f"\n  (ignored {line.text.strip()!r}: typed before this request was shown)")
                self.prompt()
            return
        text = line.text.strip()
        if self.step == "reason":
            self.answer(lambda: self.gate.deny(req, text or None, responder=self.RESPONDER), "denied")
        elif self.step == "edit":
            self.step = "key"
            try:
                edited = json.loads(text)
            except ValueError as e:
                say(f"  not JSON: {e}")
                self.prompt()
                return
            self.answer(lambda: self.gate.approve(req, arguments=edited, responder=self.RESPONDER),
                        "approved with your arguments")
        elif text.lower() == "a":
            self.answer(lambda: self.gate.approve(req, responder=self.RESPONDER), "approved")
        elif text.lower() == "s":
            self.answer(lambda: self.gate.approve(req, scope="session", responder=self.RESPONDER),
                        f"approved; {req.tool} needs no approval for the rest of this session")
        elif text.lower() == "d":
            self.step = "reason"
            self.prompt()
        elif text.lower() == "e":
            if not req.editable:
                say("  this tool does not allow edits")
            else:
                self.step = "edit"
            self.prompt()
        else:
            self.prompt()

    def answer(self, respond: Callable[[], object], done: str) -> None:
        try:
            respond()
        except (signoff.InvalidArgumentsError, signoff.EditsNotAllowedError, signoff.MalformedError) as e:
            say(f"  refused: {e}")  # the request is still pending: try again
            self.step = "key"
            self.prompt()
            return
        except (signoff.ExpiredError, signoff.AlreadyResolvedError, signoff.UnknownRequestError,
                signoff.ClosedError) as e:
            say(f"  too late: {e}")
        else:
            say(f"  -> {done}")
        self.take_down()
        self.show_next()

    def on_stdin_closed(self) -> None:
        """Nobody can answer any more: deny what is waiting, and everything that comes later."""
        self.stdin_closed = True
        say("\n  stdin closed: denying every waiting request (fail safe)")
        reqs = ([self.current] if self.current is not None else []) + list(self.waiting.values())
        self.take_down()
        self.waiting.clear()
        for req in reqs:
            self.deny_unanswerable(req)

    def deny_unanswerable(self, req: signoff.ConfirmationRequest) -> None:
        try:
            self.gate.deny(req, "nobody is at the terminal to answer (stdin closed)", responder=self.RESPONDER)
            say(f"  -> denied {label(req)}: stdin is closed")
        except signoff.SignoffError:
            pass  # it had already ended: it did not run either


def auto_approver(answer: str) -> signoff.Handler:
    def approve_or_deny(req: signoff.PendingRequest) -> None:
        show(req)
        if answer == "approve":
            say("  -> approved (--auto approve)")
            req.approve(responder="auto")
        else:
            say("  -> denied (--auto deny)")
            req.deny("the automatic approver denies everything", responder="auto")

    return approve_or_deny


# ---- the loop ----------------------------------------------------------------------------------


async def agent(auto: Optional[str], timeout: float) -> List[signoff.ToolResult]:
    async with signoff.Gate(default_timeout=timeout) as gate:
        for spec in TOOLS:
            gate.register_spec(spec, executor=EXECUTORS[spec["name"]])
        approver: Optional[asyncio.Future[None]] = None
        if auto:
            gate.on_request(auto_approver(auto))
        else:  # subscribe now, before the first call, so that no request is missed
            approver = asyncio.ensure_future(TerminalApprover(gate).run(gate.events()))
        try:
            return await run_model(gate)
        finally:
            if approver is not None:  # stop it; if it had failed, raise its error
                approver.cancel()
                try:
                    await approver
                except asyncio.CancelledError:
                    pass


async def run_model(gate: signoff.Gate) -> List[signoff.ToolResult]:
    model = ScriptedModel()
    tools = [{"type": "function", "function": {k: t[k] for k in ("name", "description", "parameters")}}
             for t in gate.tools()]
    messages: List[Dict[str, Any]] = [{"role": "user", "content": "Tidy up /tmp and mail the report."}]
    every: List[signoff.ToolResult] = []
    while True:
        reply = model.complete(messages, tools)
        messages.append(reply)
        if not reply.get("tool_calls"):
            say("\nassistant: " + str(reply["content"]))
            return every
        calls = [signoff.ToolCall.from_openai(tc, session_id=SESSION) for tc in reply["tool_calls"]]
        results = await gate.execute_batch(calls)  # concurrently, results in order; each call runs at most once
        for r in results:
            say(f"\n[{r.call_id}] {r.tool}: {r.status}")
        messages.extend(r.to_openai() for r in results)
        every.extend(results)


def seconds(text: str) -> float:
    value = float(text)
    if not 0 < value <= 86400:
        raise argparse.ArgumentTypeError("between 0 and 86400 seconds")
    return value


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--auto", choices=["approve", "deny"], help="answer every request automatically")
    ap.add_argument("--timeout", type=seconds, default=120, metavar="SECONDS",
                    help="how long each request waits for an answer (default: 120)")
    a = ap.parse_args()
    if a.auto is None and not sys.stdin.isatty():
        print("stdin is not a terminal: pass --auto approve or --auto deny", file=sys.stderr)
        return 2
    results = asyncio.run(agent(a.auto, a.timeout))
    statuses = {r.call_id: r.status for r in results}
    if a.auto == "approve":
        ok = all(s == "executed" for s in statuses.values()) and "/tmp/old.log" not in FILES and len(OUTBOX) == 1
    elif a.auto == "deny":
        ok = (statuses == {"call_1": "executed", "call_2": "denied", "call_3": "denied", "call_4": "denied"}
              and len(FILES) == 3 and not OUTBOX)
    else:
        ok = True
    say("\nresult: " + ("ok" if ok else f"UNEXPECTED {statuses}"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
