#!/usr/bin/env bash
# Usage: scripts/release-annotations.sh X.Y.Z[-pre] [chart/Chart.yaml]
# Sets the Artifact Hub annotations a release must carry: the image it lists is the one the
# release pushed (the whole version, pre-release suffix included), and a pre-release version is
# marked as one (and a final one is not).
set -euo pipefail
version=${1:-}
chart=${2:-"$(dirname "$0")/../chart/Chart.yaml"}
fail() { echo "release annotations: $*" >&2; exit 1; }

[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] ||
  fail "version '$version' is not X.Y.Z or X.Y.Z-prerelease"
[[ -w "$chart" ]] || fail "cannot write $chart"
prerelease=false
[[ "$version" == *-* ]] && prerelease=true
grep -q '^  artifacthub.io/prerelease:' "$chart" || fail "no artifacthub.io/prerelease in $chart"
grep -q 'image: docker.io/4pdosc/llmscaleoperator:' "$chart" || fail "no image in artifacthub.io/images of $chart"
sed -i \
  -e "s|^\(  artifacthub.io/prerelease:\).*|\1 \"$prerelease\"|" \
  -e "s|\(image: docker.io/4pdosc/llmscaleoperator:\)[^[:space:]]*|\1$version|" \
  "$chart"
echo "artifacthub.io annotations of $chart: image llmscaleoperator:$version, prerelease $prerelease"
