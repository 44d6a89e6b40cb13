#!/usr/bin/env bash
# ARM throughput on paper: builds the aarch64 release library, cuts the inner loop of every
# aarch64 kernel (T2P gemv and gemm, q8_K and q8_0, per path, and the stock-layout vec_dot port)
# out of its disassembly and runs LLVM's llvm-mca on it for several CPU scheduling models.
# Prints, per model, cycles per 128 weights x 4 rows (512 multiply-adds), instructions per 64
# multiply-adds, and the implied GB/s of weights per core at a stated clock.
#
# A model, not a measurement: llvm-mca simulates the out-of-order core on an endless repetition
# of the loop body with every load an L1 hit and no branch mispredicts, using LLVM's scheduling
# tables (which are themselves approximations of the vendors' optimisation guides).
#
# Usage: tools/arm-throughput.sh [--no-install] [--no-build] [--clock GHZ] [--cpus a,b,c]
# Needs (installed unless --no-install): rustup target aarch64-unknown-linux-gnu,
# gcc-aarch64-linux-gnu (the cdylib's linker) and Debian's llvm-19 (llvm-mca, llvm-objdump).
set -euo pipefail
cd "$(dirname "$0")/.."

install=1
build=1
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --no-install) install=0 ;;
        --no-build) build=0 ;;
        *) args+=("$1") ;;
    esac
    shift
done

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

# llvm-19 is the newest LLVM Debian 12 (bookworm) ships; it is the first with Qualcomm's
# oryon-1 model and has Neoverse N1/N2/N3/V1/V2/V3 and Cortex-A510/A55/A53 models. A newer
# llvm-NN, where the distribution has one, is used instead.
pick_llvm() {
    for v in 22 21 20 19; do
        if [ -x "/usr/lib/llvm-$v/bin/llvm-mca" ]; then
            echo "/usr/lib/llvm-$v/bin"
            return
        fi
    done
}

if [ "$install" = 1 ]; then
    rustup target list --installed | grep -qx aarch64-unknown-linux-gnu ||
        rustup target add aarch64-unknown-linux-gnu
    missing=()
    dpkg -s gcc-aarch64-linux-gnu >/dev/null 2>&1 || missing+=(gcc-aarch64-linux-gnu)
    if [ -z "$(pick_llvm)" ]; then
        as_root apt-get update -qq
        for v in 22 21 20 19; do
            if apt-cache show "llvm-$v" >/dev/null 2>&1; then
                missing+=("llvm-$v")
                break
            fi
        done
    fi
    if [ ${#missing[@]} -gt 0 ]; then
        as_root apt-get update -qq
        DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
fi

llvm=$(pick_llvm)
if [ -z "$llvm" ]; then
    echo "arm-throughput: no llvm-mca of LLVM 19 or newer found (install llvm-19)" >&2
    exit 1
fi

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target-arm}"
target=aarch64-unknown-linux-gnu
if [ "$build" = 1 ]; then
    cargo build --quiet --release --lib --no-default-features --target "$target"
fi
lib="$CARGO_TARGET_DIR/$target/release/libt2p.so"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$llvm/llvm-objdump" -d -C --no-show-raw-insn --mattr=+dotprod,+i8mm,+fullfp16 "$lib" >"$work/lib.dis"
echo "library: $lib ($(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ', with uncommitted changes'))"
echo "llvm-mca: $("$llvm/llvm-mca" --version | grep -m1 -o 'LLVM version [0-9.]*')"
python3 tools/arm_throughput.py --mca "$llvm/llvm-mca" --dis "$work/lib.dis" --work "$work" "${args[@]}"
