/*
 * handlers: one function per endpoint, glue between the parsed request,
 * authentication, the body decoder, the data layer (db) and the response.
 * Supplies the server_handler callbacks; knows nothing of the assembly (app).
 */
#ifndef EVENTD_HANDLERS_H
#define EVENTD_HANDLERS_H

#include <stdint.h>

#include "db.h"
#include "server.h"

/* The settings the endpoints need, copied from the configuration. */
struct handler_limits {
    const char *base_path;     /* "/v2"; must outlive the handlers (config strings do) */
    uint32_t max_string_bytes; /* longest text field value, bytes */
    uint32_t list_default;     /* page size without ?limit */
    uint32_t list_max;         /* largest ?limit */
};

struct handlers {
    struct db *db; /* borrowed: outlives the server */
    struct handler_limits lim;
};

/* Fills h (caller-owned storage) and out with the callbacks that serve the API over db. */
void handlers_init(struct handlers *h, struct db *db, const struct handler_limits *lim,
                   struct server_handler *out);

#endif
