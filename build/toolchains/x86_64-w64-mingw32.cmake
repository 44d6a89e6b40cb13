# CMake toolchain file: Windows x86_64 with Debian's mingw-w64 cross compilers
# (gcc-mingw-w64-x86-64, g++-mingw-w64-x86-64 for C++), for libt2p installed with
#   cmake -DT2P_TARGET=x86_64-pc-windows-gnu -P build/install.cmake PREFIX
# and used as: cmake -DCMAKE_TOOLCHAIN_FILE=build/toolchains/x86_64-w64-mingw32.cmake -DCMAKE_PREFIX_PATH=PREFIX ...
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR AMD64)
set(CMAKE_C_COMPILER x86_64-w64-mingw32-gcc)
# Debian's default g++ (win32 thread model) has no std::thread / std::mutex, which llama.cpp
# needs: the -posix one where it is installed (C code does not care)
if(EXISTS /usr/bin/x86_64-w64-mingw32-g++-posix)
    set(CMAKE_CXX_COMPILER x86_64-w64-mingw32-g++-posix)
else()
    set(CMAKE_CXX_COMPILER x86_64-w64-mingw32-g++)
endif()
set(CMAKE_RC_COMPILER x86_64-w64-mingw32-windres)
set(CMAKE_FIND_ROOT_PATH /usr/x86_64-w64-mingw32)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
# packages (t2p) come from CMAKE_PREFIX_PATH as given, not re-rooted under the mingw sysroot
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
set(CMAKE_CROSSCOMPILING_EMULATOR wine)
