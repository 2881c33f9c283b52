/*
 * json_write: see json_write.h.
 */
#include "common/json_write.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bytes that must be escaped inside a JSON string. */
static const uint8_t needs_escape[256] = {
    [0 ... 0x1f] = 1,
    ['"'] = 1,
    ['\\'] = 1,
};

void json_write_string(struct buf *b, const char *ptr, size_t len) {
    static const char hex[] = "0123456789abcdef";
    /* Worst case every byte becomes \u00XX. */
    char *o = buf_reserve(b, len * 6 + 2), *start = o;
    *o++ = '"';
    size_t i = 0;
    while (i < len) {
        /* Copy the run of plain bytes in one go; most strings are one run. */
        size_t run = i;
        while (run < len && !needs_escape[(unsigned char)ptr[run]])
            run++;
        memcpy(o, ptr + i, run - i);
        o += run - i;
        if (run == len) break;
        unsigned char c = (unsigned char)ptr[run];
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
        i = run + 1;
    }
    *o++ = '"';
    buf_commit(b, (size_t)(o - start));
}

/*
 * Fast path for the numbers people store (coordinates, prices): find the
 * fewest decimals k for which m = d * 10^k is a whole number below 2^53 with
 * m / 10^k == d. Both operands are exact, so that division is correctly
 * rounded, exactly as strtod would read "m e-k": the text round-trips. Other
 * numbers go through printf.
 */
static bool write_short_decimal(struct buf *b, double d) {
    static const double pow10[] = {1e0, 1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7, 1e8,
                                   1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16};
    double ad = fabs(d);
    if (!(ad < 1e15)) return false;
    for (int k = 0; k <= 16; k++) {
        double scaled = ad * pow10[k];
        if (scaled >= 9007199254740992.0) return false;
        double m = nearbyint(scaled);
        if (m / pow10[k] != ad) continue;
        char digits[20];
        size_t n = u64_digits((uint64_t)m, digits);
        char *o = buf_reserve(b, n + (size_t)k + 3), *start = o;
        if (d < 0) *o++ = '-';
        if (n <= (size_t)k) {
            *o++ = '0';
            *o++ = '.';
            for (size_t z = n; z < (size_t)k; z++)
                *o++ = '0';
            memcpy(o, digits, n);
            o += n;
        } else {
            memcpy(o, digits, n - (size_t)k);
            o += n - (size_t)k;
            if (k) {
                *o++ = '.';
                memcpy(o, digits + n - (size_t)k, (size_t)k);
                o += k;
            }
        }
        buf_commit(b, (size_t)(o - start));
        return true;
    }
    return false;
}

void json_write_double(struct buf *b, double d) {
    if (d == 0) {
        buf_append_char(b, '0');
        return;
    }
    if (write_short_decimal(b, d)) return;
    char tmp[32];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*g", prec, d);
        if (strtod(tmp, NULL) == d) break;
    }
    buf_append_str(b, tmp);
}
