#!/usr/bin/env bash
# Runs the demo in every mode and checks what the person saw and what the model was told; then, in a
# real terminal (tmux), the countdown, the pre-filled edit, a request that expires on screen, colours
# and NO_COLOR, Ctrl-C, and `make demo` ended by Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --locked -q -p signoff-examples --bin demo
demo=${CARGO_TARGET_DIR:-target}/debug/demo
[[ $demo == /* ]] || demo=$PWD/$demo
tmp=$(mktemp -d)
sock=signoff-demo-check-$$
cleanup() {
  if command -v tmux >/dev/null; then tmux -L "$sock" kill-server 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
out=$tmp/out
fail() { echo "demo check failed ($1): $2"; cat "$out"; exit 1; }
expect() { grep -qF -- "$1" "$out" || fail "$2" "missing: $1"; }
refuse() { if grep -qiF -- "$1" "$out"; then fail "$2" "unexpected: $1"; fi; }
# Output that is not a terminal carries no escape sequence (no colours, no cursor movement).
plain() { if grep -q $'\x1b' "$out"; then fail "$1" "escape sequence in output that is not a terminal"; fi; }
# The first line containing $1 comes before the first line containing $2.
before() {
  local a b
  a=$(grep -nF -- "$1" "$out" | head -1 | cut -d: -f1 || true)
  b=$(grep -nF -- "$2" "$out" | head -1 | cut -d: -f1 || true)
  [[ -n $a && -n $b && $a -lt $b ]] || fail "$3" "expected \"$1\" before \"$2\""
}

# --help is a question, not a mistake: the usage on stdout, exit 0; a wrong argument exits 2.
"$demo" --help >"$out" || fail help "exit $?"
expect 'usage: demo' help
if "$demo" --bogus >"$out" 2>&1; then fail bogus "exit 0"; fi
expect 'unknown argument "--bogus"' bogus

"$demo" --script examples/demo-answers.txt >"$out"
plain script
expect 'Their reason: "I'"'"'ll write to my advisor myself"' script
expect 'rejected: edited arguments for `delete_file` do not match its schema' script
expect 'the user changed the arguments before approving' script
expect '      path: "/notes/thesis.tex" → "/notes/thesis-scratch.tex"' script
expect 'And the second one (you approved deletes for this session, so no need to ask).' script
# The closing summary: what ran (and on whose say-so), what was denied and why, the grants.
expect '── summary' script
expect '  ran (7):' script
expect '    delete_file /notes/thesis-scratch.tex  (approved by the script after an edit: path "/notes/thesis.tex" → "/notes/thesis-scratch.tex")' script
expect '    delete_file /notes/tmp2.txt  (covered by the session grant, not asked)' script
expect '  denied (1):' script
expect '    send_email to advisor@university.edu  (denied by the script: "I'"'"'ll write to my advisor myself")' script
expect '  session grants: delete_file' script
expect '  files left: /notes/thesis.tex, /notes/todo.txt' script

# Denied: the model changes course (no more deletes, asks what to do instead) and never claims an approval.
NO_COLOR=1 "$demo" --auto deny >"$out"
plain deny
expect 'files left: /notes/old-draft.txt, /notes/thesis-scratch.tex, /notes/thesis.tex, /notes/tmp.txt, /notes/tmp2.txt, /notes/todo.txt' deny
expect "I won't delete /notes/old-draft.txt, and I'll stop deleting files altogether. What would you like me to do with it instead?" deny
expect "I'm not deleting anything: they all stay where they are" deny
expect '    delete_file /notes/old-draft.txt  (denied by --auto: "auto-denied by the demo")' deny
expect '  session grants: none' deny
refuse 'deleted /notes' deny
refuse 'approved' deny

"$demo" --auto approve >"$out"
plain approve
expect 'files left: /notes/thesis-scratch.tex, /notes/todo.txt' approve
# Approved once, not for the session: the model says it will ask again, and it does.
expect "And the second one (you approved only that delete, so you'll be asked again)." approve
refuse 'approved deletes for this session' approve
expect '    delete_file /notes/tmp2.txt  (approved by --auto)' approve

# The interactive path, answered through stdin: approve; deny with a reason; an edit that is
# not JSON (asked again), then a valid one; approve for the session.
printf 'a\nd\nnot now\ne\n{oops\ne\n{"path": "/notes/thesis-scratch.tex"}\ns\n' | "$demo" >"$out"
plain interactive
expect 'Their reason: "not now"' interactive
expect 'not JSON' interactive
expect '      path: "/notes/thesis.tex" → "/notes/thesis-scratch.tex"' interactive
expect '    send_email to advisor@university.edu  (denied by you: "not now")' interactive
expect 'files left: /notes/thesis.tex, /notes/todo.txt' interactive

# An empty edit line keeps the arguments as they are (and approves them).
printf 'e\n\n' | "$demo" >"$out"
expect '(no change: approving the arguments as shown)' empty-edit
expect 'deleted /notes/old-draft.txt' empty-edit

# A terminal that closes before answering denies everything.
"$demo" </dev/null >"$out"
plain closed
expect 'input closed: denying' closed
expect 'Nobody could answer (the terminal was closed), so it did not run.' closed
expect 'files left: /notes/old-draft.txt,' closed

# A request nobody answers expires: it is withdrawn at once and the next one is shown without any
# input; the next answer goes to the next request (the send_email one), not to the expired one.
# Input is held back until the second request is on screen, which can only be after the first
# expired (after 2 s), and is then answered at once, well within its own 2 s.
(
  trap '' PIPE # a demo that already ended makes printf fail, not this shell die: reported below
  for _ in $(seq 100); do
    if grep -qF 'tool:         send_email' "$out"; then touch "$tmp/shown"; break; fi
    sleep 0.1
  done
  printf 'a\n' 2>/dev/null || true
) | "$demo" --timeout 2 >"$out" || fail timeout "the demo exited with status $?"
plain timeout
[[ -e $tmp/shown ]] || fail timeout "the next request was not shown within 10 s of starting, without any input"
expect '✗ expired: nobody answered in time, the tool did not run' timeout
expect 'tool result for call_2 [delete_file] (timed out):' timeout
before 'expired: nobody answered in time' 'tool result for call_2' timeout
before 'expired: nobody answered in time' 'tool:         send_email' timeout
before 'tool:         send_email' '  > a' timeout
expect 'sent to advisor@university.edu' timeout
expect '  timed out (1):' timeout
expect '    delete_file /notes/old-draft.txt  (nobody answered within 2 s; it did not run)' timeout
expect '    send_email to advisor@university.edu  (approved by you)' timeout
expect 'files left: /notes/old-draft.txt,' timeout
refuse 'expired before this response arrived' timeout
refuse 'please answer' timeout
refuse 'deleted /notes/old-draft.txt' timeout
echo "demo: 7 modes checked"

# ----- In a real terminal: tmux (installed here when missing, as CI does for its other needs) -----
if ! command -v tmux >/dev/null && command -v apt-get >/dev/null && [[ $(id -u) == 0 ]]; then
  echo "demo: installing tmux for the terminal checks"
  export DEBIAN_FRONTEND=noninteractive
  { apt-get install -y -q tmux || { apt-get update -q && apt-get install -y -q tmux; }; } >/dev/null 2>&1 || true
fi
if ! command -v tmux >/dev/null; then
  echo "demo: SKIPPED the terminal checks (countdown, edit, expiry on screen, colours, Ctrl-C): tmux is not installed"
  exit 0
fi

tm() { tmux -L "$sock" "$@"; }
screen() { tm capture-pane -p -J -t "$1" -S -1000; }
tfail() { echo "demo terminal check failed ($1): $2"; echo "--- screen:"; screen "$1" || true; exit 1; }
wait_for() {
  local text
  for _ in $(seq $((${3:-10} * 10))); do
    text=$(screen "$1")
    if grep -qF -- "$2" <<<"$text"; then return 0; fi
    sleep 0.1
  done
  tfail "$1" "waited ${3:-10} s for: $2"
}
# Starts a shell script in a new 120x50 terminal; the pane's raw output goes to $tmp/$1.raw.
start() {
  local name=$1
  shift
  printf '%s\n' "while [ ! -e $tmp/$name.go ]; do sleep 0.05; done" "cd $PWD" "$@" "sleep 600" >"$tmp/$name.sh"
  tm new-session -d -s "$name" -x 120 -y 50 "bash $tmp/$name.sh"
  tm pipe-pane -t "$name" -o "cat >>$tmp/$name.raw"
  touch "$tmp/$name.go"
}

# 1. NO_COLOR, a live countdown, a pre-filled edit with a diff, a request that expires on screen
#    (the next one appears with no key pressed), then Ctrl-C: summary, status 130, terminal restored.
start live "stty -g >$tmp/stty.before" "NO_COLOR=1 $demo --timeout 6" 'echo "exit=$?"' "stty -g >$tmp/stty.after"
wait_for live '"path": "/notes/old-draft.txt"'
wait_for live ' left >'
first=$(screen live | grep -F ' left >' || true)
sleep 1.3
second=$(screen live | grep -F ' left >' || true)
[[ $(grep -c . <<<"$second") == 1 ]] || tfail live "the countdown is not redrawn in place: $second"
[[ $first != "$second" ]] || tfail live "the countdown did not move in 1.3 s: $second"
tm send-keys -t live e Enter
wait_for live 'arguments > {"path":"/notes/old-draft.txt"}' # the current arguments, ready to edit
tm send-keys -t live C-u
tm send-keys -t live -l '{"path":"/notes/tmp.txt"}'
tm send-keys -t live Enter
wait_for live 'path: "/notes/old-draft.txt" → "/notes/tmp.txt"'
wait_for live 'deleted /notes/tmp.txt'
wait_for live 'tool:         send_email'
wait_for live '✗ expired: nobody answered in time, the tool did not run' 10
wait_for live '"path": "/notes/thesis.tex"' # the next request, with no key pressed
wait_for live ' left >'
tm send-keys -t live C-c
wait_for live 'exit='
wait_for live 'exit=130'
for s in 'stopped (Ctrl-C); the request on screen is withdrawn' '  timed out (1):' \
  '    delete_file /notes/thesis.tex  (stopped by Ctrl-C; it did not run)' 'stopped early by Ctrl-C'; do
  wait_for live "$s" 1
done
cmp -s "$tmp/stty.before" "$tmp/stty.after" || tfail live "the terminal settings were not restored"
if grep -q $'\x1b' "$tmp/live.raw"; then tfail live "NO_COLOR=1: escape sequences in the output"; fi
grep -q $'\r' "$tmp/live.raw" || tfail live "no carriage returns: the live line was never redrawn"

# 2. Colours are on in a terminal without NO_COLOR.
start colour "env -u NO_COLOR $demo --auto approve" 'echo "exit=$?"'
wait_for colour 'exit=0'
grep -q $'\x1b\\[' "$tmp/colour.raw" || tfail colour "no colours in a terminal"

# 3. `make demo` ended by Ctrl-C: the demo's summary, and not a word from make.
start make "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make demo" 'echo "make-exit=$?"'
wait_for make ' left >' 300
tm send-keys -t make C-c
wait_for make 'make-exit=' 10
wait_for make 'make-exit=0' 1
wait_for make 'stopped early by Ctrl-C' 1
text=$(screen make)
if grep -qF '***' <<<"$text"; then tfail make "make printed an error after Ctrl-C"; fi
echo "demo: terminal checked (countdown, edit, expiry, NO_COLOR, colours, Ctrl-C, make demo)"
