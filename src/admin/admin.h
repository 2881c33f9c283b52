/*
 * admin: the admin API (docs/ACCOUNTS.md "Admin API"): on the admin socket,
 * and on the listener with a Bearer token when enabled.
 */
#ifndef EVENTD_ADMIN_ADMIN_H
#define EVENTD_ADMIN_ADMIN_H

#include "core/handlers.h"

bool admin_headers(struct handlers *h, struct req_state *st, struct http_request *req,
                   struct http_response *r, enum server_headers_result *res);
void admin_complete(struct handlers *h, struct req_state *st, struct http_request *req,
                    struct http_response *r);

#endif
