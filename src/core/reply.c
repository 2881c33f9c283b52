/*
 * reply: see reply.h.
 */
#include "core/reply.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char hdr_www_authenticate[] = "WWW-Authenticate: Basic realm=\"eventd\"\r\n";
const char hdr_retry_after[] = "Retry-After: 1\r\n";
const char hdr_no_store[] = "Cache-Control: no-store\r\n";

bool reply_if_storage_failing(struct handlers *h, struct http_response *r) {
    int err = db_writable(h->db);
    if (!err) return false;
    reply_error(r, ERR_STORAGE, NULL,
                "the disk refuses writes (%s); nothing was changed, retry later", strerror(-err));
    r->extra = hdr_retry_after;
    return true;
}

bool reply_if_no_room(struct handlers *h, struct http_response *r) {
    if (reply_if_storage_failing(h, r)) return true;
    int rc = db_room(h->db);
    if (!rc) return false;
    if (rc == -ENOMEM)
        reply_error(r, ERR_NO_ROOM, NULL,
                    "the server holds its limit of live data (max-live-bytes %llu); nothing was "
                    "changed: deletions still work",
                    (unsigned long long)db_max_live_bytes(h->db));
    else
        reply_error(r, ERR_NO_ROOM, NULL,
                    "the server's disk is below its free space limit (min-free-disk-bytes %llu); "
                    "nothing was changed: deletions still work",
                    (unsigned long long)db_min_free_disk(h->db));
    return true;
}

void reply_answer(struct handlers *h, struct http_response *r, const struct server_ticket *t) {
    if (!t && h->deferring) {
        /* The surface took a ticket: its answer comes back here with it. */
        h->deferring = false;
        return;
    }
    uint64_t visible = db_visible_lsn(h->db);
    if (r->lsn < visible) r->lsn = visible;
    if (t && !h->server_gone) server_deferred_done(h->srv, *t);
}

struct server_ticket reply_defer(struct handlers *h, struct http_response *r) {
    h->deferring = true;
    return server_defer(h->srv, r);
}

struct server_ticket reply_defer_park(struct handlers *h, struct http_response *r) {
    h->deferring = true;
    return server_defer_park(h->srv, r);
}

struct http_response *reply_deferred(struct handlers *h, struct server_ticket t) {
    /* After server_destroy a ticket points into freed connections: never look. */
    if (h->server_gone) return NULL;
    return server_deferred(h->srv, t);
}

bool reply_ticket_client_left(const struct handlers *h, struct server_ticket t) {
    return h->server_gone || server_ticket_client_left(h->srv, t);
}

void reply_server_gone(struct handlers *h) {
    h->server_gone = true;
}

void reply_ok_open(struct http_response *r) {
    r->status = 200;
    buf_reset(&r->body);
    buf_append_str(&r->body, "{\"Status\":\"ok\",\"Result\":");
}

void reply_error(struct http_response *r, enum err e, const char *field, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    http_response_error(r, e, field, msg);
}

void reply_no_content(struct http_response *r) {
    r->status = 204;
    r->no_body = true;
    buf_reset(&r->body);
}
