/*
 * admin: the admin API (docs/ACCOUNTS.md "Admin API"): on the admin socket,
 * and on the listener with a Bearer token when enabled.
 */
#ifndef EVENTD_ADMIN_ADMIN_H
#define EVENTD_ADMIN_ADMIN_H

#include "core/account_body.h"
#include "core/handlers.h"
#include "storage/auth.h"

/*
 * One admin request's state, from admin_headers to admin_request_end. It
 * shares its memory with the other surfaces' (the front's union): on entry
 * to admin_headers it holds anything, and admin_headers sets what it uses
 * before it claims the request.
 */
struct admin_state {
    uint8_t page;  /* admin.c's enum admin_route */
    char name[68]; /* the path's username (or token name), NUL-terminated */
    /* On the listener: the token that let the request in (0: the admin
     * socket, no token), and its hash, checked again at completion. */
    uint64_t admin_token_id;
    uint8_t admin_token_hash[AUTH_HASH_BYTES];
    struct account_body body; /* PUT .../limits */
};

/* Returns true when the request is the admin API's (then *res is set). */
bool admin_headers(struct handlers *h, struct admin_state *st, struct http_request *req,
                   struct http_response *r, enum server_headers_result *res);
/* A body chunk (valid during the call) of a request admin_headers let read its body. */
void admin_body(struct admin_state *st, const char *ptr, size_t len);
void admin_complete(struct handlers *h, struct admin_state *st, struct http_request *req,
                    struct http_response *r);
/* Releases what the request holds (its body's parser), completed or cut short; idempotent. */
void admin_request_end(struct admin_state *st);

#endif
