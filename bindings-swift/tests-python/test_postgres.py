"""A PostgreSQL store shared by two gates (`GateConfig(storeUrl:storeSchema:)`), through the uniffi
surface the Swift package wraps: a call made through gate A is listed by gate B, approved there,
and runs once on A; racing answers resolve it once; the store options are checked by the core.
The XCTest suite (Tests/SignoffTests/RemoteTests.swift) covers the same case in Swift.

Needs a real server: SIGNOFF_TEST_POSTGRES_URL (scripts/with-postgres.sh sets it). Without it these
tests are skipped, unless SIGNOFF_REQUIRE_POSTGRES is set. Each test uses a schema of its own."""

import json
import os
import uuid

import pytest

from conftest import async_test
from test_remote import Exec, call, delete_spec, pending_call, wait_for
import signoff_ffi as so

URL = os.environ.get("SIGNOFF_TEST_POSTGRES_URL") or None
if URL is None and os.environ.get("SIGNOFF_REQUIRE_POSTGRES"):
    raise RuntimeError("SIGNOFF_REQUIRE_POSTGRES is set but SIGNOFF_TEST_POSTGRES_URL is not (run under scripts/with-postgres.sh)")
pytestmark = pytest.mark.skipif(URL is None, reason="no SIGNOFF_TEST_POSTGRES_URL (run under scripts/with-postgres.sh)")


def shared_gate(schema, executor=None):
    gate = so.Gate.open(config=so.GateConfig(store_url=URL, store_schema=schema))
    gate.register_executable_tool(delete_spec(editable=True), executor or Exec())
    return gate


def response(req, decision, **kw):
    return so.ConfirmationResponse(id=req.id, decision=decision, scope=so.Scope.ONCE, **kw)


@async_test
async def test_a_call_made_through_one_gate_is_approved_through_another_and_runs_once():
    schema = "t_" + uuid.uuid4().hex
    ex = Exec()
    agent = shared_gate(schema, ex)  # no approver attached: with a shared store it waits all the same
    console = shared_gate(schema)
    handle = agent.execute_cancellable(call("/tmp/x", call_id="c1"))
    await wait_for(lambda: len(console.pending()) == 1, "the request listed by the other gate")
    [req] = console.pending()
    assert (req.tool, json.loads(req.arguments_json)) == ("delete_file", {"path": "/tmp/x"})
    assert console.pending_count() == 1
    assert console.record(req.id).state == so.RecordState.PENDING

    assert console.respond(response(req, so.ResponseDecision.APPROVE, responder="alice")) == so.Outcome.APPROVED
    result = await handle.wait()
    assert result.status == so.ToolStatus.EXECUTED and json.loads(result.output_json) == {"deleted": "/tmp/x"}
    assert result.decision.responder == "alice"
    assert ex.calls == [{"path": "/tmp/x"}]
    await wait_for(lambda: console.record(req.id).state == so.RecordState.DONE, "done")
    assert console.record(req.id).responder == "alice"

    # A second answer, through either gate, is refused and changes nothing.
    with pytest.raises(so.SignoffError.AlreadyResolved):
        console.respond(response(req, so.ResponseDecision.DENY))
    with pytest.raises(so.SignoffError.AlreadyResolved):
        agent.respond(response(req, so.ResponseDecision.APPROVE))
    assert console.pending() == [] and ex.calls == [{"path": "/tmp/x"}]

    # A denial with a reason, made through the other gate, reaches the call.
    handle, _ = await pending_call(agent, "/etc")
    [req] = console.pending()
    assert console.respond(response(req, so.ResponseDecision.DENY, reason="not /etc")) == so.Outcome.DENIED
    result = await handle.wait()
    assert result.status == so.ToolStatus.DENIED and "not /etc" in result.content
    assert ex.calls == [{"path": "/tmp/x"}]
    agent.close()
    console.close()


def test_the_store_options_are_checked_in_swifts_names(tmp_path):
    schema = "t_" + uuid.uuid4().hex
    cases = [
        (dict(store_url=URL, store_path=str(tmp_path / "db")), ["storeUrl", "storePath"]),
        (dict(store_owner="agent-1"), ["storeOwner", "storeUrl"]),
        (dict(store_schema=schema), ["storeSchema", "storeUrl"]),
        (dict(store_url=""), ["storeUrl"]),
        (dict(store_url="postgres://[not a host"), ["storeUrl"]),
        (dict(store_url=URL, store_schema="no-dashes; drop table x"), ["storeSchema"]),
    ]
    for config, names in cases:
        with pytest.raises(so.SignoffError.Config) as e:
            so.Gate.open(config=so.GateConfig(**config))
        assert all(n in str(e.value) for n in names), (config, str(e.value))
    with pytest.raises(so.SignoffError.Store):
        so.Gate.open(config=so.GateConfig(store_url="postgres://signoff@127.0.0.1:1/signoff"))
