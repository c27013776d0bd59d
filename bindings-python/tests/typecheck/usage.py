"""Type-checked with `mypy --strict` in test.sh (and run, as a smoke test): the public API as an
application uses it, with the types editors and mypy see."""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List, Optional

from typing_extensions import assert_type

import signoff
from signoff import (
    ConfirmationRequest,
    Decision,
    EventStream,
    Gate,
    HandlerRegistration,
    Lagged,
    PendingRequest,
    ToolCall,
    ToolResult,
)


async def approver(request: PendingRequest) -> None:
    assert_type(request.tool, str)
    assert_type(request.arguments, Any)
    assert_type(request.deadline_ms, int)
    if request.tool == "delete_file":
        assert_type(request.approve(scope="session"), signoff.Outcome)
    else:
        request.deny("no")


async def main() -> None:
    gate = Gate(default_timeout=5, keywords=["delete"], audit_path=None)
    gate.register("delete_file", parameters={"type": "object"}, editable=True,
                  rules=[signoff.path_outside("/path", ["/tmp"])], executor=lambda args: {"ok": True})

    @gate.tool(approval="not_required")
    async def lookup(key: str) -> str:
        return key

    reg = gate.on_request(approver)
    assert_type(reg, HandlerRegistration)
    d = await gate.confirm("delete_file", {"path": "/etc/x"}, session_id="s")
    assert_type(d, Decision)
    outcome: str = d.outcome
    args: Optional[Any] = d.arguments
    r = await gate.execute(ToolCall("lookup", {"key": "k"}, call_id="c1"))
    assert_type(r, ToolResult)
    msg: Dict[str, Any] = r.to_openai()
    batch = await gate.execute_batch([ToolCall("lookup", {"key": "a"}), {"tool": "lookup", "arguments": {"key": "b"}}])
    assert_type(batch, List[ToolResult])
    stream = gate.events()
    assert_type(stream, EventStream)
    stream.close()
    waiting = asyncio.ensure_future(gate.confirm("delete_file", {"path": "/etc/y"}))
    async for item in gate.events():
        if isinstance(item, Lagged):
            pending: List[ConfirmationRequest] = item.pending
        elif isinstance(item, ConfirmationRequest):
            text: str = item.display_arguments
        break
    assert (await waiting).outcome in ("approved", "denied")
    event = signoff.parse_event(d.to_json()) if False else None
    try:
        gate.respond("00000000-0000-4000-8000-000000000000", "approve")
    except signoff.UnknownRequestError as e:
        kind: str = e.kind
        assert kind == "unknown_request"
    except signoff.SignoffError:
        raise
    reg.stop()
    gate.close()
    print("usage ok", outcome, args, msg["role"], len(batch), event)


if __name__ == "__main__":
    asyncio.run(main())
