#!/usr/bin/env bash
# The MCP gate's tests against real parts: the `signoff mcp-proxy` binary, the npm package
# @modelcontextprotocol/server-filesystem and server-everything as upstreams (installed into
# mcp/node_modules), signoff's own Python package (the in-process gate of the loopback tests), and
# the official Python SDK's client (stdio and Streamable HTTP), mcp==2.3.0 from PyPI, in both protocol eras (a venv:
# bindings-python/.venv when it exists, otherwise mcp/.venv). Extra arguments go to pytest.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
read -r -a cargo <<< "${CARGO:-cargo}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"

echo "mcp/test.sh: Rust unit tests (config, risk rules)"
"${cargo[@]}" test --locked -q -p signoff-mcp

echo "mcp/test.sh: building signoff (the mcp-proxy command)"
"${cargo[@]}" build --locked -q -p signoff-cli
export SIGNOFF_BIN="$CARGO_TARGET_DIR/debug/signoff"

if [ ! -x "$here/node_modules/.bin/mcp-server-filesystem" ] || [ ! -x "$here/node_modules/.bin/mcp-server-everything" ]; then
  echo "mcp/test.sh: installing @modelcontextprotocol/server-filesystem and server-everything (npm)"
  (cd "$here" && npm install --no-audit --no-fund --loglevel=error)
fi
export SIGNOFF_MCP_FS="$here/node_modules/.bin/mcp-server-filesystem"
export SIGNOFF_MCP_EVERYTHING="$here/node_modules/.bin/mcp-server-everything"

if [ -x "$root/bindings-python/.venv/bin/python" ]; then
  venv="$root/bindings-python/.venv"
else
  venv="$here/.venv"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("mcp") != "2.3.0")' 2>/dev/null \
   || ! "$venv/bin/python" -c 'import pytest' 2>/dev/null; then
  echo "mcp/test.sh: installing mcp==2.3.0 and pytest into $venv"
  "$venv/bin/pip" install -q "mcp==2.3.0" pytest
fi

# The loopback tests and the example agent use signoff's own Python package (an in-process gate).
# `make test` has installed it into bindings-python/.venv already; on its own, build it here.
if ! (cd "$here" && "$venv/bin/python" -c 'import signoff._native') 2>/dev/null; then
  echo "mcp/test.sh: installing signoff's Python package (./bindings-python) into $venv"
  "$venv/bin/pip" install -q "maturin>=1.5,<2"
  "$venv/bin/pip" install -q "$root/bindings-python"
fi

echo "mcp/test.sh: the proxy (over stdio and Streamable HTTP) against server-filesystem and server-everything (stdio and HTTP), driven by the Python SDK"
"$venv/bin/python" -m pytest -q "$here/tests-python" "$@"
