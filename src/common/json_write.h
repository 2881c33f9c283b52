/*
 * json_write: JSON text primitives, string literals and numbers, appended to
 * a buffer. No state; the record writer (core/json.h) and the HTTP error
 * bodies (http/http.c) build on them.
 */
#ifndef EVENTD_JSON_WRITE_H
#define EVENTD_JSON_WRITE_H

#include <stddef.h>

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
 * look at them. Needs len + 2 bytes at o. */
char *json_put_plain_string(char *o, const char *ptr, size_t len);
#define JSON_DOUBLE_MAX 32
size_t json_put_double(char *o, double d);

#endif
