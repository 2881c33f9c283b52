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

add_library(llhttp STATIC
    ${LLHTTP_SRC_DIR}/api.c ${LLHTTP_SRC_DIR}/http.c ${LLHTTP_SRC_DIR}/llhttp.c)
target_include_directories(llhttp SYSTEM PUBLIC ${LLHTTP_INCLUDE_DIR})
# Generated third-party code: build it without our warning flags.
set_target_properties(llhttp PROPERTIES C_STANDARD 99 POSITION_INDEPENDENT_CODE ON)
target_compile_options(llhttp PRIVATE -w)
