# Link options for linking libt2p.a / t2p.lib into a shared library (part of the t2p CMake
# package; t2pConfig.cmake includes it, and it is plain CMake so that tests/platforms.sh can run
# it in script mode with a faked platform and linker).
#
# libt2p is a Rust staticlib: besides the t2p_* functions it carries the Rust standard library,
# whose symbols are global. A shared library that links it should export none of them and drop
# the code it does not use. What that takes depends on the linker:
#
#   kind     linker (CMAKE_<LANG>_COMPILER_LINKER_ID)          options
#   ELF      GNU ld, gold, lld, mold (GNU, GNUgold, LLD, MOLD)  --exclude-libs,libt2p.a  --gc-sections
#   MACHO    ld64 / ld-prime, ld64.lld (AppleClang, LLD)       -load_hidden,<libt2p.a>  -dead_strip
#   PE-MSVC  link.exe, lld-link (MSVC, LLD; MSVC ABI)          /OPT:REF
#   PE-GNU   mingw-w64 GNU ld (GNU)                            --exclude-libs,libt2p.a  --gc-sections
#   PE-LLD   mingw-w64 lld (LLD)                               --gc-sections
#   NONE     anything else                                     (none: a plain link)
#
# ELF: --exclude-libs makes the archive's symbols local to the output. Mach-O: -load_hidden loads
# the archive with every symbol hidden (ld64 exports all global symbols of a dylib otherwise), so
# the archive is given there instead of on the link line. PE: a DLL exports only what is marked
# dllexport or listed in a .def file, so nothing of t2p.lib leaks under the MSVC ABI; GNU ld
# exports every symbol when an image marks none, which --exclude-libs stops for libt2p.a.
#
# The linker is CMAKE_<LANG>_COMPILER_LINKER_ID (CMake 3.29 and later); with older CMake (or a
# linker it does not identify) it is inferred from the platform and the compiler, as the
# platform's default linker. T2P_LINKER_ID, when set, overrides both.

# _t2p_link_kind(<out> <lang>): one of the kinds above for the current platform and linker.
function(_t2p_link_kind out lang)
    set(id "${T2P_LINKER_ID}")
    if(id STREQUAL "")
        set(id "${CMAKE_${lang}_COMPILER_LINKER_ID}")
    endif()
    set(msvc_abi FALSE)
    if(MSVC OR CMAKE_${lang}_SIMULATE_ID STREQUAL "MSVC")
        set(msvc_abi TRUE)
    endif()
    if(id STREQUAL "")
        # no linker id: the platform's default linker for this compiler
        if(APPLE)
            set(id AppleClang)
        elseif(WIN32 AND msvc_abi)
            set(id MSVC)
        elseif(WIN32 AND CMAKE_${lang}_COMPILER_ID STREQUAL "GNU")
            set(id GNU)
        elseif(WIN32 AND CMAKE_${lang}_COMPILER_ID MATCHES "Clang")
            set(id LLD) # llvm-mingw's default; its option (--gc-sections) GNU ld takes too
        elseif(UNIX AND CMAKE_${lang}_COMPILER_ID MATCHES "^(GNU|Clang|IntelLLVM)$")
            set(id GNU)
        endif()
    endif()
    set(kind NONE)
    if(APPLE)
        if(id MATCHES "^(AppleClang|LLD)$")
            set(kind MACHO)
        endif()
    elseif(WIN32 OR CYGWIN)
        if(msvc_abi AND id MATCHES "^(MSVC|LLD)$")
            set(kind PE-MSVC)
        elseif(NOT msvc_abi AND id STREQUAL "GNU")
            set(kind PE-GNU)
        elseif(NOT msvc_abi AND id STREQUAL "LLD")
            set(kind PE-LLD)
        endif()
    elseif(UNIX)
        if(id MATCHES "^(GNU|GNUgold|LLD|MOLD)$")
            set(kind ELF)
        endif()
    endif()
    set(${out} "${kind}" PARENT_SCOPE)
endfunction()

# _t2p_link_options(<out> <kind> <library path>): the link options of that kind ("LINKER:" form).
function(_t2p_link_options out kind lib)
    get_filename_component(name "${lib}" NAME)
    if(kind STREQUAL "ELF" OR kind STREQUAL "PE-GNU")
        set(opts "LINKER:--exclude-libs,${name}" "LINKER:--gc-sections")
    elseif(kind STREQUAL "MACHO")
        set(opts "LINKER:-load_hidden,${lib}" "LINKER:-dead_strip")
    elseif(kind STREQUAL "PE-MSVC")
        set(opts "LINKER:/OPT:REF")
    elseif(kind STREQUAL "PE-LLD")
        set(opts "LINKER:--gc-sections")
    else()
        set(opts "")
    endif()
    set(${out} "${opts}" PARENT_SCOPE)
endfunction()
