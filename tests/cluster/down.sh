#!/usr/bin/env bash
# Stop the local test control plane started by tests/cluster/up.sh.
# Only the processes named by target/cluster/pids/*.pid are signalled (SIGTERM, then
# SIGKILL after CLUSTER_STOP_TIMEOUT seconds); pid files are removed, logs are kept.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"

if [[ ! -d "$PID_DIR" ]]; then
  log "nothing to stop (no ${PID_DIR#"$REPO_ROOT"/})"
  exit 0
fi
mkdir -p "$STATE_DIR"
exec 8>"$STATE_DIR/.up.lock"
flock -n 8 || { log "another up.sh/down.sh is running; waiting for it"; flock 8; }

for c in "${ALL_COMPONENTS[@]}"; do
  stop_component "$c"
done
rm -f "$PROFILE_FILE"
log "stopped; logs kept in ${LOG_DIR#"$REPO_ROOT"/}"
