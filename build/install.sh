#!/usr/bin/env bash
# Builds libt2p (static, C ABI only) and installs it for CMake and pkg-config consumers:
#
#   build/install.sh PREFIX
#
# A thin wrapper of build/install.cmake, which does the work on every platform (it is what to
# run where there is no bash: `cmake -P build/install.cmake PREFIX`); see there and
# build/README.md for what is installed where. Environment: T2P_TARGET, T2P_SKIP_BUILD=1,
# CARGO, CARGO_TARGET_DIR (install.cmake reads them).
set -euo pipefail

if [ $# -ne 1 ] || [ -z "$1" ]; then
    echo "usage: $0 PREFIX" >&2
    exit 2
fi
exec "${CMAKE:-cmake}" -P "$(dirname "${BASH_SOURCE[0]}")/install.cmake" "$1"
