#!/usr/bin/env bash
# Installs what `make test` and `make demo` need on a fresh machine, and nothing that is there.
set -euo pipefail

need_apt=()
command -v prometheus >/dev/null || need_apt+=(prometheus)
for tool in openssl curl jq python3; do command -v "$tool" >/dev/null || need_apt+=("$tool"); done
[ -e /etc/ssl/certs/ca-certificates.crt ] || need_apt+=(ca-certificates)
# `ip netns`: the vLLM conformance test runs the llm-d simulators where only loopback reaches them.
command -v ip >/dev/null || need_apt+=(iproute2)
if [ "${#need_apt[@]}" -gt 0 ]; then
  echo "deps: installing ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}"
fi

if command -v rustup >/dev/null; then
  for component in rustfmt clippy; do
    rustup component list --installed 2>/dev/null | grep -q "^${component}" || rustup component add "$component"
  done
fi

command -v go >/dev/null || { echo "deps: Go is required to build the local control plane (tests/cluster)" >&2; exit 1; }
command -v cargo >/dev/null || { echo "deps: cargo (Rust stable) is required" >&2; exit 1; }
