#!/usr/bin/env bash
# The Node binding's whole suite, from a clean clone with only node, npm and cargo installed:
# install (the install hook builds the addon and the facade when they are missing; no EBADENGINE
# warning allowed), build, the tests (node --test), the README examples run as a reader runs
# them, the memory check, and the example in both non-interactive modes.
# `make test-node` runs this.
set -euo pipefail
cd "$(dirname "$0")"

echo "== npm ci"
ci_log=$(mktemp)
trap 'rm -f "$ci_log"' EXIT
npm ci --no-audit --no-fund 2>&1 | tee "$ci_log"
if grep -q EBADENGINE "$ci_log"; then
  echo "npm ci warned EBADENGINE on node $(node --version): a dependency excludes a Node version" \
    "package.json's engines (and the README) promise; align them" >&2
  exit 1
fi
echo "== engines: every locked package accepts every Node version engines promises"
node scripts/check-engines.cjs
echo "== npm run build"
npm run build
echo "== npm test"
npm test
echo "== README examples as a reader runs them (npm pack, installed into a new project, node <file>)"
node scripts/check-readme-as-user.cjs
echo "== memory over 100,000 confirmations"
npm run --silent memory
echo "== example: --auto approve"
node ../examples/node/agent-loop.mjs --auto approve
echo "== example: --auto deny"
node ../examples/node/agent-loop.mjs --auto deny
echo "bindings-node: all passed"
