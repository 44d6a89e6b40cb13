#!/usr/bin/env bash
# CI check of the llama.cpp patch parts that need only t2p.h and libt2p (no llama.cpp checkout):
#   1. t2p-mm.h (the ggml-independent glue of ggml-t2p.cpp over t2p_plan_*: planes, T2P_VERIFY)
#      compiles as C11 and C++17 with -Wall -Wextra -Werror, and stays glue: llama-patch/*.h
#      at most 150 lines;
#   2. test/t2p-mm-test.c, linked against libt2p.a, runs that glue with emulated threads and
#      checks it bit for bit against the scalar oracle (every shape family the buffer type takes,
#      odd rows and k = 384 / 640 included, with q8_K activations (tq1_0/tq2_0) and q8_0 ones
#      (pq2_0) from t2p's quantizer and from a C model of ggml's x86 quantize_row_q8_0);
#   3. the patch is well formed: touches only the 3 ggml files, GGML_T2P defaults to OFF, a
#      relative GGML_T2P_PREFIX is refused, libt2p is linked with the package's
#      t2p_link_private (per-linker options: --exclude-libs on ELF, ...) and no flag of its own.
# With LLAMA_FORK_DIR=<checkout of prismml-eng/llama.cpp at ff6b68f3875a858c6b0849c6e17211f558f495b6>
# it also runs `git apply --check` on that checkout and a syntax check of ggml-t2p.cpp against
# its headers.
#
# libt2p.a: $T2P_LIB if set, else `cargo build --release --lib --no-default-features` into
# ${CARGO_TARGET_DIR:-<repo>/target}. Compilers: $CC (default cc), $CXX (default c++).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
CC=${CC:-cc}
CXX=${CXX:-c++}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ -n "${T2P_LIB:-}" ]; then
    lib=$T2P_LIB
else
    target_dir=${CARGO_TARGET_DIR:-$root/target}
    (cd "$root" && CARGO_TARGET_DIR="$target_dir" cargo build --quiet --release --lib --no-default-features)
    lib=$target_dir/release/libt2p.a
fi
[ -f "$lib" ] || { echo "check.sh: $lib not found" >&2; exit 1; }

echo "check.sh: t2p-mm.h as C11 and C++17"
"$CC" -std=c11 -fsyntax-only -Wall -Wextra -Werror -I"$root/include" -x c "$here/t2p-mm.h"
"$CXX" -std=c++17 -fsyntax-only -Wall -Wextra -Werror -I"$root/include" -x c++ "$here/t2p-mm.h"
lines=$(cat "$here"/*.h | wc -l)
if [ "$lines" -gt 150 ]; then
    echo "check.sh: llama-patch/*.h has $lines lines; the driver belongs in libt2p (t2p_plan_*), not here" >&2
    exit 1
fi

echo "check.sh: test/t2p-mm-test.c against $lib"
"$CC" -std=c11 -O2 -Wall -Wextra -Werror -I"$root/include" -I"$here" "$here/test/t2p-mm-test.c" "$lib" \
    -lpthread -ldl -lm -lrt -lutil -o "$tmp/t2p-mm-test"
"$tmp/t2p-mm-test"
# the scalar path too (the buffer type uses whatever path libt2p picks)
T2P_ISA=scalar "$tmp/t2p-mm-test" > /dev/null

echo "check.sh: ggml-t2p.patch"
files=$(grep '^+++ b/' "$here/ggml-t2p.patch" | sed 's|^+++ b/||' | sort | tr '\n' ' ')
want="ggml/CMakeLists.txt ggml/src/ggml-cpu/CMakeLists.txt ggml/src/ggml-cpu/ggml-cpu.cpp "
if [ "$files" != "$want" ]; then
    echo "check.sh: the patch touches '$files', expected '$want'" >&2
    exit 1
fi
grep -q '^+option(GGML_T2P .* OFF)$' "$here/ggml-t2p.patch" || { echo "check.sh: GGML_T2P must default to OFF" >&2; exit 1; }
grep -q 'if (NOT IS_ABSOLUTE "${GGML_T2P_PREFIX}")' "$here/ggml-t2p.patch"
grep -q 'set(t2p_DIR "${GGML_T2P_PREFIX}/lib/cmake/t2p" CACHE PATH .* FORCE)' "$here/ggml-t2p.patch"
# the link options are chosen per linker by the package (build/t2pLink.cmake, checked for every
# platform by tests/platforms.sh); the patch must link through it, with no linker flag of its own
grep -q '^+        t2p_link_private(${GGML_CPU_NAME})$' "$here/ggml-t2p.patch" || { echo "check.sh: the patch must link libt2p with t2p_link_private" >&2; exit 1; }
if grep -E '^\+.*(LINKER:|-Wl,|target_link_options)' "$here/ggml-t2p.patch"; then
    echo "check.sh: the patch sets link options itself; they belong in build/t2pLink.cmake (per linker)" >&2
    exit 1
fi
grep -q 'LINKER:--exclude-libs,${name}' "$root/build/t2pLink.cmake"
grep -q 'function(t2p_link_private' "$root/build/t2pConfig.cmake"
grep -q 't2p_GGML_SOURCES' "$here/ggml-t2p.patch"
grep -q 't2p_GGML_SOURCES' "$root/build/t2pConfig.cmake"
grep -q 'ggml_backend_cpu_t2p_buffer_type' "$here/ggml-t2p.cpp"

if [ -n "${LLAMA_FORK_DIR:-}" ]; then
    echo "check.sh: against the fork checkout $LLAMA_FORK_DIR"
    if git -C "$LLAMA_FORK_DIR" apply --check "$here/ggml-t2p.patch" 2>/dev/null; then
        echo "  patch applies"
    elif git -C "$LLAMA_FORK_DIR" apply --check --reverse "$here/ggml-t2p.patch" 2>/dev/null; then
        echo "  patch already applied"
    else
        echo "check.sh: ggml-t2p.patch does not apply to $LLAMA_FORK_DIR" >&2
        exit 1
    fi
    "$CXX" -std=c++17 -fsyntax-only -Wall -Wextra -I"$LLAMA_FORK_DIR/ggml/include" -I"$LLAMA_FORK_DIR/ggml/src" \
        -I"$LLAMA_FORK_DIR/ggml/src/ggml-cpu" -I"$root/include" "$here/ggml-t2p.cpp"
    echo "  ggml-t2p.cpp compiles against the fork's headers"
fi
echo "check.sh: ok"
