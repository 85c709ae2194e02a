#!/usr/bin/env bash
# Start (or reuse) the local test control plane. See tests/cluster/README.md.
#
#   tests/cluster/up.sh                       etcd + kube-apiserver ("minimal")
#   CLUSTER_PROFILE=full tests/cluster/up.sh  + kube-controller-manager, kube-scheduler,
#                                             kwok and 2 fake Nodes ("full")
#
# A running cluster is reused when our processes (pid files) are alive and /readyz is ok;
# asking for "full" on a running minimal cluster adds the missing components.
#
#   tests/cluster/up.sh restart-apiserver     start kube-apiserver again with the same flags
#                                             (stopping it first if it runs) on the same etcd,
#                                             then the other components afresh
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

PROFILE=${CLUSTER_PROFILE:-minimal}
case "$PROFILE" in
  minimal | full) ;;
  *) die "CLUSTER_PROFILE must be 'minimal' or 'full' (got '$PROFILE')" ;;
esac
# Off by default: with routing on, the aggregator dials an extension server at its Service's
# endpoint IP, and endpoints may not be loopback. Off, it dials the Service itself, and an
# ExternalName Service pointing at localhost reaches a server the tests run on 127.0.0.1.
AGGREGATOR_ROUTING=${CLUSTER_AGGREGATOR_ROUTING:-false}

for tool in curl openssl jq base64 setsid; do
  command -v "$tool" >/dev/null 2>&1 || die "'$tool' is required but not on PATH"
done

if [[ "${CLUSTER_SKIP_BUILD:-0}" == 1 ]]; then
  log "CLUSTER_SKIP_BUILD=1: using the binaries already in ${BIN_DIR#"$REPO_ROOT"/}"
elif [[ "$PROFILE" == full ]]; then
  "$CLUSTER_SCRIPT_DIR/build.sh" all
else
  "$CLUSTER_SCRIPT_DIR/build.sh" minimal
fi

mkdir -p "$PKI_DIR" "$LOG_DIR" "$PID_DIR"
exec 8>"$STATE_DIR/.up.lock"
flock -n 8 || { log "another up.sh/down.sh is running; waiting for it"; flock 8; }

# ---------------------------------------------------------------- helpers

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

require_free_port() {
  local port=$1 what=$2
  if port_in_use "$port"; then
    die "port 127.0.0.1:$port ($what) is already in use by another process; free it or override the port (see tests/cluster/README.md)"
  fi
}

# start_component NAME ARGS... : run target/cluster/bin/NAME detached in its own session.
start_component() {
  local c=$1
  shift
  local bin=$BIN_DIR/$c logf
  logf=$(log_file "$c")
  [[ -x "$bin" ]] || die "$bin is missing; run tests/cluster/build.sh"
  [[ -f "$logf" ]] && mv -f "$logf" "$logf.prev"
  {
    printf '# started %s\n# %s' "$(date -u +%FT%TZ)" "$bin"
    printf ' %q' "$@"
    printf '\n'
  } >"$logf"
  # setsid: own session/process group, so the component outlives this shell and
  # never receives its terminal's signals. In a script the background job is not a
  # group leader, so setsid execs in place and $! is the component's own PID.
  # 8>&-: do not hand our lock file descriptor to the long-running component.
  setsid "$bin" "$@" >>"$logf" 2>&1 </dev/null 8>&- &
  local pid=$!
  printf '%s\n' "$pid" >"$(pid_file "$c")"
  log "$c: started pid $pid (log: ${logf#"$REPO_ROOT"/})"
}

# wait_until COMPONENT DESCRIPTION COMMAND... : poll COMMAND until it succeeds,
# failing early if the component exits, and at the READY_TIMEOUT deadline.
wait_until() {
  local c=$1 what=$2
  shift 2
  local deadline=$((SECONDS + READY_TIMEOUT)) delay=0.1
  until "$@"; do
    if ! is_starting_or_running "$c"; then
      show_log_tail "$c"
      die "$c exited while waiting for $what"
    fi
    if ((SECONDS >= deadline)); then
      show_log_tail "$c"
      die "$c: $what not reached within ${READY_TIMEOUT}s (CLUSTER_READY_TIMEOUT)"
    fi
    sleep "$delay"
    [[ "$delay" == 0.1 ]] && delay=0.5
  done
  log "$c: $what"
}

https_healthz() { [[ "$(curl -sk --max-time 5 "https://127.0.0.1:$1/healthz" 2>/dev/null)" == ok ]]; }
etcd_healthy() { curl -sf --max-time 5 "http://127.0.0.1:$ETCD_CLIENT_PORT/health" 2>/dev/null | grep -q '"health":"true"'; }
kwok_healthy() { [[ "$(curl -sf --max-time 5 "http://127.0.0.1:$KWOK_PORT/healthz" 2>/dev/null)" == ok ]]; }

# ---------------------------------------------------------------- PKI

# sign NAME CN O EXT_FILE_CONTENT [CA_NAME]: ECDSA P-256 key + cert signed by CA_NAME (default ca).
sign() {
  local name=$1 cn=$2 org=$3 ext=$4 ca=${5:-ca}
  local subj="/CN=$cn"
  [[ -n "$org" ]] && subj="/O=$org$subj"
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$PKI_DIR/$name.key" 2>/dev/null
  openssl req -new -key "$PKI_DIR/$name.key" -subj "$subj" -out "$PKI_DIR/$name.csr"
  openssl x509 -req -in "$PKI_DIR/$name.csr" -CA "$PKI_DIR/$ca.crt" -CAkey "$PKI_DIR/$ca.key" \
    -set_serial "0x$(openssl rand -hex 16)" -days 365 -sha256 \
    -extfile <(printf '%s\n' "$ext") -out "$PKI_DIR/$name.crt" 2>/dev/null
  rm -f "$PKI_DIR/$name.csr"
}

make_ca() {
  local name=$1 cn=$2
  openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$PKI_DIR/$name.key" 2>/dev/null
  openssl req -x509 -new -key "$PKI_DIR/$name.key" -subj "/CN=$cn" -days 3650 -sha256 \
    -set_serial "0x$(openssl rand -hex 16)" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
    -addext "subjectKeyIdentifier=hash" \
    -out "$PKI_DIR/$name.crt"
}

PKI_CERTS=(ca front-proxy-ca apiserver admin front-proxy-client kube-controller-manager kube-scheduler)

pki_valid() {
  local n
  for n in "${PKI_CERTS[@]}"; do
    [[ -s "$PKI_DIR/$n.crt" && -s "$PKI_DIR/$n.key" ]] || return 1
    openssl x509 -in "$PKI_DIR/$n.crt" -noout -checkend 86400 >/dev/null 2>&1 || return 1
  done
  [[ -s "$PKI_DIR/sa.key" && -s "$PKI_DIR/sa.pub" ]] || return 1
  # the serving cert must still match the configured service range's first IP
  openssl x509 -in "$PKI_DIR/apiserver.crt" -noout -ext subjectAltName 2>/dev/null | grep -q "IP Address:$(first_service_ip)\b"
}

first_service_ip() {
  local net=${SERVICE_CIDR%/*}
  local a b c d
  IFS=. read -r a b c d <<<"$net"
  printf '%s.%s.%s.%s' "$a" "$b" "$c" $((d + 1))
}

ensure_pki() {
  if pki_valid; then
    log "PKI: reusing ${PKI_DIR#"$REPO_ROOT"/}"
    return
  fi
  log "PKI: generating in ${PKI_DIR#"$REPO_ROOT"/}"
  rm -rf "$PKI_DIR"
  mkdir -p "$PKI_DIR"
  chmod 700 "$PKI_DIR"
  local client_ext='basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth
authorityKeyIdentifier=keyid'
  make_ca ca llmscaleoperator-test-ca
  make_ca front-proxy-ca llmscaleoperator-test-front-proxy-ca
  sign apiserver kube-apiserver "" "basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
authorityKeyIdentifier=keyid
subjectAltName=IP:127.0.0.1,DNS:localhost,IP:$(first_service_ip),DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  sign admin kubernetes-admin system:masters "$client_ext"
  sign kube-controller-manager system:kube-controller-manager "" "$client_ext"
  sign kube-scheduler system:kube-scheduler "" "$client_ext"
  sign front-proxy-client front-proxy-client "" "$client_ext" front-proxy-ca
  openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$PKI_DIR/sa.key" 2>/dev/null
  openssl pkey -in "$PKI_DIR/sa.key" -pubout -out "$PKI_DIR/sa.pub"
  chmod 600 "$PKI_DIR"/*.key
}

# write_kubeconfig FILE CERT_NAME USER
write_kubeconfig() {
  local file=$1 cert=$2 user=$3 tmp
  tmp=$(mktemp "$file.XXXXXX")
  cat >"$tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: llmscaleoperator-test
  cluster:
    server: https://127.0.0.1:$APISERVER_PORT
    certificate-authority-data: $(base64 -w0 <"$PKI_DIR/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $(base64 -w0 <"$PKI_DIR/$cert.crt")
    client-key-data: $(base64 -w0 <"$PKI_DIR/$cert.key")
contexts:
- name: llmscaleoperator-test
  context:
    cluster: llmscaleoperator-test
    user: $user
    namespace: default
current-context: llmscaleoperator-test
EOF
  chmod 600 "$tmp"
  mv -f "$tmp" "$file"
}

write_kubeconfigs() {
  write_kubeconfig "$KUBECONFIG_FILE" admin admin
  write_kubeconfig "$STATE_DIR/kube-controller-manager.kubeconfig" kube-controller-manager system:kube-controller-manager
  write_kubeconfig "$STATE_DIR/kube-scheduler.kubeconfig" kube-scheduler system:kube-scheduler
}

# ---------------------------------------------------------------- components

start_etcd() {
  require_free_port "$ETCD_CLIENT_PORT" "etcd client, CLUSTER_ETCD_CLIENT_PORT"
  require_free_port "$ETCD_PEER_PORT" "etcd peer, CLUSTER_ETCD_PEER_PORT"
  rm -rf "$STATE_DIR/etcd-data"
  start_component etcd \
    --name=llmscaleoperator-test \
    --data-dir="$STATE_DIR/etcd-data" \
    --listen-client-urls="http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --advertise-client-urls="http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --listen-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls="http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster="llmscaleoperator-test=http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster-state=new \
    --unsafe-no-fsync=true \
    --log-level=warn
  wait_until etcd "healthy on 127.0.0.1:$ETCD_CLIENT_PORT" etcd_healthy
}

start_apiserver() {
  require_free_port "$APISERVER_PORT" "kube-apiserver, CLUSTER_APISERVER_PORT"
  mkdir -p "$STATE_DIR/apiserver-certs"
  # --advertise-address=127.0.0.1 is accepted, but Endpoints/EndpointSlices may not hold
  # loopback IPs, so the default "kubernetes" endpoint reconciler would fail every 10s
  # ("Endpoints kubernetes is invalid ... may not be in the loopback range"). With
  # --endpoint-reconciler-type=none the Service default/kubernetes exists without endpoints;
  # nothing in this cluster runs in a pod that would need them.
  start_component kube-apiserver \
    --etcd-servers="http://127.0.0.1:$ETCD_CLIENT_PORT" \
    --bind-address=127.0.0.1 \
    --advertise-address=127.0.0.1 \
    --endpoint-reconciler-type=none \
    --secure-port="$APISERVER_PORT" \
    --cert-dir="$STATE_DIR/apiserver-certs" \
    --tls-cert-file="$PKI_DIR/apiserver.crt" \
    --tls-private-key-file="$PKI_DIR/apiserver.key" \
    --client-ca-file="$PKI_DIR/ca.crt" \
    --authorization-mode=Node,RBAC \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$PKI_DIR/sa.pub" \
    --service-account-signing-key-file="$PKI_DIR/sa.key" \
    --requestheader-client-ca-file="$PKI_DIR/front-proxy-ca.crt" \
    --requestheader-allowed-names=front-proxy-client \
    --requestheader-username-headers=X-Remote-User \
    --requestheader-group-headers=X-Remote-Group \
    --requestheader-extra-headers-prefix=X-Remote-Extra- \
    --proxy-client-cert-file="$PKI_DIR/front-proxy-client.crt" \
    --proxy-client-key-file="$PKI_DIR/front-proxy-client.key" \
    --enable-aggregator-routing="$AGGREGATOR_ROUTING" \
    --allow-privileged=true \
    --profiling=false
  wait_until kube-apiserver "ready (https://127.0.0.1:$APISERVER_PORT/readyz)" apiserver_ready
}

KCM_CONTROLLERS=(
  deployment-controller replicaset-controller statefulset-controller daemonset-controller
  job-controller cronjob-controller horizontal-pod-autoscaler-controller garbage-collector-controller
  serviceaccount-controller serviceaccount-token-controller endpoints-controller
  endpointslice-controller endpointslice-mirroring-controller namespace-controller
  node-lifecycle-controller taint-eviction-controller pod-garbage-collector-controller
  disruption-controller resourcequota-controller replicationcontroller-controller
  clusterrole-aggregation-controller root-ca-certificate-publisher-controller
  ttl-after-finished-controller
)

start_kcm() {
  require_free_port "$KCM_PORT" "kube-controller-manager, CLUSTER_KCM_PORT"
  local kc=$STATE_DIR/kube-controller-manager.kubeconfig
  start_component kube-controller-manager \
    --kubeconfig="$kc" \
    --authentication-kubeconfig="$kc" \
    --authorization-kubeconfig="$kc" \
    --bind-address=127.0.0.1 \
    --secure-port="$KCM_PORT" \
    --leader-elect=false \
    --service-account-private-key-file="$PKI_DIR/sa.key" \
    --root-ca-file="$PKI_DIR/ca.crt" \
    --use-service-account-credentials=true \
    --controllers="$(
      IFS=,
      echo "${KCM_CONTROLLERS[*]}"
    )" \
    --profiling=false
  wait_until kube-controller-manager "healthy (https://127.0.0.1:$KCM_PORT/healthz)" https_healthz "$KCM_PORT"
}

start_scheduler() {
  require_free_port "$SCHEDULER_PORT" "kube-scheduler, CLUSTER_SCHEDULER_PORT"
  local kc=$STATE_DIR/kube-scheduler.kubeconfig
  start_component kube-scheduler \
    --kubeconfig="$kc" \
    --authentication-kubeconfig="$kc" \
    --authorization-kubeconfig="$kc" \
    --bind-address=127.0.0.1 \
    --secure-port="$SCHEDULER_PORT" \
    --leader-elect=false \
    --profiling=false
  wait_until kube-scheduler "healthy (https://127.0.0.1:$SCHEDULER_PORT/healthz)" https_healthz "$SCHEDULER_PORT"
}

start_kwok() {
  require_free_port "$KWOK_PORT" "kwok, CLUSTER_KWOK_PORT"
  mkdir -p "$STATE_DIR/kwok"
  # KWOK_WORKDIR keeps kwok from loading a user's ~/.kwok/kwok.yaml.
  # --node-ip=127.0.0.1: anything that dials a fake node (kubectl logs/exec) stays on loopback.
  KWOK_WORKDIR="$STATE_DIR/kwok" start_component kwok \
    --config="$CLUSTER_SCRIPT_DIR/kwok/stages.yaml" \
    --kubeconfig="$KUBECONFIG_FILE" \
    --manage-all-nodes=false \
    --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    --node-ip=127.0.0.1 \
    --cidr="$KWOK_POD_CIDR" \
    --node-lease-duration-seconds=40 \
    --server-address="127.0.0.1:$KWOK_PORT"
  wait_until kwok "healthy (http://127.0.0.1:$KWOK_PORT/healthz)" kwok_healthy
}

FAKE_NODES=(kwok-node-0 kwok-node-1)

node_json() {
  jq -n --arg name "$1" '{
    apiVersion: "v1", kind: "Node",
    metadata: {
      name: $name,
      annotations: {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
      labels: {
        "kubernetes.io/hostname": $name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
        "node-role.kubernetes.io/agent": "", "type": "kwok"
      }
    },
    spec: {},
    status: {
      allocatable: {cpu: "1000", memory: "1Ti", pods: "1000", "ephemeral-storage": "1Ti"},
      capacity:    {cpu: "1000", memory: "1Ti", pods: "1000", "ephemeral-storage": "1Ti"}
    }
  }'
}

ensure_fake_nodes() {
  local n code
  for n in "${FAKE_NODES[@]}"; do
    code=$(api_curl -o "$STATE_DIR/.node-create.out" -w '%{http_code}' -X POST \
      -H 'Content-Type: application/json' --data-binary "$(node_json "$n")" \
      "https://127.0.0.1:$APISERVER_PORT/api/v1/nodes") || die "creating Node $n failed (curl)"
    case "$code" in
      201) log "node $n: created" ;;
      409) log "node $n: exists" ;;
      *) die "creating Node $n failed: HTTP $code: $(cat "$STATE_DIR/.node-create.out")" ;;
    esac
  done
  rm -f "$STATE_DIR/.node-create.out"
}

nodes_ready() {
  local n
  for n in "${FAKE_NODES[@]}"; do
    api_curl --fail "https://127.0.0.1:$APISERVER_PORT/api/v1/nodes/$n" 2>/dev/null |
      jq -e '(.status.conditions // []) | any(.type == "Ready" and .status == "True")' >/dev/null 2>&1 ||
      return 1
  done
}

# ---------------------------------------------------------------- main

# A running apiserver started with another aggregator-routing setting is restarted.
apiserver_flags_match() {
  tr '\0' '\n' <"/proc/$(component_pid kube-apiserver)/cmdline" 2>/dev/null |
    grep -qx -- "--enable-aggregator-routing=$AGGREGATOR_ROUTING"
}

if [[ "${1:-}" == restart-apiserver ]]; then
  # For tests of clients surviving an apiserver restart: etcd keeps the data, the components
  # that talk to the apiserver reconnect by themselves.
  is_running etcd || die "restart-apiserver: etcd is not running; start the cluster first"
  stop_component kube-apiserver
  start_apiserver
  # Not every controller here comes back whole from losing its apiserver (kube-controller-manager
  # was seen with a ReplicaSet at 4 that never created its pods): the rest start afresh, so the
  # client under test is the only one that had to survive.
  if is_running kube-controller-manager; then stop_component kube-controller-manager; start_kcm; fi
  if is_running kube-scheduler; then stop_component kube-scheduler; start_scheduler; fi
  if is_running kwok; then
    stop_component kwok
    start_kwok
    wait_until kwok "fake nodes ${FAKE_NODES[*]} Ready" nodes_ready
  fi
  exit 0
fi

core_ok=0
if is_running etcd && is_running kube-apiserver && apiserver_ready && apiserver_flags_match; then
  core_ok=1
  log "reusing running etcd (pid $(component_pid etcd)) and kube-apiserver (pid $(component_pid kube-apiserver))"
else
  leftovers=()
  for c in "${ALL_COMPONENTS[@]}"; do [[ -e "$(pid_file "$c")" ]] && leftovers+=("$c"); done
  if ((${#leftovers[@]})); then
    log "control plane not healthy; stopping leftovers of ours: ${leftovers[*]}"
    for c in "${ALL_COMPONENTS[@]}"; do stop_component "$c"; done
  fi
  rm -f "$PROFILE_FILE"
  ensure_pki
  write_kubeconfigs
  start_etcd
  start_apiserver
fi

if [[ "$PROFILE" == full ]]; then
  # (re)write kubeconfigs in case a reused minimal cluster predates them
  [[ -s "$STATE_DIR/kube-controller-manager.kubeconfig" && -s "$STATE_DIR/kube-scheduler.kubeconfig" ]] || write_kubeconfigs
  if is_running kube-controller-manager; then log "kube-controller-manager: reusing pid $(component_pid kube-controller-manager)"; else stop_component kube-controller-manager; start_kcm; fi
  if is_running kube-scheduler; then log "kube-scheduler: reusing pid $(component_pid kube-scheduler)"; else stop_component kube-scheduler; start_scheduler; fi
  if is_running kwok; then log "kwok: reusing pid $(component_pid kwok)"; else stop_component kwok; start_kwok; fi
  ensure_fake_nodes
  wait_until kwok "fake nodes ${FAKE_NODES[*]} Ready" nodes_ready
fi

running_profile=minimal
all_extras=1
for c in "${FULL_EXTRAS[@]}"; do is_running "$c" || all_extras=0; done
((all_extras)) && running_profile=full
printf '%s\n' "$running_profile" >"$PROFILE_FILE"

((core_ok)) && [[ "$PROFILE" == minimal && "$running_profile" == full ]] &&
  log "note: a full cluster was already running; leaving it as is"

log "cluster up (profile: $running_profile)"
log "  kubeconfig: ${KUBECONFIG_FILE#"$REPO_ROOT"/}  (server https://127.0.0.1:$APISERVER_PORT)"
log "  try: kubectl --kubeconfig ${KUBECONFIG_FILE#"$REPO_ROOT"/} get --raw /readyz"
