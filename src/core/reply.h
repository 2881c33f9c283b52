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

/* ---- answers at completion: one path for immediate and deferred ones ---- */

/*
 * Every answer a surface gives at completion leaves through reply_answer,
 * and only there is the rule applied that a response carries the store's
 * latest visible LSN: it leaves only once everything it could have seen is
 * acknowledged, so a read never shows a write that could still be lost.
 *
 * Immediate: the surface fills r in its complete; then the front calls
 * reply_answer(h, r, NULL). Deferred (work on the threadpool): in its
 * complete the surface takes a ticket (reply_defer) and leaves r unfilled;
 * the front's reply_answer(h, r, NULL) then lets r be. When the work is
 * done, reply_deferred gives r back to fill, or NULL when nobody waits for
 * it any more (the connection closed: the client left, a timeout; or the
 * server is gone, reply_server_gone); after filling it the surface calls
 * reply_answer(h, r, &ticket), which sends it in its turn.
 *
 * Answers given at headers time (SERVER_ANSWERED: routing errors, refused
 * credentials, /healthz, /metrics) do not pass here and leave at once.
 */
void reply_answer(struct handlers *h, struct http_response *r, const struct server_ticket *t);
/* During the surface's complete only: r is answered later; the ticket is used once. */
struct server_ticket reply_defer(struct handlers *h, struct http_response *r);
/* The same for a long wait (the change feed's): the connection may park meanwhile
 * (server_defer_park), so the r reply_deferred gives back holds only the request's facts,
 * and the request state must not be used for the answer. */
struct server_ticket reply_defer_park(struct handlers *h, struct http_response *r);
/* The deferred response to fill, or NULL when nobody waits for it (then drop the answer). */
struct http_response *reply_deferred(struct handlers *h, struct server_ticket t);
/* Whether t's client left or closed its side (server_ticket_client_left); no side effect. */
bool reply_ticket_client_left(const struct handlers *h, struct server_ticket t);
/* The server is destroyed (its on_server_gone): from now on reply_deferred answers NULL. */
void reply_server_gone(struct handlers *h);

#endif
