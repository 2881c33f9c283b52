/* b64: see b64.h. */
#include "common/b64.h"

#include <stdint.h>

/*
 * A character's 6-bit value, or -1: each range test is a mask made from the
 * signs of two differences (all ones inside the range, zero outside), so the
 * work is the same for every character. Relies on >> of a negative int being
 * arithmetic, as it is with gcc and clang.
 */
static inline int sextet(int c) {
    int v = -1;
    v += (((64 - c) & (c - 91)) >> 8) & (c - 64);  /* 'A'..'Z': 0..25 */
    v += (((96 - c) & (c - 123)) >> 8) & (c - 70); /* 'a'..'z': 26..51 */
    v += (((47 - c) & (c - 58)) >> 8) & (c + 5);   /* '0'..'9': 52..61 */
    v += (((42 - c) & (c - 44)) >> 8) & 63;        /* '+': 62 */
    v += (((46 - c) & (c - 48)) >> 8) & 64;        /* '/': 63 */
    return v;
}

long b64_decode(unsigned char *out, size_t out_max, const char *in, size_t len) {
    if (len % 4) return -1;
    size_t pad = 0;
    if (len && in[len - 1] == '=') pad = in[len - 2] == '=' ? 2 : 1;
    size_t n = len - pad; /* characters of data: n % 4 is 0, or 3 with "=", or 2 with "==" */
    if (n * 6 / 8 > out_max) return -1;
    int bad = 0;
    uint32_t acc = 0;
    unsigned acc_len = 0;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int v = sextet((unsigned char)in[i]);
        bad |= v >> 8; /* -1 for an invalid character, else 0 */
        acc = (acc << 6) | (uint32_t)(v & 63);
        acc_len += 6;
        if (acc_len >= 8) { /* depends on i only */
            acc_len -= 8;
            out[o++] = (unsigned char)(acc >> acc_len);
        }
    }
    /* The bits left over before the padding must be zero (one encoding per value). */
    bad |= (int)(acc & ((1u << acc_len) - 1u));
    return bad ? -1 : (long)o;
}
