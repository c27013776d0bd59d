# `make test` runs every test the repository has; it installs what it needs itself.
# `make demo` runs the main demo (interactive in a terminal; `make demo ARGS="--auto approve"`).
SHELL := /bin/bash
.DEFAULT_GOAL := test
CARGO ?= cargo

.PHONY: test test-rust test-python test-node test-swift demo remote-demo bench doc

test: test-rust test-python test-node test-swift
	@echo "make test: all suites passed"

test-rust:
	$(CARGO) test --locked -p signoff -p signoff-examples
	examples/check-demo.sh
	examples/check-remote.sh

test-python:
	@if [ -x bindings-python/test.sh ]; then bindings-python/test.sh; else echo "bindings-python: not present"; fi

test-node:
	@if [ -x bindings-node/test.sh ]; then bindings-node/test.sh; else echo "bindings-node: not present"; fi

test-swift:
	@if [ -x bindings-swift/test.sh ]; then bindings-swift/test.sh; else echo "bindings-swift: not present"; fi

remote-demo:
	$(CARGO) run -q -p signoff-examples --bin remote-approval

demo:
	$(CARGO) run -q -p signoff-examples --bin demo -- $(ARGS)

bench:
	$(CARGO) bench -p signoff --bench gate
	$(CARGO) bench -p signoff --bench remote
	$(CARGO) run --release -q -p signoff --example durable_latency
	$(CARGO) run --release -q -p signoff --example pending_memory

doc:
	$(CARGO) doc --no-deps -p signoff
