# Configure-only toolchain (tests/platforms.sh): Windows arm64, MSVC ABI, clang with its GNU-style
# driver and lld-link (how the seed's Windows-on-ARM validation built llama.cpp: clang + ninja).
# There is no Windows SDK here, so try_compile builds static libraries (nothing is linked); the
# configure shows which link options t2p_link_private picks for link.exe / lld-link.
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR ARM64)
set(CMAKE_C_COMPILER clang)
set(CMAKE_C_COMPILER_TARGET aarch64-pc-windows-msvc)
set(CMAKE_LINKER lld-link)
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
