# Shared settings and helpers for tests/cluster/{up,down}.sh. Source it; do not run it.
# shellcheck shell=bash disable=SC2034 # variables are used by the scripts that source this file

CLUSTER_SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$CLUSTER_SCRIPT_DIR/../.." && pwd)

STATE_DIR=$REPO_ROOT/target/cluster
BIN_DIR=$STATE_DIR/bin
PKI_DIR=$STATE_DIR/pki
LOG_DIR=$STATE_DIR/logs
PID_DIR=$STATE_DIR/pids
KUBECONFIG_FILE=$STATE_DIR/kubeconfig
PROFILE_FILE=$STATE_DIR/profile

# Ports (all listeners bind 127.0.0.1 only).
ETCD_CLIENT_PORT=${CLUSTER_ETCD_CLIENT_PORT:-12379}
ETCD_PEER_PORT=${CLUSTER_ETCD_PEER_PORT:-12380}
APISERVER_PORT=${CLUSTER_APISERVER_PORT:-16443}
KCM_PORT=${CLUSTER_KCM_PORT:-16457}
SCHEDULER_PORT=${CLUSTER_SCHEDULER_PORT:-16459}
KWOK_PORT=${CLUSTER_KWOK_PORT:-16247}

SERVICE_CIDR=${CLUSTER_SERVICE_CIDR:-10.96.0.0/16}
KWOK_POD_CIDR=${CLUSTER_KWOK_POD_CIDR:-10.0.0.0/16}
READY_TIMEOUT=${CLUSTER_READY_TIMEOUT:-120}
STOP_TIMEOUT=${CLUSTER_STOP_TIMEOUT:-20}

# Stop order; start order is the reverse.
ALL_COMPONENTS=(kwok kube-scheduler kube-controller-manager kube-apiserver etcd)
FULL_EXTRAS=(kube-controller-manager kube-scheduler kwok)

log() { printf '[cluster] %s\n' "$*" >&2; }
die() { printf '[cluster] ERROR: %s\n' "$*" >&2; exit 1; }

pid_file() { printf '%s/%s.pid' "$PID_DIR" "$1"; }
log_file() { printf '%s/%s.log' "$LOG_DIR" "$1"; }

# Prints the PID of COMPONENT if its pid file names a live process that is our binary
# (argv[0] is target/cluster/bin/COMPONENT), so a recycled PID is never mistaken for ours.
component_pid() {
  local c=$1 f pid arg0
  f=$(pid_file "$c")
  [[ -s "$f" ]] || return 1
  pid=$(<"$f")
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  arg0=$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | head -n1) || return 1
  [[ "$arg0" == "$BIN_DIR/$c" ]] || return 1
  printf '%s' "$pid"
}

is_running() { component_pid "$1" >/dev/null; }

# True while the process up.sh just started for COMPONENT is alive. Right after the
# `setsid BIN &` fork, /proc/PID/cmdline still shows bash or setsid until the exec
# lands, so is_running would call a component that is merely starting "exited"
# (a CI run failed that way on a loaded machine). Only for a PID we started
# ourselves moments ago; a zombie (exited, not yet reaped) counts as exited.
is_starting_or_running() {
  local f pid state
  f=$(pid_file "$1")
  [[ -s "$f" ]] || return 1
  pid=$(<"$f")
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  { state=$(<"/proc/$pid/stat"); } 2>/dev/null || return 1
  state=${state##*) }
  state=${state%% *}
  [[ -n "$state" && "$state" != Z && "$state" != X ]]
}

show_log_tail() {
  local f
  f=$(log_file "$1")
  if [[ -f "$f" ]]; then
    printf -- '----- last 40 lines of %s -----\n' "$f" >&2
    tail -n 40 "$f" >&2
    printf -- '----- end of %s -----\n' "$f" >&2
  fi
}

# Stop one component started by us (SIGTERM, then SIGKILL after STOP_TIMEOUT seconds).
stop_component() {
  local c=$1 f pid
  f=$(pid_file "$c")
  [[ -e "$f" ]] || return 0
  if ! pid=$(component_pid "$c"); then
    log "$c: not running (removing stale pid file)"
    rm -f "$f"
    return 0
  fi
  log "$c: stopping pid $pid (SIGTERM)"
  kill -TERM "$pid" 2>/dev/null || true
  local start=$SECONDS deadline=$((SECONDS + STOP_TIMEOUT))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null; then
    log "$c: still alive after ${STOP_TIMEOUT}s, sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    deadline=$((SECONDS + 10))
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
    kill -0 "$pid" 2>/dev/null && die "$c: pid $pid survived SIGKILL"
  fi
  log "$c: stopped after $((SECONDS - start))s"
  rm -f "$f"
}

# curl against the apiserver with the admin client certificate.
api_curl() {
  curl --silent --show-error --max-time 10 \
    --cacert "$PKI_DIR/ca.crt" --cert "$PKI_DIR/admin.crt" --key "$PKI_DIR/admin.key" \
    "$@"
}

apiserver_ready() {
  [[ -f "$PKI_DIR/admin.crt" ]] || return 1
  [[ "$(api_curl --fail "https://127.0.0.1:$APISERVER_PORT/readyz" 2>/dev/null)" == ok ]]
}
