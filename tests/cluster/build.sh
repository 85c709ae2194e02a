#!/usr/bin/env bash
# Build (or reuse from the cache) the binaries of the local test control plane:
#   etcd, kube-apiserver, kubectl, kube-controller-manager, kube-scheduler, kwok, helm
# and link them into target/cluster/bin. On request only, also a benchmark peer:
#   prometheus-adapter (never built by all/minimal, so never by `make test` or up.sh)
#
# Usage: tests/cluster/build.sh [all|minimal|adapter|tidy]
#   all      (default) all six binaries
#   minimal  only etcd and kube-apiserver
#   adapter  only prometheus-adapter (module tests/cluster/prometheus-adapter)
#   tidy     run `go mod tidy` in the module dirs (after bumping a version)
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
    all | minimal | adapter) ;;
    tidy) tidy; return ;;
    -h | --help) sed -n '2,15p' "$0"; return ;;
    *) die "unknown argument '$what' (expected all, minimal, adapter or tidy)" ;;
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
