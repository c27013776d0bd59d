#!/usr/bin/env bash
# Fault injection for the PostgreSQL store (examples/src/pg_fault.rs), bounded for `make test`: three agent
# processes keep gated calls going, one approver process answers them, agents are SIGKILLed at random and
# restarted (they recover), PostgreSQL is restarted once; then no tool may have run twice and no request may be
# lost. Needs a PostgreSQL server: run under scripts/with-postgres.sh (it sets SIGNOFF_TEST_POSTGRES_URL and
# SIGNOFF_TEST_POSTGRES_CTL), e.g.
#
#   scripts/with-postgres.sh examples/check-postgres-faults.sh
#   scripts/with-postgres.sh examples/check-postgres-faults.sh --approvals 10000    # the benchmark size
#
# Extra arguments go to `signoff-pg-fault orchestrate` (they override the defaults below).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${SIGNOFF_TEST_POSTGRES_URL:-}" ]; then
  echo "check-postgres-faults: SIGNOFF_TEST_POSTGRES_URL is not set; run under scripts/with-postgres.sh" >&2
  exit 1
fi
restart=()
if [ -n "${SIGNOFF_TEST_POSTGRES_CTL:-}" ]; then
  restart=(--restart-postgres)
else
  echo "check-postgres-faults: SIGNOFF_TEST_POSTGRES_CTL is not set: PostgreSQL will not be restarted" >&2
fi
cargo build --locked -q --release -p signoff-examples --bin signoff-pg-fault
dir=$(mktemp -d)
keep() { echo "check-postgres-faults: FAILED; the run's files are in $dir" >&2; }
if ! timeout 600 target/release/signoff-pg-fault orchestrate --approvals 1000 --min-kills 5 --agents 3 --kill-every-ms 300-1500 \
  "${restart[@]}" --max-seconds 240 --dir "$dir" "$@"; then
  keep
  exit 1
fi
rm -rf "$dir"
echo "check-postgres-faults: ok"
