/* llhttp's parser for the x86-64 baseline, under the name llhttp_simd.c
 * calls (deps.cmake builds this instead of llhttp.c when it builds both). */
#define llhttp__internal_execute eventd_llhttp_execute_base
#include "llhttp.c"
