#!/usr/bin/env bash
# The Node binding's whole suite, from a clean clone with only node, npm and cargo installed:
# install (the install hook builds the addon and the facade when they are missing), build,
# the tests (node --test), the memory check, and the example in both non-interactive modes.
# `make test-node` runs this.
set -euo pipefail
cd "$(dirname "$0")"

echo "== npm ci"
npm ci --no-audit --no-fund
echo "== npm run build"
npm run build
echo "== npm test"
npm test
echo "== memory over 100,000 confirmations"
npm run --silent memory
echo "== example: --auto approve"
node ../examples/node/agent-loop.mjs --auto approve
echo "== example: --auto deny"
node ../examples/node/agent-loop.mjs --auto deny
echo "bindings-node: all passed"
