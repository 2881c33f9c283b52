/*
 * api: the /v2 surface: records (api_records.c: create, update, read,
 * list, delete) and events (api_events.c: links to a theme and an address,
 * embeds).
 */
#ifndef EVENTD_API_API_H
#define EVENTD_API_API_H

#include "core/handlers.h"
#include "core/json.h"
#include "core/router.h"
#include "storage/auth.h"

/*
 * What the API keeps on a connection from one request to the next, whatever
 * surface the requests in between went to (so it is not in the front's
 * union of the surfaces' states): owned by the front's connection state,
 * api_conn_init when the state is made, api_conn_reset when it moves to
 * another connection, api_conn_destroy when it is freed.
 */
struct api_conn {
    struct arena arena; /* the decoder's strings: reset per body, its blocks kept warm */
    /* The Authorization header that last verified on this connection, and
     * what it verified as: a keep-alive client skips the base64 and the hash;
     * while no user record changed since (db_users_gen), the key hash too. */
    struct buf auth_seen;
    uint64_t auth_user_id;
    uint8_t auth_hash[AUTH_HASH_BYTES];
    uint64_t auth_gen; /* db_users_gen when auth_hash was last found to be the user's */
};
void api_conn_init(struct api_conn *c);
/* Forgets the credentials (the state goes to another connection, or idle). */
void api_conn_reset(struct api_conn *c);
void api_conn_destroy(struct api_conn *c);

/* Room for a crypto_generichash_state (384 bytes, 64-aligned) at any alignment. */
#define IDEM_HASH_STATE_BYTES (384 + 64)

/*
 * One /v2 request's state, from api_headers to api_request_end. It shares
 * its memory with the other surfaces' (the front's union): on entry to
 * api_headers it holds anything, and api_headers sets what it uses.
 */
struct api_state {
    struct json_decoder dec;
    struct route route;
    /* The caller, by id: a record pointer could be freed (a rotated key, an
     * undone write) between the headers and the end of the body. */
    uint64_t user_id;
    bool decoding; /* dec holds a yajl handle (creates and updates) */
    /* Bytes of a Content-Length body still to come; 0 when chunked (or none). */
    uint64_t body_left;
    /* A create with an Idempotency-Key: the key (validated, copied from the
     * header) and the running BLAKE2b of the request (kind, then body). The
     * hash state lives in hash_mem, aligned by idem_hash_state(). */
    bool idem;
    uint8_t idem_key_len;
    char idem_key[IDEM_KEY_MAX];
    unsigned char hash_mem[IDEM_HASH_STATE_BYTES];
};

/* A /v2 request (every path the site and the admin API do not take): routing, the
 * credentials (cached in c), and for a create or update the start of the body's decoding. */
enum server_headers_result api_headers(struct handlers *h, struct api_conn *c, struct api_state *st,
                                       struct http_request *req, struct http_response *r);
/* A body chunk of a request api_headers let read its body: valid during the call, or,
 * the piece that ends a Content-Length body, through api_complete (server.h), whose
 * decoded strings may then point into it. */
void api_body(struct api_state *st, const char *ptr, size_t len);
void api_complete(struct handlers *h, struct api_conn *c, struct api_state *st,
                  struct http_request *req, struct http_response *r);
/* Releases what the request holds (the decoder), completed or cut short; idempotent. */
void api_request_end(struct api_state *st);

/* ---- the API contract (openapi.c) ---- */

/*
 * Builds the served copy of the embedded docs/openapi.json into h->openapi_doc
 * (the top-level servers entry naming h->set.base_path) and its head lines
 * (a strong ETag of those bytes, Cache-Control); api_openapi_destroy frees them.
 */
void api_openapi_init(struct handlers *h);
void api_openapi_destroy(struct handlers *h);
/* Answers GET/HEAD {base}/openapi.json: no authentication. */
void api_openapi_reply(struct handlers *h, struct http_response *r);

/* A list's or the feed's ?limit (1..--list-max) into *limit; false after answering 400. */
bool api_limit_param(struct handlers *h, struct slice val, struct http_response *r,
                     uint32_t *limit);

/* ---- /v2/changes, the change feed (api_changes.c) ---- */

void api_changes(struct handlers *h, struct api_state *st, struct http_request *req,
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
