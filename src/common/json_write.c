/*
 * json_write: see json_write.h.
 */
#include "common/json_write.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bytes that must be escaped inside a JSON string. */
static const uint8_t needs_escape[256] = {
    [0 ... 0x1f] = 1,
    ['"'] = 1,
    ['\\'] = 1,
};

/*
 * Does any byte of w need escaping: below 0x20, '"' or '\\'? Exact for the
 * question "any" (the usual has-zero-byte trick, on w and on w with each
 * byte XOR-ed with the quote and the backslash).
 */
static inline bool word_needs_escape(uint64_t w) {
    const uint64_t ones = UINT64_C(0x0101010101010101), highs = UINT64_C(0x8080808080808080);
    uint64_t q = w ^ (ones * '"'), b = w ^ (ones * '\\');
    return (((w - ones * 0x20) & ~w) | ((q - ones) & ~q) | ((b - ones) & ~b)) & highs;
}

/* The same question for four bytes. */
static inline bool word4_needs_escape(uint32_t w) {
    const uint32_t ones = 0x01010101u, highs = 0x80808080u;
    uint32_t q = w ^ (ones * '"'), b = w ^ (ones * '\\');
    return (((w - ones * 0x20) & ~w) | ((q - ones) & ~q) | ((b - ones) & ~b)) & highs;
}

char *json_put_string(char *o, const char *ptr, size_t len) {
    static const char hex[] = "0123456789abcdef";
    *o++ = '"';
    /* Short plain strings, most values, in two overlapping loads and stores. */
    if (len >= 4 && len <= 8) {
        uint32_t a, b;
        memcpy(&a, ptr, 4);
        memcpy(&b, ptr + len - 4, 4);
        if (!word4_needs_escape(a) && !word4_needs_escape(b)) {
            memcpy(o, &a, 4);
            memcpy(o + len - 4, &b, 4);
            o[len] = '"';
            return o + len + 1;
        }
    }
    size_t i = 0;
    while (i < len) {
        /* Plain text, the common case, eight bytes at a time (no call: most
         * strings are short); the rest byte by byte. */
        uint64_t w;
        if (len - i >= 8 && (memcpy(&w, ptr + i, 8), !word_needs_escape(w))) {
            memcpy(o, &w, 8);
            o += 8;
            i += 8;
            continue;
        }
        /* The tail as the last eight bytes: those before i in it were written
         * as they are (none needs escaping), so they are written again in place. */
        if (len - i < 8 && len >= 8 && (memcpy(&w, ptr + len - 8, 8), !word_needs_escape(w))) {
            memcpy(o - (i - (len - 8)), &w, 8);
            o += len - i;
            break;
        }
        unsigned char c = (unsigned char)ptr[i++];
        if (!needs_escape[c]) {
            *o++ = (char)c;
            continue;
        }
        *o++ = '\\';
        switch (c) {
        case '"':
            *o++ = '"';
            break;
        case '\\':
            *o++ = '\\';
            break;
        case '\n':
            *o++ = 'n';
            break;
        case '\r':
            *o++ = 'r';
            break;
        case '\t':
            *o++ = 't';
            break;
        case '\b':
            *o++ = 'b';
            break;
        case '\f':
            *o++ = 'f';
            break;
        default:
            *o++ = 'u';
            *o++ = '0';
            *o++ = '0';
            *o++ = hex[c >> 4];
            *o++ = hex[c & 15];
        }
    }
    *o++ = '"';
    return o;
}

void json_write_string(struct buf *b, const char *ptr, size_t len) {
    /* Worst case every byte becomes \u00XX. */
    char *o = buf_reserve(b, len * 6 + 2);
    buf_commit(b, (size_t)(json_put_string(o, ptr, len) - o));
}

/*
 * Fast path for the numbers people store (coordinates, prices): find the
 * fewest decimals k for which m = d * 10^k is a whole number below 2^53 with
 * m / 10^k == d. Both operands are exact, so that division is correctly
 * rounded, exactly as strtod would read "m e-k": the text round-trips. Other
 * numbers go through printf.
 */
/*
 * nearbyint for 0 <= x < 2^53 in the default rounding mode, without a call
 * into libm: below 2^52, adding and taking away 2^52 leaves the nearest
 * integer (ties to even, as nearbyint); from 2^52 on every double is one.
 */
static inline double round_even(double x) {
    const double two52 = 4503599627370496.0;
    return x < two52 ? (x + two52) - two52 : x;
}

static char *put_short_decimal(char *o, double d) {
    static const double pow10[] = {1e0, 1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7, 1e8,
                                   1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16};
    double ad = fabs(d);
    if (!(ad < 1e15)) return NULL;
    for (int k = 0; k <= 16; k++) {
        double scaled = ad * pow10[k];
        if (scaled >= 9007199254740992.0) return NULL;
        double m = round_even(scaled);
        if (m / pow10[k] != ad) continue;
        /* The digits of m with the point k from the right, written backwards
         * from the end, whose place is known from the count of digits. */
        uint64_t v = (uint64_t)m;
        int n = 1;
        for (uint64_t top = 10; n < 16 && v >= top; top *= 10)
            n++;
        int len = (d < 0) + (n > k ? n : k + 1) + (k > 0);
        char *p = o + len;
        for (int f = 0; f < k; f++) {
            *--p = (char)('0' + v % 10);
            v /= 10;
        }
        if (k) *--p = '.';
        do {
            *--p = (char)('0' + v % 10);
            v /= 10;
        } while (v);
        if (d < 0) *--p = '-';
        return o + len;
    }
    return NULL;
}

size_t json_put_double(char *out, double d) {
    if (d == 0) {
        *out = '0';
        return 1;
    }
    char *o = put_short_decimal(out, d);
    if (o) return (size_t)(o - out);
    int n = 0;
    for (int prec = 15; prec <= 17; prec++) {
        n = snprintf(out, JSON_DOUBLE_MAX, "%.*g", prec, d);
        if (strtod(out, NULL) == d) break;
    }
    return (size_t)n;
}

void json_write_double(struct buf *b, double d) {
    char *o = buf_reserve(b, JSON_DOUBLE_MAX);
    buf_commit(b, json_put_double(o, d));
}
