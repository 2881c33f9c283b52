/*
 * api: the /v2 surface: records (api_records.c: create, update, read,
 * list, delete) and events (api_events.c: links to a theme and an address,
 * embeds).
 */
#ifndef EVENTD_API_API_H
#define EVENTD_API_API_H

#include "core/handlers.h"

enum server_headers_result api_headers(struct handlers *h, struct req_state *st,
                                       struct http_request *req, struct http_response *r);
void api_complete(struct handlers *h, struct req_state *st, struct http_request *req,
                  struct http_response *r);

/* ---- the API contract (openapi.c) ---- */

/*
 * Builds the served copy of the embedded docs/openapi.json into h->openapi_doc
 * (the top-level servers entry naming h->lim.base_path) and its head lines
 * (a strong ETag of those bytes, Cache-Control); api_openapi_destroy frees them.
 */
void api_openapi_init(struct handlers *h);
void api_openapi_destroy(struct handlers *h);
/* Answers GET/HEAD {base}/openapi.json: no authentication. */
void api_openapi_reply(struct handlers *h, struct http_response *r);

/* Feeds a body chunk of a keyed create to its request hash (api_records.c). */
void api_idem_body(struct req_state *st, const char *ptr, size_t len);

/* ---- /v2/changes, the change feed (api_changes.c) ---- */

void api_changes(struct handlers *h, struct req_state *st, struct http_request *req,
                 struct http_response *r);
/* A change of user_id's records was made: answer the user's waiting callers now. */
void changes_notify(struct handlers *h, uint64_t user_id);
/* Answers every waiting caller now (drain and shutdown). */
void changes_release(struct handlers *h);
/* Drops the waiters (their connections are gone) and closes the timer: the loop must run. */
void changes_close(struct handlers *h);
/* Callers waiting. */
size_t changes_waiting(const struct handlers *h);

/* ---- /v2 events (api_events.c) ---- */

/* The linked theme and address of an event draft are the caller's and free; true if fine. */
bool events_check_links(struct handlers *h, uint64_t user_id, struct http_response *r,
                        const union value *vals, uint64_t event_id);
/* Appends ,"Theme":{..},"Address":{..} (null when unlinked) to an open event object. */
void events_write_embeds(struct handlers *h, const struct record *ev, struct buf *out);

#endif
