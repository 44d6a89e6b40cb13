#!/usr/bin/env bash
# Runs the Rust test suite for aarch64 under qemu: every test target of the workspace (library
# unit tests, kernels, runner references, drafting, batching, formats, GGUF loading, pool
# stress, no-allocation, header, C ABI agreement, doc tests) and `libt2p check` on `-cpu max`,
# then the kernel suites, the no-allocation test (whose runner takes each model's best path, so
# every aarch64 path's per-call buffers are checked) and `libt2p check` on the two other CPU
# models, each with the ISA paths it must expose:
#   -cpu max          dotprod + i8mm   scalar,neon,neon-dotprod,neon-i8mm   (everything)
#   -cpu neoverse-n1  dotprod, no i8mm scalar,neon,neon-dotprod             (kernel suites,
#   -cpu cortex-a53   neither          scalar,neon                           no-allocation)
# Extra arguments go to every `cargo test` (e.g. `-- --nocapture`).
# Needs: rustup target aarch64-unknown-linux-gnu, aarch64-linux-gnu-gcc, qemu-aarch64-static,
# libclang (bindgen, for the C ABI check) and the shared test data (`T2P_TESTDATA`, which
# test.sh exports; default ../shared/testdata).
# CARGO_TARGET_DIR defaults to target-arm so the cross build does not churn the host one.
# Each cargo step is bounded by T2P_ARM_TIMEOUT seconds (default 1800 for the build + the
# whole suite, a third of it for the kernel suites), so an emulated hang (e.g. a thread-pool
# test under a loaded machine) fails the run instead of stalling CI.
#
# T2P_EMULATED=1 tells the few tests that are too long for CI under qemu to size themselves
# down or skip, each saying why in its code (tests/runner_data: `emulated`,
# `skip_when_emulated`): the perplexity references (whole-text values that cannot be cut
# short) and gguf_hostile's sampling of the big files.
set -euo pipefail

cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target-arm}"
export T2P_EMULATED=1
target=aarch64-unknown-linux-gnu
sysroot=/usr/aarch64-linux-gnu
limit="${T2P_ARM_TIMEOUT:-1800}"

# The test binaries are built once (`--workspace` everywhere, so every step has the same
# feature set and nothing is rebuilt) and run under each CPU model through the cargo runner.
run_cpu() {
    local cpu=$1 expect=$2 what=$3
    shift 3
    echo "== aarch64 qemu -cpu $cpu: $what, expecting $expect"
    local start=$SECONDS
    local runner="qemu-aarch64-static -cpu $cpu -L $sysroot"
    if [ "$what" = all ]; then
        CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="$runner" T2P_EXPECT_ISAS="$expect" \
            timeout "$limit" cargo test --target "$target" --workspace "$@"
    else
        CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="$runner" T2P_EXPECT_ISAS="$expect" \
            timeout "$((limit / 3))" cargo test --target "$target" --workspace --lib \
            --test kernels_matrix --test kernels_prop --test kernels_tiles --test kernels_g64 --test kernels_int8 --test quant_kernels \
            --test runner_no_alloc "$@"
    fi
    CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="$runner" \
        timeout "$limit" cargo run --quiet --target "$target" --release --bin libt2p -- check
    echo "== aarch64 qemu -cpu $cpu: done in $((SECONDS - start)) s"
}

run_cpu max scalar,neon,neon-dotprod,neon-i8mm all "$@"
run_cpu neoverse-n1 scalar,neon,neon-dotprod kernels "$@"
run_cpu cortex-a53 scalar,neon kernels "$@"
