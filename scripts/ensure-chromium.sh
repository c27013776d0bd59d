#!/usr/bin/env bash
# Makes sure a Chromium the browser tests can drive is installed, and prints its path (one line, on stdout).
#
#   scripts/ensure-chromium.sh              # e.g. /usr/bin/chromium
#   SIGNOFF_CHROMIUM=$(scripts/ensure-chromium.sh)
#
# The console's browser tests (console/test-browser.sh) drive Chromium with Playwright, which cannot download
# its own browser here: they launch the system's Chromium through its executable path instead. In order:
#
#   1. SIGNOFF_CHROMIUM, when set: it must be an executable file (nothing is installed).
#   2. `chromium` on PATH (Debian's package installs /usr/bin/chromium, a launcher for /usr/lib/chromium/chromium).
#   3. When there is none and we are root on a system with apt-get: Debian's `chromium` package is installed
#      (without recommended packages; `apt-get update` first only when the install fails, e.g. on a fresh
#      machine with empty package lists), then 2. again.
#
# Idempotent: when Chromium is there, it only prints the path. Messages go to stderr; the exit status is 1 when
# no Chromium could be found or installed.
set -euo pipefail

say() { echo "ensure-chromium: $*" >&2; }

is_root() { [ "$(id -u)" -eq 0 ]; }

if [ -n "${SIGNOFF_CHROMIUM:-}" ]; then
  if [ -f "$SIGNOFF_CHROMIUM" ] && [ -x "$SIGNOFF_CHROMIUM" ]; then
    printf '%s\n' "$SIGNOFF_CHROMIUM"
    exit 0
  fi
  say "SIGNOFF_CHROMIUM=$SIGNOFF_CHROMIUM is not an executable file"
  exit 1
fi

install_chromium() {
  say "Chromium is not installed; installing Debian's chromium package"
  export DEBIAN_FRONTEND=noninteractive
  # (Waits for the dpkg lock rather than failing when another install is running.)
  local install=(apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=300 chromium)
  local log
  log=$(mktemp -t signoff-apt-chromium.XXXXXX)
  # A fresh machine (or a CI image) may have no package lists, or stale ones: update only then.
  if ! "${install[@]}" >"$log" 2>&1; then
    say "apt-get install failed; running apt-get update and trying again"
    if ! { apt-get update -q -o DPkg::Lock::Timeout=300 && "${install[@]}"; } >"$log" 2>&1; then
      tail -n 30 "$log" >&2 || true
      rm -f "$log"
      say "could not install chromium with apt-get"
      return 1
    fi
  fi
  rm -f "$log"
}

if ! command -v chromium >/dev/null; then
  if command -v apt-get >/dev/null && is_root; then
    install_chromium || exit 1
  fi
fi

if ! command -v chromium >/dev/null; then
  say "no Chromium found (looked for \`chromium\` on PATH)."
  say "Install it (Debian: apt-get install chromium; as root, this script does it) or set SIGNOFF_CHROMIUM to a"
  say "Chromium or Chrome executable."
  exit 1
fi

path=$(command -v chromium)
say "$(chromium --version 2>/dev/null | head -n 1 || echo "version unknown") at $path"
printf '%s\n' "$path"
