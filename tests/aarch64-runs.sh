#!/usr/bin/env bash
# Runs the kernel tests and `libt2p check` for aarch64 under qemu on three CPU models, each with
# the ISA paths it must expose:
#   -cpu max          dotprod + i8mm   scalar,neon,neon-dotprod,neon-i8mm
#   -cpu neoverse-n1  dotprod, no i8mm scalar,neon,neon-dotprod
#   -cpu cortex-a53   neither          scalar,neon
# Extra arguments go to every `cargo test` (e.g. `--release`, `-- --nocapture`).
# Needs: rustup target aarch64-unknown-linux-gnu, aarch64-linux-gnu-gcc, qemu-aarch64-static.
# CARGO_TARGET_DIR defaults to target-arm so the cross build does not churn the host one.
# Each cargo step is bounded by T2P_ARM_TIMEOUT seconds (default 900), so an emulated hang
# (e.g. a thread-pool test under a loaded machine) fails the run instead of stalling CI.
set -euo pipefail

cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target-arm}"
target=aarch64-unknown-linux-gnu
sysroot=/usr/aarch64-linux-gnu
limit="${T2P_ARM_TIMEOUT:-900}"

run_cpu() {
    local cpu=$1 expect=$2
    shift 2
    echo "== aarch64 qemu -cpu $cpu: expecting $expect"
    local start=$SECONDS
    CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64-static -cpu $cpu -L $sysroot" \
        T2P_EXPECT_ISAS="$expect" \
        timeout "$limit" cargo test --target "$target" --lib --test kernels_matrix --test kernels_prop "$@"
    CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64-static -cpu $cpu -L $sysroot" \
        timeout "$limit" cargo run --quiet --target "$target" --release --bin libt2p -- check
    echo "== aarch64 qemu -cpu $cpu: done in $((SECONDS - start)) s"
}

run_cpu max scalar,neon,neon-dotprod,neon-i8mm "$@"
run_cpu neoverse-n1 scalar,neon,neon-dotprod "$@"
run_cpu cortex-a53 scalar,neon "$@"
