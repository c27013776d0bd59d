#!/usr/bin/env bash
# Runs the console demo unattended (--check: it signs in over HTTP and answers two requests) and
# checks what the agent got.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --locked -q -p signoff-examples --bin console-demo
out=$(mktemp); trap 'rm -f "$out"' EXIT
timeout 60 "${CARGO_TARGET_DIR:-target}/debug/console-demo" --check >"$out" 2>&1
expect() { grep -qF -- "$1" "$out" || { echo "console demo check failed: missing: $1"; cat "$out"; exit 1; }; }
expect 'open this link in your browser'
expect '/login#token=so1s.'
expect 'agent: delete_file -> executed (deleted notes/draft-old.md)'
expect 'agent: send_email -> denied'
expect 'not this week'
echo "console demo: ok"
