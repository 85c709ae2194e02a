#!/usr/bin/env bash
# `make demo`: a local control plane, a Prometheus scraping a metric you can edit, a Deployment
# with an LLMScaler on it, and the operator in the foreground. Ctrl-C stops everything this
# script started.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh
cargo build --locked --bin llmscaleoperator --example demo_exporter --example decision_server

demo_dir=$PWD/target/demo
mkdir -p "$demo_dir"
pids=()
started_cluster=1
pid=$(cat target/cluster/pids/kube-apiserver.pid 2>/dev/null || true)
if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then started_cluster=0; fi
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  if [ "$started_cluster" = 1 ] && [ "${KEEP_CLUSTER:-0}" != 1 ]; then
    echo "demo: stopping the local control plane"
    tests/cluster/down.sh
  fi
}
trap cleanup EXIT
CLUSTER_PROFILE=full tests/cluster/up.sh

export KUBECONFIG=$PWD/target/cluster/kubeconfig
kubectl=target/cluster/bin/kubectl
operator=target/debug/llmscaleoperator
exporter_port=${DEMO_EXPORTER_PORT:-19100}
prometheus_port=${DEMO_PROMETHEUS_PORT:-19090}
decision_port=${DEMO_DECISION_PORT:-19200}
metrics_file=$demo_dir/metrics.prom
decision_file=$demo_dir/decision

# The load: total waiting requests across the fleet. The exporter divides it by the ready
# replicas, so the per-replica queue depth falls as the fleet grows.
echo 6 > "$metrics_file"
target/debug/examples/demo_exporter "127.0.0.1:$exporter_port" "$metrics_file" default vllm-demo &
pids+=($!)
cat > "$demo_dir/prometheus.yml" <<YAML
global: { scrape_interval: 2s, evaluation_interval: 2s }
scrape_configs:
  - job_name: vllm-demo
    static_configs: [{ targets: ['127.0.0.1:$exporter_port'] }]
YAML
prometheus --config.file="$demo_dir/prometheus.yml" --storage.tsdb.path="$demo_dir/prometheus-data" \
  --web.listen-address="127.0.0.1:$prometheus_port" > "$demo_dir/prometheus.log" 2>&1 &
pids+=($!)
# The Custom sample's decision server: the replica count it hands out is in a file.
echo 4 > "$decision_file"
target/debug/examples/decision_server "127.0.0.1:$decision_port" "$decision_file" &
pids+=($!)

echo "demo: installing the LLMScaler CRD, two Deployments and their scalers"
"$operator" crd | "$kubectl" apply --server-side --field-manager=llmscaleoperator-demo -f -
"$kubectl" wait --for condition=Established --timeout=60s crd/llmscalers.autoscaling.modelsphere.dev
"$kubectl" apply -f - <<YAML
apiVersion: apps/v1
kind: Deployment
metadata: { name: vllm-demo, namespace: default, labels: { app: vllm-demo } }
spec:
  replicas: 1
  selector: { matchLabels: { app: vllm-demo } }
  template:
    metadata: { labels: { app: vllm-demo } }
    spec: { containers: [{ name: vllm, image: "registry.k8s.io/pause:3.10" }] }
---
apiVersion: autoscaling.modelsphere.dev/v1alpha1
kind: LLMScaler
metadata: { name: vllm-demo, namespace: default }
spec:
  targetRef: { apiVersion: apps/v1, kind: Deployment, name: vllm-demo }
  serverAddress: "http://127.0.0.1:$prometheus_port"
  minReplicas: 0
  maxReplicas: 8
  syncPeriodSeconds: 5
  metrics:
    - name: queue-depth
      query: 'avg(vllm:num_requests_waiting{namespace="default", app="vllm-demo"})'
      target: "2"
  scaleDown: { stabilizationWindowSeconds: 30, maxStepReplicas: 2 }
---
apiVersion: apps/v1
kind: Deployment
metadata: { name: fallback-modelforge-01, namespace: default, labels: { app: fallback-modelforge-01 } }
spec:
  replicas: 1
  selector: { matchLabels: { app: fallback-modelforge-01 } }
  template:
    metadata: { labels: { app: fallback-modelforge-01 } }
    spec: { containers: [{ name: vllm, image: "registry.k8s.io/pause:3.10" }] }
YAML
# The Custom sample as shipped, pointed at the local decision server instead of the in-cluster one.
"$kubectl" apply -n default -f config/samples/autoscaling_v1alpha1_llmscaler_customprovider.yaml
"$kubectl" patch -n default llmscaler llmscaler-custom-provider-sample --type merge \
  -p "{\"spec\": {\"serverAddress\": \"http://127.0.0.1:$decision_port\"}}"

cat <<TXT

demo: the operator now scales Deployment vllm-demo on its queue depth. The total number of
      waiting requests is in $metrics_file (now 6); with a target of 2 per replica,
      expect 1 -> 3 replicas. In another terminal:
        export KUBECONFIG=$KUBECONFIG
        watch $kubectl get llmscalers,deployments -n default
        echo 15 > $metrics_file    # busier: 8 replicas (maxReplicas)
        echo 0 > $metrics_file     # idle: after the 30 s window, walks down 2 at a time to 0
        $kubectl describe llmscaler vllm-demo -n default    # conditions and events
      The Custom sample follows the decision server's count in $decision_file (now 4):
        echo 12 > $decision_file   # fallback-modelforge-01 goes to 12 at once
        echo 1 > $decision_file    # and back down, 1 replica per step after a 180 s window
      Ctrl-C stops the operator and everything the demo started.

TXT
# A handler (not an ignore) so Ctrl-C reaches the operator with its default disposition and this
# script carries on to the cleanup once the operator has stopped.
trap 'true' INT
"$operator" run --kubeconfig "$KUBECONFIG" --health-address 127.0.0.1:8081 --extmetrics-address 127.0.0.1:6443 || status=$?
echo "demo: operator exited with status ${status:-0}"
