# Third-party dependencies, all from Debian packages.
#   llhttp: C sources shipped by node-llhttp, compiled here into a static library.
#   libuv, yajl, libsodium: found with pkg-config.
# A missing one stops cmake with the name of the Debian package to install.

find_package(PkgConfig)
if(NOT PKG_CONFIG_FOUND)
    message(FATAL_ERROR "pkg-config not found: install the Debian package 'pkg-config' (or run deps/install.sh)")
endif()

function(eventd_require_pkg target module debpkg)
    pkg_check_modules(${target} IMPORTED_TARGET ${module})
    if(NOT ${target}_FOUND)
        message(FATAL_ERROR "${module} not found: install the Debian package '${debpkg}' (or run deps/install.sh)")
    endif()
endfunction()

eventd_require_pkg(UV libuv libuv1-dev)
eventd_require_pkg(SODIUM libsodium libsodium-dev)
eventd_require_pkg(YAJL yajl libyajl-dev)

set(LLHTTP_SRC_DIR "/usr/share/llhttp" CACHE PATH "llhttp C sources (Debian node-llhttp)")
set(LLHTTP_INCLUDE_DIR "/usr/share/include/llhttp" CACHE PATH "llhttp.h (Debian node-llhttp)")
foreach(f api.c http.c llhttp.c)
    if(NOT EXISTS "${LLHTTP_SRC_DIR}/${f}")
        message(FATAL_ERROR "${LLHTTP_SRC_DIR}/${f} not found: install the Debian package 'node-llhttp' (or run deps/install.sh)")
    endif()
endforeach()
if(NOT EXISTS "${LLHTTP_INCLUDE_DIR}/llhttp.h")
    message(FATAL_ERROR "${LLHTTP_INCLUDE_DIR}/llhttp.h not found: install the Debian package 'node-llhttp'")
endif()

# On x86-64, llhttp's parser is compiled twice, for the baseline and with
# SSE4.2 (it scans header values 16 bytes at a time then: about 400 fewer
# instructions a request), and deps/llhttp_simd.c picks the copy the CPU can
# run, once, before main. The SSE4.2 copy's global symbols other than its
# entry point are made local with objcopy, so that the copies do not clash.
option(EVENTD_LLHTTP_SSE42 "x86-64: also build llhttp's parser with SSE4.2, used when the CPU has it" ON)
set(EVENTD_LLHTTP_DISPATCH OFF)
if(EVENTD_LLHTTP_SSE42 AND CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$" AND CMAKE_OBJCOPY)
    set(EVENTD_LLHTTP_DISPATCH ON)
endif()
# Generated third-party code: built without our warning flags.
function(eventd_llhttp_props target)
    target_include_directories(${target} SYSTEM PRIVATE ${LLHTTP_SRC_DIR} ${LLHTTP_INCLUDE_DIR})
    set_target_properties(${target} PROPERTIES C_STANDARD 99 POSITION_INDEPENDENT_CODE ON)
    target_compile_options(${target} PRIVATE -w)
    # Strict mode: a CR not followed by LF (after a header line, the headers' end, a
    # chunk size, the last chunk) and bare LF line ends are errors, not skipped
    # (a review, 2026-11-29, smuggled "\r\n\rX" past the lenient build).
    target_compile_definitions(${target} PRIVATE LLHTTP_STRICT_MODE=1)
endfunction()
if(EVENTD_LLHTTP_DISPATCH)
    add_library(llhttp_sse42_raw OBJECT ${CMAKE_CURRENT_LIST_DIR}/llhttp_sse42.c)
    eventd_llhttp_props(llhttp_sse42_raw)
    target_compile_options(llhttp_sse42_raw PRIVATE -msse4.2)
    set(_llhttp_sse42_obj ${CMAKE_CURRENT_BINARY_DIR}/llhttp_sse42.o)
    add_custom_command(OUTPUT ${_llhttp_sse42_obj}
        COMMAND ${CMAKE_OBJCOPY} --wildcard "--localize-symbol=llhttp__internal_*"
                $<TARGET_OBJECTS:llhttp_sse42_raw> ${_llhttp_sse42_obj}
        DEPENDS llhttp_sse42_raw $<TARGET_OBJECTS:llhttp_sse42_raw>
        COMMENT "llhttp's SSE4.2 parser: only its entry point stays global"
        COMMAND_EXPAND_LISTS VERBATIM)
    set_source_files_properties(${_llhttp_sse42_obj} PROPERTIES EXTERNAL_OBJECT TRUE GENERATED TRUE)
    # The choice is our code: built with warnings, apart from llhttp's.
    add_library(llhttp_simd OBJECT ${CMAKE_CURRENT_LIST_DIR}/llhttp_simd.c)
    target_include_directories(llhttp_simd SYSTEM PRIVATE ${LLHTTP_INCLUDE_DIR})
    set_target_properties(llhttp_simd PROPERTIES POSITION_INDEPENDENT_CODE ON)
    target_compile_options(llhttp_simd PRIVATE -Wall -Wextra)
    add_library(llhttp STATIC
        ${LLHTTP_SRC_DIR}/api.c ${LLHTTP_SRC_DIR}/http.c ${CMAKE_CURRENT_LIST_DIR}/llhttp_base.c
        $<TARGET_OBJECTS:llhttp_simd> ${_llhttp_sse42_obj})
    target_include_directories(llhttp PUBLIC ${CMAKE_CURRENT_LIST_DIR})
    target_compile_definitions(llhttp PUBLIC EVENTD_LLHTTP_DISPATCH=1)
else()
    add_library(llhttp STATIC
        ${LLHTTP_SRC_DIR}/api.c ${LLHTTP_SRC_DIR}/http.c ${LLHTTP_SRC_DIR}/llhttp.c)
endif()
eventd_llhttp_props(llhttp)
target_include_directories(llhttp SYSTEM PUBLIC ${LLHTTP_INCLUDE_DIR})
