/*
 * llhttp_simd: which build of llhttp's parser runs (see llhttp_simd.c).
 * Only on x86-64 builds with EVENTD_LLHTTP_SSE42 (deps.cmake); elsewhere
 * llhttp is compiled once and these are not built.
 */
#ifndef EVENTD_LLHTTP_SIMD_H
#define EVENTD_LLHTTP_SIMD_H

#include <llhttp.h>
#include <stdbool.h>

/* Chooses the SSE4.2 build (on) or the baseline one (off) for every parser
 * from now on; false, and no change, when on is asked of a CPU without
 * SSE4.2. For tests: the choice is made before main. Not thread-safe. */
bool llhttp_simd_set(bool on);

/* Whether the SSE4.2 build runs. */
bool llhttp_simd_active(void);

#endif
