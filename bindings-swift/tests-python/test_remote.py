"""Remote approval (signed tokens), approvers, the durable store and recovery after a killed
process, the hash-chained audit log, and the gate configuration the core checks, through the
uniffi surface the Swift package wraps (`Gate.open(config:keys:)`, `issueToken`, `respondToken`,
`recover`, `record`, `flushAudit`, `verifyAuditChain`). The XCTest suite (Tests/SignoffTests/RemoteTests.swift) covers the same
cases in Swift. Every check is the core's; these tests pin that the binding reaches it and
reports each rejection as its own `SignoffError` case."""

import asyncio
import base64
import hashlib
import json
import os
import subprocess
import sys
import time

import pytest

from conftest import async_test
import signoff_ffi as so

SECRET_A = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
SECRET_B = "ISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0+P0A="
PATH_SCHEMA = json.dumps(
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"], "additionalProperties": False}
)
NIL_ID = "00000000-0000-4000-8000-000000000000"


def keys(kid="k1", secret=SECRET_A):
    return so.TokenKeys(kid, so.Secret.from_base64(secret))


def delete_spec(**kw):
    return so.ToolSpec(name="delete_file", description="Deletes a file", parameters_json=PATH_SCHEMA, **kw)


def call(path="/tmp/a", **kw):
    return so.ToolCall(tool="delete_file", arguments_json=json.dumps({"path": path}), **kw)


class Exec(so.ToolExecutor):
    """Records each call; appends the path to `count` (a file) when given."""

    def __init__(self, count=None, result=None):
        self.calls = []
        self.count = count
        self.result = result

    async def execute(self, arguments_json, context):
        args = json.loads(arguments_json)
        self.calls.append(args)
        if self.count:
            with open(self.count, "a") as f:
                f.write(args.get("path", "?") + "\n")
        return json.dumps(self.result if self.result is not None else {"deleted": args["path"]})


class Approve(so.ApprovalHandler):
    async def handle(self, request):
        request.approve_with(responder="handler")


NO_KEYS = object()


def remote_gate(executor=None, token_keys=None, **config):
    """A gate with token keys (a `TokenKeys`, passed as `keys`) that keeps requests pending with
    nobody subscribed; `config` are `GateConfig` fields."""
    config.setdefault("deny_when_unobserved", False)
    token_keys = keys() if token_keys is None else token_keys
    gate = so.Gate.open(config=so.GateConfig(**config), keys=None if token_keys is NO_KEYS else token_keys)
    gate.register_executable_tool(delete_spec(editable=True), executor or Exec())
    return gate


async def pending_call(gate, path="/tmp/a", **kw):
    """Starts `execute(delete_file(path))`; returns its handle (keep it: dropping it cancels) and
    its pending request."""
    before = {r.id for r in gate.pending()}
    handle = gate.execute_cancellable(call(path, **kw))
    for _ in range(500):
        new = [r for r in gate.pending() if r.id not in before]
        if new:
            return handle, new[0]
        await asyncio.sleep(0.005)
    raise AssertionError("no pending request")


async def wait_for(pred, what, timeout=10.0):
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def b64d(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def b64e(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


# --------------------------------------------------------------------------------------------
# tokens


@async_test
async def test_a_token_approval_runs_the_stored_arguments_exactly_once(tmp_path):
    ex = Exec(result={"deleted": True})
    log = tmp_path / "audit.jsonl"
    gate = remote_gate(ex, audit_path=str(log))
    handle, req = await pending_call(gate, "/etc/passwd", call_id="c1")
    token = gate.issue_token(req.id, "alice")
    assert token.startswith("so1.k1.")

    claims = gate.inspect_token(token)
    assert (claims.request_id, claims.approver, claims.tool, claims.key_id) == (req.id, "alice", "delete_file", "k1")
    assert claims.arguments_digest == req.arguments_digest and claims.session_id == req.session_id
    assert claims.expires_at_ms == req.deadline_ms  # expires with the request by default
    assert claims.issued_at_ms <= claims.expires_at_ms

    assert gate.respond_token(token, "alice", so.ResponseDecision.APPROVE) == so.Outcome.APPROVED
    result = await handle.wait()
    assert result.status == so.ToolStatus.EXECUTED and json.loads(result.output_json) == {"deleted": True}
    assert result.decision.responder == "alice" and result.call_id == "c1"
    assert ex.calls == [{"path": "/etc/passwd"}]

    with pytest.raises(so.SignoffError.AlreadyUsed) as e:
        gate.respond_token(token, "alice", so.ResponseDecision.APPROVE)
    assert so.error_kind_name(e.value.kind()) == "already_used"
    assert ex.calls == [{"path": "/etc/passwd"}]

    await gate.flush_audit()
    gate.close()
    text = log.read_text()
    assert token not in text, "a token must never be logged"
    assert '"token-issued"' in text and '"already_used"' in text


@async_test
async def test_a_token_denial_carries_the_reason_to_the_model():
    ex = Exec()
    gate = remote_gate(ex)
    handle, req = await pending_call(gate)
    token = gate.issue_token(req.id, "alice")
    assert gate.respond_token(token, "alice", so.ResponseDecision.DENY, reason="not today") == so.Outcome.DENIED
    result = await handle.wait()
    assert result.status == so.ToolStatus.DENIED and "not today" in result.content
    assert ex.calls == []
    gate.close()


@async_test
async def test_a_token_with_an_edit_runs_the_validated_edit():
    ex = Exec()
    gate = remote_gate(ex)
    handle, req = await pending_call(gate, "/tmp/a")
    token = gate.issue_token(req.id, "alice")
    with pytest.raises(so.SignoffError.InvalidArguments):
        gate.respond_token(token, "alice", so.ResponseDecision.APPROVE, arguments_json='{"path": 1}')
    with pytest.raises(so.SignoffError.Malformed):
        gate.respond_token(token, "alice", so.ResponseDecision.APPROVE, arguments_json='{"path":"/a","path":"/b"}')
    assert gate.pending_count() == 1 and ex.calls == []
    outcome = gate.respond_token(
        token, "alice", so.ResponseDecision.APPROVE, arguments_json='{"path":"/tmp/b"}', scope=so.Scope.SESSION
    )
    assert outcome == so.Outcome.APPROVED
    result = await handle.wait()
    assert result.edited and ex.calls == [{"path": "/tmp/b"}]
    assert gate.grants("default") == ["delete_file"]

    # A tool that does not allow edits refuses the edit, and the token stays usable.
    gate.register_executable_tool(delete_spec(approval=so.ApprovalMode.REQUIRED), ex)
    handle, req = await pending_call(gate, "/tmp/c", session_id="s2")
    token = gate.issue_token(req.id, "alice")
    with pytest.raises(so.SignoffError.EditsNotAllowed):
        gate.respond_token(token, "alice", so.ResponseDecision.APPROVE, arguments_json='{"path":"/tmp/d"}')
    assert gate.respond_token(token, "alice", so.ResponseDecision.APPROVE) == so.Outcome.APPROVED
    assert (await handle.wait()).status == so.ToolStatus.EXECUTED
    assert ex.calls[-1] == {"path": "/tmp/c"}
    gate.close()


@async_test
async def test_a_forged_token_is_rejected_and_changes_nothing():
    ex = Exec()
    gate = remote_gate(ex)
    handle, req = await pending_call(gate, "/a")
    other_handle, other = await pending_call(gate, "/b")
    token = gate.issue_token(req.id, "alice")
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
        with pytest.raises(so.SignoffError.BadSignature):
            gate.respond_token(forged, approver, so.ResponseDecision.APPROVE)
        with pytest.raises(so.SignoffError.BadSignature):
            gate.inspect_token(forged)
    flipped = sig[:3] + ("B" if sig[3] == "A" else "A") + sig[4:]
    with pytest.raises(so.SignoffError.BadSignature):
        gate.respond_token(".".join([prefix, kid, body, flipped]), "alice", so.ResponseDecision.APPROVE)
    for junk in ["", "so1", "so1.k1.x", "so2.k1.e30.AAAA", token + ".x", "x" * 10_000]:
        with pytest.raises(so.SignoffError.Malformed):
            gate.respond_token(junk, "alice", so.ResponseDecision.APPROVE)

    # Nothing above changed anything: the genuine token still works, once.
    assert ex.calls == [] and gate.pending_count() == 2
    assert gate.respond_token(token, "alice", so.ResponseDecision.APPROVE) == so.Outcome.APPROVED
    assert (await handle.wait()).status == so.ToolStatus.EXECUTED
    assert ex.calls == [{"path": "/a"}]
    gate.close()
    assert (await other_handle.wait()).status == so.ToolStatus.CANCELLED


@async_test
async def test_a_wrong_approver_is_refused_without_using_up_the_token():
    ex = Exec()
    gate = remote_gate(ex)
    handle, req = await pending_call(gate)
    token = gate.issue_token(req.id, "alice")
    with pytest.raises(so.SignoffError.WrongApprover) as e:
        gate.respond_token(token, "bob", so.ResponseDecision.APPROVE)
    assert "alice" in str(e.value)
    assert gate.pending_count() == 1
    gate.respond_token(token, "alice", so.ResponseDecision.APPROVE)
    assert (await handle.wait()).status == so.ToolStatus.EXECUTED
    assert len(ex.calls) == 1
    gate.close()


@async_test
async def test_an_expired_token_is_refused():
    ex = Exec()
    gate = remote_gate(ex, token_ttl_ms=50)
    handle, req = await pending_call(gate)
    token = gate.issue_token(req.id, "alice")
    claims = gate.inspect_token(token)
    assert claims.expires_at_ms - claims.issued_at_ms == 50
    await asyncio.sleep(0.15)
    with pytest.raises(so.SignoffError.TokenExpired):
        gate.respond_token(token, "alice", so.ResponseDecision.APPROVE)
    assert gate.pending_count() == 1 and ex.calls == []
    # A fresh token still answers the request.
    gate.respond_token(gate.issue_token(req.id, "alice"), "alice", so.ResponseDecision.DENY)
    assert (await handle.wait()).status == so.ToolStatus.DENIED
    gate.close()


@async_test
async def test_unknown_keys_and_rotation():
    gate = remote_gate(token_keys=keys("k1", SECRET_A))
    handle, req = await pending_call(gate)
    old = gate.issue_token(req.id, "alice")

    # After a rotation the old key still verifies what it signed; new tokens use the new key.
    rotated = keys("k1", SECRET_A).rotate("k2", so.Secret.from_base64(SECRET_B))
    assert (rotated.current_key_id(), rotated.key_ids()) == ("k2", ["k2", "k1"])
    after = so.Gate.open(keys=rotated)
    assert after.inspect_token(old).key_id == "k1"
    # A gate holding only the new key does not know the old one.
    only_new = so.Gate.open(keys=keys("k2", SECRET_B))
    with pytest.raises(so.SignoffError.UnknownKey) as e:
        only_new.inspect_token(old)
    assert "k1" in str(e.value)
    with pytest.raises(so.SignoffError.UnknownKey):
        only_new.respond_token(old, "alice", so.ResponseDecision.APPROVE)
    # The same key id with another secret: a forgery.
    impostor = so.Gate.open(keys=keys("k1", SECRET_B))
    with pytest.raises(so.SignoffError.BadSignature):
        impostor.inspect_token(old)
    # A retired, verify-only key.
    retired = keys("k2", SECRET_B).with_verify_only("k1", so.Secret.from_base64(SECRET_A))
    assert retired.current_key_id() == "k2"
    assert so.Gate.open(keys=retired).inspect_token(old).request_id == req.id

    gate.respond_token(old, "alice", so.ResponseDecision.APPROVE)
    assert (await handle.wait()).status == so.ToolStatus.EXECUTED
    for g in (gate, after, only_new, impostor):
        g.close()


@async_test
async def test_token_errors_without_keys_request_or_gate():
    gate = remote_gate(token_keys=NO_KEYS)
    with pytest.raises(so.SignoffError.Config):
        gate.issue_token(NIL_ID, "alice")
    with pytest.raises(so.SignoffError.Config):
        gate.inspect_token("so1.k1.e30.AAAA")
    with pytest.raises(so.SignoffError.Config):
        gate.respond_token("so1.k1.e30.AAAA", "alice", so.ResponseDecision.APPROVE)

    gate = remote_gate()
    with pytest.raises(so.SignoffError.NotPending):
        gate.issue_token(NIL_ID, "alice")
    with pytest.raises(so.SignoffError.UnknownRequest):
        gate.issue_token("not-a-uuid", "alice")
    handle, req = await pending_call(gate)
    with pytest.raises(so.SignoffError.Malformed):
        gate.issue_token(req.id, "  ")
    token = gate.issue_token(req.id, "alice")
    gate.deny(req, reason="no")
    assert (await handle.wait()).status == so.ToolStatus.DENIED
    with pytest.raises(so.SignoffError.NotPending) as e:
        gate.respond_token(token, "alice", so.ResponseDecision.APPROVE)
    assert "denied" in str(e.value)
    with pytest.raises(so.SignoffError.NotPending):
        gate.issue_token(req.id, "alice")
    gate.close()
    with pytest.raises(so.SignoffError.Closed):
        gate.respond_token(token, "alice", so.ResponseDecision.APPROVE)


def test_keys_and_secrets_are_validated_and_never_echoed(tmp_path, monkeypatch):
    secret = so.Secret.from_base64(SECRET_A)
    assert secret.to_base64() == SECRET_A
    assert so.Secret(bytes(range(32))).to_base64() == SECRET_A
    assert len(base64.b64decode(so.Secret.generate().to_base64())) == 32
    with pytest.raises(so.SignoffError.Config):
        so.Secret(b"too short")
    with pytest.raises(so.SignoffError.Config):
        so.Secret.from_base64("not base64!")
    with pytest.raises(so.SignoffError.Config):
        so.TokenKeys("bad.id", secret)
    with pytest.raises(so.SignoffError.Config):
        keys("k1").with_verify_only("k1", secret)

    text = f"k2:{SECRET_B}\n# the previous key\nk1:{SECRET_A}\n"
    assert so.TokenKeys.parse(text).key_ids() == ["k2", "k1"]
    monkeypatch.setenv("SIGNOFF_SWIFT_TEST_KEYS", text)
    assert so.TokenKeys.from_env("SIGNOFF_SWIFT_TEST_KEYS").key_ids() == ["k2", "k1"]
    (tmp_path / "keys").write_text(text)
    assert so.TokenKeys.from_file(str(tmp_path / "keys")).current_key_id() == "k2"

    bad = "k1:" + SECRET_A[:-8]  # a secret too short: the message must not echo it
    for attempt in (lambda: so.TokenKeys.parse(bad), lambda: so.TokenKeys.parse(f"k1:{SECRET_A},k1:{SECRET_B}")):
        with pytest.raises(so.SignoffError.Config) as e:
            attempt()
        assert SECRET_A[:-8] not in str(e.value) and SECRET_B not in str(e.value)
    monkeypatch.delenv("SIGNOFF_SWIFT_TEST_KEYS")
    for attempt in (
        lambda: so.TokenKeys.from_env("SIGNOFF_SWIFT_TEST_KEYS"),
        lambda: so.TokenKeys.from_file(str(tmp_path / "missing")),
        lambda: so.TokenKeys.parse(""),
    ):
        with pytest.raises(so.SignoffError.Config):
            attempt()


def test_the_configuration_is_checked_by_the_core_in_swifts_names(tmp_path):
    """`Gate.open(config:)` goes through the core's `GateConfig`: errors name the option as Swift
    spells it (the shared config.json vectors run the same rules in test_vectors.py)."""
    cases = [
        (dict(token_ttl_ms=5), "tokenTtlMs"),
        (dict(allowed_responders=["alice"], approvers={"*": ["bob"]}), "allowedResponders"),
        (dict(allowed_responders=["alice"], forbid_self_approval=True), "forbidSelfApproval"),
        (dict(audit_rotate_bytes=4096), "auditRotateBytes"),
        (dict(audit_path=str(tmp_path / "a.jsonl"), audit_rotate_bytes=0), "auditRotateBytes"),
        (dict(synchronous_full=True), "synchronousFull"),
        (dict(audit_in_store=True), "auditInStore"),
        (dict(audit_in_store=True, store_path=str(tmp_path / "x.db")), "auditInStore"),
        (dict(bus_capacity=0), "busCapacity"),
        (dict(bus_capacity=10**9), "busCapacity"),
        (dict(default_timeout_ms=0), "defaultTimeoutMs"),
        (dict(default_timeout_ms=31 * 24 * 3600 * 1000), "defaultTimeoutMs"),
        (dict(remember_resolved=10**12), "rememberResolved"),
        (dict(token_keys="not a key"), "tokenKeys"),
    ]
    for config, name in cases:
        with pytest.raises(so.SignoffError.Config) as e:
            so.Gate.open(config=so.GateConfig(**config))
        assert name in str(e.value), (config, str(e.value))
    with pytest.raises(so.SignoffError.Config) as e:
        so.Gate.open(config=so.GateConfig(token_keys="k1:" + SECRET_A), keys=keys())
    assert "twice" in str(e.value)
    # A token lifetime with keys given as an object is fine; the keys are the object's.
    gate = so.Gate.open(config=so.GateConfig(token_ttl_ms=5), keys=keys("k9"))
    with pytest.raises(so.SignoffError.UnknownKey):  # the object's keys (k9), not the placeholder
        gate.inspect_token("so1.placeholder.e30.AAAA")
    gate.close()
    with pytest.raises(so.SignoffError.Io):
        so.Gate.open(config=so.GateConfig(audit_path=str(tmp_path / "no" / "dir" / "a.jsonl")))
    with pytest.raises(so.SignoffError.Store):
        so.Gate.open(config=so.GateConfig(store_path=str(tmp_path / "no" / "dir" / "db")))
    # Nothing was left open by the refusals: the same files open now.
    so.Gate.open(config=so.GateConfig(store_path=str(tmp_path / "db"), audit_path=str(tmp_path / "a"))).close()
    # Every option at once, and nothing at all (Gate.open() is Gate()).
    so.Gate.open(
        config=so.GateConfig(
            default_timeout_ms=1000, keywords=["delete"], deny_when_unobserved=False, bus_capacity=16,
            remember_resolved=0, approvers={"delete_file": ["alice"], "*": ["root"]}, forbid_self_approval=True,
            store_path=str(tmp_path / "all.db"), synchronous_full=True, audit_path=str(tmp_path / "all.jsonl"),
            audit_rotate_bytes=4096, token_keys="k1:" + SECRET_A, token_ttl_ms=1000,
        )
    ).close()
    gate = so.Gate.open()
    assert not gate.is_closed() and gate.record(NIL_ID) is None
    gate.close()


# --------------------------------------------------------------------------------------------
# approvers


@async_test
async def test_approvers_refuse_unlisted_and_self_approval():
    ex = Exec()
    gate = remote_gate(ex, approvers={"delete_file": ["alice", "carol"], "*": ["admin"]}, forbid_self_approval=True)

    handle, req = await pending_call(gate, session_id="carol")
    with pytest.raises(so.SignoffError.Unauthorized) as e:
        gate.respond_token(gate.issue_token(req.id, "mallory"), "mallory", so.ResponseDecision.APPROVE)
    assert "mallory" in str(e.value)
    with pytest.raises(so.SignoffError.Unauthorized):
        gate.approve(req, responder="mallory")
    with pytest.raises(so.SignoffError.Unauthorized):
        gate.approve(req)  # an approval must name its approver
    with pytest.raises(so.SignoffError.Unauthorized) as e:
        gate.respond_token(gate.issue_token(req.id, "carol"), "carol", so.ResponseDecision.APPROVE)
    assert "own session" in str(e.value)
    assert ex.calls == [] and gate.pending_count() == 1

    assert gate.respond_token(gate.issue_token(req.id, "alice"), "alice", so.ResponseDecision.APPROVE) == so.Outcome.APPROVED
    assert (await handle.wait()).status == so.ToolStatus.EXECUTED

    # admin may approve any tool; anyone may deny.
    handle, req = await pending_call(gate)
    assert gate.approve(req, responder="admin") == so.Outcome.APPROVED
    assert (await handle.wait()).status == so.ToolStatus.EXECUTED
    handle, req = await pending_call(gate)
    assert gate.deny(req, reason="no", responder="mallory") == so.Outcome.DENIED
    assert (await handle.wait()).status == so.ToolStatus.DENIED
    assert len(ex.calls) == 2
    gate.close()

    # Only forbidSelfApproval: any named responder but the request's own session.
    gate = remote_gate(ex, forbid_self_approval=True)
    handle, req = await pending_call(gate, session_id="agent-7")
    with pytest.raises(so.SignoffError.Unauthorized):
        gate.approve(req, responder="agent-7")
    assert gate.approve(req, responder="bob") == so.Outcome.APPROVED
    assert (await handle.wait()).status == so.ToolStatus.EXECUTED
    gate.close()


@async_test
async def test_an_unlisted_handler_approval_is_refused_and_fails_safe():
    """A handler whose approval the approvers refuse: the request ends as approval-failed."""
    ex = Exec()
    gate = so.Gate.open(config=so.GateConfig(approvers={"*": ["alice"]}))
    gate.register_executable_tool(delete_spec(), ex)
    reg = gate.on_request(Approve())  # approves as "handler", who is not listed
    result = await gate.execute_cancellable(call()).wait()
    assert result.status == so.ToolStatus.CANCELLED and ex.calls == []
    assert result.decision.reason == so.CancelReason.APPROVAL_FAILED
    reg.stop()
    gate.close()


# --------------------------------------------------------------------------------------------
# the durable store: records, recover() rules, close()


@async_test
async def test_records_and_recover_rules(tmp_path):
    memory = remote_gate()
    handle, req = await pending_call(memory)
    assert memory.record(req.id) is None  # the in-memory store keeps no records
    with pytest.raises(so.SignoffError.UnknownRequest):
        memory.record("not-a-uuid")
    memory.deny(req)
    await handle.wait()
    memory.close()

    db = str(tmp_path / "signoff.db")
    gate = remote_gate(store_path=db, synchronous_full=True)
    handle, req = await pending_call(gate)
    with pytest.raises(so.SignoffError.Config):
        gate.recover()  # after the first request
    record = gate.record(req.id)
    assert (record.state, record.is_final, record.request.id, record.tool_result) == (
        so.RecordState.PENDING, False, req.id, None)
    gate.approve(req, responder="alice")
    assert (await handle.wait()).status == so.ToolStatus.EXECUTED
    record = gate.record(req.id)
    assert (record.state, record.is_final, record.responder) == (so.RecordState.DONE, True, "alice")
    assert json.loads(record.arguments_json) == {"path": "/tmp/a"}
    assert record.tool_result.status == so.ToolStatus.EXECUTED
    assert json.loads(record.tool_result.output_json) == {"deleted": "/tmp/a"}
    assert json.loads(record.result_json)["status"] == "executed"
    assert record.token_fingerprint is None

    # One gate per database: a second opener is refused until the first is closed.
    with pytest.raises(so.SignoffError.Store) as e:
        so.Gate.open(config=so.GateConfig(store_path=db))
    assert "in use" in str(e.value)

    # A request pending when the gate is closed is cancelled by close(), so a restart does not
    # bring it back (only a process that dies leaves requests pending: see the tests below).
    handle, req = await pending_call(gate, "/tmp/closed")
    gate.close()
    result = await handle.wait()
    assert result.status == so.ToolStatus.CANCELLED and result.decision.reason == so.CancelReason.SHUTDOWN
    again = remote_gate(store_path=db)
    recovery = again.recover()
    assert (recovery.restored, recovery.timed_out, recovery.interrupted, recovery.not_restored) == ([], [], [], [])
    assert again.record(req.id).state == so.RecordState.CANCELLED
    with pytest.raises(so.SignoffError.Config):
        again.recover()  # once per gate
    again.close()


@async_test
async def test_a_gate_released_without_close_releases_its_database(tmp_path):
    """A gate the app lets go of without close() (with everything it handed out: a handler
    registration, a subscription, finished calls) stops its threads and unlocks its database: a
    new gate opens the same file, and the audit it wrote verifies. (A call still waiting holds its
    gate, as in the core: release or cancel it too.) The last reference may go on a worker
    thread a moment later, so opening is retried for up to 2 s."""
    import gc
    import threading

    db, audit = str(tmp_path / "signoff.db"), str(tmp_path / "audit.jsonl")

    async def reopen():
        for _ in range(200):
            try:
                return remote_gate(store_path=db, audit_path=audit)
            except so.SignoffError.Store:
                await asyncio.sleep(0.01)
        pytest.fail("the database stayed locked after its gate was released")

    threads = threading.active_count()
    for round in range(3):
        gate = await reopen()
        registration = gate.on_request(Approve())
        subscription = gate.subscribe()
        assert (await gate.execute_cancellable(call(f"/tmp/{round}")).wait()).status == so.ToolStatus.EXECUTED
        with pytest.raises(so.SignoffError.Store):
            so.Gate.open(config=so.GateConfig(store_path=db))  # one gate per database
        del gate, registration, subscription  # no close()
        gc.collect()
    (await reopen()).close()
    assert so.verify_audit_chain(path=audit, store_path=db).problem is None
    assert threading.active_count() <= threads + 1


# --------------------------------------------------------------------------------------------
# recovery after a killed process (a child process over the same generated bindings)

CHILD = r"""
import asyncio, json, os, sys
sys.path.insert(0, os.environ["SIGNOFF_FFI_PY_DIR"])
import signoff_ffi as so

db, count, mode, secret = sys.argv[1:5]
SCHEMA = json.dumps({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]})

class Exec(so.ToolExecutor):
    async def execute(self, arguments_json, context):
        args = json.loads(arguments_json)
        with open(count, "a") as f:
            f.write(args.get("path", "?") + "\n")
        if mode == "hang":
            print("EXECUTING", flush=True)
            await asyncio.sleep(3600)
        return json.dumps({"deleted": args.get("path")})

async def main():
    so.uniffi_set_event_loop(asyncio.get_running_loop())
    gate = so.Gate.open(config=so.GateConfig(deny_when_unobserved=False, store_path=db, token_keys="k1:" + secret))
    gate.register_executable_tool(so.ToolSpec(name="delete_file", parameters_json=SCHEMA), Exec())
    gate.register_executable_tool(so.ToolSpec(name="send_email", approval=so.ApprovalMode.REQUIRED, timeout_ms=500), Exec())
    assert gate.recover().restored == []
    runs = [gate.execute_cancellable(so.ToolCall(tool="delete_file", arguments_json='{"path":"/tmp/a"}', call_id="c1"))]
    if mode == "pending":
        runs.append(gate.execute_cancellable(so.ToolCall(tool="send_email", arguments_json='{"to":"x"}')))
    while gate.pending_count() < len(runs):
        await asyncio.sleep(0.005)
    req = next(r for r in gate.pending() if r.tool == "delete_file")
    token = gate.issue_token(req.id, "alice")
    short = [r.id for r in gate.pending() if r.tool == "send_email"]
    print(req.id, token, *short, flush=True)
    if mode == "hang":
        gate.respond_token(token, "alice", so.ResponseDecision.APPROVE)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


def run_child_and_kill(db, count, mode):
    """Runs a process that leaves requests in the store at `db` (`pending`: two pending requests;
    `hang`: one approved whose tool is running), then SIGKILLs it: no close(), nothing flushed."""
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(db), str(count), mode, SECRET_A],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    try:
        lines = []
        for _ in range(2 if mode == "hang" else 1):
            line = child.stdout.readline()
            if not line:
                child.wait(10)
                raise AssertionError(f"child exited {child.returncode}: {child.stderr.read()}")
            lines.append(line.split())
    finally:
        child.kill()
        child.wait(10)
    assert child.returncode != 0
    if mode == "hang":
        assert lines[1] == ["EXECUTING"]
    return lines[0]


def counting_gate(db, count, keys=None, deny_when_unobserved=False):
    config = so.GateConfig(store_path=str(db), deny_when_unobserved=deny_when_unobserved)
    gate = so.Gate.open(config=config, keys=keys)
    gate.register_executable_tool(so.ToolSpec(name="delete_file", parameters_json=PATH_SCHEMA), Exec(count))
    gate.register_executable_tool(
        so.ToolSpec(name="send_email", approval=so.ApprovalMode.REQUIRED, timeout_ms=500), Exec(count)
    )
    return gate


@async_test
async def test_a_pending_request_survives_a_killed_process_and_runs_once(tmp_path):
    db, count = tmp_path / "signoff.db", tmp_path / "runs.txt"
    rid, token, short_id = run_child_and_kill(db, count, "pending")
    assert not count.exists()
    await asyncio.sleep(0.6)  # send_email's deadline passes while no process runs

    # A new process' gate, with the key rotated since: the old token still verifies.
    gate = counting_gate(db, count, keys=keys("k1", SECRET_A).rotate("k2", so.Secret.from_base64(SECRET_B)))
    sub = gate.subscribe()
    recovery = gate.recover()
    assert [r.id for r in recovery.restored] == [rid]
    assert [r.id for r in recovery.timed_out] == [short_id]
    assert recovery.interrupted == [] and recovery.not_restored == []
    assert recovery.restored[0].tool_call_id == "c1"
    ev = await asyncio.wait_for(sub.next(), 5)
    assert ev.is_request() and ev.request.id == rid  # published again
    with pytest.raises(so.SignoffError.Config):
        gate.recover()  # once per gate

    assert [r.id for r in gate.pending()] == [rid]
    stored = gate.record(rid)
    assert (stored.state, stored.request.tool, stored.is_final) == (so.RecordState.PENDING, "delete_file", False)
    assert gate.record(short_id).state == so.RecordState.TIMED_OUT
    assert gate.issue_token(rid, "bob").startswith("so1.k2.")
    assert gate.inspect_token(token).key_id == "k1"

    assert gate.respond_token(token, "alice", so.ResponseDecision.APPROVE) == so.Outcome.APPROVED
    await wait_for(lambda: gate.record(rid).state == so.RecordState.DONE, "the restored call to run")
    done = gate.record(rid)
    assert (done.responder, json.loads(done.arguments_json), done.is_final) == ("alice", {"path": "/tmp/a"}, True)
    assert done.tool_result.status == so.ToolStatus.EXECUTED and done.tool_result.call_id == "c1"
    assert json.loads(done.tool_result.output_json) == {"deleted": "/tmp/a"}
    assert done.token_fingerprint == hashlib.sha256(token.encode()).hexdigest()
    assert token not in (done.result_json or "")
    assert count.read_text().splitlines() == ["/tmp/a"]
    with pytest.raises(so.SignoffError.AlreadyUsed):
        gate.respond_token(token, "alice", so.ResponseDecision.APPROVE)
    with pytest.raises(so.SignoffError.Store):
        counting_gate(db, count)  # still open here
    sub.close()
    gate.close()

    # In yet another gate on the same file: nothing left to do, and the token is still spent.
    again = counting_gate(db, count, keys=keys())
    recovery = again.recover()
    assert (recovery.restored, recovery.timed_out, recovery.interrupted) == ([], [], [])
    with pytest.raises(so.SignoffError.AlreadyUsed):
        again.respond_token(token, "alice", so.ResponseDecision.APPROVE)
    assert again.record(rid).state == so.RecordState.DONE
    again.close()
    assert count.read_text().splitlines() == ["/tmp/a"]


@async_test
async def test_a_call_killed_while_executing_is_interrupted_and_never_rerun(tmp_path):
    db, count = tmp_path / "signoff.db", tmp_path / "runs.txt"
    rid, token = run_child_and_kill(db, count, "hang")
    assert count.read_text().splitlines() == ["/tmp/a"]

    gate = counting_gate(db, count, keys=keys())
    recovery = gate.recover()
    assert recovery.restored == [] and [r.request.id for r in recovery.interrupted] == [rid]
    assert recovery.interrupted[0].state == so.RecordState.EXECUTING  # as it was found
    assert recovery.interrupted[0].responder == "alice"
    record = gate.record(rid)
    assert record.state == so.RecordState.INTERRUPTED and record.is_final
    assert json.loads(record.result_json)["interrupted_in"] == "executing"
    assert record.tool_result is None
    with pytest.raises(so.SignoffError.AlreadyUsed):
        gate.respond_token(token, "alice", so.ResponseDecision.APPROVE)
    with pytest.raises(so.SignoffError.NotPending):
        gate.issue_token(rid, "alice")
    await asyncio.sleep(0.2)
    gate.close()
    assert count.read_text().splitlines() == ["/tmp/a"]  # never run a second time


@async_test
async def test_a_restored_request_fails_safe(tmp_path):
    """Pending after a crash, but its tool is gone: cancelled, never run. And a restored request
    with nobody subscribed on a gate that denies when unobserved: cancelled at once."""
    db, count = tmp_path / "signoff.db", tmp_path / "runs.txt"
    rid, _token, short = run_child_and_kill(db, count, "pending")

    gate = so.Gate.open(config=so.GateConfig(deny_when_unobserved=False, store_path=str(db)))
    gate.register_tool(so.ToolSpec(name="delete_file", parameters_json=PATH_SCHEMA))  # no executor
    recovery = gate.recover()  # (send_email is not registered at all)
    assert recovery.restored == [] and recovery.timed_out == []
    reasons = {n.request.id: n.reason for n in recovery.not_restored}
    assert set(reasons) == {rid, short}
    assert "no executor" in reasons[rid] and "send_email" in reasons[short]
    assert gate.record(rid).state == so.RecordState.CANCELLED and gate.pending_count() == 0
    gate.close()

    db2 = tmp_path / "second.db"
    rid, _token, short = run_child_and_kill(db2, count, "pending")
    gate = counting_gate(db2, count, deny_when_unobserved=True)
    recovery = gate.recover()
    assert {r.id for r in recovery.restored} == {rid, short}
    assert gate.pending_count() == 0
    assert gate.record(rid).state == gate.record(short).state == so.RecordState.CANCELLED
    gate.close()
    assert not count.exists()


# --------------------------------------------------------------------------------------------
# the audit chain


class Audited:
    """A gate with an audit log whose handler approves every call. `close()` stops the handler
    first: a handler released only at interpreter exit would be dropped on a runtime thread that
    can no longer enter Python."""

    def __init__(self, path, rotate_bytes=None, store_path=None):
        config = so.GateConfig(audit_path=str(path), audit_rotate_bytes=rotate_bytes, store_path=store_path)
        self.gate = so.Gate.open(config=config)
        self.gate.register_executable_tool(delete_spec(), Exec())
        self.registration = self.gate.on_request(Approve())

    def close(self):
        self.registration.stop()
        self.gate.close()


def audited_gate(path, rotate_bytes=None, store_path=None):
    return Audited(path, rotate_bytes, None if store_path is None else str(store_path))


async def run_calls(audited, n, prefix="/tmp/"):
    for i in range(n):
        r = await audited.gate.execute_cancellable(call(f"{prefix}{i}")).wait()
        assert r.status == so.ToolStatus.EXECUTED, r.content


@async_test
async def test_audit_chain_verifies_and_finds_edits_gaps_and_junk(tmp_path):
    path = tmp_path / "audit.jsonl"
    gate = audited_gate(path)
    await run_calls(gate, 3)
    await gate.gate.flush_audit()
    assert len(path.read_text().splitlines()) > 6  # flushed while the gate is open
    gate.close()
    report = so.verify_audit_chain(str(path))
    lines = path.read_text().splitlines()
    assert report.intact and report.problem is None and report.anchor is None
    assert report.files == [str(path)] and report.records == len(lines)
    assert len(report.head) == 64

    n = next(i for i, ln in enumerate(lines) if '"/tmp/1"' in ln)
    edited = list(lines)
    edited[n] = edited[n].replace('"/tmp/1"', '"/tmp/X"')
    path.write_text("\n".join(edited) + "\n")
    report = so.verify_audit_chain(str(path))
    assert not report.intact and report.records == n
    p = report.problem
    assert (p.kind, p.line, p.seq, p.file) == (so.ChainProblemKind.EDITED, n + 1, n, str(path))
    assert "hash" in p.message

    path.write_text("\n".join(lines[:2] + lines[3:]) + "\n")  # a deleted record
    p = so.verify_audit_chain(str(path)).problem
    assert (p.kind, p.line) == (so.ChainProblemKind.MISSING, 3)

    path.write_text("\n".join([lines[0], lines[2], lines[1]] + lines[3:]) + "\n")  # two swapped
    assert so.verify_audit_chain(str(path)).problem.kind == so.ChainProblemKind.REORDERED

    path.write_text("\n".join(lines[:2] + ["not a record"] + lines[2:]) + "\n")
    p = so.verify_audit_chain(str(path)).problem
    assert (p.kind, p.line) == (so.ChainProblemKind.MALFORMED, 3)

    with pytest.raises(so.SignoffError.Io):
        so.verify_audit_chain(str(tmp_path / "nope.jsonl"))


@async_test
async def test_audit_rotation_keeps_one_chain(tmp_path):
    path = tmp_path / "audit.jsonl"
    gate = audited_gate(path, rotate_bytes=2000)
    for i in range(8):
        await run_calls(gate, 1, f"/tmp/{i}-")
        await gate.gate.flush_audit()
    gate.close()
    # Re-opened (a restart): the chain continues.
    gate = audited_gate(path, rotate_bytes=2000)
    await run_calls(gate, 1, "/tmp/again-")
    gate.close()
    report = so.verify_audit_chain(str(path))
    assert report.intact, report.problem
    assert len(report.files) > 2 and report.files[-1] == str(path) and report.files[0] == f"{path}.1"
    os.remove(f"{path}.1")
    assert so.verify_audit_chain(str(path)).problem.kind == so.ChainProblemKind.MISSING


def reforge_last_record(path):
    """Rewrites the log's last record with another reason and a recomputed hash: still a valid
    chain (nothing follows it), but not the record that was written."""
    lines = path.read_text(encoding="utf-8").splitlines()
    body = lines[-1][: lines[-1].rindex(',"hash":"')]
    record = json.loads(body + "}")
    record["reason"] = "forged"
    forged = json.dumps(record, separators=(",", ":"), ensure_ascii=False)[:-1]
    digest = hashlib.sha256((forged + "}").encode()).hexdigest()
    path.write_text("\n".join(lines[:-1] + [f'{forged},"hash":"{digest}"}}']) + "\n", encoding="utf-8")


@async_test
async def test_the_store_anchors_the_audit_chain_so_a_cut_end_is_found(tmp_path):
    log, db = tmp_path / "audit.jsonl", tmp_path / "signoff.db"
    gate = audited_gate(log, store_path=db)
    await run_calls(gate, 3)
    gate.close()
    whole = log.read_text(encoding="utf-8")
    lines = whole.splitlines()
    report = so.verify_audit_chain(str(log), store_path=str(db))
    assert report.intact and report.records == len(lines) > 6
    assert report.anchor.seq == len(lines) - 1 and report.anchor.hash == report.head

    log.write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")  # the last record cut
    assert so.verify_audit_chain(str(log)).intact  # the documented limit without the store
    report = so.verify_audit_chain(str(log), store_path=str(db))
    assert not report.intact and report.records == len(lines) - 1
    p = report.problem
    assert (p.kind, p.seq, p.file) == (so.ChainProblemKind.TRUNCATED, len(lines) - 1, str(log))
    assert "cut" in p.message

    log.write_text("", encoding="utf-8")  # every record cut
    p = so.verify_audit_chain(str(log), store_path=str(db)).problem
    assert (p.kind, p.seq) == (so.ChainProblemKind.TRUNCATED, 0)

    log.write_text(whole, encoding="utf-8")
    reforge_last_record(log)
    assert so.verify_audit_chain(str(log)).intact
    p = so.verify_audit_chain(str(log), store_path=str(db)).problem
    assert (p.kind, p.seq) == (so.ChainProblemKind.EDITED, len(lines) - 1)


@async_test
async def test_verifying_against_the_wrong_store_or_a_running_one(tmp_path):
    log, db = tmp_path / "audit.jsonl", tmp_path / "signoff.db"
    with pytest.raises(so.SignoffError.Io, match="no such database"):
        so.verify_audit_chain(str(log), store_path=str(db))  # as in every language
    gate = audited_gate(log, store_path=db)
    await run_calls(gate, 1)
    await gate.gate.flush_audit()
    # A running gate holds its database locked: verify after it has closed.
    with pytest.raises(so.SignoffError.Store):
        so.verify_audit_chain(str(log), store_path=str(db))
    gate.close()
    assert so.verify_audit_chain(str(log), store_path=str(db)).intact

    # Another gate's store anchors another chain: checked against it, this log is not it.
    other_log, other_db = tmp_path / "other.jsonl", tmp_path / "other.db"
    other = audited_gate(other_log, store_path=other_db)
    await run_calls(other, 3)
    other.close()
    report = so.verify_audit_chain(str(log), store_path=str(other_db))
    assert not report.intact
    assert report.problem.kind in (so.ChainProblemKind.TRUNCATED, so.ChainProblemKind.EDITED)
    # A store that never anchored anything (no audit log): the chain alone is checked.
    plain = tmp_path / "plain.db"
    so.Gate.open(config=so.GateConfig(store_path=str(plain))).close()
    report = so.verify_audit_chain(str(log), store_path=str(plain))
    assert report.intact and report.anchor is None
    # Not a database at all.
    with pytest.raises(so.SignoffError.Store):
        so.verify_audit_chain(str(log), store_path=str(log))


class Answer(so.ApprovalHandler):
    """Approves as alice (optionally with an edit), or denies."""

    def __init__(self, deny=False, edit=None):
        self.deny, self.edit = deny, edit

    async def handle(self, request):
        if self.deny:
            request.deny(reason="no", responder="alice")
        else:
            request.approve_with(arguments_json=json.dumps(self.edit) if self.edit else None, responder="alice")


async def decided(gate, handler, path="/tmp/a"):
    reg = gate.on_request(handler)
    try:
        return await gate.confirm_cancellable(call(path)).wait()
    finally:
        reg.stop()


@async_test
async def test_an_approval_marker_is_accepted_once_by_a_gate_sharing_the_keys():
    local, remote = remote_gate(), remote_gate()
    d = await decided(local, Answer())
    assert d.is_approved()
    marker = local.approval_marker("delete_file", d)
    assert marker.startswith("so1m.") and so.marker_meta_key() == "dev.signoff/approval"
    claims = remote.accept_approval_marker(marker, "delete_file", json.dumps({"path": "/tmp/a"}))
    assert (claims.approver, claims.request_id) == ("alice", d.request_id)
    with pytest.raises(so.SignoffError.AlreadyUsed):
        remote.accept_approval_marker(marker, "delete_file", json.dumps({"path": "/tmp/a"}))
    with pytest.raises(so.SignoffError.AlreadyUsed):
        local.approval_marker("delete_file", d)


@async_test
async def test_an_approval_marker_for_other_arguments_or_keys_is_refused():
    local, remote, stranger = remote_gate(), remote_gate(), remote_gate(token_keys=keys(secret=SECRET_B))
    marker = local.approval_marker("delete_file", await decided(local, Answer(edit={"path": "/tmp/b"})))
    with pytest.raises(so.SignoffError.Mismatch):
        remote.accept_approval_marker(marker, "delete_file", json.dumps({"path": "/tmp/a"}))
    with pytest.raises(so.SignoffError.BadSignature):
        stranger.accept_approval_marker(marker, "delete_file", json.dumps({"path": "/tmp/b"}))
    with pytest.raises(so.SignoffError.Malformed):
        remote.accept_approval_marker(marker, "delete_file", "{not json")
    remote.accept_approval_marker(marker, "delete_file", json.dumps({"path": "/tmp/b"}))


@async_test
async def test_only_a_persons_approval_gets_a_marker():
    local = remote_gate()
    denied = await decided(local, Answer(deny=True))
    assert isinstance(denied, so.Decision.DENIED) and denied.responder == "alice"
    with pytest.raises(so.SignoffError.Malformed):
        local.approval_marker("delete_file", denied)
    keyless = remote_gate(token_keys=NO_KEYS)
    with pytest.raises(so.SignoffError.Config):
        keyless.approval_marker("delete_file", await decided(keyless, Answer()))


@async_test
async def test_respond_async_and_respond_token_async_record_a_durable_answer_with_the_same_outcomes_and_errors(
    tmp_path,
):
    ex = Exec()
    gate = remote_gate(ex, store_path=str(tmp_path / "s.db"), synchronous_full=True)
    # A response answers; a wrong or a second one raises as `respond` raises.
    handle, req = await pending_call(gate, "/tmp/a")
    with pytest.raises(so.SignoffError.Mismatch):
        await gate.respond_async(
            so.ConfirmationResponse(
                id=req.id, decision=so.ResponseDecision.APPROVE, scope=so.Scope.ONCE, arguments_digest="sha256:00"
            )
        )
    approve = so.ConfirmationResponse(
        id=req.id, decision=so.ResponseDecision.APPROVE, scope=so.Scope.ONCE, responder="alice"
    )
    assert await gate.respond_async(approve) == so.Outcome.APPROVED
    result = await handle.wait()
    assert result.status == so.ToolStatus.EXECUTED
    assert gate.record(req.id).state == so.RecordState.DONE
    with pytest.raises(so.SignoffError.AlreadyResolved):
        await gate.respond_async(
            so.ConfirmationResponse(id=req.id, decision=so.ResponseDecision.DENY, scope=so.Scope.ONCE)
        )
    # A token answers once.
    handle, req = await pending_call(gate, "/tmp/b")
    token = gate.issue_token(req.id, "bob")
    with pytest.raises(so.SignoffError.WrongApprover):
        await gate.respond_token_async(token, "eve", so.ResponseDecision.APPROVE)
    assert await gate.respond_token_async(token, "bob", so.ResponseDecision.DENY, reason="no") == so.Outcome.DENIED
    assert (await handle.wait()).status == so.ToolStatus.DENIED
    with pytest.raises(so.SignoffError.AlreadyUsed):
        await gate.respond_token_async(token, "bob", so.ResponseDecision.APPROVE)
    assert ex.calls == [{"path": "/tmp/a"}], "the denied call did not run"
    gate.close()
