#!/usr/bin/env bash
# Usage: scripts/release-manifests.sh VERSION OUTDIR
# Renders the plain install manifests a release attaches, for clusters installed without Helm:
#   OUTDIR/crd.yaml      the LLMScaler CustomResourceDefinition alone
#   OUTDIR/install.yaml  the namespace, the CRD, RBAC, the operator Deployment and everything else
#                        the chart installs with its default values (`kubectl apply -f`)
# Both come from the chart packaged exactly as the release packages it (version and appVersion
# VERSION), so the manifests and the published chart cannot drift apart.
#
# Environment (all optional):
#   HELM          the helm binary (default: helm on PATH, else target/cluster/bin/helm)
#   IMAGE         the image repository (default docker.io/4pdosc/llmscaleoperator)
#   IMAGE_DIGEST  sha256:... of the pushed image: the Deployment then pulls by digest
#   NAMESPACE     the namespace to install into (default llmscaleoperator)
#   CHART_DIR     the chart (default chart/)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
version=${1:-}
outdir=${2:-}
fail() { echo "release manifests: $*" >&2; exit 1; }

[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] ||
  fail "version '$version' is not X.Y.Z or X.Y.Z-prerelease (usage: $0 VERSION OUTDIR)"
[[ -n "$outdir" ]] || fail "no output directory (usage: $0 VERSION OUTDIR)"
helm=${HELM:-$(command -v helm || echo "$root/target/cluster/bin/helm")}
[[ -x "$helm" ]] || fail "no helm at $helm (set HELM, or run tests/cluster/build.sh helm)"
image=${IMAGE:-docker.io/4pdosc/llmscaleoperator}
digest=${IMAGE_DIGEST:-}
[[ -z "$digest" || "$digest" =~ ^sha256:[0-9a-f]{64}$ ]] || fail "IMAGE_DIGEST '$digest' is not sha256:<64 hex>"
namespace=${NAMESPACE:-llmscaleoperator}
chart_dir=${CHART_DIR:-"$root/chart"}
name=$(sed -n 's/^name:[[:space:]]*\([^[:space:]]*\)[[:space:]]*$/\1/p' "$chart_dir/Chart.yaml" | head -n1)
[[ -n "$name" ]] || fail "no name in $chart_dir/Chart.yaml"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$helm" package "$chart_dir" --destination "$work" --version "$version" --app-version "$version" >/dev/null
archive="$work/$name-$version.tgz"
[[ -f "$archive" ]] || fail "helm package made no $archive"

args=(template "$name" "$archive" --namespace "$namespace" --set "manager.image.repository=$image")
[[ -n "$digest" ]] && args+=(--set "manager.image.digest=$digest")

mkdir -p "$outdir"
"$helm" "${args[@]}" --show-only templates/crd.yaml >"$work/crd.yaml"
"$helm" "${args[@]}" >"$work/rendered.yaml"
# helm template does not create the release namespace; `helm install --create-namespace` would.
{
  printf -- '# llmscaleoperator %s: kubectl apply --server-side -f install.yaml\n' "$version"
  printf -- '---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n' "$namespace"
  cat "$work/rendered.yaml"
} >"$outdir/install.yaml"
mv "$work/crd.yaml" "$outdir/crd.yaml"
grep -q '^kind: CustomResourceDefinition' "$outdir/crd.yaml" || fail "the chart rendered no CRD"
grep -q '^kind: Deployment' "$outdir/install.yaml" || fail "the chart rendered no Deployment"
echo "release manifests $version ($image${digest:+@$digest}) in $outdir: crd.yaml, install.yaml"
