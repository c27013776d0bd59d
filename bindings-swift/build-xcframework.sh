#!/usr/bin/env bash
# Builds SignoffFFI.xcframework (static libsignoff_ffi for iOS, the iOS simulator and macOS, with
# the SignoffFFI C header and module map) and regenerates Sources/Signoff/Signoff.swift from the
# same build, so the Swift package next to this script is ready for `swift build` / `swift test`.
#
# Runs on a Mac with Xcode (xcodebuild, lipo) and rustup. Usage:
#   bindings-swift/build-xcframework.sh           # release build
#   bindings-swift/build-xcframework.sh --debug   # debug build (faster, for local testing)
#   bindings-swift/build-xcframework.sh --zip     # also SignoffFFI.xcframework.zip + its checksum
#
# Slices: ios-arm64 (aarch64-apple-ios), ios-arm64_x86_64-simulator (aarch64-apple-ios-sim +
# x86_64-apple-ios, lipo), macos-arm64_x86_64 (aarch64-apple-darwin + x86_64-apple-darwin, lipo).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$root"

profile=release
zip=0
for arg in "$@"; do
  case "$arg" in
    --debug) profile=debug ;;
    --zip) zip=1 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "build-xcframework.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done

if [ "$(uname -s)" != Darwin ]; then
  echo "build-xcframework.sh: needs macOS with Xcode (xcodebuild, lipo)." >&2
  echo "On other systems, bindings-swift/test.sh verifies the bindings without Swift." >&2
  exit 1
fi
for tool in cargo xcodebuild lipo; do
  command -v "$tool" >/dev/null || { echo "build-xcframework.sh: $tool not found" >&2; exit 1; }
done

cargo="${CARGO:-cargo}"
target_dir="${CARGO_TARGET_DIR:-$root/target}"
targets=(aarch64-apple-ios aarch64-apple-ios-sim x86_64-apple-ios aarch64-apple-darwin x86_64-apple-darwin)
cargo_profile=()
[ "$profile" = release ] && cargo_profile=(--release)

# Match the deployment targets in Package.swift.
export IPHONEOS_DEPLOYMENT_TARGET="${IPHONEOS_DEPLOYMENT_TARGET:-15.0}"
export MACOSX_DEPLOYMENT_TARGET="${MACOSX_DEPLOYMENT_TARGET:-12.0}"

if command -v rustup >/dev/null; then
  rustup target add "${targets[@]}"
fi

echo "==> building libsignoff_ffi ($profile) for ${targets[*]}"
for t in "${targets[@]}"; do
  # (the ${a[@]+...} form: macOS's bash 3.2 treats an empty array as unset under set -u)
  "$cargo" build --locked -p signoff-swift --target "$t" ${cargo_profile[@]+"${cargo_profile[@]}"}
done

lib() { echo "$target_dir/$1/$profile/libsignoff_ffi.a"; }

work="$(mktemp -d "${TMPDIR:-/tmp}/signoff-xcframework.XXXXXX")"
trap 'rm -rf "$work"' EXIT

echo "==> generating Swift bindings, header and module map from the built library"
"$cargo" build --locked -q -p signoff-uniffi-bindgen
host_dylib="$target_dir/aarch64-apple-darwin/$profile/libsignoff_ffi.dylib"
[ "$(uname -m)" = x86_64 ] && host_dylib="$target_dir/x86_64-apple-darwin/$profile/libsignoff_ffi.dylib"
"$target_dir/debug/uniffi-bindgen" generate --library "$host_dylib" --language swift --no-format \
  --config "$here/uniffi-bindgen.toml" --out-dir "$work/gen"
cp "$work/gen/Signoff.swift" "$here/Sources/Signoff/Signoff.swift"
mkdir -p "$here/Sources/SignoffFFI"
cp "$work/gen/SignoffFFI.h" "$work/gen/SignoffFFI.modulemap" "$here/Sources/SignoffFFI/"

# The xcframework's Headers: the header and the module map, which must be named module.modulemap.
mkdir -p "$work/headers"
cp "$work/gen/SignoffFFI.h" "$work/headers/"
cp "$work/gen/SignoffFFI.modulemap" "$work/headers/module.modulemap"

echo "==> lipo: simulator (arm64 + x86_64) and macOS (arm64 + x86_64)"
mkdir -p "$work/ios-simulator" "$work/macos"
lipo -create "$(lib aarch64-apple-ios-sim)" "$(lib x86_64-apple-ios)" -output "$work/ios-simulator/libsignoff_ffi.a"
lipo -create "$(lib aarch64-apple-darwin)" "$(lib x86_64-apple-darwin)" -output "$work/macos/libsignoff_ffi.a"

echo "==> xcodebuild -create-xcframework"
rm -rf "$here/SignoffFFI.xcframework"
xcodebuild -create-xcframework \
  -library "$(lib aarch64-apple-ios)" -headers "$work/headers" \
  -library "$work/ios-simulator/libsignoff_ffi.a" -headers "$work/headers" \
  -library "$work/macos/libsignoff_ffi.a" -headers "$work/headers" \
  -output "$here/SignoffFFI.xcframework"

if [ "$zip" = 1 ]; then
  echo "==> zipping for a release binaryTarget(url:checksum:)"
  rm -f "$here/SignoffFFI.xcframework.zip"
  (cd "$here" && ditto -c -k --sequesterRsrc --keepParent SignoffFFI.xcframework SignoffFFI.xcframework.zip)
  echo "checksum: $(cd "$here" && swift package compute-checksum SignoffFFI.xcframework.zip)"
fi

echo "==> done: $here/SignoffFFI.xcframework"
echo "    next: cd bindings-swift && swift test"
