#!/usr/bin/env bash
# `make test`: formatting, lints, unit tests and the integration tests against a real local
# control plane (started here when none is running, and stopped again if this script started it).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
step() { printf '\n==> %s (%ss)\n' "$*" "$(( $(date +%s) - start ))"; }

step "dependencies"
scripts/deps.sh

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy"
cargo clippy --locked --all-targets -- -D warnings

step "local control plane (full profile)"
# Leave a cluster that was already running as it was found; stop one this run started.
started_cluster=1
pid=$(cat target/cluster/pids/kube-apiserver.pid 2>/dev/null || true)
if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then started_cluster=0; fi
CLUSTER_PROFILE=full tests/cluster/up.sh
if [ "$started_cluster" = 1 ] && [ "${KEEP_CLUSTER:-0}" != 1 ]; then
  trap 'tests/cluster/down.sh || true' EXIT
fi

step "the vLLM conformance test's servers: llm-d inference simulator, Prometheus with Kubernetes SD"
tests/cluster/build.sh inference-sim
tests/cluster/build.sh prometheus

step "cargo test"
log=$(mktemp)
status=0
cargo test --locked --no-fail-fast 2>&1 | tee "$log" || status=$?
passed=$(grep -Eo '^test result: [A-Za-z]+\. [0-9]+ passed' "$log" | awk '{s += $4} END {print s + 0}')
failed=$(grep -Eo '[0-9]+ failed;' "$log" | awk '{s += $1} END {print s + 0}')
rm -f "$log"

step "done"
# One closing line for the whole suite (cargo prints one per test binary).
echo "$passed passed, $failed failed"
exit "$status"
