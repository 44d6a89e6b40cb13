# Configure-only toolchain (tests/platforms.sh): macOS arm64 with Debian's clang. There is no
# macOS SDK here, so try_compile builds static libraries (nothing is linked); the configure
# shows which link options t2p_link_private picks for Apple's linker.
set(CMAKE_SYSTEM_NAME Darwin)
set(CMAKE_SYSTEM_PROCESSOR arm64)
set(CMAKE_OSX_ARCHITECTURES arm64)
set(CMAKE_C_COMPILER clang)
set(CMAKE_C_COMPILER_TARGET arm64-apple-macos11)
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
