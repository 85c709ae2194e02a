#!/usr/bin/env bash
# Usage: scripts/check-release-refs.sh [WORKFLOW [VERSION [CHART_YAML]]]
#   WORKFLOW    the release workflow (default .github/workflows/release.yml)
#   VERSION     the version being released (default: appVersion of CHART_YAML)
#   CHART_YAML  the chart's Chart.yaml (default chart/Chart.yaml)
#
# The release pushes the image to $IMAGE:VERSION and then `helm push`es the chart to
# $CHART_REGISTRY, which appends the chart's name and tags it with its version. Were both the
# same reference, the chart would overwrite the image and no pod could pull it. This reads IMAGE
# and CHART_REGISTRY from the workflow's top-level `env:`, normalises both references the way a
# registry sees them, and fails when they are equal, or when either is a Docker Hub name of more
# than two levels (Docker Hub refuses docker.io/org/charts/name, with a 401). The release runs it
# before any push;
# tests/release_workflow.rs runs it on the real workflow and on a colliding copy.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
workflow=${1:-"$root/.github/workflows/release.yml"}
version=${2:-}
chart=${3:-"$root/chart/Chart.yaml"}
fail() { echo "release refs: $*" >&2; exit 1; }

[[ -r "$workflow" ]] || fail "cannot read $workflow"
[[ -r "$chart" ]] || fail "cannot read $chart"

# A top-level key of Chart.yaml, quotes removed.
chart_field() {
  sed -n "s/^$1:[[:space:]]*[\"']\{0,1\}\([^\"' ]*\)[\"']\{0,1\}[[:space:]]*\$/\1/p" "$chart" | head -n1
}

# KEY's value in the workflow's top-level `env:` block (its two-space-indented lines), quotes
# and a trailing comment removed. Job- and step-level env blocks are deeper and not read.
workflow_env() {
  awk -v key="$1" '
    /^env:[[:space:]]*$/ { inside = 1; next }
    inside && /^[^[:space:]#]/ { inside = 0 }
    inside && $0 ~ "^  " key ":" {
      value = substr($0, index($0, ":") + 1)
      sub(/[[:space:]]+#.*$/, "", value)
      gsub(/^[[:space:]]+|[[:space:]]+$/, "", value)
      gsub(/^["\047]|["\047]$/, "", value)
      print value
      exit
    }
  ' "$workflow"
}

# The reference as a registry resolves it: no oci:// scheme, Docker Hub's aliases as docker.io,
# a name without a registry on Docker Hub, a one-part Docker Hub name under library/, lower case.
normalise() {
  local ref=${1#oci://}
  ref=${ref%/}
  ref=$(printf '%s' "$ref" | tr '[:upper:]' '[:lower:]')
  local first=${ref%%/*}
  if [[ "$ref" != */* || ( "$first" != *.* && "$first" != *:* && "$first" != localhost ) ]]; then
    ref="docker.io/$ref"
  fi
  case "$ref" in
    registry-1.docker.io/*) ref="docker.io/${ref#registry-1.docker.io/}" ;;
    index.docker.io/*) ref="docker.io/${ref#index.docker.io/}" ;;
  esac
  local rest=${ref#docker.io/}
  if [[ "$ref" == docker.io/* && "$rest" != */* ]]; then
    ref="docker.io/library/$rest"
  fi
  printf '%s' "$ref"
}

image=$(workflow_env IMAGE)
chart_registry=$(workflow_env CHART_REGISTRY)
[[ -n "$image" ]] || fail "no IMAGE in the top-level env of $workflow"
[[ -n "$chart_registry" ]] || fail "no CHART_REGISTRY in the top-level env of $workflow"
[[ "$chart_registry" == oci://* ]] || fail "CHART_REGISTRY '$chart_registry' in $workflow is not an oci:// registry (helm push needs one)"
name=$(chart_field name)
[[ -n "$name" ]] || fail "no name in $chart"
[[ -n "$version" ]] || version=$(chart_field appVersion)
[[ -n "$version" ]] || fail "no version given and no appVersion in $chart"

image_ref="$(normalise "$image"):$version"
chart_ref="$(normalise "$chart_registry/$name"):$version"
# Docker Hub names are NAMESPACE/REPOSITORY: a third level cannot be pushed to.
for what in image chart; do
  ref_var="${what}_ref"
  ref=${!ref_var}
  if [[ "$ref" == docker.io/* ]]; then
    path=${ref#docker.io/}
    path=${path%:*}
    slashes=${path//[^\/]/}
    if [[ ${#slashes} -gt 1 ]]; then
      fail "the $what would be pushed to $ref, but Docker Hub has only namespace/repository names and refuses a third level: use another registry (e.g. oci://ghcr.io/OWNER/charts for the chart) or a two-level name"
    fi
  fi
done
if [[ "$image_ref" == "$chart_ref" ]]; then
  fail "the chart would be pushed to $chart_ref, the image's own reference (IMAGE=$image, CHART_REGISTRY=$chart_registry in $workflow): helm push would overwrite the image and pods could not pull it. Give the chart a repository of its own, e.g. CHART_REGISTRY: oci://ghcr.io/OWNER/charts"
fi
echo "release refs: image $image_ref, chart $chart_ref: distinct"
