/*
 * varint: the unsigned LEB128 integers of record payloads and log frames
 * (7 bits a byte, little end first, at most 10 bytes for 64 bits).
 */
#ifndef EVENTD_VARINT_H
#define EVENTD_VARINT_H

#include <stddef.h>
#include <stdint.h>

#define VARINT_MAX 10 /* bytes of the longest varint */

/* Writes v to out (which needs VARINT_MAX bytes); returns the bytes written. */
static inline size_t varint_put(uint8_t *out, uint64_t v) {
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

/* Reads one varint; returns the bytes read, or 0 when the input ends inside
 * it or it is longer than 10 bytes or overflows 64 bits. */
static inline size_t varint_get(const uint8_t *p, size_t len, uint64_t *v) {
    uint64_t x = 0;
    for (size_t i = 0; i < len && i < VARINT_MAX; i++) {
        /* The tenth byte holds bit 63 only; anything more would overflow. */
        if (i == 9 && p[i] > 1) return 0;
        x |= (uint64_t)(p[i] & 0x7f) << (7 * i);
        if (!(p[i] & 0x80)) {
            *v = x;
            return i + 1;
        }
    }
    return 0;
}

#endif
