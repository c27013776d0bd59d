"""What the gate says names Swift's own API, never the Rust builder's (issue 42, item 6)."""

import uuid

import pytest

import signoff_ffi as so

RUST_ONLY = ("GateBuilder", "Gate::", "on_request", "deny_when_unobserved", "token_keys")


@pytest.mark.parametrize("make", [so.Gate, lambda: so.Gate.open(config=so.GateConfig())])
def test_recovery_and_token_errors_name_swifts_api(make):
    gate = make()
    gate.recover()
    with pytest.raises(so.SignoffError.Config) as e:
        gate.recover()
    assert "`try gate.recover()` runs once per gate" in str(e.value), str(e.value)
    with pytest.raises(so.SignoffError.Config) as t:
        gate.issue_token(str(uuid.uuid4()), "alice")
    assert "this gate has no token keys (`Gate.open(config:keys:)`)" in str(t.value), str(t.value)
    for text in (str(e.value), str(t.value)):
        for rust in RUST_ONLY:
            assert rust not in text, (rust, text)
    gate.close()
