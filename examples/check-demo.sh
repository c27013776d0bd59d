#!/usr/bin/env bash
# Runs the demo non-interactively in every mode and checks what the model was told.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --locked -q -p signoff-examples --bin demo
demo=target/debug/demo
out=$(mktemp); trap 'rm -f "$out"' EXIT
expect() { grep -qF -- "$1" "$out" || { echo "demo check failed ($2): missing: $1"; cat "$out"; exit 1; }; }
refuse() { if grep -qF -- "$1" "$out"; then echo "demo check failed ($2): unexpected: $1"; cat "$out"; exit 1; fi; }

"$demo" --script examples/demo-answers.txt >"$out"
expect 'Their reason: "I'"'"'ll write to my advisor myself"' script
expect 'rejected: edited arguments for `delete_file` do not match its schema' script
expect 'the user changed the arguments before approving' script
expect 'files left: ["/notes/thesis.tex", "/notes/todo.txt"]' script
expect 'session grants: ["delete_file"]' script

"$demo" --auto deny >"$out"
expect 'files left: ["/notes/old-draft.txt", "/notes/thesis-scratch.tex", "/notes/thesis.tex", "/notes/tmp.txt", "/notes/tmp2.txt", "/notes/todo.txt"]' deny
refuse 'deleted /notes' deny

"$demo" --auto approve >"$out"
expect 'files left: ["/notes/thesis-scratch.tex", "/notes/todo.txt"]' approve

# The interactive path, answered through stdin: approve; deny with a reason; an edit that is
# not JSON (asked again), then a valid one; approve for the session.
printf 'a\nd\nnot now\ne\n{oops\ne\n{"path": "/notes/thesis-scratch.tex"}\ns\n' | "$demo" >"$out"
expect 'Their reason: "not now"' interactive
expect 'not JSON' interactive
expect 'files left: ["/notes/thesis.tex", "/notes/todo.txt"]' interactive

# A terminal that closes before answering denies everything.
"$demo" </dev/null >"$out"
expect 'input closed: denying' closed
expect 'files left: ["/notes/old-draft.txt"' closed
echo "demo: 5 modes checked"
