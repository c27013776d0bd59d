"""Approval markers (loopback de-duplication): a call a person approved through one gate is
accepted once by another gate sharing the keys; everything else raises, so that gate asks."""
import pytest

import signoff

KEYS = f"k1:{'A' * 43}="
OTHER_KEYS = signoff.TokenKeys("k1", signoff.Secret.generate())
SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}


def make_gate(keys=KEYS):
    gate = signoff.Gate(default_timeout=30, token_keys=keys)
    gate.register("fs__write_file", parameters=SCHEMA, editable=True, approval="required")
    gate.register("fs__read_file", parameters=SCHEMA, approval="not_required")
    return gate


def decided(gate, answer, path="/tmp/a"):
    registration = gate.on_request(answer)
    try:
        return gate.confirm_blocking("fs__write_file", {"path": path})
    finally:
        registration.stop()


def approve(request):
    request.approve(responder="alice")


def test_a_marker_is_accepted_once_by_a_gate_sharing_the_keys():
    with make_gate() as local, make_gate() as remote:
        decision = decided(local, approve)
        marker = local.approval_marker("fs__write_file", decision)
        assert marker.startswith("so1m.")
        claims = remote.accept_approval_marker(marker, "fs__write_file", {"path": "/tmp/a"})
        assert claims["approver"] == "alice"
        assert claims["request_id"] == decision.request_id
        with pytest.raises(signoff.AlreadyUsedError):
            remote.accept_approval_marker(marker, "fs__write_file", {"path": "/tmp/a"})
        with pytest.raises(signoff.AlreadyUsedError):
            local.approval_marker("fs__write_file", decision)


def test_other_arguments_another_tool_or_other_keys_are_refused():
    with make_gate() as local, make_gate() as remote, make_gate(OTHER_KEYS) as stranger:
        marker = local.approval_marker("fs__write_file", decided(local, approve))
        with pytest.raises(signoff.MismatchError):
            remote.accept_approval_marker(marker, "fs__write_file", {"path": "/etc/passwd"})
        with pytest.raises(signoff.MismatchError):
            remote.accept_approval_marker(marker, "fs__delete", {"path": "/tmp/a"})
        with pytest.raises(signoff.BadSignatureError):
            stranger.accept_approval_marker(marker, "fs__write_file", {"path": "/tmp/a"})
        with pytest.raises(signoff.MalformedError):
            remote.accept_approval_marker("not a marker", "fs__write_file", {"path": "/tmp/a"})
        # None of the refusals used it up.
        remote.accept_approval_marker(marker, "fs__write_file", {"path": "/tmp/a"})


def test_an_edit_is_what_the_marker_carries():
    with make_gate() as local, make_gate() as remote:
        decision = decided(local, lambda r: r.approve(arguments={"path": "/tmp/b"}, responder="alice"))
        assert decision.edited
        marker = local.approval_marker("fs__write_file", decision)
        with pytest.raises(signoff.MismatchError):
            remote.accept_approval_marker(marker, "fs__write_file", {"path": "/tmp/a"})
        remote.accept_approval_marker(marker, "fs__write_file", {"path": "/tmp/b"})


def test_only_a_persons_approval_gets_a_marker():
    with make_gate() as local:
        denied = decided(local, lambda r: r.deny("no", responder="alice"))
        with pytest.raises(signoff.MalformedError):
            local.approval_marker("fs__write_file", denied)
        not_gated = local.confirm_blocking("fs__read_file", {"path": "/tmp/a"})
        assert not_gated.approved and not_gated.by == "not-gated"
        with pytest.raises(signoff.MalformedError):
            local.approval_marker("fs__read_file", not_gated)
    with signoff.Gate(default_timeout=30) as keyless:
        keyless.register("fs__write_file", parameters=SCHEMA, approval="required")
        with pytest.raises(signoff.ConfigError):
            keyless.approval_marker("fs__write_file", decided(keyless, approve))
