#!/usr/bin/env bash
# Builds libt2p (static, C ABI only) and installs it for CMake and pkg-config consumers:
#
#   build/install.sh PREFIX
#
#   PREFIX/include/t2p.h
#   PREFIX/lib/libt2p.a
#   PREFIX/lib/cmake/t2p/t2pConfig.cmake, t2pConfigVersion.cmake   (find_package(t2p) -> t2p::t2p)
#   PREFIX/lib/pkgconfig/t2p.pc                                    (pkg-config --cflags --libs t2p)
#   PREFIX/share/t2p/ggml/ggml-t2p.cpp, t2p-mm.h                   (the ggml glue llama-patch/ builds)
#
# PREFIX may be relative (it is made absolute here); the files installed record the absolute path.
# Needs Rust 1.95 or later (edition 2024) unless T2P_SKIP_BUILD=1.
#
# Environment: CARGO (default cargo), CARGO_TARGET_DIR (default <repo>/target),
# T2P_SKIP_BUILD=1 installs an already built target/release/libt2p.a without running cargo.
set -euo pipefail

if [ $# -ne 1 ] || [ -z "$1" ]; then
    echo "usage: $0 PREFIX" >&2
    exit 2
fi

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
mkdir -p "$1"
prefix=$(cd "$1" && pwd)
target_dir=${CARGO_TARGET_DIR:-$root/target}
case "$target_dir" in /*) ;; *) target_dir=$root/$target_dir ;; esac

version=$(sed -n 's/^version *= *"\([^"]*\)".*/\1/p' "$root/Cargo.toml" | head -n 1)
if [ -z "$version" ]; then
    echo "install.sh: cannot read the version from $root/Cargo.toml" >&2
    exit 1
fi

if [ "${T2P_SKIP_BUILD:-0}" != 1 ]; then
    (cd "$root" && CARGO_TARGET_DIR="$target_dir" "${CARGO:-cargo}" build --release --lib --no-default-features)
fi
lib=$target_dir/release/libt2p.a
if [ ! -f "$lib" ]; then
    echo "install.sh: $lib not found" >&2
    exit 1
fi

install -d "$prefix/include" "$prefix/lib/cmake/t2p" "$prefix/lib/pkgconfig" "$prefix/share/t2p/ggml"
install -m 0644 "$root/include/t2p.h" "$prefix/include/t2p.h"
install -m 0644 "$lib" "$prefix/lib/libt2p.a"
install -m 0644 "$here/t2pConfig.cmake" "$prefix/lib/cmake/t2p/t2pConfig.cmake"
sed "s|@VERSION@|$version|g" "$here/t2pConfigVersion.cmake.in" > "$prefix/lib/cmake/t2p/t2pConfigVersion.cmake"
sed -e "s|@PREFIX@|$prefix|g" -e "s|@VERSION@|$version|g" "$here/t2p.pc.in" > "$prefix/lib/pkgconfig/t2p.pc"
install -m 0644 "$root/llama-patch/ggml-t2p.cpp" "$root/llama-patch/t2p-mm.h" "$prefix/share/t2p/ggml/"

echo "install.sh: libt2p $version installed into $prefix"
echo "  CMake:      -DCMAKE_PREFIX_PATH=$prefix   (find_package(t2p) -> t2p::t2p)"
echo "  pkg-config: PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags --libs t2p"
echo "  llama.cpp:  -DGGML_T2P=ON -DGGML_T2P_PREFIX=$prefix   (with llama-patch/ggml-t2p.patch applied)"
