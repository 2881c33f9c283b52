/*
 * llhttp_simd: picks, once, which build of llhttp's parser runs.
 *
 * llhttp's generated parser scans header values 16 bytes at a time with
 * SSE4.2 when it is compiled for it (#ifdef __SSE4_2__), and a byte at a
 * time otherwise. Debian's x86-64 baseline has no SSE4.2, so deps.cmake
 * compiles llhttp.c twice: as eventd_llhttp_execute_base for the baseline,
 * and with -msse4.2 as eventd_llhttp_execute_sse42 (its other global
 * symbols made local with objcopy, so that the two copies do not clash).
 * llhttp's api.c calls llhttp__internal_execute, defined here, which calls
 * the copy this CPU can run. Both copies share llhttp.h's parser state and
 * are generated from the same source: they parse alike, byte for byte
 * (tests/unit/test_llhttp_simd.c compares them).
 */
#include "llhttp_simd.h"

typedef int execute_fn(llhttp__internal_t *s, const char *p, const char *endp);

execute_fn eventd_llhttp_execute_base;
execute_fn eventd_llhttp_execute_sse42;

static execute_fn *execute = eventd_llhttp_execute_base;
static bool available;

__attribute__((constructor)) static void pick(void) {
    __builtin_cpu_init();
    available = __builtin_cpu_supports("sse4.2");
    if (available) execute = eventd_llhttp_execute_sse42;
}

int llhttp__internal_execute(llhttp__internal_t *s, const char *p, const char *endp) {
    return execute(s, p, endp);
}

bool llhttp_simd_set(bool on) {
    if (on && !available) return false;
    execute = on ? eventd_llhttp_execute_sse42 : eventd_llhttp_execute_base;
    return true;
}

bool llhttp_simd_active(void) {
    return execute == eventd_llhttp_execute_sse42;
}
