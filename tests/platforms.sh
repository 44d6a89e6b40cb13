#!/usr/bin/env bash
# macOS and Windows checks that run on this Linux x86_64 host (test.sh runs this script after its
# install step, which installs the tools it needs; run alone, it fails naming what is missing):
#
#   1. cargo check --all-targets for aarch64-apple-darwin, x86_64-apple-darwin and
#      aarch64-pc-windows-msvc;
#   2. build/t2pLink.cmake's choice of link options for every platform and linker id
#      (tests/platforms/link-kinds.cmake, platform variables faked);
#   3. build/install.cmake for x86_64-pc-windows-gnu, aarch64-apple-darwin and
#      aarch64-pc-windows-msvc (real builds: libt2p.a / t2p.lib, rustc's system libraries
#      recorded in t2pPlatform.cmake and t2p.pc);
#   4. Windows x86_64 (mingw-w64, GNU ld): the C unit tests (tests/c) and the CMake consumer
#      (build/test-consumer with build/toolchains/x86_64-w64-mingw32.cmake: a program, a DLL
#      through t2p_link_private and a program using it) and the pkg-config consumer, run under
#      wine; the DLL must export its own two functions and nothing of libt2p;
#   5. macOS arm64: the CMake consumer's shared library configured with clang for
#      arm64-apple-macos11 and linked by ld64.lld (LLVM 15; there is no macOS SDK here, so
#      libSystem, libc and libm are empty stub dylibs and undefined symbols are left to the
#      loader): the dylib must export only its two functions (a plain link, the control,
#      exports libt2p's Rust symbols);
#   6. Windows arm64, MSVC ABI (clang + lld-link, as the seed built llama.cpp): the consumer
#      configured (no Windows SDK here, so nothing is linked): /OPT:REF and no GNU option on
#      the DLL's link line; t2p.lib carries no export directive;
#   7. the GGML_T2P hunk of llama-patch/ggml-t2p.patch configured (tests/platforms/patch-hunk)
#      for Linux, mingw-w64, macOS and Windows MSVC: ELF, PE-GNU, MACHO, PE-MSVC (and a static
#      ggml-cpu on macOS: STATIC, libt2p.a passed on to the program).
#
# What only a real Mac or Windows machine shows (running there, Apple's ld64, link.exe, the
# patched fork's full build) is listed in README.md, "Platforms".
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
t0=$(date +%s)
say() { printf '  [%4ds] %s\n' $(( $(date +%s) - t0 )) "$*"; }
fail() { echo "platforms.sh: FAILED: $*" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

llvm15=/usr/lib/llvm-15/bin
for tool in cmake clang llvm-nm x86_64-w64-mingw32-gcc x86_64-w64-mingw32-objdump wine \
            pkg-config "$llvm15/ld64.lld"; do
    command -v "$tool" >/dev/null || fail "$tool not found (test.sh's install step installs it)"
done
target_dir=${CARGO_TARGET_DIR:-$root/target}

# the kind and options t2p-link.txt (written by the consumer and patch-hunk projects) records
expect_kind() { # file kind
    grep -qx "kind $2" "$1" || fail "$1: $(head -1 "$1"), expected kind $2"
}

say "1. cargo check --all-targets for macOS and Windows on ARM"
# one cargo run for the three (it schedules their crates together)
cargo check --quiet --all-targets --target aarch64-apple-darwin --target x86_64-apple-darwin --target aarch64-pc-windows-msvc
say "   aarch64-apple-darwin, x86_64-apple-darwin, aarch64-pc-windows-msvc: ok"

say "2. t2pLink.cmake for every platform and linker id"
cmake -P tests/platforms/link-kinds.cmake > "$tmp/link-kinds.log" || { cat "$tmp/link-kinds.log"; fail "link-kinds.cmake"; }
tail -1 "$tmp/link-kinds.log"

say "3. install.cmake for three targets"
for t in x86_64-pc-windows-gnu aarch64-apple-darwin aarch64-pc-windows-msvc; do
    cmake -DT2P_TARGET=$t -P build/install.cmake "$tmp/prefix-$t" > "$tmp/install-$t.log" 2>&1 \
        || { cat "$tmp/install-$t.log"; fail "install.cmake for $t"; }
    case $t in *-msvc) lib=t2p.lib other=libt2p.a ;; *) lib=libt2p.a other=t2p.lib ;; esac
    [ -f "$tmp/prefix-$t/lib/$lib" ] && [ ! -e "$tmp/prefix-$t/lib/$other" ] || fail "$t: expected lib/$lib only"
    grep -q "from rustc --print native-static-libs ($t)" "$tmp/prefix-$t/lib/cmake/t2p/t2pPlatform.cmake" \
        || fail "$t: t2pPlatform.cmake does not record rustc's list"
    say "   $t: lib/$lib, $(grep '^Libs:' "$tmp/prefix-$t/lib/pkgconfig/t2p.pc")"
done
grep -q '^Libs: .* -lkernel32 -lntdll -luserenv -lws2_32 -ldbghelp' "$tmp/prefix-aarch64-pc-windows-msvc/lib/pkgconfig/t2p.pc" \
    || fail "MSVC t2p.pc: kernel32.lib ... not converted to -l flags"

say "4. Windows x86_64 (mingw-w64) under wine"
export WINEPREFIX="$tmp/wine" WINEDEBUG=-all WINEDLLOVERRIDES="mscoree,mshtml="
# mingw DLLs that link libt2p import libgcc_s_seh-1.dll (the unwinder Rust's std uses)
WINEPATH=$(dirname "$(x86_64-w64-mingw32-gcc -print-libgcc-file-name)")
export WINEPATH
win=$tmp/prefix-x86_64-pc-windows-gnu
winlibs=$(cat "$target_dir/x86_64-pc-windows-gnu/release/t2p-native-static-libs.txt")
# Wine 8 has no ProcessPrng (bcryptprimitives.dll), which Rust's std imports for random seeds:
# the one-function stand-in goes beside every .exe (the present tests do not reach it; a
# program that seeds a HashMap would not start without it)
x86_64-w64-mingw32-gcc -shared -O2 -Wall -Wextra -Werror -o "$tmp/bcryptprimitives.dll" tests/windows/bcryptprimitives.c -ladvapi32
mkdir -p "$tmp/c-win"
cp "$tmp/bcryptprimitives.dll" "$tmp/c-win/"
make -s -C tests/c CC=x86_64-w64-mingw32-gcc EXE=.exe BUILD="$tmp/c-win" LDLIBS="$winlibs" \
    LIB="$target_dir/x86_64-pc-windows-gnu/release/libt2p.a" RUN=wine > "$tmp/c-win.log" 2>&1 \
    || { cat "$tmp/c-win.log"; fail "tests/c under wine"; }
say "   tests/c: $(tail -1 "$tmp/c-win.log")"
cmake -S build/test-consumer -B "$tmp/consumer-win" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_TOOLCHAIN_FILE="$root/build/toolchains/x86_64-w64-mingw32.cmake" -DCMAKE_PREFIX_PATH="$win" > /dev/null
cmake --build "$tmp/consumer-win" > /dev/null
expect_kind "$tmp/consumer-win/t2p-link.txt" PE-GNU
cp "$tmp/bcryptprimitives.dll" "$tmp/consumer-win/"
(cd "$tmp/consumer-win" && wine ./t2p-consumer.exe && wine ./t2p-consumer-dyn.exe) | sed 's/^/     /'
exports=$(x86_64-w64-mingw32-objdump -p "$tmp/consumer-win/libt2p-consumer-shared.dll" \
    | sed -n '/\[Ordinal\/Name Pointer\] Table/,/^$/p' | awk '/\[/ && NR > 1 {print $NF}' | sort | tr '\n' ' ')
[ "$exports" = "consumer_t2p_check consumer_t2p_version " ] || fail "the mingw DLL exports '$exports'"
say "   consumer: PE-GNU link; the DLL exports only: $exports"
x86_64-w64-mingw32-gcc build/test-consumer/main.c -o "$tmp/consumer-win/consumer-pc.exe" \
    $(PKG_CONFIG_PATH="$win/lib/pkgconfig" pkg-config --cflags --libs t2p)
(cd "$tmp/consumer-win" && wine ./consumer-pc.exe) | sed 's/^/     /'

say "5. macOS arm64: the consumer's dylib linked by ld64.lld"
mkdir -p "$tmp/macos-stubs"
echo 'int t2p_stub_unused;' > "$tmp/empty.c"
clang --target=arm64-apple-macos11 -c "$tmp/empty.c" -o "$tmp/empty-macos.o"
for l in System c m; do
    "$llvm15/ld64.lld" -arch arm64 -platform_version macos 11.0 11.0 -dylib -install_name "/usr/lib/lib$l.dylib" \
        -o "$tmp/macos-stubs/lib$l.dylib" "$tmp/empty-macos.o"
done
mac=$tmp/prefix-aarch64-apple-darwin
mac_link_flags="-fuse-ld=$llvm15/ld64.lld -nostdlib -L$tmp/macos-stubs -Wl,-platform_version,macos,11.0,11.0 -Wl,-undefined,dynamic_lookup"
for variant in t2p plain; do
    extra=()
    [ $variant = plain ] && extra=(-DT2P_LINKER_ID=none)
    cmake -S build/test-consumer -B "$tmp/consumer-mac-$variant" -DCMAKE_BUILD_TYPE=Release "${extra[@]}" \
        -DCMAKE_TOOLCHAIN_FILE="$root/tests/platforms/clang-darwin.cmake" -DCMAKE_PREFIX_PATH="$mac" \
        -DCMAKE_C_FLAGS=-ffreestanding "-DCMAKE_SHARED_LINKER_FLAGS=$mac_link_flags" > /dev/null
    cmake --build "$tmp/consumer-mac-$variant" --target t2p-consumer-shared > /dev/null
done
expect_kind "$tmp/consumer-mac-t2p/t2p-link.txt" MACHO
expect_kind "$tmp/consumer-mac-plain/t2p-link.txt" NONE
exports=$(llvm-nm -gU "$tmp/consumer-mac-t2p/libt2p-consumer-shared.dylib" | awk '{print $3}' | sort | tr '\n' ' ')
[ "$exports" = "_consumer_t2p_check _consumer_t2p_version " ] || fail "the macOS dylib exports '$exports'"
plain=$(llvm-nm -gU "$tmp/consumer-mac-plain/libt2p-consumer-shared.dylib" | wc -l)
[ "$plain" -gt 100 ] || fail "control: a plain link exports only $plain symbols (the check could not see a leak)"
say "   MACHO link (-load_hidden, -dead_strip): the dylib exports only: $exports(a plain link: $plain symbols)"

say "6. Windows arm64, MSVC ABI: the consumer configured for clang + lld-link"
cmake -S build/test-consumer -B "$tmp/consumer-msvc" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_TOOLCHAIN_FILE="$root/tests/platforms/clang-windows-msvc.cmake" \
    -DCMAKE_PREFIX_PATH="$tmp/prefix-aarch64-pc-windows-msvc" > /dev/null
expect_kind "$tmp/consumer-msvc/t2p-link.txt" PE-MSVC
d=$tmp/consumer-msvc/CMakeFiles/t2p-consumer-shared.dir
link="$(cat "$d/link.txt") $(cat "$d/linkLibs.rsp" 2>/dev/null || true)" # the libraries may be in a response file
case $link in *"/OPT:REF"*) ;; *) fail "no /OPT:REF on the MSVC DLL's link line: $link" ;; esac
case $link in *--exclude-libs*|*--gc-sections*|*-dead_strip*|*-load_hidden*) fail "a foreign option on the MSVC link line: $link" ;; esac
case $link in *"/lib/t2p.lib"*) ;; *) fail "t2p.lib is not on the MSVC DLL's link line: $link" ;; esac
if grep -a -q -i -e '/EXPORT:' -e '-export:' "$tmp/prefix-aarch64-pc-windows-msvc/lib/t2p.lib"; then
    fail "t2p.lib carries an export directive: a DLL linking it would export libt2p's symbols"
fi
say "   PE-MSVC link options: /OPT:REF; t2p.lib has no export directive"

say "7. the patch's GGML_T2P hunk configured for each platform"
sed -n '/^+    if (GGML_T2P)$/,/^+    endif()$/p' llama-patch/ggml-t2p.patch | sed 's/^+//' > "$tmp/hunk.cmake"
grep -q 't2p_link_private' "$tmp/hunk.cmake" || fail "no GGML_T2P hunk with t2p_link_private in the patch"
cmake -DT2P_SKIP_BUILD=1 -P build/install.cmake "$tmp/prefix-host" > /dev/null
# kind, target, library type of ggml-cpu, toolchain
for case in "ELF host SHARED" "PE-GNU x86_64-pc-windows-gnu SHARED build/toolchains/x86_64-w64-mingw32.cmake" \
            "MACHO aarch64-apple-darwin SHARED tests/platforms/clang-darwin.cmake" \
            "STATIC aarch64-apple-darwin STATIC tests/platforms/clang-darwin.cmake" \
            "PE-MSVC aarch64-pc-windows-msvc SHARED tests/platforms/clang-windows-msvc.cmake"; do
    read -r kind t type toolchain <<< "$case"
    args=(-DT2P_HUNK="$tmp/hunk.cmake" -DGGML_T2P_PREFIX="$tmp/prefix-$t" -DGGML_CPU_LIBRARY_TYPE="$type")
    [ -n "${toolchain:-}" ] && args+=(-DCMAKE_TOOLCHAIN_FILE="$root/$toolchain")
    dir=$tmp/hunk-$t-$type
    cmake -S tests/platforms/patch-hunk -B "$dir" "${args[@]}" > "$dir.log" 2>&1 \
        || { cat "$dir.log"; fail "the patch hunk does not configure for $t ($type)"; }
    expect_kind "$dir/t2p-link.txt" "$kind"
    say "   $t, $type ggml-cpu: $kind, $(grep '^options' "$dir/t2p-link.txt")"
done
say "platforms: all checks passed"
