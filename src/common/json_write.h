/*
 * json_write: JSON text primitives, string literals and numbers, appended to
 * a buffer. No state; the record writer (core/json.h) and the HTTP error
 * bodies (http/http.c) build on them.
 */
#ifndef EVENTD_JSON_WRITE_H
#define EVENTD_JSON_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/buf.h"

/* Appends a JSON string literal, escaping quotes, backslashes and control bytes. */
void json_write_string(struct buf *b, const char *ptr, size_t len);
/* Appends the shortest decimal form that reads back as the same double. */
void json_write_double(struct buf *b, double d);

/*
 * The same two, written at o rather than appended, for writers that reserve
 * once for many values. json_put_string needs len * 6 + 2 bytes at o and
 * returns the end of what it wrote; json_put_double needs JSON_DOUBLE_MAX
 * bytes and returns how many it wrote (no terminator counted).
 */
char *json_put_string(char *o, const char *ptr, size_t len);
/* json_put_string of a string known to hold no byte that needs escaping (no
 * '"', '\\' or byte below 0x20): its bytes are copied as they are, with no
 * look at them. Needs len + 2 bytes at o. Inline: a few stores, no call. */
static inline char *json_put_plain_string(char *o, const char *ptr, size_t len) {
    *o++ = '"';
    /* Short strings, most values, with two overlapping loads and stores. */
    if (len >= 8 && len <= 16) {
        uint64_t a, b;
        memcpy(&a, ptr, 8);
        memcpy(&b, ptr + len - 8, 8);
        memcpy(o, &a, 8);
        memcpy(o + len - 8, &b, 8);
    } else if (len >= 4 && len < 8) {
        uint32_t a, b;
        memcpy(&a, ptr, 4);
        memcpy(&b, ptr + len - 4, 4);
        memcpy(o, &a, 4);
        memcpy(o + len - 4, &b, 4);
    } else if (len < 4) {
        for (size_t i = 0; i < len; i++)
            o[i] = ptr[i];
    } else {
        memcpy(o, ptr, len);
    }
    o[len] = '"';
    return o + len + 1;
}
#define JSON_DOUBLE_MAX 32
size_t json_put_double(char *o, double d);
/*
 * The decimal v * 10^-k ('-' first when neg), as json_put_double writes a
 * double whose shortest decimal that is (v not a multiple of 10 unless k is
 * 0; the digits before the point at least "0"). Needs JSON_DOUBLE_MAX bytes
 * at o for v below 10^17; returns the end.
 */
char *json_put_decimal(char *o, bool neg, uint64_t v, int k);

#endif
