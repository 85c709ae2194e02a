#!/usr/bin/env bash
# Usage: scripts/check-release-tag.sh vX.Y.Z[-pre] [chart/Chart.yaml]
# A release tag must name the version the chart installs: X.Y.Z equals appVersion in
# chart/Chart.yaml (a pre-release suffix on either side compares by its X.Y.Z core).
set -euo pipefail
tag=${1:-}
chart=${2:-"$(dirname "$0")/../chart/Chart.yaml"}
fail() { echo "release tag check: $*" >&2; exit 1; }

[[ -n "$tag" ]] || fail "no tag given (usage: $0 vX.Y.Z)"
[[ "$tag" =~ ^v([0-9]+\.[0-9]+\.[0-9]+)(-[0-9A-Za-z.-]+)?$ ]] ||
  fail "tag '$tag' is not vX.Y.Z or vX.Y.Z-prerelease"
tag_core=${BASH_REMATCH[1]}
[[ -r "$chart" ]] || fail "cannot read $chart"
app_version=$(sed -n 's/^appVersion:[[:space:]]*["'\'']\{0,1\}\([^"'\'' ]*\)["'\'']\{0,1\}[[:space:]]*$/\1/p' "$chart" | head -n1)
[[ -n "$app_version" ]] || fail "no appVersion in $chart"
app_core=${app_version%%-*}
app_core=${app_core%%+*}
if [[ "$tag_core" != "$app_core" ]]; then
  fail "tag $tag is version $tag_core but $chart has appVersion $app_version: bump appVersion (and version) in chart/Chart.yaml to $tag_core, commit, and tag again"
fi
echo "release tag $tag matches appVersion $app_version"
