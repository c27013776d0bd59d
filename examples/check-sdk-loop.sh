#!/usr/bin/env bash
# Runs an SDK-shaped loop example (OpenAI and Anthropic messages, a scripted model) with
# --auto approve and --auto deny, and checks its transcript: the results in each API's shape and
# in call order, the refusals (bad JSON, wrong schema), the model's reaction to a denial, and that
# nothing is deleted on deny.
#
#   examples/check-sdk-loop.sh                                  # the Rust example (builds it)
#   examples/check-sdk-loop.sh python3 examples/python/sdk_loop.py
#
# The examples print the same transcript in every language, except for the JSON parser's own
# error text and the key order inside JSON objects (serde_json sorts keys), so each check names
# fragments that one line must hold, in any order.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then
  cargo build --locked -q -p signoff-examples --bin sdk-loop
  set -- target/debug/sdk-loop
fi
out=$(mktemp); trap 'rm -f "$out"' EXIT
cmd="$*" mode=""
fail() { echo "sdk-loop check failed ($cmd --auto $mode): $1"; echo "--- output:"; cat "$out"; exit 1; }
has() {  # has FRAGMENT...: some line holds every fragment
  local lines f; lines=$(cat "$out")
  for f in "$@"; do lines=$(grep -F -- "$f" <<<"$lines") || fail "no line holds all of: $*"; done
}
hasnt() { if grep -qF -- "$1" "$out"; then fail "unexpected: $1"; fi; }
times() {  # times N LINE: LINE is a whole line of the output exactly N times
  [ "$(grep -cxF -- "$2" "$out" || true)" = "$1" ] || fail "expected $1 time(s) the line: $2"
}
ids() {  # ids PATTERN EXPECTED: the ids PATTERN finds, in output order
  [ "$(grep -oE -- "$1" "$out" | tr '\n' ' ')" = "$2" ] || fail "expected, in order: $2(got: $(grep -oE -- "$1" "$out" | tr '\n' ' '))"
}
read_result='"content":"Standup moved to 10:00."'
bad_json='"content":"The call to `delete_file` was refused and did not run: its arguments are not valid JSON ('
bad_schema='"content":"The call to `delete_file` was refused and did not run: original arguments for `delete_file` do not match its schema'
declined='"content":"The user declined this call to `delete_file`, so the tool did not run. Their reason: \"--auto deny: no files are deleted today\". Do not retry the same call'

for mode in approve deny; do
  "$@" --auto "$mode" >"$out" 2>&1 || fail "the example exited with status $?"

  # OpenAI: one {"role":"tool"} message per call, in call order; the bad JSON refused, the model told.
  has '"role":"tool"' '"tool_call_id":"call_01"' "$read_result"
  has '"role":"tool"' '"tool_call_id":"call_03"' "$bad_json" 'Send it again with the arguments as one JSON object."'
  # Anthropic: tool_result blocks (is_error false when the tool ran), the schema mismatch refused.
  has '"type":"tool_result"' '"tool_use_id":"toolu_01"' "$read_result" '"is_error":false'
  has '"type":"tool_result"' '"tool_use_id":"toolu_03"' "$bad_schema" '"is_error":true'

  if [ "$mode" = approve ]; then
    ids '"tool_call_id":"call_0[0-9]"' '"tool_call_id":"call_01" "tool_call_id":"call_02" "tool_call_id":"call_03" "tool_call_id":"call_04" '
    ids '"tool_use_id":"toolu_0[0-9]"' '"tool_use_id":"toolu_01" "tool_use_id":"toolu_02" "tool_use_id":"toolu_03" "tool_use_id":"toolu_04" '
    times 2 'approver    delete_file {"path":"/tmp/old.log"} -> approved (--auto approve)'
    has '"tool_call_id":"call_02"' '"content":"deleted /tmp/old.log"'
    has 'tool_call call_04 delete_file {"path": "/tmp/cache.bin"}'  # the model fixed its JSON
    has '"tool_call_id":"call_04"' '"content":"deleted /tmp/cache.bin"'
    has '"tool_use_id":"toolu_02"' '"content":"deleted /tmp/old.log"' '"is_error":false'
    has 'tool_use toolu_04 delete_file {"path":"/tmp/cache.bin"}'  # ... and its arguments
    has '"tool_use_id":"toolu_04"' '"content":"deleted /tmp/cache.bin"' '"is_error":false'
    has 'assistant   "Deleted /tmp/old.log and /tmp/cache.bin'
    has 'assistant   text "Deleted /tmp/old.log and /tmp/cache.bin'
    times 2 'files left  /tmp/notes.txt'
    times 1 'summary: --auto approve | openai: call_01 executed, call_02 executed, call_03 rejected, call_04 executed | anthropic: toolu_01 executed, toolu_02 executed, toolu_03 rejected, toolu_04 executed | files deleted: 4 | ok'
  else
    ids '"tool_call_id":"call_0[0-9]"' '"tool_call_id":"call_01" "tool_call_id":"call_02" "tool_call_id":"call_03" '
    ids '"tool_use_id":"toolu_0[0-9]"' '"tool_use_id":"toolu_01" "tool_use_id":"toolu_02" "tool_use_id":"toolu_03" '
    times 2 'approver    delete_file {"path":"/tmp/old.log"} -> denied (--auto deny)'
    has '"role":"tool"' '"tool_call_id":"call_02"' "$declined"
    has '"type":"tool_result"' '"tool_use_id":"toolu_02"' "$declined" '"is_error":true'
    # The model reads "Do not retry" and stops: no further call, a different answer.
    has 'assistant   "You declined deleting /tmp/old.log, so I did not retry it and left /tmp/cache.bin alone too.'
    has 'assistant   text "You declined deleting /tmp/old.log, so I did not retry it and left /tmp/cache.bin alone too.'
    hasnt 'call_04'
    hasnt 'toolu_04'
    hasnt 'deleted /tmp/'
    times 2 'files left  /tmp/cache.bin, /tmp/notes.txt, /tmp/old.log'
    times 1 'summary: --auto deny | openai: call_01 executed, call_02 denied, call_03 rejected | anthropic: toolu_01 executed, toolu_02 denied, toolu_03 rejected | files deleted: 0 | ok'
  fi
done
echo "sdk-loop ($cmd): ok in --auto approve and --auto deny"
