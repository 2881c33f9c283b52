/*
 * json_scan: the byte scanners the decoder (json.c) runs over each chunk
 * before yajl sees it (json.h): unpaired surrogate escapes, and the length of
 * the token a chunk ends inside. Each keeps its state across chunks, so a body
 * gets the same answer however it was split.
 */
#include "core/json.h"

#include <stddef.h>
#include <stdint.h>

enum { ESC_NONE, ESC_BACKSLASH, ESC_HEX };

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') return (c | 0x20) - 'a' + 10;
    return -1;
}

long json_escapes_scan(struct json_escapes *e, const char *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        switch (e->state) {
        case ESC_NONE:
            if (e->want_low && c != '\\') return (long)i;
            if (c != '\\') {
                /* Most bodies hold no backslash: skip to the next one at once. */
                const char *b = memchr(p + i, '\\', n - i);
                if (!b) return -1;
                i = (size_t)(b - p);
            }
            e->state = ESC_BACKSLASH;
            break;
        case ESC_BACKSLASH:
            if (c != 'u') {
                if (e->want_low) return (long)i;
                e->state = ESC_NONE;
                break;
            }
            e->state = ESC_HEX;
            e->digits = 0;
            e->cp = 0;
            break;
        default: {
            int v = hex_value(c);
            if (v < 0) { /* not an escape: yajl says so */
                e->state = ESC_NONE;
                e->want_low = false;
                break;
            }
            e->cp = (uint16_t)(e->cp << 4 | (unsigned)v);
            if (++e->digits < 4) break;
            e->state = ESC_NONE;
            bool high = e->cp >= 0xD800 && e->cp <= 0xDBFF,
                 low = e->cp >= 0xDC00 && e->cp <= 0xDFFF;
            if (e->want_low != low) return (long)i;
            e->want_low = high;
            break;
        }
        }
    }
    return -1;
}

long json_tokens_scan(struct json_tokens *t, const char *p, size_t n, uint32_t max) {
    uint8_t state = t->state, last = t->last;
    uint64_t len = t->len;
    size_t i;
    for (i = 0; i < n && len <= max; i++) {
        unsigned char c = (unsigned char)p[i];
        switch (state) {
        case JSON_TOK_STR:
            state = c == '\\' ? JSON_TOK_STR_ESC : c == '"' ? JSON_TOK_NONE : JSON_TOK_STR;
            len++;
            break;
        case JSON_TOK_STR_ESC:
            state = JSON_TOK_STR;
            len++;
            break;
        default:
            if (c == '"') {
                state = JSON_TOK_STR;
                len = 1;
                t->opener = last;
            } else if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                       c == '-' || c == '+' || c == '.') {
                if (state != JSON_TOK_BARE) t->opener = last;
                len = state == JSON_TOK_BARE ? len + 1 : 1;
                state = JSON_TOK_BARE;
            } else {
                state = JSON_TOK_NONE;
                if (c != ' ' && c != '\t' && c != '\n' && c != '\r') last = c;
            }
        }
    }
    t->state = state;
    t->last = last;
    t->len = (uint32_t)len;
    return len > max ? (long)i - 1 : -1;
}
