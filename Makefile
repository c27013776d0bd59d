# `make test` runs every test the repository has; it installs what it needs itself (a private PostgreSQL server
# for the PostgreSQL store's tests: scripts/with-postgres.sh).
# `make demo` runs the main demo (interactive in a terminal; `make demo ARGS="--auto approve"`).
SHELL := /bin/bash
.DEFAULT_GOAL := help
CARGO ?= cargo

.PHONY: help generate test test-all lint test-rust test-python test-console test-node test-swift test-mcp demo remote-demo console-demo bench bench-mcp doc

help:
	@echo "signoff: a person between your AI agent and the tools it calls"
	@echo
	@echo "The two commands:"
	@echo "  make demo          an agent asks to delete files; you approve or deny in this terminal"
	@echo "                     (make demo ARGS=\"--auto approve\", ARGS=\"--auto deny\", ARGS=\"--timeout 10\")"
	@echo "  make test          every test in every language (installs what it needs: a Python venv, npm packages,"
	@echo "                     PostgreSQL; every suite runs against one private server started for the run)"
	@echo
	@echo "The rest:"
	@echo "  make remote-demo   remote approval with signed tokens on the durable store, across a crash"
	@echo "  make console-demo  an agent that keeps asking, and the approval console: open the printed link in a browser"
	@echo "  make lint          cargo fmt --check and clippy with warnings as errors (part of make test)"
	@echo "  make test-rust     the core (memory, SQLite and PostgreSQL stores), the examples and the shared vectors"
	@echo "                     (Rust; starts its own PostgreSQL server unless SIGNOFF_TEST_POSTGRES_URL is set)"
	@echo "  make test-python   the Python package (bindings-python/test.sh)"
	@echo "  make test-console  the approval console in a real browser (headless Chromium, installed when missing;"
	@echo "                     console/test-browser.sh, through the Python package)"
	@echo "  make test-node     the Node package (bindings-node/test.sh)"
	@echo "  make test-swift    the Swift package, through uniffi's Python bindings (bindings-swift/test.sh)"
	@echo "  make test-mcp      the MCP gate and signoff mcp-proxy against @modelcontextprotocol/server-filesystem (npm),"
	@echo "                     driven by the Python SDK mcp==2.3.0 in both protocol eras (mcp/test.sh)"
	@echo "  make bench         the Rust benchmarks and the MCP proxy's (figures in BENCHMARKS.md; make bench-mcp alone)"
	@echo "  make doc           the core's API documentation (target/doc/signoff)"
	@echo "  make generate      rewrite the bindings' generated regions from the core (core/tests/sourcegen.rs), then the"
	@echo "                     Swift sources (uniffi) and Node's native .d.ts (napi) written from them"

# Every suite runs under one private PostgreSQL server (scripts/with-postgres.sh: started here, stopped and deleted
# when the run ends, whatever its outcome); nested targets see SIGNOFF_TEST_POSTGRES_URL and use it.
test:
	scripts/with-postgres.sh $(MAKE) --no-print-directory test-all

test-all: lint test-rust test-python test-console test-node test-swift test-mcp
	@echo "make test: all suites passed"

# The bindings' regions mirroring the core's shapes (`@generated begin/end`), then what the bindings' generators
# write from them: the Swift sources (uniffi) and Node's native `.d.ts` (napi). `make test` fails while either is stale.
generate:
	SIGNOFF_SOURCEGEN=write $(CARGO) test --locked -q -p signoff --test sourcegen
	SIGNOFF_SWIFT_UPDATE=only bindings-swift/test.sh
	cd bindings-node && npm run update-native-types

# Format, lints and the core's API docs, as CI enforces them (rustfmt.toml; warnings are errors). The Node addon's
# functions are only reachable from JavaScript, so its lib is linted without the test harness.
lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --locked --workspace --all-targets --exclude signoff-node -- -D warnings
	$(CARGO) clippy --locked -p signoff-node --lib -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --locked --no-deps -q -p signoff
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --locked --no-deps -q -p signoff --features postgres
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --locked --no-deps -q -p signoff-console
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --locked --no-deps -q -p signoff-mcp

# Alone, it starts its own PostgreSQL server; under `make test` (SIGNOFF_TEST_POSTGRES_URL set), it uses that one.
test-rust:
ifeq ($(SIGNOFF_TEST_POSTGRES_URL),)
	scripts/with-postgres.sh $(MAKE) --no-print-directory test-rust
else
	$(CARGO) test --locked -p signoff -p signoff-console -p signoff-examples -p signoff-cli --features signoff/postgres
	examples/check-demo.sh
	examples/check-remote.sh
	examples/check-quickstart.sh
	examples/check-sdk-loop.sh
	examples/check-postgres-faults.sh
	examples/check-console.sh
endif

test-python:
	bash bindings-python/test.sh

# Drives the console with Playwright through the Python package (built by test-python when missing).
test-console:
	bash console/test-browser.sh

test-node:
	bash bindings-node/test.sh

test-swift:
	bash bindings-swift/test.sh

test-mcp:
	CARGO="$(CARGO)" bash mcp/test.sh

remote-demo:
	$(CARGO) run -q -p signoff-examples --bin remote-approval

console-demo:
	$(CARGO) run -q -p signoff-examples --bin console-demo

# Builds in the open (a fresh clone compiles every dependency first), then runs the binary itself,
# so Ctrl-C reaches the demo alone: it prints its summary and exits with 130, which ends `make`
# quietly (any other failure still fails).
demo:
	@echo "make demo: building the demo (the first build compiles all dependencies and takes a couple of minutes)"
	$(CARGO) build -p signoff-examples --bin demo
	@"$${CARGO_TARGET_DIR:-target}/debug/demo" $(ARGS) || { status=$$?; [ $$status -eq 130 ] || exit $$status; }

bench:
	$(CARGO) bench -p signoff --bench gate
	$(CARGO) bench -p signoff --bench remote
	$(CARGO) run --release -q -p signoff --example durable_latency
	$(CARGO) run --release -q -p signoff --example pending_memory
	$(MAKE) --no-print-directory bench-mcp

# The MCP proxy's latency against its upstream called directly (stdio, rmcp's client).
bench-mcp:
	$(CARGO) build --release -q -p signoff-cli -p signoff-mcp --example bench
	@[ -x mcp/node_modules/.bin/mcp-server-filesystem ] || (cd mcp && npm install --no-audit --no-fund --loglevel=error)
	"$${CARGO_TARGET_DIR:-target}/release/examples/bench" "$${CARGO_TARGET_DIR:-target}/release/signoff" \
		mcp/node_modules/.bin/mcp-server-filesystem 500

doc:
	$(CARGO) doc --no-deps -p signoff
