"""Remote approval (signed tokens), approvers, the durable store across a real process boundary,
and the hash-chained audit log."""

from __future__ import annotations

import asyncio
import base64
import errno
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Coroutine, List, Tuple

import pytest

import signoff
from conftest import wait_until
from helpers import PATH_SCHEMA, Recorder, gate_with_tools, read_line, wait_for

SECRET_A = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
SECRET_B = "ISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0+P0A="

Run = Callable[[Coroutine[Any, Any, Any]], Any]


def keys(kid: str = "k1", secret: str = SECRET_A) -> signoff.TokenKeys:
    return signoff.TokenKeys(kid, signoff.Secret.from_base64(secret))


def remote_gate(recorder: Recorder, **options: Any) -> signoff.Gate:
    options.setdefault("token_keys", keys())
    return gate_with_tools(recorder, deny_when_unobserved=False, **options)


async def pending_call(gate: signoff.Gate, path: str = "/a", **kw: Any) -> Tuple["asyncio.Future[signoff.ToolResult]", signoff.ConfirmationRequest]:
    """Starts `execute(delete_file(path))` and returns it with its pending request."""
    before = {r.id for r in gate.pending()}
    task = asyncio.ensure_future(gate.execute("delete_file", {"path": path}, **kw))
    await wait_until(lambda: len(gate.pending()) > len(before), what="a pending request")
    return task, next(r for r in gate.pending() if r.id not in before)


def b64d(s: str) -> bytes:
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def b64e(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


# ---- tokens ----------------------------------------------------------------------------------


def test_a_token_approval_runs_the_stored_arguments_exactly_once(run: Run, tmp_path: Path) -> None:
    async def main() -> None:
        rec = Recorder(result={"deleted": True})
        audit = tmp_path / "audit.jsonl"
        gate = remote_gate(rec, audit_path=audit)
        task, req = await pending_call(gate, "/etc/passwd", call_id="c1")
        token = gate.issue_token(req, "alice")
        assert token.startswith("so1.k1.")

        claims = gate.inspect_token(token)
        assert isinstance(claims, signoff.TokenClaims)
        assert (claims.request_id, claims.approver, claims.tool, claims.key_id) == (req.id, "alice", "delete_file", "k1")
        assert claims.arguments_digest == req.arguments_digest and claims.session_id == req.session_id
        assert claims.expires_at_ms == req.deadline_ms  # expires with the request by default
        assert claims.to_dict()["approver"] == "alice" and json.loads(claims.to_json())["tool"] == "delete_file"

        assert gate.respond_token(token, "approve", approver="alice") == "approved"
        result = await task
        assert (result.status, result.output, result.decision and result.decision.responder) == (
            "executed", {"deleted": True}, "alice")
        assert rec.calls == [{"path": "/etc/passwd"}]

        with pytest.raises(signoff.AlreadyUsedError) as e:
            gate.respond_token(token, "approve", approver="alice")
        assert e.value.kind == "already_used"
        assert rec.calls == [{"path": "/etc/passwd"}]

        gate.close()
        gate.flush_audit()
        text = audit.read_text()
        assert token not in text, "a token must never be logged"
        assert '"token-issued"' in text and '"already_used"' in text

    run(main())


def test_a_token_denial_and_an_id_string(run: Run) -> None:
    async def main() -> None:
        rec = Recorder()
        gate = remote_gate(rec)
        task, req = await pending_call(gate)
        token = gate.issue_token(req.id, "alice")
        assert gate.respond_token(token, "deny", approver="alice", reason="not today") == "denied"
        result = await task
        assert result.status == "denied" and "not today" in result.content
        assert rec.calls == []
        gate.close()

    run(main())


def test_a_token_tampered_in_any_field_is_rejected_and_changes_nothing(run: Run) -> None:
    async def main() -> None:
        rec = Recorder()
        gate = remote_gate(rec)
        task, req = await pending_call(gate, "/a")
        _, other = await pending_call(gate, "/b")
        token = gate.issue_token(req, "alice")
        prefix, kid, body, sig = token.split(".")
        claims = json.loads(b64d(body))
        assert list(claims) == ["rid", "tool", "dig", "sid", "apr", "iat", "exp"]
        changes = {
            "rid": other.id,
            "tool": "read_file",
            "dig": other.arguments_digest,
            "sid": "another-session",
            "apr": "mallory",
            "iat": claims["iat"] - 1,
            "exp": claims["exp"] + 3_600_000,
        }
        for field, value in changes.items():
            forged_claims = dict(claims, **{field: value})
            forged = ".".join([prefix, kid, b64e(json.dumps(forged_claims, separators=(",", ":")).encode()), sig])
            approver = "mallory" if field == "apr" else "alice"
            with pytest.raises(signoff.BadSignatureError):
                gate.respond_token(forged, "approve", approver=approver)
            with pytest.raises(signoff.BadSignatureError):
                gate.inspect_token(forged)
        flipped = sig[:3] + ("B" if sig[3] == "A" else "A") + sig[4:]
        with pytest.raises(signoff.BadSignatureError):
            gate.respond_token(".".join([prefix, kid, body, flipped]), "approve", approver="alice")
        for junk in ["", "so1", "so1.k1.x", "so2.k1.e30.AAAA", token + ".x"]:
            with pytest.raises(signoff.MalformedError):
                gate.respond_token(junk, "approve", approver="alice")

        # Nothing above changed anything: the genuine token still works, once.
        assert rec.calls == [] and gate.pending_count == 2
        assert gate.respond_token(token, "approve", approver="alice") == "approved"
        assert (await task).output == "ok"
        assert rec.calls == [{"path": "/a"}]
        gate.close()

    run(main())


def test_a_wrong_approver_is_refused_without_using_up_the_token(run: Run) -> None:
    async def main() -> None:
        rec = Recorder()
        gate = remote_gate(rec)
        task, req = await pending_call(gate)
        token = gate.issue_token(req, "alice")
        with pytest.raises(signoff.WrongApproverError) as e:
            gate.respond_token(token, "approve", approver="bob")
        assert e.value.kind == "wrong_approver" and "alice" in str(e.value)
        assert gate.pending_count == 1
        gate.respond_token(token, "approve", approver="alice")
        assert (await task).status == "executed"
        assert len(rec.calls) == 1
        gate.close()

    run(main())


def test_an_expired_token_is_refused(run: Run) -> None:
    async def main() -> None:
        rec = Recorder()
        gate = remote_gate(rec, token_ttl=0.05)
        task, req = await pending_call(gate)
        token = gate.issue_token(req, "alice")
        claims = gate.inspect_token(token)
        assert claims.expires_at_ms - claims.issued_at_ms == 50
        await asyncio.sleep(0.15)
        with pytest.raises(signoff.TokenExpiredError):
            gate.respond_token(token, "approve", approver="alice")
        assert gate.pending_count == 1 and rec.calls == []
        # A fresh token still answers the request.
        gate.respond_token(gate.issue_token(req, "alice"), "deny", approver="alice")
        assert (await task).status == "denied"
        gate.close()

    run(main())


def test_unknown_keys_and_rotation(run: Run) -> None:
    async def main() -> None:
        rec = Recorder()
        gate = remote_gate(rec, token_keys=keys("k1", SECRET_A))
        task, req = await pending_call(gate)
        old = gate.issue_token(req, "alice")

        # After a rotation the old key still verifies what it signed; new tokens use the new key.
        rotated = keys("k1", SECRET_A).rotate("k2", signoff.Secret.from_base64(SECRET_B))
        assert (rotated.current_key_id, rotated.key_ids) == ("k2", ["k2", "k1"])
        with signoff.Gate(token_keys=rotated) as after:
            assert after.inspect_token(old).key_id == "k1"
        # A gate holding only the new key does not know the old one.
        with signoff.Gate(token_keys=keys("k2", SECRET_B)) as only_new:
            with pytest.raises(signoff.UnknownKeyError) as e:
                only_new.inspect_token(old)
            assert e.value.kind == "unknown_key" and "k1" in str(e.value)
            with pytest.raises(signoff.UnknownKeyError):
                only_new.respond_token(old, "approve", approver="alice")
        # The same key id with another secret: a forgery.
        with signoff.Gate(token_keys=keys("k1", SECRET_B)) as impostor:
            with pytest.raises(signoff.BadSignatureError):
                impostor.inspect_token(old)
        # A retired, verify-only key.
        retired = keys("k2", SECRET_B).with_verify_only("k1", signoff.Secret.from_base64(SECRET_A))
        assert retired.current_key_id == "k2"
        with signoff.Gate(token_keys=retired) as g:
            assert g.inspect_token(old).request_id == req.id

        gate.respond_token(old, "approve", approver="alice")
        assert (await task).status == "executed"
        gate.close()

    run(main())


def test_token_errors_without_keys_or_request() -> None:
    with signoff.Gate() as gate:
        with pytest.raises(signoff.ConfigError):
            gate.issue_token("00000000-0000-4000-8000-000000000000", "alice")
        with pytest.raises(signoff.ConfigError):
            gate.inspect_token("so1.k1.e30.AAAA")
    with signoff.Gate(token_keys=keys()) as gate:
        with pytest.raises(signoff.NotPendingError) as e:
            gate.issue_token("00000000-0000-4000-8000-000000000000", "alice")
        assert e.value.kind == "not_pending"
        with pytest.raises(signoff.UnknownRequestError):
            gate.issue_token("not-a-uuid", "alice")


def test_a_token_for_a_request_that_ended_is_not_pending(run: Run) -> None:
    async def main() -> None:
        gate = remote_gate(Recorder())
        task, req = await pending_call(gate)
        token = gate.issue_token(req, "alice")
        gate.deny(req, "no")
        assert (await task).status == "denied"
        with pytest.raises(signoff.NotPendingError) as e:
            gate.respond_token(token, "approve", approver="alice")
        assert "denied" in str(e.value)
        with pytest.raises(signoff.MalformedError):
            gate.respond_token(token, "maybe", approver="alice")  # type: ignore[arg-type]
        gate.close()

    run(main())


def test_keys_and_secrets_are_validated_and_never_shown(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = signoff.Secret.from_base64(SECRET_A)
    assert secret.to_base64() == SECRET_A
    assert repr(secret) == "Secret(<32 bytes, redacted>)" and SECRET_A not in str(secret)
    assert signoff.Secret(bytes(range(32))).to_base64() == SECRET_A
    assert len(base64.b64decode(signoff.Secret.generate().to_base64())) == 32
    with pytest.raises(signoff.ConfigError):
        signoff.Secret(b"too short")
    with pytest.raises(signoff.ConfigError):
        signoff.Secret.from_base64("not base64!")
    with pytest.raises(signoff.ConfigError):
        signoff.TokenKeys("bad.id", secret)

    text = f"k2:{SECRET_B}\n# the previous key\nk1:{SECRET_A}\n"
    parsed = signoff.TokenKeys.parse(text)
    assert (parsed.current_key_id, parsed.key_ids) == ("k2", ["k2", "k1"])
    for shown in (repr(parsed), str(parsed)):
        assert SECRET_A not in shown and SECRET_B not in shown and "redacted" in shown
    monkeypatch.setenv("SIGNOFF_TEST_KEYS", text)
    assert signoff.TokenKeys.from_env("SIGNOFF_TEST_KEYS").key_ids == ["k2", "k1"]
    (tmp_path / "keys").write_text(text)
    assert signoff.TokenKeys.from_file(tmp_path / "keys").key_ids == ["k2", "k1"]

    bad = "k1:" + SECRET_A[:-8]  # a secret too short: the message must not echo it
    for attempt in (lambda: signoff.TokenKeys.parse(bad), lambda: signoff.TokenKeys.parse(f"k1:{SECRET_A},k1:{SECRET_B}")):
        with pytest.raises(signoff.ConfigError) as e:
            attempt()
        assert SECRET_A[:-8] not in str(e.value) and SECRET_B not in str(e.value)
    monkeypatch.delenv("SIGNOFF_TEST_KEYS")
    with pytest.raises(signoff.ConfigError):
        signoff.TokenKeys.from_env("SIGNOFF_TEST_KEYS")
    with pytest.raises(signoff.ConfigError):
        signoff.TokenKeys.from_file(tmp_path / "missing")
    with pytest.raises(signoff.ConfigError):
        signoff.TokenKeys.parse("")


def test_options_that_need_another_option() -> None:
    for options in (
        {"synchronous_full": True},
        {"audit_rotate_bytes": 1000},
        {"token_ttl": 5},
        {"approvers": signoff.Approvers(), "allowed_responders": ["alice"]},
    ):
        with pytest.raises(signoff.ConfigError):
            signoff.Gate(**options)


def test_key_and_approver_objects_count_only_under_their_own_names() -> None:
    keys = signoff.TokenKeys("k1", signoff.Secret.from_base64(SECRET_A))
    for options in ({"approvers": keys}, {"audit_path": keys}, {"token_keys": signoff.Approvers()}):
        with pytest.raises(signoff.ConfigError, match=next(iter(options))):
            signoff.Gate(**options)
    signoff.Gate(token_keys=keys, approvers=signoff.Approvers()).close()


# ---- approvers -------------------------------------------------------------------------------


def test_approvers_refuse_unlisted_and_self_approval(run: Run) -> None:
    async def main() -> None:
        rec = Recorder()
        approvers = signoff.Approvers().allow("delete_file", ["alice", "carol"]).allow_all_tools(["admin"])
        approvers = approvers.forbid_self_approval()
        assert "forbid_self_approval: true" in repr(approvers)
        gate = remote_gate(rec, approvers=approvers)

        task, req = await pending_call(gate, session_id="carol")
        with pytest.raises(signoff.UnauthorizedError) as e:
            gate.respond_token(gate.issue_token(req, "mallory"), "approve", approver="mallory")
        assert "mallory" in str(e.value)
        with pytest.raises(signoff.UnauthorizedError):
            gate.approve(req, responder="mallory")
        with pytest.raises(signoff.UnauthorizedError):
            gate.approve(req)  # an approval must name its approver
        with pytest.raises(signoff.UnauthorizedError) as e:
            gate.respond_token(gate.issue_token(req, "carol"), "approve", approver="carol")
        assert "own session" in str(e.value)
        assert rec.calls == [] and gate.pending_count == 1

        assert gate.respond_token(gate.issue_token(req, "alice"), "approve", approver="alice") == "approved"
        assert (await task).status == "executed"

        # admin may approve any tool; anyone may deny.
        task, req = await pending_call(gate)
        assert gate.approve(req, responder="admin") == "approved"
        assert (await task).status == "executed"
        task, req = await pending_call(gate)
        assert gate.deny(req, "no", responder="mallory") == "denied"
        assert (await task).status == "denied"
        assert len(rec.calls) == 2
        gate.close()

    run(main())


def test_an_approver_check_callback(run: Run) -> None:
    async def main() -> None:
        seen: List[Tuple[str, str]] = []

        def check(request: signoff.ConfirmationRequest, approver: str) -> Any:
            seen.append((request.tool, approver))
            if approver == "bob":
                return "bob is on leave"
            if approver == "eve":
                raise RuntimeError("directory unavailable")
            if approver == "zed":
                return 1  # not True: refused
            return True

        rec = Recorder()
        gate = remote_gate(rec, approvers=signoff.Approvers().allow_all_tools(["alice", "bob", "eve", "zed"]).check(check))
        task, req = await pending_call(gate)
        with pytest.raises(signoff.UnauthorizedError, match="bob is on leave"):
            gate.approve(req, responder="bob")
        with pytest.raises(signoff.UnauthorizedError, match="directory unavailable"):
            gate.respond_token(gate.issue_token(req, "eve"), "approve", approver="eve")
        with pytest.raises(signoff.UnauthorizedError, match="not True"):
            gate.approve(req, responder="zed")
        assert gate.respond_token(gate.issue_token(req, "alice"), "approve", approver="alice") == "approved"
        assert (await task).status == "executed"
        assert seen == [("delete_file", "bob"), ("delete_file", "eve"), ("delete_file", "zed"), ("delete_file", "alice")]
        with pytest.raises(TypeError):
            signoff.Approvers().check("not callable")  # type: ignore[arg-type]
        gate.close()

    run(main())


# ---- the durable store across a process boundary ---------------------------------------------

CHILD = r"""
import asyncio, sys, time
import signoff

db, count, mode, secret = sys.argv[1:5]

def delete_file(args):
    with open(count, "a") as f:
        f.write(args["path"] + "\n")
    if mode == "hang":
        print("EXECUTING", flush=True)
        time.sleep(3600)
    return {"deleted": args["path"]}

async def main():
    gate = signoff.Gate(store_path=db, deny_when_unobserved=False,
                        token_keys=signoff.TokenKeys.parse("k1:" + secret))
    schema = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
    gate.register("delete_file", parameters=schema, executor=delete_file)
    gate.register("send_email", parameters={"type": "object"}, timeout=0.5, executor=lambda a: "sent")
    assert gate.recover().restored == []
    calls = [asyncio.ensure_future(gate.execute("delete_file", {"path": "/tmp/a"}, call_id="c1"))]
    if mode == "pending":
        calls.append(asyncio.ensure_future(gate.execute("send_email", {"to": "x"})))
    while gate.pending_count < len(calls):
        await asyncio.sleep(0.005)
    req = next(r for r in gate.pending() if r.tool == "delete_file")
    token = gate.issue_token(req, "alice")
    short = [r.id for r in gate.pending() if r.tool == "send_email"]
    print(req.id, token, *short, flush=True)
    if mode == "hang":
        gate.respond_token(token, "approve", approver="alice")
    await asyncio.sleep(3600)

asyncio.run(main())
"""


def start_child(db: Path, count: Path, mode: str) -> "subprocess.Popen[str]":
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(db), str(count), mode, SECRET_A],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def kill(proc: "subprocess.Popen[str]") -> None:
    proc.kill()  # SIGKILL: no atexit, no close(), nothing flushed by the gate
    proc.wait(10)
    assert proc.returncode != 0


def counting_gate(db: Path, count: Path, **options: Any) -> signoff.Gate:
    def delete_file(args: Any) -> Any:
        with open(count, "a") as f:
            f.write(args["path"] + "\n")
        return {"deleted": args["path"]}

    gate = signoff.Gate(store_path=db, deny_when_unobserved=False, **options)
    gate.register("delete_file", parameters=PATH_SCHEMA, executor=delete_file)
    gate.register("send_email", parameters={"type": "object"}, timeout=0.5, executor=lambda a: "sent")
    return gate


def test_a_pending_request_survives_a_killed_process_and_runs_once(tmp_path: Path) -> None:
    db, count = tmp_path / "signoff.db", tmp_path / "runs.txt"
    child = start_child(db, count, "pending")
    try:
        rid, token, short_id = read_line(child).split()
    finally:
        kill(child)
    assert not count.exists()
    time.sleep(0.6)  # send_email's deadline passes while no process runs

    # A new process' gate, with the key rotated since: the old token still verifies.
    gate = counting_gate(db, count, token_keys=keys("k1", SECRET_A).rotate("k2", signoff.Secret.from_base64(SECRET_B)))
    recovery = gate.recover()
    assert [r.id for r in recovery.restored] == [rid]
    assert [r.id for r in recovery.timed_out] == [short_id]
    assert recovery.interrupted == [] and recovery.not_restored == []
    assert recovery.to_dict()["restored"][0]["id"] == rid
    assert "restored=1" in repr(recovery)
    with pytest.raises(signoff.ConfigError):
        gate.recover()  # once per gate

    assert [r.id for r in gate.pending()] == [rid]
    stored = gate.record(rid)
    assert stored is not None and (stored.state, stored.request.tool, stored.is_final) == ("pending", "delete_file", False)
    timed_out = gate.record(short_id)
    assert timed_out is not None and timed_out.state == "timed-out"
    assert gate.issue_token(rid, "bob").startswith("so1.k2.")
    assert gate.inspect_token(token).key_id == "k1"

    assert gate.respond_token(token, "approve", approver="alice") == "approved"
    wait_for(lambda: (r := gate.record(rid)) is not None and r.state == "done", "the restored call to run")
    done = gate.record(rid)
    assert done is not None
    assert (done.state, done.responder, done.arguments, done.is_final) == ("done", "alice", {"path": "/tmp/a"}, True)
    assert done.result["status"] == "executed" and done.result["output"] == {"deleted": "/tmp/a"}
    assert done.token is not None and done.token != token and token not in done.to_json()
    assert count.read_text().splitlines() == ["/tmp/a"]
    with pytest.raises(signoff.AlreadyUsedError):
        gate.respond_token(token, "approve", approver="alice")
    # One process, one gate per database: a second opener is refused while this one is open...
    with pytest.raises(signoff.StoreError, match="in use"):
        counting_gate(db, count)
    # ...and close() releases it, even while the gate object is still referenced.
    gate.close()

    # And in yet another gate on the same file: nothing left to do, the token is still spent.
    again = counting_gate(db, count, token_keys=keys())
    recovery = again.recover()
    assert (recovery.restored, recovery.timed_out, recovery.interrupted) == ([], [], [])
    with pytest.raises(signoff.AlreadyUsedError):
        again.respond_token(token, "approve", approver="alice")
    again_done = again.record(rid)
    assert again_done is not None and again_done.state == "done"
    again.close()
    assert count.read_text().splitlines() == ["/tmp/a"]


def test_a_call_killed_while_executing_is_interrupted_and_never_rerun(tmp_path: Path) -> None:
    db, count = tmp_path / "signoff.db", tmp_path / "runs.txt"
    child = start_child(db, count, "hang")
    try:
        rid, token = read_line(child).split()
        assert read_line(child) == "EXECUTING"
    finally:
        kill(child)
    assert count.read_text().splitlines() == ["/tmp/a"]

    gate = counting_gate(db, count, token_keys=keys())
    recovery = gate.recover()
    assert recovery.restored == [] and [r.id for r in recovery.interrupted] == [rid]
    assert recovery.interrupted[0].state == "executing"  # as it was found
    record = gate.record(rid)
    assert record is not None and record.state == "interrupted"
    assert record.result["interrupted_in"] == "executing"
    with pytest.raises(signoff.AlreadyUsedError):
        gate.respond_token(token, "approve", approver="alice")
    time.sleep(0.2)
    gate.close()
    assert count.read_text().splitlines() == ["/tmp/a"]  # never run a second time


def test_recover_rules_and_records_in_memory(run: Run, tmp_path: Path) -> None:
    async def main() -> None:
        with remote_gate(Recorder()) as memory:
            task, req = await pending_call(memory)
            assert memory.record(req) is None  # the in-memory store keeps no records
            memory.deny(req)
            await task
        gate = gate_with_tools(Recorder(), store_path=tmp_path / "db", deny_when_unobserved=False)
        task, req = await pending_call(gate)
        with pytest.raises(signoff.ConfigError):
            gate.recover()  # after the first request
        record = gate.record(req)
        assert record is not None and record.state == "pending"
        gate.approve(req)
        assert (await task).status == "executed"
        record = gate.record(req)
        assert record is not None and record.state == "done"
        gate.close()
        with pytest.raises(signoff.StoreError):
            signoff.Gate(store_path=tmp_path / "no" / "such" / "dir" / "db")

    run(main())


# ---- the audit chain -------------------------------------------------------------------------


def audited_gate(path: Path, **options: Any) -> signoff.Gate:
    gate = signoff.Gate(audit_path=path, **options)
    gate.register("delete_file", parameters=PATH_SCHEMA, executor=lambda a: "ok")
    gate.on_request(lambda r: r.approve())
    return gate


def test_audit_chain_verifies_and_finds_an_edited_line(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with audited_gate(path) as gate:
        for i in range(3):
            assert gate.execute_blocking("delete_file", {"path": f"/tmp/{i}"}).status == "executed"
        gate.flush_audit()
    report = signoff.verify_audit_chain(path)
    assert report.intact and report.problem is None
    assert report.files == [str(path)] and report.records == len(path.read_text().splitlines()) > 6
    assert len(report.head) == 64 and report.to_dict()["records"] == report.records

    lines = path.read_text().splitlines()
    n = next(i for i, ln in enumerate(lines) if '"/tmp/1"' in ln)
    edited = list(lines)
    edited[n] = edited[n].replace('"/tmp/1"', '"/tmp/X"')
    path.write_text("\n".join(edited) + "\n")
    report = signoff.verify_audit_chain(str(path))
    assert not report.intact and report.records == n
    problem = report.problem
    assert problem is not None
    assert (problem.kind, problem.line, problem.seq, problem.file) == ("edited", n + 1, n, str(path))
    assert "hash" in problem.message and "edited" in repr(problem)

    path.write_text("\n".join(lines[:2] + lines[3:]) + "\n")  # a deleted record
    problem = signoff.verify_audit_chain(path).problem
    assert problem is not None and (problem.kind, problem.line) == ("missing", 3)

    with pytest.raises(signoff.IoError) as missing_log:
        signoff.verify_audit_chain(tmp_path / "nope.jsonl")
    # A SignoffError of kind `io`, and an OSError with the system's error number.
    assert isinstance(missing_log.value, OSError) and isinstance(missing_log.value, signoff.SignoffError)
    assert (missing_log.value.kind, missing_log.value.errno) == ("io", errno.ENOENT)
    assert "nope.jsonl" in str(missing_log.value)


def test_audit_rotation_keeps_one_chain(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with audited_gate(path, audit_rotate_bytes=2000) as gate:
        for i in range(8):
            gate.execute_blocking("delete_file", {"path": f"/tmp/{i}"})
            gate.flush_audit()
    # Re-opened (a restart): the chain continues.
    with audited_gate(path, audit_rotate_bytes=2000) as gate:
        gate.execute_blocking("delete_file", {"path": "/tmp/again"})
        gate.flush_audit()
    report = signoff.verify_audit_chain(path)
    assert report.intact, report.problem
    assert len(report.files) > 2 and report.files[-1] == str(path) and report.files[0] == f"{path}.1"
    os.remove(f"{path}.1")
    problem = signoff.verify_audit_chain(path).problem
    assert problem is not None and problem.kind == "missing"


def reforge_last_record(path: Path) -> None:
    """Rewrites the log's last record with another reason and a recomputed hash: still a valid
    chain (nothing follows it), but not the record that was written."""
    lines = path.read_text(encoding="utf-8").splitlines()
    body = lines[-1][: lines[-1].rindex(',"hash":"')]
    record = json.loads(body + "}")
    record["reason"] = "forged"
    forged = json.dumps(record, separators=(",", ":"), ensure_ascii=False)[:-1]
    digest = hashlib.sha256((forged + "}").encode()).hexdigest()
    path.write_text("\n".join(lines[:-1] + [f'{forged},"hash":"{digest}"}}']) + "\n", encoding="utf-8")


def test_the_store_anchors_the_audit_chain_so_a_cut_end_is_found(tmp_path: Path) -> None:
    # Issue 15 item 6: records cut from the end of the log leave a valid chain; the head the
    # durable store anchored shows them.
    log, db = tmp_path / "audit.jsonl", tmp_path / "signoff.db"
    with audited_gate(log, store_path=db) as gate:
        for i in range(3):
            assert gate.execute_blocking("delete_file", {"path": f"/tmp/{i}"}).status == "executed"
    whole = log.read_text(encoding="utf-8")
    lines = whole.splitlines()
    for store_path in (db, str(db)):
        report = signoff.verify_audit_chain(log, store_path=store_path)
        assert report.intact and report.problem is None, report.problem
        assert report.records == len(lines) > 6
        assert report.anchored_seq == len(lines) - 1
    assert signoff.verify_audit_chain(log).anchored_seq is None

    log.write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")  # the last record cut
    report = signoff.verify_audit_chain(log)
    assert report.intact and report.records == len(lines) - 1  # the documented limit
    report = signoff.verify_audit_chain(log, store_path=db)
    assert not report.intact and report.records == len(lines) - 1
    problem = report.problem
    assert problem is not None
    assert (problem.kind, problem.seq, problem.file) == ("truncated", len(lines) - 1, str(log))
    assert "cut" in problem.message and report.to_dict()["problem"]["kind"] == "truncated"

    log.write_text("", encoding="utf-8")  # every record cut
    problem = signoff.verify_audit_chain(log, store_path=db).problem
    assert problem is not None and (problem.kind, problem.seq) == ("truncated", 0)

    log.write_text(whole, encoding="utf-8")
    reforge_last_record(log)
    assert signoff.verify_audit_chain(log).intact
    problem = signoff.verify_audit_chain(log, store_path=db).problem
    assert problem is not None and (problem.kind, problem.seq) == ("edited", len(lines) - 1)


def test_verifying_against_a_store_needs_the_database_and_its_gate_closed(tmp_path: Path) -> None:
    log, db = tmp_path / "audit.jsonl", tmp_path / "signoff.db"
    with pytest.raises(signoff.IoError) as missing:
        signoff.verify_audit_chain(log, store_path=db)
    assert (missing.value.errno, missing.value.filename) == (errno.ENOENT, str(db))
    with audited_gate(log, store_path=db) as gate:
        assert gate.execute_blocking("delete_file", {"path": "/tmp/x"}).status == "executed"
        gate.flush_audit()
        # A running gate holds its database locked (SQLite waits for it for a few seconds).
        with pytest.raises(signoff.StoreError, match="after the gate using it has closed"):
            signoff.verify_audit_chain(log, store_path=db)
    assert signoff.verify_audit_chain(log, store_path=db).intact
    # A store that never anchored anything (no audit log): the chain alone is checked.
    other = tmp_path / "other.db"
    signoff.Gate(store_path=other).close()
    report = signoff.verify_audit_chain(log, store_path=other)
    assert report.intact and report.anchored_seq is None


def test_an_approver_check_runs_for_handlers_and_not_on_runtime_threads(run: Run) -> None:
    async def main() -> None:
        approvers = signoff.Approvers().check(lambda request, who: who in ("sync-handler", "async-handler"))
        rec = Recorder()
        gate = gate_with_tools(rec, approvers=approvers)

        def sync_handler(request: signoff.PendingRequest) -> None:
            request.approve(responder="sync-handler")

        async def async_handler(request: signoff.PendingRequest) -> None:
            request.approve(responder="async-handler")

        for handler in (sync_handler, async_handler):
            reg = gate.on_request(handler)
            result = await gate.execute("delete_file", {"path": "/a"})
            assert result.status == "executed", result.content
            assert result.decision is not None and result.decision.responder == handler.__name__.replace("_", "-")
            reg.stop()

        gate.close()

        # A tool executor runs on a runtime thread: an approval from there is refused (the check
        # never waits for the GIL on a runtime thread).
        gate = gate_with_tools(rec, approvers=approvers, deny_when_unobserved=False)
        task = asyncio.ensure_future(gate.execute("delete_file", {"path": "/b"}))
        await wait_until(lambda: gate.pending_count == 1)
        answers: List[str] = []

        def sneaky(args: Any) -> str:
            try:
                gate.approve(gate.pending()[0], responder="sync-handler")
            except signoff.UnauthorizedError as e:
                answers.append(str(e))
            return "done"

        gate.register("sneaky", approval="not_required", executor=sneaky)
        assert (await gate.execute("sneaky", {})).status == "executed"
        assert len(answers) == 1 and "runtime thread" in answers[0]
        assert gate.pending_count == 1 and len(rec.calls) == 2
        gate.close()
        assert (await task).status == "cancelled"

    run(main())


def test_respond_async_and_respond_token_async_record_a_durable_answer_with_the_same_outcomes_and_errors(
    run: Run, tmp_path: Path
) -> None:
    async def main() -> None:
        rec = Recorder(result={"deleted": True})
        gate = remote_gate(rec, store_path=str(tmp_path / "s.db"), synchronous_full=True)
        # A response answers; a wrong or a second one raises as respond raises.
        task, req = await pending_call(gate, "/a")
        with pytest.raises(signoff.MismatchError):
            await gate.respond_async(req.id, "approve", arguments_digest="sha256:00")
        assert await gate.respond_async(req.id, "approve", responder="alice") == "approved"
        assert (await task).status == "executed"
        assert rec.calls == [{"path": "/a"}]
        record = gate.record(req.id)
        assert record is not None and record.state == "done"
        with pytest.raises(signoff.AlreadyResolvedError):
            await gate.respond_async({"id": req.id, "decision": "deny"})
        with pytest.raises(TypeError):
            await gate.respond_async(req.id)
        # A token answers once.
        task, req = await pending_call(gate, "/b")
        token = gate.issue_token(req.id, "bob")
        with pytest.raises(signoff.WrongApproverError):
            await gate.respond_token_async(token, "approve", approver="eve")
        assert await gate.respond_token_async(token, "deny", approver="bob", reason="no") == "denied"
        assert (await task).status == "denied"
        with pytest.raises(signoff.AlreadyUsedError):
            await gate.respond_token_async(token, "approve", approver="bob")
        assert rec.calls == [{"path": "/a"}], "the denied call did not run"
        gate.close()
        # The in-memory store answers at once, through the same call.
        mem = remote_gate(Recorder())
        task, req = await pending_call(mem, "/c")
        assert await mem.respond_async(req.id, "approve") == "approved"
        assert (await task).status == "executed"
        mem.close()

    run(main())
