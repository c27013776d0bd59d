#!/usr/bin/env bash
# Builds and tests the Python binding from a clean clone: needs only python3 (>= 3.9) and cargo.
# Creates bindings-python/.venv, installs the package with pip (PEP 517, maturin), then runs
# stubtest, mypy --strict, pytest (API, fail-safe paths, concurrency, shared vectors, remote
# approval and the durable store across processes, under asyncio and uvloop), the doc examples, the
# README quickstart and remote approval example, and the example agent loop.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
venv="$here/.venv"
py="${PYTHON:-python3}"

"$py" -c 'import sys; assert sys.version_info >= (3, 9), sys.version' \
  || { echo "bindings-python: needs Python >= 3.9" >&2; exit 1; }

step() { printf '\n== bindings-python: %s\n' "$*"; }

step "virtualenv"
if [ ! -x "$venv/bin/python" ]; then
  "$py" -m venv "$venv"
fi
vpy="$venv/bin/python"
export PIP_DISABLE_PIP_VERSION_CHECK=1
"$vpy" -m pip install -q "maturin>=1.5,<2" "pytest>=7" pytest-timeout "mypy>=1.8" typing_extensions uvloop

step "pip install ./bindings-python (release build)"
# Build in the workspace's target dir unless the caller chose one.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
"$vpy" -m pip install -q --force-reinstall --no-deps "$here"

# Run everything against the installed package, not the source tree.
cd "$here"
export SIGNOFF_REQUIRE_UVLOOP=1

step "stubtest (signoff/_native.pyi against the built module)"
"$vpy" -m mypy.stubtest signoff._native

step "mypy --strict (package, usage file, example)"
"$vpy" -m mypy --strict -p signoff
"$vpy" -m mypy --strict tests/typecheck/usage.py "$root/examples/python/agent_loop.py" bench/bench.py
"$vpy" -m mypy --strict "$root/examples/python/sdk_loop.py"

step "pytest"
"$vpy" -m pytest -q -p no:cacheprovider tests

step "doc examples (doctests in the package)"
"$vpy" -m pytest -q -p no:cacheprovider --doctest-modules --pyargs signoff

step "README quickstart and remote approval example"
example="$(mktemp -t signoff-readme-XXXXXX.py)"
trap 'rm -f "$example"' EXIT
run_readme_block() {  # $1: README, $2: heading regex, $3: label
  "$vpy" - "$1" "$2" "$example" <<'PYEOF'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
m = re.search(r"##+ " + sys.argv[2] + r"\n.*?```python\n(.*?)```", text, re.S)
assert m, f"no Python block under {sys.argv[2]!r} in {sys.argv[1]}"
open(sys.argv[3], "w", encoding="utf-8").write(m.group(1))
PYEOF
  echo "$3 from $1"
  "$vpy" -m mypy --strict "$example"
  "$vpy" "$example"
}
for readme in "$here/README.md" "$root/README.md"; do
  run_readme_block "$readme" "(?:Python q|Q)uickstart" "quickstart"
done
run_readme_block "$here/README.md" "Remote approval and durable store" "remote approval example"
"$vpy" tests/typecheck/usage.py

step "example: agent loop"
"$vpy" "$root/examples/python/agent_loop.py" --auto approve
"$vpy" "$root/examples/python/agent_loop.py" --auto deny

step "example: OpenAI- and Anthropic-shaped tool loops (--auto approve and deny, transcript checked)"
"$root/examples/check-sdk-loop.sh" "$vpy" "$root/examples/python/sdk_loop.py"

if [ "${SIGNOFF_BENCH:-0}" = "1" ]; then
  step "benchmark (quick)"
  "$vpy" bench/bench.py --quick
fi

step "all passed"
