# CMake package configuration for libt2p (installed by build/install.sh).
#
#   find_package(t2p REQUIRED)            # with CMAKE_PREFIX_PATH=<prefix> or t2p_DIR=<prefix>/lib/cmake/t2p
#   target_link_libraries(app PRIVATE t2p::t2p)
#
# t2p::t2p is the static library <prefix>/lib/libt2p.a (a Rust staticlib built with position
# independent code, so it can be linked into shared libraries too) with the header
# <prefix>/include/t2p.h and the system libraries the Rust standard library needs.
# t2p_GGML_SOURCES: the ggml glue source that llama-patch/ggml-t2p.patch compiles into ggml-cpu.

cmake_minimum_required(VERSION 3.14)

# <prefix>/lib/cmake/t2p -> <prefix>
get_filename_component(_t2p_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)

include(CMakeFindDependencyMacro)
set(THREADS_PREFER_PTHREAD_FLAG ON)
find_dependency(Threads)

if(NOT TARGET t2p::t2p)
    if(NOT EXISTS "${_t2p_prefix}/lib/libt2p.a" OR NOT EXISTS "${_t2p_prefix}/include/t2p.h")
        set(t2p_FOUND FALSE)
        set(t2p_NOT_FOUND_MESSAGE "t2p: ${_t2p_prefix}/lib/libt2p.a or ${_t2p_prefix}/include/t2p.h is missing (rerun build/install.sh)")
        return()
    endif()

    add_library(t2p::t2p STATIC IMPORTED)
    set(_t2p_link_deps Threads::Threads ${CMAKE_DL_LIBS})
    if(CMAKE_SYSTEM_NAME STREQUAL "Linux")
        # `cargo rustc -- --print native-static-libs`: -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc
        list(APPEND _t2p_link_deps m rt util gcc_s)
    elseif(UNIX)
        list(APPEND _t2p_link_deps m)
    endif()
    set_target_properties(t2p::t2p PROPERTIES
        IMPORTED_LOCATION "${_t2p_prefix}/lib/libt2p.a"
        IMPORTED_LINK_INTERFACE_LANGUAGES "C"
        INTERFACE_INCLUDE_DIRECTORIES "${_t2p_prefix}/include"
        INTERFACE_LINK_LIBRARIES "${_t2p_link_deps}")
    unset(_t2p_link_deps)
endif()

set(t2p_INCLUDE_DIRS "${_t2p_prefix}/include")
# The ggml extra buffer type (llama-patch/ggml-t2p.patch compiles it into ggml-cpu).
set(t2p_GGML_SOURCES "${_t2p_prefix}/share/t2p/ggml/ggml-t2p.cpp")
set(t2p_LIBRARIES t2p::t2p)
unset(_t2p_prefix)
