"""Type-checked with `mypy --strict` in test.sh (and run, as a smoke test): the public API as an
application uses it, with the types editors and mypy see."""

from __future__ import annotations

import asyncio
from datetime import timedelta
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
        call = signoff.current_call()
        assert_type(call, Optional[signoff.CallContext])
        if call is not None:
            assert_type(call.request_id, Optional[str])
            assert_type(call.gate_closed, bool)
        return key

    def audited(args: Any, call: signoff.CallContext) -> str:
        return f"{call.tool} {call.call_id} {call.session_id} {call.edited}"

    gate.register("audited", approval="not_required", executor=audited)

    reg = gate.on_request(approver)
    assert_type(reg, HandlerRegistration)
    d = await gate.confirm("delete_file", {"path": "/etc/x"}, session_id="s")
    assert_type(d, Decision)
    outcome: str = d.outcome
    args: Optional[Any] = d.arguments
    if d.cancel_reason == "approval-failed":  # a handler raised or gave no answer (strict_equality checks it)
        print("the approval step failed: see the audit log")
    r = await gate.execute(ToolCall("lookup", {"key": "k"}, call_id="c1"))
    assert_type(r, ToolResult)
    msg: Dict[str, Any] = r.to_openai()
    batch = await gate.execute_batch([ToolCall("lookup", {"key": "a"}), {"tool": "lookup", "arguments": {"key": "b"}}])
    assert_type(batch, List[ToolResult])
    stream = gate.events()
    assert_type(stream, EventStream)
    stream.close()
    with gate.events(observe=True) as log:  # an observer: sees everything, never an approver
        assert_type(log, EventStream)
    wanted: List[signoff.EventType] = ["confirmation-request", "confirmation-resolved"]
    with gate.events(types=wanted) as some:  # only those types (and lag markers)
        assert_type(some, EventStream)
    approvers: int = gate.approver_count
    options: signoff.GateOptions = {"bus_capacity": 64, "default_timeout": 5}
    Gate(**options).close()
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
    print("usage ok", outcome, args, msg["role"], len(batch), event, approvers)


def remote(workdir: str) -> None:
    keys = signoff.TokenKeys("k1", signoff.Secret.generate()).rotate("k2", signoff.Secret.generate())
    assert_type(keys.key_ids, List[str])
    approvers = signoff.Approvers().allow("delete_file", ["alice"]).check(lambda request, who: who != "bob")
    gate = Gate(store_path=f"{workdir}/db", token_keys=keys, token_ttl=60, approvers=approvers,
                deny_when_unobserved=False, audit_path=f"{workdir}/audit.jsonl", audit_rotate_bytes=1 << 20)
    recovery = gate.recover()
    assert_type(recovery, signoff.Recovery)
    restored: List[ConfirmationRequest] = recovery.restored
    interrupted: List[signoff.StoredRecord] = recovery.interrupted
    for item in recovery.not_restored:
        reason: str = item.reason
    record = gate.record("00000000-0000-4000-8000-000000000000")
    assert_type(record, Optional[signoff.StoredRecord])
    state: signoff.RecordState = record.state if record is not None else "pending"
    try:
        gate.respond_token("so1.k1.e30.AAAA", "approve", approver="alice", scope="once")
    except (signoff.BadSignatureError, signoff.UnknownKeyError, signoff.MalformedError) as e:
        assert e.kind in ("bad_signature", "unknown_key", "malformed")
    gate.close()
    gate.flush_audit()
    report = signoff.verify_audit_chain(f"{workdir}/audit.jsonl")
    assert_type(report, signoff.ChainReport)
    problem: Optional[signoff.ChainProblem] = report.problem
    anchored = signoff.verify_audit_chain(f"{workdir}/audit.jsonl", store_path=f"{workdir}/db")
    kind: signoff.ChainProblemKind = anchored.problem.kind if anchored.problem is not None else "truncated"
    assert anchored.intact, kind
    try:
        signoff.verify_audit_chain(f"{workdir}/missing.jsonl")
    except signoff.IoError as e:  # a SignoffError and an OSError
        errno: Optional[int] = e.errno
        io_kind: str = e.kind
        assert isinstance(e, OSError) and io_kind == "io", errno
    print("remote ok", len(restored), len(interrupted), state, report.intact, problem)


def approval_console() -> None:
    keys = signoff.TokenKeys("k1", signoff.Secret.generate())
    with signoff.Gate(token_keys=keys) as gate:
        with gate.serve_console(sign_in_ttl=timedelta(minutes=5), approver_keys={"alice": "a-long-enough-key"}) as c:
            assert_type(c, signoff.Console)
            url: str = c.url
            host, port = c.address
            link: str = c.sign_in_link("alice")
            assert link.startswith(url) and port > 0 and host == "127.0.0.1"
        closed: bool = c.closed
        assert closed
    print("console ok")


if __name__ == "__main__":
    asyncio.run(main())
    approval_console()
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        remote(d)
