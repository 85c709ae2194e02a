# llmscaleoperator: `make demo` and `make test` are the two entry points (see README.md).
SHELL := /usr/bin/env bash
CLUSTER_PROFILE ?= minimal
CRD_FILE := config/crd/bases/autoscaling.modelsphere.dev_llmscalers.yaml

.PHONY: help build test bench lab lab-quick what-if demo crd manifests deploy undeploy deps cluster-up cluster-down fmt lint clean

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

build: ## Build the operator (debug)
	cargo build --locked

test: ## Format check, clippy, unit and integration tests against a real local control plane
	scripts/test.sh

bench: ## Benchmarks (numbers as ratios from one run; never part of make test)
	scripts/deps.sh
	tests/cluster/up.sh
	tests/cluster/build.sh adapter
	cargo bench --locked --bench policies
	cargo bench --locked --bench extmetrics
	cargo bench --locked --bench operator

lab: ## The scaling-quality lab: the operator against every peer on simulated vLLM traces (≤ 15 min; target/bench/lab/; ARGS="--traces … --delays … --seeds N --profile l40s")
	cargo bench --locked --bench policies -- $(ARGS)

lab-quick: ## The lab on one trace, one start-up delay and 5 seeds (about a minute; ARGS="--profile l40s" for the larger card)
	cargo bench --locked --bench policies -- --quick $(ARGS)

what-if: ## Your own request log (LOG=file, the lab's format): the spec the operator would run for your objective (2 s TTFT / 100 ms TPOT / 99% unless ARGS="--ttft 3 --tpot 0.15 --percentile 95"), and what it, the HPA and KEDA would have cost and attained (ARGS="--delays 90,300")
	cargo bench --locked --bench policies -- --what-if --log $(LOG) --delays 180 $(ARGS)

demo: ## A simulated vLLM fleet scaled live by the operator; a plot of the run at the end (Ctrl-C ends early)
	scripts/demo.sh

crd: ## Regenerate the committed CRD manifest from the Rust types
	cargo run --quiet --locked -- crd > $(CRD_FILE)
	cp $(CRD_FILE) chart/files/llmscalers.yaml

# make deploy IMG=<registry>/llmscaleoperator:<tag> installs (or upgrades) the chart with that image.
HELM ?= $(shell command -v helm 2>/dev/null || echo target/cluster/bin/helm)
RELEASE ?= llmscaleoperator
NAMESPACE ?= llmscaleoperator
HELM_FLAGS ?=

# --take-ownership (Helm 3.17+): a CRD applied with kubectl before (make demo, "From the binary")
# is adopted by the release instead of refusing the install.
deploy: ## Install the chart with IMG=<registry>/llmscaleoperator:<tag> or @sha256:<digest> (RELEASE, NAMESPACE, HELM_FLAGS)
	@test -n "$(IMG)" || { echo "usage: make deploy IMG=<registry>/llmscaleoperator:<tag>" >&2; exit 2; }
	@repo="$(IMG)"; tag=""; digest=""; \
	case "$$repo" in \
	  *@*) digest="$${repo##*@}"; repo="$${repo%@*}";; \
	  *) case "$${repo##*/}" in *:*) tag="$${repo##*:}"; repo="$${repo%:*}";; esac;; \
	esac; \
	set -x; $(HELM) upgrade --install $(RELEASE) chart --namespace $(NAMESPACE) --create-namespace \
	  --take-ownership --set manager.image.repository="$$repo" --set manager.image.tag="$$tag" \
	  --set manager.image.digest="$$digest" $(HELM_FLAGS)

undeploy: ## Uninstall the chart's release (the CRD stays unless crd.keep=false)
	$(HELM) uninstall $(RELEASE) --namespace $(NAMESPACE)

manifests: ## Regenerate apiservice/ (plain manifests) from chart/
	UPDATE_MANIFESTS=1 cargo test --quiet --locked --test chart the_plain_apiservice_manifests_match_the_chart

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
