/*
 * handlers_internal: what the handler files share; not an API for anyone
 * else (handlers.h is). One file per surface, over the data layer (db.h):
 *
 *   handlers.c      the front: per-connection state, routing a request to
 *                   its surface, the replies every surface uses
 *   api_records.c   /v2 records: create, update, read, list, delete
 *   api_events.c    /v2 events: links to a theme and an address, embeds
 *   site.c          the account site and its JSON variant (docs/ACCOUNTS.md)
 *   admin.c         the admin API
 *
 * A surface gets the request at headers time (it decides whether it wants
 * the body), its body chunks, and the complete request.
 */
#ifndef EVENTD_HANDLERS_INTERNAL_H
#define EVENTD_HANDLERS_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <yajl/yajl_parse.h>

#include "auth.h"
#include "form.h"
#include "handlers.h"
#include "json.h"
#include "router.h"

enum surface { SURF_API, SURF_SITE, SURF_ADMIN };

/* Room for a crypto_generichash_state (384 bytes, 64-aligned) at any alignment. */
#define IDEM_HASH_STATE_BYTES (384 + 64)

/* An account form, from a form post or the JSON variant (site.c, admin.c). */
struct account_body {
    uint8_t kind; /* BODY_NONE, BODY_FORM, BODY_JSON */
    struct form form;
    yajl_handle yh; /* JSON variant: a flat object of strings into form's fields */
    int json_depth;
    int json_field; /* the field the next JSON value is for, -1 for an unknown key */
    bool json_error;
    bool json_any; /* a byte of JSON came: an empty body is an empty object */
    bool numbers;  /* JSON numbers are taken as their text, null as "" (set after begin) */
};
enum { BODY_NONE, BODY_FORM, BODY_JSON };

struct req_state {
    uint8_t surface; /* enum surface */
    /* /v2 */
    struct arena arena;
    struct json_decoder dec;
    struct route route;
    /* The caller, by id: a record pointer could be freed (a rotated key, an
     * undone write) between the headers and the end of the body. */
    uint64_t user_id;
    bool decoding;
    /* A create with an Idempotency-Key: the key (validated, copied from the
     * header) and the running BLAKE2b of the request (kind, then body). The
     * hash state lives in hash_mem, aligned by idem_hash_state(). */
    bool idem;
    uint8_t idem_key_len;
    char idem_key[IDEM_KEY_MAX];
    unsigned char hash_mem[IDEM_HASH_STATE_BYTES];
    /* The Authorization header that last verified on this connection, and
     * what it verified as: a keep-alive client skips the base64 and the hash. */
    struct buf auth_seen;
    uint64_t auth_user_id;
    uint8_t auth_hash[AUTH_HASH_BYTES];
    /* account site and admin API */
    uint8_t page;  /* site.c / admin.c route */
    bool json;     /* answer JSON */
    char name[68]; /* admin: the path's username */
    /* admin on the listener: the token that let the request in (0: the
     * admin socket, no token), and its hash, checked again at completion */
    uint64_t admin_token_id;
    uint8_t admin_token_hash[AUTH_HASH_BYTES];
    struct account_body body;
};

/* ---- replies (handlers.c) ---- */

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

/* ---- /v2 records (api_records.c) ---- */

enum server_headers_result api_headers(struct handlers *h, struct req_state *st,
                                       struct http_request *req, struct http_response *r);
void api_complete(struct handlers *h, struct req_state *st, struct http_request *req,
                  struct http_response *r);

/* Feeds a body chunk of a keyed create to its request hash (api_records.c). */
void api_idem_body(struct req_state *st, const char *ptr, size_t len);

/* ---- /v2 events (api_events.c) ---- */

/* The linked theme and address of an event draft are the caller's and free; true if fine. */
bool events_check_links(struct handlers *h, uint64_t user_id, struct http_response *r,
                        const union value *vals, uint64_t event_id);
/* Appends ,"Theme":{..},"Address":{..} (null when unlinked) to an open event object. */
void events_write_embeds(struct handlers *h, const struct record *ev, struct buf *out);

/* ---- account bodies (site.c) ---- */

/* Starts reading a form or JSON body with these fields; false after answering 415. */
bool account_body_begin(struct account_body *b, struct http_request *req, struct http_response *r,
                        const struct form_field *fields, size_t nfields);
void account_body_feed(struct account_body *b, const char *ptr, size_t len);
/* Ends the body; false after answering 400 (naming the field). */
bool account_body_finish(struct account_body *b, struct http_response *r);
void account_body_end(struct account_body *b);

/* ---- the account site (site.c) ---- */

/* Computes the pages' Content-Security-Policy (the inline assets' hashes),
 * checks --site-origin and loads (or makes) the CSRF secret. Returns 0, or
 * -1 after writing the reason to msg. */
int site_init(struct handlers *h, char *msg, size_t msg_len);
/* Returns true when path is the site's (then *res is set). */
bool site_headers(struct handlers *h, struct req_state *st, struct http_request *req,
                  struct http_response *r, enum server_headers_result *res);
void site_complete(struct handlers *h, struct req_state *st, struct http_request *req,
                   struct http_response *r);

/* ---- the admin API (admin.c) ---- */

bool admin_headers(struct handlers *h, struct req_state *st, struct http_request *req,
                   struct http_response *r, enum server_headers_result *res);
void admin_complete(struct handlers *h, struct req_state *st, struct http_request *req,
                    struct http_response *r);

/* ---- sign-in and registration throttling (signin_throttle.c) ---- */

/* A sign-in whose password is being checked: on h->verifying meanwhile. */
struct signin_flight {
    const char *name; /* NUL-terminated; the throttle's name key */
    const uint8_t *addr;
    size_t addr_len; /* the throttle's address key */
    struct signin_flight *prev, *next;
};

/* 0 when a sign-in of name from addr may be checked now, else the seconds to wait. */
uint32_t signin_wait(const struct handlers *h, struct slice name, const uint8_t *addr,
                     size_t addr_len, uint64_t now_ms);
void signin_flight_add(struct handlers *h, struct signin_flight *f);
void signin_flight_remove(struct handlers *h, struct signin_flight *f);
/* The outcome of a checked sign-in: a failure counts for its name and address, a success
 * forgets the name's failures. */
void signin_failed(struct handlers *h, const struct signin_flight *f, uint64_t now_ms);
void signin_succeeded(struct handlers *h, const struct signin_flight *f);

/* 0 when a registration from addr may be hashed now, else the seconds to wait; *server_wide
 * tells whether the server's rate refused it (else the address's count). */
uint32_t register_wait(const struct handlers *h, const uint8_t *addr, size_t addr_len,
                       uint64_t now_ms, bool *server_wide);
/* A registration from addr was queued for hashing: it counts for addr and the server. */
void register_counted(struct handlers *h, const uint8_t *addr, size_t addr_len, uint64_t now_ms);

/* The request's client address as the throttles key it (net_client_key: IPv4, or IPv6 cut
 * to its /64): the peer, or behind one of --trusted-proxies the rightmost untrusted address
 * of X-Forwarded-For. Returns the key's length (NET_KEY_BYTES). */
size_t site_client_addr(const struct handlers *h, const struct http_request *req, uint8_t out[17]);

#endif
