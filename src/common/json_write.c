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

/* The general case: 9 to 16 plain bytes in two words, else plain runs eight
 * bytes at a time and escapes byte by byte. Out of line, so the short cases
 * save no registers. */
static __attribute__((noinline)) char *put_string_slow(char *o, const char *ptr, size_t len) {
    static const char hex[] = "0123456789abcdef";
    if (len > 8 && len <= 16) {
        /* Plain strings of 9 to 16 bytes in two overlapping eight-byte words. */
        uint64_t a, b;
        memcpy(&a, ptr, 8);
        memcpy(&b, ptr + len - 8, 8);
        if (!word_needs_escape(a) && !word_needs_escape(b)) {
            memcpy(o, &a, 8);
            memcpy(o + len - 8, &b, 8);
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

char *json_put_string(char *o, const char *ptr, size_t len) {
    *o++ = '"';
    if (len < 4) {
        /* Very short plain strings (codes, states): first, middle and last byte. */
        if (len == 0) {
            *o = '"';
            return o + 1;
        }
        char a = ptr[0], m = ptr[len >> 1], z = ptr[len - 1];
        if (!(needs_escape[(unsigned char)a] | needs_escape[(unsigned char)m] |
              needs_escape[(unsigned char)z])) {
            o[0] = a;
            o[len >> 1] = m;
            o[len - 1] = z;
            o[len] = '"';
            return o + len + 1;
        }
    } else if (len <= 8) {
        /* Short plain strings, most values: two overlapping four-byte loads,
         * checked as one word, and two stores. */
        uint32_t a, b;
        memcpy(&a, ptr, 4);
        memcpy(&b, ptr + len - 4, 4);
        if (!word_needs_escape(a | (uint64_t)b << 32)) {
            memcpy(o, &a, 4);
            memcpy(o + len - 4, &b, 4);
            o[len] = '"';
            return o + len + 1;
        }
    }
    return put_string_slow(o, ptr, len);
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
 * The fewest decimals k, and m, for ad > 0 (below 1e15); -1 if none. Two
 * loops, as the scaled value only grows with k: below 2^52, adding and
 * taking away 2^52 rounds to the nearest integer (ties to even, as
 * nearbyint) without a call into libm; from 2^52 to 2^53 every double is an
 * integer already; from 2^53 on there is no answer. An infinite power after
 * 1e16 ends the first loop without a count check.
 */
static inline int short_decimals(double ad, double *mout) {
    static const double pow10[] = {1e0, 1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,
                                   1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, INFINITY};
    const double two52 = 4503599627370496.0;
    int k = 0;
    for (;; k++) {
        double scaled = ad * pow10[k];
        if (scaled >= two52) break;
        double m = (scaled + two52) - two52;
        if (m / pow10[k] == ad) {
            *mout = m;
            return k;
        }
    }
    for (; k <= 16; k++) {
        double scaled = ad * pow10[k];
        if (scaled >= 9007199254740992.0) return -1;
        if (scaled / pow10[k] == ad) {
            *mout = scaled;
            return k;
        }
    }
    return -1;
}

/* The count of decimal digits of v (1 for 0), without a loop: from the bit
 * length, one compare with the power of ten it may fall short of. */
static inline int decimal_digits(uint64_t v) {
    static const uint64_t pow10u[] = {1ull,
                                      10ull,
                                      100ull,
                                      1000ull,
                                      10000ull,
                                      100000ull,
                                      1000000ull,
                                      10000000ull,
                                      100000000ull,
                                      1000000000ull,
                                      10000000000ull,
                                      100000000000ull,
                                      1000000000000ull,
                                      10000000000000ull,
                                      100000000000000ull,
                                      1000000000000000ull,
                                      10000000000000000ull,
                                      100000000000000000ull,
                                      1000000000000000000ull,
                                      10000000000000000000ull};
    int t = ((64 - __builtin_clzll(v | 1)) * 1233) >> 12;
    return t + ((v | 1) >= pow10u[t]);
}

/* json_put_decimal's work, inlined into json_put_double's fast path. */
static inline char *put_decimal(char *o, bool neg, uint64_t v, int k) {
    /* The digits of v with the point k from the right, written backwards
     * from the end, whose place is known from the count of digits; two
     * digits at a time (u64_pairs, buf.h). */
    int n = decimal_digits(v);
    int len = neg + (n > k ? n : k + 1) + (k > 0);
    char *p = o + len;
    int f = k;
    for (; f >= 2; f -= 2) {
        p -= 2;
        memcpy(p, u64_pairs + 2 * (v % 100), 2);
        v /= 100;
    }
    if (f) {
        *--p = (char)('0' + v % 10);
        v /= 10;
    }
    if (k) *--p = '.';
    for (; v >= 100; v /= 100) {
        p -= 2;
        memcpy(p, u64_pairs + 2 * (v % 100), 2);
    }
    if (v >= 10) {
        p -= 2;
        memcpy(p, u64_pairs + 2 * v, 2);
    } else {
        *--p = (char)('0' + v);
    }
    if (neg) *--p = '-';
    return o + len;
}

static inline char *put_short_decimal(char *o, double d) {
    double ad = fabs(d), m;
    if (!(ad < 1e15)) return NULL;
    int k = short_decimals(ad, &m);
    if (k < 0) return NULL;
    return put_decimal(o, d < 0, (uint64_t)m, k);
}

char *json_put_decimal(char *o, bool neg, uint64_t v, int k) {
    return put_decimal(o, neg, v, k);
}

/* Numbers the fast path does not take: the shortest of 15 to 17 significant
 * digits that reads back. Out of line, so the fast path saves no registers. */
static __attribute__((noinline, cold)) size_t put_double_printf(char *out, double d) {
    int n = 0;
    for (int prec = 15; prec <= 17; prec++) {
        n = snprintf(out, JSON_DOUBLE_MAX, "%.*g", prec, d);
        if (strtod(out, NULL) == d) break;
    }
    return (size_t)n;
}

size_t json_put_double(char *out, double d) {
    if (d == 0) {
        *out = '0';
        return 1;
    }
    char *o = put_short_decimal(out, d);
    if (o) return (size_t)(o - out);
    return put_double_printf(out, d);
}

void json_write_double(struct buf *b, double d) {
    char *o = buf_reserve(b, JSON_DOUBLE_MAX);
    buf_commit(b, json_put_double(o, d));
}
