/*
 * reply: the answers every surface writes the same way: the success
 * envelope, errors, 204, and the storage guards that refuse a write before
 * it changes anything.
 */
#ifndef EVENTD_CORE_REPLY_H
#define EVENTD_CORE_REPLY_H

#include <stdbool.h>

#include "common/err.h"
#include "core/handlers.h"
#include "http/http.h"

extern const char hdr_retry_after[]; /* "Retry-After: 1\r\n" */
extern const char hdr_www_authenticate[];
extern const char hdr_no_store[]; /* "Cache-Control: no-store\r\n": answers that carry a secret */

void reply_error(struct http_response *r, enum err e, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Starts the envelope {"Status":"ok","Result": with status 200. */
void reply_ok_open(struct http_response *r);
void reply_no_content(struct http_response *r);
/* While the disk refuses writes, a write is answered 503 before it changes anything. */
bool reply_if_storage_failing(struct handlers *h, struct http_response *r);
/*
 * A write that adds data (not a deletion): reply_if_storage_failing, then
 * the server-wide guard (db_room): 507 naming the setting that refuses it.
 * True when it answered.
 */
bool reply_if_no_room(struct handlers *h, struct http_response *r);

#endif
