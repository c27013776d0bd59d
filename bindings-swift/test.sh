#!/usr/bin/env bash
# Verifies the Swift binding on a machine without a Swift compiler (see README.md, "What is
# verified where"):
#   1. builds libsignoff_ffi (cdylib) and the workspace uniffi-bindgen;
#   2. regenerates the Swift sources, C header and modulemap from the built library and fails if
#      the committed copies (Sources/Signoff/Signoff.swift, Sources/SignoffFFI/*) differ;
#   3. generates uniffi's Python bindings from the same library and runs tests-python/ through
#      them: the same C ABI, scaffolding and async/callback machinery the Swift code calls,
#      plus the shared vectors in tests/vectors/.
# Needs only cargo and python3. Set SIGNOFF_SWIFT_UPDATE=1 to rewrite the committed generated
# sources instead of failing on drift; SIGNOFF_SWIFT_UPDATE=only rewrites them and stops there
# (`make generate`).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$root"

cargo="${CARGO:-cargo}"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
case "$(uname -s)" in
  Darwin) lib="$target_dir/debug/libsignoff_ffi.dylib" ;;
  *) lib="$target_dir/debug/libsignoff_ffi.so" ;;
esac
bindgen="$target_dir/debug/uniffi-bindgen"

work="$(mktemp -d "${TMPDIR:-/tmp}/signoff-swift-test.XXXXXX")"
trap 'rm -rf "$work"' EXIT

echo "==> [1/3] building libsignoff_ffi and uniffi-bindgen"
# Two invocations so the library never gets uniffi's `cli` feature unified into it.
"$cargo" build --locked -q -p signoff-swift
"$cargo" build --locked -q -p signoff-uniffi-bindgen
# The crate's own checks (e.g. the GateConfig record has every option the core reads).
[ "${SIGNOFF_SWIFT_UPDATE:-0}" = only ] || "$cargo" test --locked -q -p signoff-swift --lib
[ -f "$lib" ] || { echo "test.sh: $lib was not built" >&2; exit 1; }

generate() { # language outdir
  "$bindgen" generate --library "$lib" --language "$1" --no-format \
    --config "$here/uniffi-bindgen.toml" --out-dir "$2" >/dev/null
}

echo "==> [2/3] drift check: committed Swift sources vs. generated from the built library"
generate swift "$work/swift"
drift=0
check() { # generated committed
  if ! cmp -s "$1" "$2"; then
    if [ "${SIGNOFF_SWIFT_UPDATE:-0}" != 0 ]; then
      mkdir -p "$(dirname "$2")" && cp "$1" "$2" && echo "    updated ${2#"$root"/}"
    else
      echo "    DRIFT: ${2#"$root"/} differs from the generated file" >&2
      diff -u "$2" "$1" 2>/dev/null | head -40 >&2 || true
      drift=1
    fi
  fi
}
check "$work/swift/Signoff.swift" "$here/Sources/Signoff/Signoff.swift"
check "$work/swift/SignoffFFI.h" "$here/Sources/SignoffFFI/SignoffFFI.h"
check "$work/swift/SignoffFFI.modulemap" "$here/Sources/SignoffFFI/SignoffFFI.modulemap"
extra="$(cd "$work/swift" && ls | grep -v -x -e Signoff.swift -e SignoffFFI.h -e SignoffFFI.modulemap || true)"
if [ -n "$extra" ]; then
  echo "    the generator produced files test.sh does not know: $extra" >&2
  drift=1
fi
if [ "$drift" != 0 ]; then
  echo "test.sh: generated Swift sources are stale; run SIGNOFF_SWIFT_UPDATE=1 bindings-swift/test.sh" >&2
  exit 1
fi
echo "    up to date"
if [ "${SIGNOFF_SWIFT_UPDATE:-0}" = only ]; then
  exit 0
fi

echo "==> [3/3] Python suite over the same C ABI"
generate python "$work/py"
cp "$lib" "$work/py/"
venv="${SIGNOFF_SWIFT_VENV:-$target_dir/venv-swift-tests}"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c 'import pytest' 2>/dev/null; then
  "$venv/bin/python" -m pip install -q --disable-pip-version-check 'pytest>=7'
fi
SIGNOFF_FFI_PY_DIR="$work/py" SIGNOFF_VECTORS_DIR="${SIGNOFF_VECTORS_DIR:-$root/tests/vectors}" \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider "$here/tests-python" "$@"
