# The operator image: a static binary on a distroless runtime, run as 65532.
#
#   docker build -t <registry>/llmscaleoperator:<tag> .
#   docker build --build-arg RUST_IMAGE=<mirror>/rust:1-bookworm \
#                --build-arg RUNTIME_IMAGE=<mirror>/distroless/static-debian12:nonroot .
#
# Multi-arch by hand: docker buildx build --platform linux/amd64,linux/arm64 . (the release
# workflow builds each architecture natively and merges them, see docs/releasing.md).
ARG RUST_IMAGE=docker.io/library/rust:1-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot

FROM ${RUST_IMAGE} AS build
# musl gives a fully static binary (ring's and jemalloc's C parts build with musl-gcc).
RUN apt-get update \
 && apt-get install -y --no-install-recommends musl-tools \
 && rm -rf /var/lib/apt/lists/*
RUN rustup target add "$(uname -m)-unknown-linux-musl"
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY benches ./benches
COPY examples ./examples
COPY tests ./tests
# The workspace's other member must be present for Cargo to read the manifest.
COPY sim ./sim
# The same release build CI runs, for this platform's musl target. jemalloc (the binary's
# allocator) fixes the page size it supports when it is built: on arm64 it is built for pages up
# to 64 KiB, so the image also runs on kernels with 16 or 64 KiB pages (it fails to start there
# otherwise).
RUN if [ "$(uname -m)" = aarch64 ]; then export JEMALLOC_SYS_WITH_LG_PAGE=16; fi \
 && cargo build --release --locked --bin llmscaleoperator --target "$(uname -m)-unknown-linux-musl" \
 && cp "target/$(uname -m)-unknown-linux-musl/release/llmscaleoperator" /llmscaleoperator

FROM ${RUNTIME_IMAGE}
COPY --from=build /llmscaleoperator /usr/local/bin/llmscaleoperator
USER 65532:65532
EXPOSE 6443 8081
ENTRYPOINT ["/usr/local/bin/llmscaleoperator"]
CMD ["run"]
