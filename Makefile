# llmscaleoperator: `make demo` and `make test` are the two entry points (see README.md).
SHELL := /usr/bin/env bash
CLUSTER_PROFILE ?= minimal
CRD_FILE := config/crd/bases/autoscaling.modelsphere.dev_llmscalers.yaml

.PHONY: help build test bench demo crd deps cluster-up cluster-down fmt lint clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

build: ## Build the operator (debug)
	cargo build --locked

test: ## Format check, clippy, unit and integration tests against a real local control plane
	scripts/test.sh

bench: ## Benchmarks (numbers as ratios from one run; never part of make test)
	tests/cluster/up.sh
	cargo bench --locked --bench extmetrics

demo: ## Start the local control plane, install the CRD and samples, run the operator (Ctrl-C stops)
	scripts/demo.sh

crd: ## Regenerate the committed CRD manifest from the Rust types
	cargo run --quiet --locked -- crd > $(CRD_FILE)
	cp $(CRD_FILE) chart/files/llmscalers.yaml

deps: ## Install missing tools (apt packages, rustfmt, clippy)
	scripts/deps.sh

cluster-up: ## Start or reuse the local control plane (CLUSTER_PROFILE=minimal|full)
	CLUSTER_PROFILE=$(CLUSTER_PROFILE) tests/cluster/up.sh

cluster-down: ## Stop the processes cluster-up started
	tests/cluster/down.sh

fmt: ## Format the code
	cargo fmt --all

lint: ## cargo fmt --check and clippy -D warnings
	cargo fmt --all -- --check
	cargo clippy --locked --all-targets -- -D warnings
