#!/usr/bin/env bash
# Builds the Swift package's library (release) and uniffi's Python bindings of it, then runs
# bench/scale.py over them: memory per pending confirmation through the C ABI Swift calls.
#   bindings-swift/bench/scale.sh [--n 1000000]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$root"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
cargo build --locked -q --release -p signoff-swift
cargo build --locked -q -p signoff-uniffi-bindgen
work="$(mktemp -d "${TMPDIR:-/tmp}/signoff-swift-scale.XXXXXX")"
trap 'rm -rf "$work"' EXIT
"$target_dir/debug/uniffi-bindgen" generate --library "$target_dir/release/libsignoff_ffi.so" --language python \
  --no-format --config "$here/uniffi-bindgen.toml" --out-dir "$work" >/dev/null
cp "$target_dir/release/libsignoff_ffi.so" "$work/"
SIGNOFF_FFI_PY_DIR="$work" python3 "$here/bench/scale.py" "$@"
