/*
 * site: the account site and its JSON variant (docs/ACCOUNTS.md), and the
 * throttles of sign-in and registration (signin_throttle.c). The files are
 * laid out in site_internal.h.
 */
#ifndef EVENTD_SITE_SITE_H
#define EVENTD_SITE_SITE_H

#include "core/account_body.h"
#include "core/handlers.h"

/*
 * One site request's state, from site_headers to site_request_end. It shares
 * its memory with the other surfaces' (the front's union): on entry to
 * site_headers it holds anything, and site_headers sets what it uses before
 * it claims the request.
 */
struct site_state {
    uint8_t page; /* site.c's enum page */
    bool json;    /* answer JSON (the JSON variant), else HTML pages */
    struct account_body body;
};

/* Computes the pages' Content-Security-Policy (the inline assets' hashes),
 * checks --site-origin and loads (or makes) the CSRF secret. Returns 0, or
 * -1 after writing the reason to msg. */
int site_init(struct handlers *h, char *msg, size_t msg_len);
/* --site-origin's check alone (site_init runs it too): 0, or -1 after writing
 * the reason, naming the setting, to msg. */
int site_origin_check(const char *origin, char *msg, size_t msg_len);
/* True when a page of the site (when it is on) has a path that begins with
 * the n bytes at prefix: the front asks once, to route the paths under the
 * API's base without asking the site. */
bool site_claims_under(const struct handlers *h, const char *prefix, size_t n);
/* Returns true when path is the site's (then *res is set). */
bool site_headers(struct handlers *h, struct site_state *st, struct http_request *req,
                  struct http_response *r, enum server_headers_result *res);
/* A body chunk (valid during the call) of a request site_headers let read its body. */
void site_body(struct site_state *st, const char *ptr, size_t len);
void site_complete(struct handlers *h, struct site_state *st, struct http_request *req,
                   struct http_response *r);
/* Releases what the request holds (its body's parser), completed or cut short; idempotent. */
void site_request_end(struct site_state *st);

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
