#!/usr/bin/env bash
# Runs the console's browser tests (console/tests-browser): Playwright driving headless Chromium.
#
#   console/test-browser.sh                      # every browser test
#   console/test-browser.sh -k smoke -x          # extra arguments go to pytest
#   console/test-browser.sh --bench              # the console's benchmark instead (console/bench-browser.py)
#
# Needs only python3 (>= 3.9) and, when Chromium is missing, root and apt-get: Debian's `chromium` package is
# installed by scripts/ensure-chromium.sh (Playwright's own browser download is never used; SIGNOFF_CHROMIUM
# chooses another executable). The tests run in the Python binding's virtualenv, bindings-python/.venv
# (created here as bindings-python/test.sh creates it, when it does not exist yet), with
# console/tests-browser/requirements.txt installed into it. Runs from any directory.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
venv="$root/bindings-python/.venv"
py="${PYTHON:-python3}"

step() { printf '\n== console browser tests: %s\n' "$*"; }

step "Chromium"
SIGNOFF_CHROMIUM="$("$root/scripts/ensure-chromium.sh")"
export SIGNOFF_CHROMIUM

step "virtualenv (bindings-python/.venv) and requirements"
if [ ! -x "$venv/bin/python" ]; then
  "$py" -c 'import sys; assert sys.version_info >= (3, 9), sys.version' \
    || { echo "console/test-browser.sh: needs Python >= 3.9" >&2; exit 1; }
  "$py" -m venv "$venv"
fi
vpy="$venv/bin/python"
export PIP_DISABLE_PIP_VERSION_CHECK=1
"$vpy" -m pip install -q -r "$here/tests-browser/requirements.txt"

# The console is started through the Python package; `make test` builds it in test-python first.
if ! "$vpy" -c 'import signoff; signoff.Gate.serve_console' 2>/dev/null; then
  step "pip install ./bindings-python (the package is missing or older than the console)"
  "$vpy" -m pip install -q "maturin>=1.5,<2"
  "$vpy" -m pip install -q --force-reinstall --no-deps "$root/bindings-python"
fi

cd "$root"
if [ "${1:-}" = "--bench" ]; then
  step "benchmark"
  exec "$vpy" console/bench-browser.py
fi
step "pytest"
"$vpy" -m pytest -q -p no:cacheprovider console/tests-browser "$@"
