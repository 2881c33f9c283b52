/* llhttp's parser compiled with -msse4.2 (deps.cmake), under the name
 * llhttp_simd.c calls when the CPU has SSE4.2. */
#define llhttp__internal_execute eventd_llhttp_execute_sse42
#include "llhttp.c"
