#!/usr/bin/env bash
# The README's Rust quickstart is examples/src/quickstart.rs, word for word, and it runs.
set -euo pipefail
cd "$(dirname "$0")/.."
block=$(mktemp); out=$(mktemp); trap 'rm -f "$block" "$out"' EXIT
python3 - README.md "$block" <<'PY'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
m = re.search(r"## Rust quickstart\n.*?```rust\n(.*?)```", text, re.S)
assert m, "no ```rust block under '## Rust quickstart' in README.md"
open(sys.argv[2], "w", encoding="utf-8").write(m.group(1))
PY
diff -u examples/src/quickstart.rs "$block" || { echo "README.md's Rust quickstart differs from examples/src/quickstart.rs"; exit 1; }
cargo run --locked -q -p signoff-examples --bin quickstart >"$out"
grep -qF 'the model reads: The user declined this call to `delete_file`, so the tool did not run. Their reason: "not my thesis".' "$out" \
  || { echo "quickstart output:"; cat "$out"; exit 1; }
echo "README Rust quickstart: the same as examples/src/quickstart.rs, and it runs"
# A bare `make` lists the two commands instead of running the whole test suite.
help=$(make --no-print-directory)
grep -q '^  make demo ' <<<"$help" && grep -q '^  make test ' <<<"$help" || { echo "make (no target) should list the two commands:"; echo "$help"; exit 1; }
for f in LICENSE-MIT LICENSE-APACHE; do [ -s "$f" ] || { echo "$f is missing (the manifests say MIT OR Apache-2.0)"; exit 1; }; done
if grep -rn --include=Cargo.toml --include=package.json --include=pyproject.toml 'example\.invalid' . 2>/dev/null | grep -v node_modules; then
  echo "a manifest points to a placeholder URL"; exit 1
fi
echo "make help, licenses and manifests: ok"
