#!/usr/bin/env bash
# Build (or reuse from the cache) the binaries of the local test control plane:
#   etcd, kube-apiserver, kubectl, kube-controller-manager, kube-scheduler, kwok, helm
# and link them into target/cluster/bin. On request only, never by all/minimal (so never by up.sh):
#   prometheus-adapter   a benchmark peer (never by `make test` either)
#   llm-d-inference-sim  a simulated vLLM server (pure Go, real vLLM-style /metrics)
#   prometheus           a Prometheus server with kubernetes_sd_configs (Debian's has no k8s SD)
#
# Usage: tests/cluster/build.sh [all|minimal|adapter|inference-sim|prometheus|tidy]
#   all            (default) all six binaries
#   minimal        only etcd and kube-apiserver
#   adapter        only prometheus-adapter (module tests/cluster/prometheus-adapter)
#   inference-sim  only llm-d-inference-sim (module github.com/llm-d/llm-d-inference-sim)
#   prometheus     only prometheus (module github.com/prometheus/prometheus, cmd/prometheus)
#   tidy           run `go mod tidy` in the module dirs (after bumping a version)
#
# Binaries are cached outside the repo, keyed by the sha256 of what defines them:
#   ${LLMSCALER_CLUSTER_CACHE:-$HOME/.cache/llmscaleoperator/cluster}/<tool>-<sha256>/
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/../.." && pwd)
CACHE_ROOT=${LLMSCALER_CLUSTER_CACHE:-${HOME:?HOME is not set}/.cache/llmscaleoperator/cluster}
BIN_DIR=$REPO_ROOT/target/cluster/bin

# Tools installed with `go install module/cmd@version` (their go.mod has no replace directives).
KWOK_PKG=sigs.k8s.io/kwok/cmd/kwok
KWOK_VERSION=v0.8.0
HELM_PKG=helm.sh/helm/v3/cmd/helm
HELM_VERSION=v3.20.2
HELM_K8S_MINOR=35 # minor of the k8s.io/client-go that helm $HELM_VERSION uses (v0.35.x)

# Built from a copy of its own module (see build_sim). SIM_SUM is the go.sum h1: hash of the
# module zip; bump it with SIM_VERSION (`go mod download -json $SIM_MODULE@<version>` prints it).
SIM_MODULE=github.com/llm-d/llm-d-inference-sim
SIM_VERSION=v0.10.2
SIM_SUM=h1:LzeQsvnsNwgtAIl1tVp/jrC+jI0a+0mjRH8tHo1mTI0=
SIM_CMD=cmd/llm-d-inference-sim

# Built like llm-d-inference-sim. Module v0.3XX.Y is Prometheus 3.XX.Y (v0.5X.Y was 2.5X.Y); its
# VERSION file gives the -X version. Only the kubernetes SD (plus the always-on static, file and
# http SDs): plugins/plugin_*.go are `//go:build !remove_all_sd || enable_<name>_sd`. No
# builtinassets tag, so no web UI (/query answers 500), while the HTTP API (/api/v1/*, /-/ready,
# /metrics) works. Upstream's go.mod needs Go >= 1.26.7.
PROM_MODULE=github.com/prometheus/prometheus
PROM_VERSION=v0.316.0
PROM_SUM=h1:f1GRFerhTMKQma+awCoC9T820ecWeGSdF+xAlMHzZzM=
PROM_CMD=cmd/prometheus
PROM_TAGS=remove_all_sd,enable_kubernetes_sd

# Bump when the way binaries are built changes, to invalidate the cache.
RECIPE_VERSION=1

log() { printf '[cluster-build] %s\n' "$*" >&2; }
die() { printf '[cluster-build] ERROR: %s\n' "$*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || die "go is not on PATH (need Go >= 1.26 to build kwok ${KWOK_VERSION})"
command -v sha256sum >/dev/null 2>&1 || die "sha256sum not found"
command -v flock >/dev/null 2>&1 || die "flock not found (util-linux)"

GOOS_GOARCH="$(go env GOOS)/$(go env GOARCH)"
RECIPE="recipe=${RECIPE_VERSION} CGO_ENABLED=0 -trimpath -s -w ${GOOS_GOARCH}"

# sha256 over the recipe plus the named files (names and contents).
hash_files() {
  {
    printf '%s\n' "$RECIPE"
    local f
    for f in "$@"; do
      [[ -f "$f" ]] || die "missing $f"
      printf '== %s\n' "$(basename "$f")"
      cat "$f"
    done
  } | sha256sum | cut -d' ' -f1
}

hash_string() { printf '%s\n%s\n' "$RECIPE" "$1" | sha256sum | cut -d' ' -f1; }

fmt_secs() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

# link_bin NAME CACHED_PATH
link_bin() {
  mkdir -p "$BIN_DIR"
  ln -sfn "$2" "$BIN_DIR/$1"
}

# ensure_built NAME CACHE_DIR BUILD_FUNCTION [args...]
# BUILD_FUNCTION is called with the output file path as its first argument.
ensure_built() {
  local name=$1 dir=$2 fn=$3
  shift 3
  local out=$dir/$name
  if [[ -x "$out" ]]; then
    log "$name: reusing cached $out"
  else
    mkdir -p "$dir"
    local tmp="$dir/.$name.tmp.$$" start=$SECONDS
    rm -f "$tmp"
    log "$name: building (cache miss) -> $out"
    if ! "$fn" "$tmp" "$@"; then
      rm -f "$tmp"
      die "$name: build failed (see the go output above)"
    fi
    mv -f "$tmp" "$out"
    log "$name: built in $(fmt_secs $((SECONDS - start)))"
  fi
  link_bin "$name" "$out"
}

# --- etcd: module tests/cluster/etcd (main.go calls etcdmain.Main) ---
build_etcd() {
  (cd "$SCRIPT_DIR/etcd" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$1" .)
}

# --- Kubernetes: module tests/cluster/kubernetes (tools.go pins the cmd packages) ---
kube_ldflags() {
  local v
  v=$(cd "$SCRIPT_DIR/kubernetes" && go list -m -f '{{.Version}}' k8s.io/kubernetes) \
    || die "cannot read the k8s.io/kubernetes version from tests/cluster/kubernetes/go.mod"
  local major=${v#v}
  major=${major%%.*}
  local minor=${v#v*.}
  minor=${minor%%.*}
  local flags="-s -w" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  printf '%s' "$flags"
}

build_kube() {
  local out=$1 cmd=$2
  (cd "$SCRIPT_DIR/kubernetes" && CGO_ENABLED=0 go build -trimpath -ldflags "$KUBE_LDFLAGS" -o "$out" "k8s.io/kubernetes/cmd/$cmd")
}

# --- prometheus-adapter: module tests/cluster/prometheus-adapter (tools.go pins cmd/adapter) ---
# Not `go install pkg@version` like kwok/helm: the module proxy refuses the version list of
# sigs.k8s.io/prometheus-adapter, so `go install` fails while "loading deprecation"; an exact
# require in our own module is served. go.sum then pins every dependency as upstream's go.mod does.
# The adapter has no version flag and upstream builds it without -X ldflags, so none here.
ADAPTER_PKG=sigs.k8s.io/prometheus-adapter/cmd/adapter

build_adapter() {
  (cd "$SCRIPT_DIR/prometheus-adapter" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$1" "$ADAPTER_PKG")
}

# module_src WORK MODULE VERSION SUM SUBDIR: `go mod download` the exact MODULE@VERSION, check its
# h1: hash against SUM and copy it to WORK/src (writable; the module cache is read-only), which
# must contain SUBDIR. Not `go install pkg@version` like kwok/helm: the module proxy refuses the
# version list of some modules (`go install` then fails while "loading deprecation"), while the
# download of an exact version is served (checked against GOSUMDB as usual, and here against SUM).
# Building WORK/src as the main module lets upstream's own go.mod/go.sum pin every dependency, as
# `go install` would.
module_src() {
  local work=$1 module=$2 version=$3 want=$4 subdir=$5 json dir sum
  # Run outside any module so that no go.mod or go.work of ours takes part.
  if ! json=$(cd "$work" && GOWORK=off go mod download -json "$module@$version"); then
    printf '%s\n' "$json" >&2
    return 1
  fi
  dir=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
  sum=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Sum": "\(.*\)",\{0,1\}$/\1/p')
  if [[ "$sum" != "$want" ]]; then
    log "$module@$version has sum '$sum', expected $want"
    return 1
  fi
  if [[ ! -d "$dir/$subdir" ]]; then
    log "no $subdir in the downloaded module dir '$dir' of $module@$version"
    return 1
  fi
  cp -R "$dir" "$work/src" && chmod -R u+w "$work/src"
}

# --- llm-d-inference-sim: module github.com/llm-d/llm-d-inference-sim at $SIM_VERSION ---
# Pure Go (upstream's Dockerfile builds it with CGO_ENABLED=0, no tags); it has no version
# variable to set with -X.
build_sim() {
  local out=$1 work
  work=$(mktemp -d "${out%/*}/.simsrc.XXXXXX")
  if ! (module_src "$work" "$SIM_MODULE" "$SIM_VERSION" "$SIM_SUM" "$SIM_CMD" \
    && cd "$work/src" && GOWORK=off CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$out" "./$SIM_CMD"); then
    rm -rf "$work"
    return 1
  fi
  rm -rf "$work"
}

# --- prometheus: module github.com/prometheus/prometheus at $PROM_VERSION, cmd/prometheus ---
# As upstream's .promu.yml, minus the builtinassets tag and the Revision/BuildUser/BuildDate -X
# (no git metadata in a module zip); netgo is implied by CGO_ENABLED=0.
build_prometheus() {
  local out=$1 work
  work=$(mktemp -d "${out%/*}/.promsrc.XXXXXX")
  if ! (module_src "$work" "$PROM_MODULE" "$PROM_VERSION" "$PROM_SUM" "$PROM_CMD" \
    && cd "$work/src" && grep -q '^//go:build !remove_all_sd || enable_kubernetes_sd$' plugins/plugin_kubernetes.go \
    && v=$(tr -d '[:space:]' <VERSION) && [[ -n "$v" ]] \
    && GOWORK=off CGO_ENABLED=0 go build -trimpath -tags "$PROM_TAGS" \
      -ldflags "-s -w -X github.com/prometheus/common/version.Version=$v -X github.com/prometheus/common/version.Branch=HEAD" \
      -o "$out" "./$PROM_CMD"); then
    log "prometheus: build of $PROM_MODULE@$PROM_VERSION failed (or its plugins/plugin_kubernetes.go lacks the SD build tags)"
    rm -rf "$work"
    return 1
  fi
  rm -rf "$work"
}

# --- go install tools ---
go_install() {
  local out=$1 pkg=$2 version=$3 ldflags=$4
  local gobin
  gobin=$(mktemp -d "${out%/*}/.gobin.XXXXXX")
  # Run outside any module so the tool's own go.mod/go.sum decide the versions.
  if ! (cd "$gobin" && GOBIN="$gobin" GOWORK=off CGO_ENABLED=0 go install -trimpath -ldflags "$ldflags" "$pkg@$version"); then
    rm -rf "$gobin"
    return 1
  fi
  mv -f "$gobin/${pkg##*/}" "$out"
  rm -rf "$gobin"
}

tidy() {
  local d
  for d in etcd kubernetes prometheus-adapter; do
    log "go mod tidy in tests/cluster/$d"
    (cd "$SCRIPT_DIR/$d" && go mod tidy)
  done
}

main() {
  local what=${1:-all}
  case "$what" in
    all | minimal | adapter | inference-sim | prometheus) ;;
    tidy) tidy; return ;;
    -h | --help) sed -n '2,18p' "$0"; return ;;
    *) die "unknown argument '$what' (expected all, minimal, adapter, inference-sim, prometheus or tidy)" ;;
  esac

  mkdir -p "$CACHE_ROOT"
  # One build at a time (machine-wide per cache dir); Go builds are memory hungry.
  exec 9>"$CACHE_ROOT/.build.lock"
  if ! flock -n 9; then
    log "another build.sh holds $CACHE_ROOT/.build.lock; waiting..."
    flock 9
  fi

  local total_start=$SECONDS

  # A benchmark peer, not part of the control plane: build only it, under the same lock.
  if [[ "$what" == adapter ]]; then
    local adapter_dir
    adapter_dir="$CACHE_ROOT/prometheus-adapter-$(hash_files "$SCRIPT_DIR/prometheus-adapter/go.mod" "$SCRIPT_DIR/prometheus-adapter/go.sum" "$SCRIPT_DIR/prometheus-adapter/tools.go")"
    ensure_built prometheus-adapter "$adapter_dir" build_adapter
    log "done in $(fmt_secs $((SECONDS - total_start))); binary in ${BIN_DIR#"$REPO_ROOT"/} (cache: $CACHE_ROOT)"
    return
  fi

  # A simulated vLLM server for tests that need real /metrics; built only on request, likewise.
  if [[ "$what" == inference-sim ]]; then
    ensure_built llm-d-inference-sim "$CACHE_ROOT/llm-d-inference-sim-$(hash_string "$SIM_MODULE@$SIM_VERSION $SIM_SUM $SIM_CMD")" build_sim
    log "done in $(fmt_secs $((SECONDS - total_start))); binary in ${BIN_DIR#"$REPO_ROOT"/} (cache: $CACHE_ROOT)"
    return
  fi

  # A real Prometheus with kubernetes_sd_configs, for conformance tests; built only on request.
  if [[ "$what" == prometheus ]]; then
    ensure_built prometheus "$CACHE_ROOT/prometheus-$(hash_string "$PROM_MODULE@$PROM_VERSION $PROM_SUM $PROM_CMD tags=$PROM_TAGS version-ldflags=1")" build_prometheus
    log "done in $(fmt_secs $((SECONDS - total_start))); binary in ${BIN_DIR#"$REPO_ROOT"/} (cache: $CACHE_ROOT)"
    return
  fi

  local etcd_dir kube_dir
  etcd_dir="$CACHE_ROOT/etcd-$(hash_files "$SCRIPT_DIR/etcd/go.mod" "$SCRIPT_DIR/etcd/go.sum" "$SCRIPT_DIR/etcd/main.go")"
  kube_dir="$CACHE_ROOT/kubernetes-$(hash_files "$SCRIPT_DIR/kubernetes/go.mod" "$SCRIPT_DIR/kubernetes/go.sum" "$SCRIPT_DIR/kubernetes/tools.go")"

  ensure_built etcd "$etcd_dir" build_etcd

  local cmds=(kube-apiserver kubectl)
  [[ "$what" == all ]] && cmds+=(kube-controller-manager kube-scheduler)
  local c need_ldflags=0
  for c in "${cmds[@]}"; do [[ -x "$kube_dir/$c" ]] || need_ldflags=1; done
  KUBE_LDFLAGS=""
  if ((need_ldflags)); then KUBE_LDFLAGS=$(kube_ldflags); fi
  for c in "${cmds[@]}"; do
    ensure_built "$c" "$kube_dir" build_kube "$c"
  done

  if [[ "$what" == all ]]; then
    ensure_built kwok "$CACHE_ROOT/kwok-$(hash_string "$KWOK_PKG@$KWOK_VERSION")" go_install \
      "$KWOK_PKG" "$KWOK_VERSION" "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}"
    ensure_built helm "$CACHE_ROOT/helm-$(hash_string "$HELM_PKG@$HELM_VERSION")" go_install \
      "$HELM_PKG" "$HELM_VERSION" "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.metadata= -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$HELM_K8S_MINOR -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$HELM_K8S_MINOR"
  fi

  log "done in $(fmt_secs $((SECONDS - total_start))); binaries in ${BIN_DIR#"$REPO_ROOT"/} (cache: $CACHE_ROOT)"
}

main "$@"
