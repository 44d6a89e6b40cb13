#!/usr/bin/env bash
# Runs every test of t2p: x86_64 natively, aarch64 under qemu (three CPU models, one per kernel
# path), and the C unit tests on both; macOS and Windows checks (tests/platforms.sh: cargo check,
# a mingw-w64 build tested under wine, link options per linker). Installs what is missing first
# (rustup targets, cross linkers, qemu-user-static, libclang for bindgen, mingw-w64, wine,
# clang, lld; Chromium and its driver for the chat page's browser tests). Usage: ./test.sh [--no-install]
set -euo pipefail
cd "$(dirname "$0")"

step() { printf '\n==== %s ====\n' "$*"; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if [ "${1:-}" != "--no-install" ]; then
    step "install: rustup targets, cross linkers, qemu, libclang, python3-venv, mingw-w64, wine, clang, lld, chromium"
    for t in aarch64-unknown-linux-gnu aarch64-apple-darwin x86_64-apple-darwin aarch64-pc-windows-msvc x86_64-pc-windows-gnu; do
        rustup target list --installed | grep -qx "$t" || rustup target add "$t"
    done
    missing=()
    for pkg in gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user-static libclang-dev make cmake pkg-config python3-venv \
               gcc-mingw-w64-x86-64 wine wine64 clang lld-15 llvm chromium chromium-driver; do
        dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        as_root apt-get update -qq
        DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "${missing[@]}"
    fi
fi

export T2P_TESTDATA="${T2P_TESTDATA:-$(cd .. && pwd)/shared/testdata}"

step "x86_64: formatting and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings

# The x86 paths this CPU must offer: AVX2 always (the project's baseline), AVX-VNNI and
# AVX-512 VNNI (with BW and VL) where /proc/cpuinfo lists their flags, AMX where it also lists
# amx_tile and amx_int8 (the library asks Linux for the tile state; a refusal fails here). The tests fail if the
# library disagrees with this list, so a machine with the flags fails when a path is missing.
x86_isas=scalar,avx2
flags=$(grep -m1 '^flags' /proc/cpuinfo)
has() { for f in "$@"; do grep -qw "$f" <<<"$flags" || return 1; done; }
if has avx_vnni; then x86_isas=$x86_isas,avx-vnni; fi
if has avx512f avx512bw avx512vl avx512_vnni; then x86_isas=$x86_isas,avx512-vnni; fi
if has avx512f avx512bw avx512vl avx512_vnni amx_tile amx_int8; then x86_isas=$x86_isas,amx; fi

step "x86_64: every Rust test (kernels on every path: $x86_isas; C ABI agreement, header drift, runner)"
T2P_EXPECT_ISAS=$x86_isas cargo test --workspace

step "x86_64: libt2p check on every path"
cargo build --release --bin libt2p
for isa in ${x86_isas//,/ }; do T2P_ISA=$isa ./target/release/libt2p check; done

step "x86_64: libt2p serve with the real openai client (tests/server)"
# A venv under target/, made once and reused: only a missing or changed requirements file
# reinstalls (PyPI is the one registry CI reaches).
venv=target/server-venv
if ! cmp -s tests/server/requirements.txt "$venv/requirements.txt" 2>/dev/null; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r tests/server/requirements.txt
    cp tests/server/requirements.txt "$venv/requirements.txt"
fi
T2P_LIBT2P=target/release/libt2p "$venv/bin/python" -m unittest tests/server/test_server.py

step "x86_64: the chat page of libt2p serve in headless Chromium (tests/server/test_webui.py)"
# Required here: a missing browser fails the run (by hand, without one, the tests skip).
T2P_REQUIRE_BROWSER=1 T2P_LIBT2P=target/release/libt2p "$venv/bin/python" -m unittest tests/server/test_webui.py

step "x86_64: C unit tests; libt2p.so exports only t2p_*, however it is built"
# The README's plain build (default features: llguidance's own C API is linked in and hidden by
# src/ffi/hidden-exports.map) and the C library's build (build/install.cmake's features).
only_t2p_exports() {
    local exports
    exports=$(nm -D --defined-only target/release/libt2p.so | awk '{print $3}')
    if [ -z "$exports" ] || echo "$exports" | grep -qv '^t2p_'; then
        echo "libt2p.so ($1) must export t2p_* only, got: $(echo "$exports" | grep -v '^t2p_' | head -5)" >&2
        exit 1
    fi
    echo "libt2p.so ($1) exports $(echo "$exports" | wc -l) symbols, all t2p_*"
}
cargo build --release --lib
only_t2p_exports "default features"
cargo build --release --lib --no-default-features
only_t2p_exports "--no-default-features"
make -s -C tests/c LIB=../../target/release/libt2p.a

step "llama-patch: the parts that need only t2p.h (compile + oracle test), patch shape"
T2P_LIB=target/release/libt2p.a ./llama-patch/check.sh

step "build/: install into a temporary prefix, build the CMake and pkg-config consumers"
prefix=$(mktemp -d)
T2P_SKIP_BUILD=1 ./build/install.sh "$prefix"
cmake -S build/test-consumer -B "$prefix/consumer" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$prefix/consumer" >/dev/null
"$prefix/consumer/t2p-consumer"
"$prefix/consumer/t2p-consumer-dyn"
# the shared library linked through t2p_link_private (ELF: --exclude-libs, --gc-sections)
grep -qx 'kind ELF' "$prefix/consumer/t2p-link.txt" || { echo "consumer: $(head -1 "$prefix/consumer/t2p-link.txt"), expected ELF" >&2; exit 1; }
exports=$(nm -D --defined-only "$prefix/consumer/libt2p-consumer-shared.so" | awk '{print $3}' | sort | tr '\n' ' ')
if [ "$exports" != "consumer_t2p_check consumer_t2p_version " ]; then
    echo "libt2p-consumer-shared.so must export its two functions only, got: $(echo "$exports" | cut -c1-300)" >&2
    exit 1
fi
echo "libt2p-consumer-shared.so (t2p_link_private, ELF) exports only: $exports"
cc build/test-consumer/main.c -o "$prefix/consumer-pc" $(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs t2p)
"$prefix/consumer-pc"
rm -rf "$prefix"

step "macOS and Windows: cargo check, mingw-w64 build under wine, link options per linker (tests/platforms.sh)"
./tests/platforms.sh

step "aarch64 under qemu: every Rust test on -cpu max, the kernel suites on neoverse-n1 and cortex-a53"
arm_start=$SECONDS
./tests/aarch64-runs.sh
echo "aarch64 Rust tests: $((SECONDS - arm_start)) s (build included)"

step "aarch64 under qemu: C unit tests"
arm_start=$SECONDS
cargo build --release --lib --no-default-features --target aarch64-unknown-linux-gnu
for cpu in max neoverse-n1 cortex-a53; do
    make -s -C tests/c CC=aarch64-linux-gnu-gcc BUILD="build-aarch64" \
        LIB=../../target/aarch64-unknown-linux-gnu/release/libt2p.a \
        RUN="qemu-aarch64-static -cpu $cpu -L /usr/aarch64-linux-gnu"
done
echo "aarch64 C unit tests: $((SECONDS - arm_start)) s (build included)"

step "all tests passed"
