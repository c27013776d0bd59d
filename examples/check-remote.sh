#!/usr/bin/env bash
# Runs the remote-approval example (two processes, a crash between them) and the audit verifier,
# and checks what they report.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --locked -q -p signoff-examples --bin remote-approval --bin signoff-audit
dir=$(mktemp -d); out=$(mktemp); trap 'rm -rf "$dir" "$out"' EXIT
expect() { grep -qF -- "$1" "$out" || { echo "remote-approval check failed: missing: $1"; cat "$out"; exit 1; }; }

target/debug/remote-approval "$dir" >"$out" 2>&1
expect 'server: *** crashes with the request pending ***'
expect 'server (restarted): recovered pending request'
expect 'mallory presents a forged token: refused (bad_signature)'
expect "mallory presents alice's link: refused (wrong_approver)"
expect 'a client answers by id with its own amount: refused (edits_not_allowed)'
expect 'alice: approves -> approved'
expect "alice's link is used again: refused (already_used)"
expect 'ledger: 1 payment(s): paid 1200 EUR to ACME GmbH'
expect 'chain intact'
if grep -q 'ACCEPTED' "$out"; then echo "remote-approval check failed: something forged was accepted"; cat "$out"; exit 1; fi

target/debug/signoff-audit verify "$dir/audit.jsonl" >"$out"
expect 'intact: '
target/debug/signoff-audit verify "$dir/audit.jsonl" --store "$dir/signoff.db" >"$out"
expect "reaching the store's anchor"
# Cut the last record: the chain alone cannot tell, the store's anchor can.
cp "$dir/audit.jsonl" "$dir/audit.whole"
sed -i '$d' "$dir/audit.jsonl"
target/debug/signoff-audit verify "$dir/audit.jsonl" >"$out"
expect 'no anchor checked'
if target/debug/signoff-audit verify "$dir/audit.jsonl" --store "$dir/signoff.db" >"$out"; then echo "signoff-audit accepted a cut log"; exit 1; fi
expect 'TAMPERED: truncated record at'
mv "$dir/audit.whole" "$dir/audit.jsonl"
# Edit one record (the payment amount in the request record): the verifier names it.
sed -i '1s/1200/12000/' "$dir/audit.jsonl"
if target/debug/signoff-audit verify "$dir/audit.jsonl" >"$out"; then echo "signoff-audit accepted an edited log"; exit 1; fi
expect 'TAMPERED: edited record at'
expect ':1 (seq 0)'
echo "remote-approval and signoff-audit: ok"
