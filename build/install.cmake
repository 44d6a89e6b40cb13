# Builds libt2p (static, C ABI only) and installs it for CMake and pkg-config consumers, on every
# platform (Linux, macOS, Windows with MSVC or mingw-w64):
#
#   cmake [-DT2P_TARGET=<rust target triple>] [-DT2P_SKIP_BUILD=1] -P build/install.cmake PREFIX
#
#   PREFIX/include/t2p.h
#   PREFIX/lib/libt2p.a                 (t2p.lib for the *-windows-msvc targets)
#   PREFIX/lib/cmake/t2p/t2pConfig.cmake, t2pConfigVersion.cmake, t2pLink.cmake, t2pPlatform.cmake
#                                       (find_package(t2p) -> t2p::t2p, t2p_link_private())
#   PREFIX/lib/pkgconfig/t2p.pc         (pkg-config --cflags --libs t2p)
#   PREFIX/share/t2p/ggml/ggml-t2p.cpp, t2p-mm.h   (the ggml glue llama-patch/ builds)
#
# The library is built with `cargo rustc --release --lib --no-default-features --crate-type
# staticlib [--target T2P_TARGET] -- --print native-static-libs`; the system libraries rustc
# prints there (what the Rust standard library needs on that target) are recorded beside the
# library and written into t2pPlatform.cmake and t2p.pc, so they are never kept by hand.
#
# Options (-D before -P, or the environment): T2P_TARGET (default: rustc's host),
# T2P_SKIP_BUILD=1 (install an already built library, no cargo: the recorded system libraries
# of an earlier build of this script, else rustc's list for that platform as of Rust 1.95),
# CARGO (default cargo), CARGO_TARGET_DIR (default <repo>/target). PREFIX may be relative (it is
# made absolute against the current directory); the installed files record the absolute path.
cmake_minimum_required(VERSION 3.19)

foreach(_v T2P_TARGET T2P_SKIP_BUILD CARGO CARGO_TARGET_DIR)
    if(NOT DEFINED ${_v} AND DEFINED ENV{${_v}})
        set(${_v} "$ENV{${_v}}")
    endif()
endforeach()
if(NOT CARGO)
    set(CARGO cargo)
endif()

# PREFIX: the first argument after the script
set(_prefix "")
math(EXPR _last "${CMAKE_ARGC} - 1")
foreach(_i RANGE 1 ${_last})
    if(CMAKE_ARGV${_i} STREQUAL "-P")
        math(EXPR _p "${_i} + 2")
        if(_p LESS CMAKE_ARGC)
            set(_prefix "${CMAKE_ARGV${_p}}")
        endif()
        break()
    endif()
endforeach()
if(_prefix STREQUAL "")
    message(FATAL_ERROR "usage: cmake [-DT2P_TARGET=triple] [-DT2P_SKIP_BUILD=1] -P build/install.cmake PREFIX")
endif()
file(TO_CMAKE_PATH "${_prefix}" _prefix)
# in script mode CMAKE_CURRENT_BINARY_DIR is the current directory
get_filename_component(_prefix "${_prefix}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_BINARY_DIR}")

get_filename_component(_here "${CMAKE_CURRENT_LIST_DIR}" ABSOLUTE)
get_filename_component(_root "${_here}/.." ABSOLUTE)
if(NOT CARGO_TARGET_DIR)
    set(CARGO_TARGET_DIR "${_root}/target")
endif()
file(TO_CMAKE_PATH "${CARGO_TARGET_DIR}" CARGO_TARGET_DIR)
get_filename_component(CARGO_TARGET_DIR "${CARGO_TARGET_DIR}" ABSOLUTE BASE_DIR "${_root}")

file(STRINGS "${_root}/Cargo.toml" _version REGEX "^version *= *\"[^\"]*\"" LIMIT_COUNT 1)
string(REGEX REPLACE "^version *= *\"([^\"]*)\".*" "\\1" VERSION "${_version}")
if(NOT VERSION)
    message(FATAL_ERROR "install.cmake: cannot read the version from ${_root}/Cargo.toml")
endif()

# The target triple: given, or rustc's host (needed to pick the library's file name).
set(_triple "${T2P_TARGET}")
if(_triple STREQUAL "")
    execute_process(COMMAND rustc -vV OUTPUT_VARIABLE _rustc_vv RESULT_VARIABLE _rc ERROR_QUIET)
    if(_rc EQUAL 0 AND _rustc_vv MATCHES "host: ([^\n]+)")
        set(_triple "${CMAKE_MATCH_1}")
    elseif(NOT T2P_SKIP_BUILD)
        message(FATAL_ERROR "install.cmake: rustc -vV failed; is Rust (1.95 or later) installed?")
    endif()
    set(_libdir "${CARGO_TARGET_DIR}/release")
else()
    set(_libdir "${CARGO_TARGET_DIR}/${_triple}/release")
endif()

# The platform the library is for: from the triple, or without one (T2P_SKIP_BUILD and no
# rustc) from the host and from which library file exists. It picks the file rustc writes for a
# staticlib (t2p.lib for the MSVC ABI, libt2p.a everywhere else: Linux, macOS, mingw-w64) and,
# further down, the fallback list of native libraries.
if(_triple MATCHES "-windows-msvc"
   OR (_triple STREQUAL "" AND EXISTS "${_libdir}/t2p.lib" AND NOT EXISTS "${_libdir}/libt2p.a"))
    set(_platform msvc)
elseif(_triple MATCHES "-windows-gnu" OR (_triple STREQUAL "" AND CMAKE_HOST_WIN32))
    set(_platform mingw)
elseif(_triple MATCHES "-apple-" OR (_triple STREQUAL "" AND CMAKE_HOST_APPLE))
    set(_platform apple)
else()
    set(_platform unix)
endif()
if(_platform STREQUAL "msvc")
    set(_libname "t2p.lib")
else()
    set(_libname "libt2p.a")
endif()
set(_lib "${_libdir}/${_libname}")
set(_record "${_libdir}/t2p-native-static-libs.txt")

if(NOT T2P_SKIP_BUILD)
    set(_target_args "")
    if(NOT "${T2P_TARGET}" STREQUAL "")
        set(_target_args --target "${T2P_TARGET}")
    endif()
    # cargo replays rustc's notes when the library is already fresh, so the list comes back
    # on every run, not only when the library is rebuilt.
    execute_process(
        COMMAND "${CARGO}" rustc --release --lib --no-default-features --crate-type staticlib
                ${_target_args} -- --print native-static-libs
        WORKING_DIRECTORY "${_root}"
        RESULT_VARIABLE _rc
        ERROR_VARIABLE _cargo_err ECHO_ERROR_VARIABLE)
    if(NOT _rc EQUAL 0)
        message(FATAL_ERROR "install.cmake: cargo rustc failed (${_rc})")
    endif()
    if(NOT _cargo_err MATCHES "native-static-libs: ([^\r\n]*)")
        message(FATAL_ERROR "install.cmake: rustc printed no native-static-libs line")
    endif()
    string(STRIP "${CMAKE_MATCH_1}" _native)
    file(WRITE "${_record}" "${_native}\n")
    set(_native_from "rustc --print native-static-libs (${_triple})")
elseif(EXISTS "${_record}")
    file(STRINGS "${_record}" _native LIMIT_COUNT 1)
    set(_native_from "${_record}")
else()
    # No recorded list (the library was built by plain cargo build): rustc 1.95's lists.
    set(_native_msvc "kernel32.lib ntdll.lib userenv.lib ws2_32.lib dbghelp.lib /defaultlib:msvcrt")
    set(_native_mingw "-lkernel32 -lntdll -luserenv -lws2_32 -ldbghelp")
    set(_native_apple "-lSystem -lc -lm")
    set(_native_unix "-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc")
    set(_native "${_native_${_platform}}")
    set(_native_from "install.cmake's list for ${_triple} (rustc 1.95; no ${_record})")
endif()
if(NOT EXISTS "${_lib}")
    message(FATAL_ERROR "install.cmake: ${_lib} not found")
endif()

# rustc's list -> CMake link items (t2pPlatform.cmake) and pkg-config -l flags (t2p.pc):
# -lfoo and foo.lib become foo, -l:file and -framework X stay as they are, /defaultlib:X
# (the MSVC C runtime the std objects were built for) becomes a link option.
separate_arguments(_tokens UNIX_COMMAND "${_native}")
set(_cmake_libs "")
set(_cmake_opts "")
set(_pc_libs "")
set(_framework FALSE)
foreach(_t IN LISTS _tokens)
    if(_framework)
        list(APPEND _cmake_libs "-framework ${_t}")
        string(APPEND _pc_libs " -framework ${_t}")
        set(_framework FALSE)
    elseif(_t STREQUAL "-framework")
        set(_framework TRUE)
    elseif(_t MATCHES "^-l(:.*)$")
        list(APPEND _cmake_libs "${_t}")
        string(APPEND _pc_libs " ${_t}")
    elseif(_t MATCHES "^-l(.+)$")
        list(APPEND _cmake_libs "${CMAKE_MATCH_1}")
        string(APPEND _pc_libs " ${_t}")
    elseif(_t MATCHES "^([^-/].*)\\.lib$")
        list(APPEND _cmake_libs "${CMAKE_MATCH_1}")
        string(APPEND _pc_libs " -l${CMAKE_MATCH_1}")
    elseif(_t MATCHES "^/defaultlib:")
        list(APPEND _cmake_opts "LINKER:${_t}")
    else()
        list(APPEND _cmake_opts "${_t}")
        string(APPEND _pc_libs " ${_t}")
    endif()
endforeach()

set(_cmake_dir "${_prefix}/lib/cmake/t2p")
file(MAKE_DIRECTORY "${_prefix}/include" "${_cmake_dir}" "${_prefix}/lib/pkgconfig" "${_prefix}/share/t2p/ggml")
foreach(_pair "include/t2p.h|include/t2p.h"
              "${_lib}|lib/${_libname}"
              "build/t2pConfig.cmake|lib/cmake/t2p/t2pConfig.cmake"
              "build/t2pLink.cmake|lib/cmake/t2p/t2pLink.cmake"
              "llama-patch/ggml-t2p.cpp|share/t2p/ggml/ggml-t2p.cpp"
              "llama-patch/t2p-mm.h|share/t2p/ggml/t2p-mm.h")
    string(REPLACE "|" ";" _pair "${_pair}")
    list(GET _pair 0 _from)
    list(GET _pair 1 _to)
    if(NOT IS_ABSOLUTE "${_from}")
        set(_from "${_root}/${_from}")
    endif()
    configure_file("${_from}" "${_prefix}/${_to}" COPYONLY)
endforeach()
# the other library name of an earlier install for another target must not linger
foreach(_other libt2p.a t2p.lib)
    if(NOT _other STREQUAL _libname AND EXISTS "${_prefix}/lib/${_other}")
        file(REMOVE "${_prefix}/lib/${_other}")
    endif()
endforeach()
configure_file("${_here}/t2pConfigVersion.cmake.in" "${_cmake_dir}/t2pConfigVersion.cmake" @ONLY)
set(PREFIX "${_prefix}")
string(STRIP "${_pc_libs}" PC_NATIVE_LIBS)
configure_file("${_here}/t2p.pc.in" "${_prefix}/lib/pkgconfig/t2p.pc" @ONLY)
file(WRITE "${_cmake_dir}/t2pPlatform.cmake"
"# Generated by build/install.cmake: what t2pConfig.cmake needs to know about this build.
set(_t2p_target \"${_triple}\")
set(_t2p_library_file \"${_libname}\")
# the system libraries of the Rust standard library, from ${_native_from}:
#   ${_native}
set(_t2p_native_libs \"${_cmake_libs}\")
set(_t2p_native_options \"${_cmake_opts}\")
")

message(STATUS "install.cmake: libt2p ${VERSION} (${_triple}, ${_libname}) installed into ${_prefix}")
message(STATUS "  system libraries: ${_native} (from ${_native_from})")
message(STATUS "  CMake:      -DCMAKE_PREFIX_PATH=${_prefix}   (find_package(t2p) -> t2p::t2p)")
message(STATUS "  pkg-config: PKG_CONFIG_PATH=${_prefix}/lib/pkgconfig pkg-config --cflags --libs t2p")
message(STATUS "  llama.cpp:  -DGGML_T2P=ON -DGGML_T2P_PREFIX=${_prefix}   (with llama-patch/ggml-t2p.patch applied)")
