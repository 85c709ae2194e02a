#!/usr/bin/env bash
# `make demo`: a local control plane, a simulated vLLM fleet (sim/) replaying a request trace over
# the pods of a Deployment, a Prometheus scraping it, an LLMScaler on the Deployment and the
# operator. A status line a second shows the load, the KV cache, the queue and the replicas; at
# the end (DEMO_SECONDS, or Ctrl-C) a plot of the run is written. Everything this script started
# is stopped.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh
cargo build --locked --bin llmscaleoperator --example decision_server
cargo build --locked -p llmscaleoperator-sim --bin fleet-sim

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
sim_port=${DEMO_SIM_PORT:-19100}
prometheus_port=${DEMO_PROMETHEUS_PORT:-19090}
decision_port=${DEMO_DECISION_PORT:-19200}
decision_file=$demo_dir/decision
# The scenario (trace, speed, length, pods' start-up) is config/demo/scenario.env, the one
# tests/demo_scenario.rs checks in simulated time; each value can be overridden from the
# environment.
# shellcheck source=config/demo/scenario.env
. config/demo/scenario.env
trace=$DEMO_TRACE
speed=$DEMO_SPEED
seconds=$DEMO_SECONDS
plot=$demo_dir/run.svg

cat > "$demo_dir/prometheus.yml" <<YAML
global: { scrape_interval: 2s, evaluation_interval: 2s }
scrape_configs:
  - job_name: vllm-demo
    static_configs: [{ targets: ['127.0.0.1:$sim_port'] }]
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
sed "s|PROMETHEUS_ADDRESS|http://127.0.0.1:$prometheus_port|" config/demo/vllm-demo.yaml | "$kubectl" apply -f -
"$kubectl" apply -f - <<YAML
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

demo: the operator scales Deployment vllm-demo on its simulated fleet's load: the $trace trace,
      ${speed}x real time, for ${seconds} s. In another terminal:
        export KUBECONFIG=$KUBECONFIG
        watch $kubectl get llmscalers,deployments -n default
        $kubectl describe llmscaler vllm-demo -n default    # conditions and events
      The Custom sample follows the decision server's count in $decision_file (now 4):
        echo 12 > $decision_file   # fallback-modelforge-01 goes to 12 at once
      The operator's log is in $demo_dir/operator.log. Ctrl-C ends the run early.

TXT
"$operator" run --kubeconfig "$KUBECONFIG" --health-address 127.0.0.1:8081 --extmetrics-address 127.0.0.1:6443 \
  > "$demo_dir/operator.log" 2>&1 &
pids+=($!)
# A handler (not an ignore) so Ctrl-C reaches the simulator with its default disposition and this
# script carries on to write the plot and clean up.
trap 'true' INT
target/debug/fleet-sim --kubeconfig "$KUBECONFIG" --namespace default --selector app=vllm-demo \
  --listen "127.0.0.1:$sim_port" --trace "$trace" --duration "$(( seconds * speed ))" --speed "$speed" \
  --startup-delay "$DEMO_STARTUP_DELAY" --deployment vllm-demo --scaler vllm-demo --progress --seconds "$seconds" \
  --plot "$plot" || status=$?
echo "demo: finished (status ${status:-0}); the plot of the run is $plot"
