#!/usr/bin/env bash
# `make demo`: a local control plane, the CRD and the two samples, and the operator running
# against them in the foreground. Ctrl-C stops the operator, then the control plane if this
# script started it.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh
cargo build --locked

started_cluster=1
pid=$(cat target/cluster/pids/kube-apiserver.pid 2>/dev/null || true)
if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then started_cluster=0; fi
CLUSTER_PROFILE=full tests/cluster/up.sh
if [ "$started_cluster" = 1 ] && [ "${KEEP_CLUSTER:-0}" != 1 ]; then
  trap 'echo "demo: stopping the local control plane"; tests/cluster/down.sh' EXIT
fi

export KUBECONFIG=$PWD/target/cluster/kubeconfig
kubectl=target/cluster/bin/kubectl
[ -x "$kubectl" ] || kubectl=kubectl
operator=target/debug/llmscaleoperator

echo "demo: installing the LLMScaler CRD and the samples"
"$operator" crd | "$kubectl" apply --server-side --field-manager=llmscaleoperator-demo -f -
"$kubectl" wait --for condition=Established --timeout=60s crd/llmscalers.autoscaling.modelsphere.dev
"$kubectl" apply -n default -f config/samples/
"$kubectl" get llmscalers -n default

cat <<TXT

demo: the operator now runs against the local control plane; Ctrl-C stops it.
      In another terminal:
        export KUBECONFIG=$KUBECONFIG
        $kubectl get llmscalers -A
        $kubectl explain llmscaler.spec.scaleDown

TXT
# A handler (not an ignore) so Ctrl-C reaches the operator with its default disposition and this
# script carries on to the cleanup once the operator has stopped.
trap 'true' INT
"$operator" run --kubeconfig "$KUBECONFIG" --health-address 127.0.0.1:8081 || status=$?
echo "demo: operator exited with status ${status:-0}"
