/*
 * router: method + path -> action, resource kind and path id.
 *
 * Paths live under the configured base path ("/v2"): /theme, /theme/:id,
 * and the same for address and event, and /changes (the change feed, GET). Ids are read by
 * record_parse_id: plain decimal positive integers up to 2^53-1 (exact in a JavaScript number);
 * anything else in the id position is not a path we serve (404). GET /openapi.json under the base
 * path is the API contract (api/openapi.c). GET /healthz sits outside the base path. HEAD is served
 * wherever GET is, as the same action (the server drops the body), and every Allow line lists it.
 * Pure: no I/O.
 */
#ifndef EVENTD_ROUTER_H
#define EVENTD_ROUTER_H

#include <stdbool.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/err.h"

enum action {
    ACT_HEALTH,
    ACT_CREATE,
    ACT_LIST,
    ACT_GET,
    ACT_UPDATE,
    ACT_DELETE,
    ACT_OPENAPI,
    ACT_CHANGES
};

struct route {
    uint8_t action;    /* enum action */
    uint8_t type;      /* enum rec_type of the resource */
    uint64_t id;       /* path id, items only */
    const char *allow; /* 405: the "Allow: ...\r\n" header line; static */
};

/*
 * Matches method (llhttp_method_t) and path. Returns ERR_NONE with out
 * filled, ERR_NOT_FOUND, or ERR_METHOD_NOT_ALLOWED with out->allow set.
 */
/*
 * The next name=value pair of a query string: takes it off the front of
 * *rest (up to the first '&'); a pair without '=' has an empty value.
 * Returns false when *rest is empty. The slices point into the query.
 */
bool query_next(struct slice *rest, struct slice *name, struct slice *val);

enum err router_match(struct slice base, struct slice path, uint8_t method, struct route *out);

#endif
