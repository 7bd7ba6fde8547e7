# syntax=docker/dockerfile:1
#
# The karpenter image: the `karpenter` binary alone, run as the nonroot user (65532). The chart runs it as
# `karpenter controller --cloud-provider aws`.
#
#   docker build -t <registry>/karpenter-rs:0.1.0 .
#
# Runtime base: the binary is built for x86_64/aarch64-unknown-linux-gnu, so it links glibc dynamically (and
# libgcc_s for unwinding). distroless/static has neither and could only run a fully static musl build;
# distroless/cc-debian12 ships exactly glibc, libgcc_s, CA certificates and tzdata. The builder is Debian 12
# (bookworm) too, so the glibc the binary was linked against (2.36) is the one it runs with. A musl build on
# distroless/static was not chosen: musl's allocator is markedly slower for an allocation-heavy controller,
# and the crypto library (aws-lc) would need musl's C toolchain as well.

FROM rust:1.95-bookworm AS builder
# aws-lc-sys (the crypto provider of rustls and the AWS SDK) compiles C; CMake and clang cover the build
# scripts that want them.
RUN apt-get update \
 && apt-get install -y --no-install-recommends cmake clang \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# The whole workspace: cargo reads every member's manifest (crates/*, tests, xtask) even to build one package.
# crds/: karpenter-sim, which the binary links for `karpenter simulate`, embeds the generated CRDs.
# rust-toolchain.toml pins the toolchain (rustup fetches it and its components if the image's differs).
# .ci/check-docker-context.py replays these lines on the context .dockerignore leaves and runs the cargo command
# below as `cargo check`: a member or an embedded file not copied here fails CI.
COPY rust-toolchain.toml Cargo.toml Cargo.lock clippy.toml rustfmt.toml ./
COPY .cargo ./.cargo
COPY crates ./crates
COPY tests ./tests
COPY xtask ./xtask
COPY crds ./crds
# The caches keep the registry and incremental build artefacts between builds; the binary is copied out of the
# cached target directory. The `image` profile (Cargo.toml) is release with symbols stripped, LTO and one codegen
# unit: a smaller, somewhat faster binary for a longer build.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --profile image --locked -p karpenter --no-default-features --features aws \
 && cp target/image/karpenter /karpenter

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=builder /karpenter /karpenter
USER 65532:65532
ENTRYPOINT ["/karpenter"]
