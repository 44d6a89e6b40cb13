# CMake package configuration for libt2p (installed by build/install.cmake).
#
#   find_package(t2p REQUIRED)            # with CMAKE_PREFIX_PATH=<prefix> or t2p_DIR=<prefix>/lib/cmake/t2p
#   target_link_libraries(app PRIVATE t2p::t2p)
#   t2p_link_private(mylib)               # a shared library: link t2p::t2p, export none of it
#
# t2p::t2p is the static library <prefix>/lib/libt2p.a (t2p.lib for the MSVC ABI; a Rust
# staticlib built with position independent code, so it can be linked into shared libraries
# too) with the header <prefix>/include/t2p.h and the system libraries the Rust standard library
# needs on the target it was built for (rustc's --print native-static-libs, recorded by the
# installer in t2pPlatform.cmake). t2p::deps is the same without the archive.
# t2p_link_private(<target>) links t2p::t2p into <target> PRIVATE with the options of the linker
# CMake uses that keep libt2p's symbols out of <target>'s exports and drop its unused code
# (t2pLink.cmake: ELF, Mach-O, PE with the MSVC or mingw ABI; another linker gets a plain link).
# t2p_GGML_SOURCES: the ggml glue source that llama-patch/ggml-t2p.patch compiles into ggml-cpu.

cmake_minimum_required(VERSION 3.14)

# <prefix>/lib/cmake/t2p -> <prefix>
get_filename_component(_t2p_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)

if(NOT EXISTS "${CMAKE_CURRENT_LIST_DIR}/t2pPlatform.cmake")
    set(t2p_FOUND FALSE)
    set(t2p_NOT_FOUND_MESSAGE "t2p: ${CMAKE_CURRENT_LIST_DIR}/t2pPlatform.cmake is missing (rerun build/install.cmake)")
    return()
endif()
include("${CMAKE_CURRENT_LIST_DIR}/t2pPlatform.cmake")
include("${CMAKE_CURRENT_LIST_DIR}/t2pLink.cmake")

# A library built for another platform does not link; say so here rather than at link time.
set(_t2p_mismatch "")
if(_t2p_target MATCHES "-windows-" AND NOT WIN32)
    set(_t2p_mismatch "Windows")
elseif(_t2p_target MATCHES "-apple-" AND NOT APPLE)
    set(_t2p_mismatch "macOS")
elseif(_t2p_target MATCHES "-linux-(gnu|musl)" AND NOT CMAKE_SYSTEM_NAME STREQUAL "Linux")
    set(_t2p_mismatch "Linux")
endif()
if(_t2p_mismatch)
    set(t2p_FOUND FALSE)
    set(t2p_NOT_FOUND_MESSAGE "t2p: ${_t2p_prefix} holds libt2p for ${_t2p_target} (${_t2p_mismatch}), this project builds for ${CMAKE_SYSTEM_NAME}")
    unset(_t2p_mismatch)
    return()
endif()
unset(_t2p_mismatch)

set(t2p_LIBRARY "${_t2p_prefix}/lib/${_t2p_library_file}")
if(NOT TARGET t2p::t2p)
    if(NOT EXISTS "${t2p_LIBRARY}" OR NOT EXISTS "${_t2p_prefix}/include/t2p.h")
        set(t2p_FOUND FALSE)
        set(t2p_NOT_FOUND_MESSAGE "t2p: ${t2p_LIBRARY} or ${_t2p_prefix}/include/t2p.h is missing (rerun build/install.cmake)")
        return()
    endif()

    # rustc's list is complete (pthread, dl, ... on Linux; System on macOS): no find_package(Threads)
    set(_t2p_link_deps ${_t2p_native_libs})
    add_library(t2p::deps INTERFACE IMPORTED)
    set_target_properties(t2p::deps PROPERTIES
        INTERFACE_INCLUDE_DIRECTORIES "${_t2p_prefix}/include"
        INTERFACE_LINK_LIBRARIES "${_t2p_link_deps}"
        INTERFACE_LINK_OPTIONS "${_t2p_native_options}")
    add_library(t2p::t2p STATIC IMPORTED)
    set_target_properties(t2p::t2p PROPERTIES
        IMPORTED_LOCATION "${t2p_LIBRARY}"
        IMPORTED_LINK_INTERFACE_LANGUAGES "C"
        INTERFACE_LINK_LIBRARIES t2p::deps)
    unset(_t2p_link_deps)
endif()

# t2p_link_private(<target>): see the top of this file and t2pLink.cmake. Sets <target>'s
# property T2P_LINK_KIND to the kind chosen (ELF, MACHO, PE-MSVC, PE-GNU, PE-LLD or NONE; STATIC
# for a static or object library, which gets t2p::t2p as target_link_libraries gives it).
function(t2p_link_private target)
    if(CMAKE_C_COMPILER_LOADED)
        set(lang C)
    else()
        set(lang CXX)
    endif()
    _t2p_link_kind(kind ${lang})
    get_target_property(type ${target} TYPE)
    if(type STREQUAL "STATIC_LIBRARY" OR type STREQUAL "OBJECT_LIBRARY")
        # no link step of its own: libt2p goes to whatever links <target> (and its link options
        # belong there), as with target_link_libraries
        set(kind STATIC)
    endif()
    get_target_property(lib t2p::t2p IMPORTED_LOCATION)
    _t2p_link_options(opts "${kind}" "${lib}")
    if(kind STREQUAL "MACHO")
        # the archive goes in through -load_hidden only (loaded twice, the first load would win)
        target_link_libraries(${target} PRIVATE t2p::deps)
        set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS "${lib}")
    else()
        target_link_libraries(${target} PRIVATE t2p::t2p)
    endif()
    target_link_options(${target} PRIVATE ${opts})
    set_property(TARGET ${target} PROPERTY T2P_LINK_KIND "${kind}")
    if(kind STREQUAL "STATIC")
        message(STATUS "t2p: ${target}: a static library: libt2p links into what links it")
    elseif(kind STREQUAL "NONE")
        message(STATUS "t2p: ${target}: linker '${T2P_LINKER_ID}${CMAKE_${lang}_COMPILER_LINKER_ID}' on ${CMAKE_SYSTEM_NAME} not known to t2pLink.cmake: "
                       "plain link (libt2p's symbols may be exported, its unused code kept)")
    else()
        message(STATUS "t2p: ${target}: ${kind} link options: ${opts}")
    endif()
endfunction()

set(t2p_INCLUDE_DIRS "${_t2p_prefix}/include")
# The ggml extra buffer type (llama-patch/ggml-t2p.patch compiles it into ggml-cpu).
set(t2p_GGML_SOURCES "${_t2p_prefix}/share/t2p/ggml/ggml-t2p.cpp")
set(t2p_LIBRARIES t2p::t2p)
unset(_t2p_prefix)
