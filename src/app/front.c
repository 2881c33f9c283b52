/*
 * front: see front.h.
 *
 * The per-connection request state, and routing a request to its surface
 * (the /v2 records, the account site, the admin API); the replies they
 * share are core/reply.c. Every answer at completion, immediate or
 * deferred, leaves through reply_answer (core/reply.h), which applies the
 * LSN rule.
 */
#include "app/front.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin/admin.h"
#include "api/api.h"
#include "core/reply.h"
#include "site/site.h"

/*
 * A connection's request state (the server allocates state_size bytes of it
 * per connection, and hands it from connection to connection): which
 * surface the current request went to, what the API keeps from request to
 * request, and the current request's own state. That last is a union of the
 * surfaces' states, not a struct of them: a request goes to one surface, so
 * a connection holds the largest surface's state rather than the sum of all
 * three. The API's connection cache (its arena and the last credentials) is
 * outside the union, because a site or admin request between two API
 * requests must neither wipe nor leak it.
 */
struct front_state {
    uint8_t surface; /* enum surface: the live member of u; SURF_NONE between requests */
    struct api_conn api_conn;
    union {
        struct api_state api;
        struct site_state site;
        struct admin_state admin;
    } u;
};

/* Ends the request on st, completed or cut short (the client left mid-body):
 * its surface releases what it holds. */
static void request_end(struct front_state *st) {
    switch (st->surface) {
    case SURF_API:
        api_request_end(&st->u.api);
        break;
    case SURF_SITE:
        site_request_end(&st->u.site);
        break;
    case SURF_ADMIN:
        admin_request_end(&st->u.admin);
        break;
    default:
        break;
    }
    st->surface = SURF_NONE;
}

static void state_init(void *data, void *mem) {
    (void)data;
    struct front_state *st = mem;
    st->surface = SURF_NONE;
    api_conn_init(&st->api_conn);
}

static void state_reset(void *data, void *mem) {
    (void)data;
    struct front_state *st = mem;
    request_end(st);
    api_conn_reset(&st->api_conn);
}

static void state_destroy(void *data, void *mem) {
    (void)data;
    struct front_state *st = mem;
    request_end(st);
    api_conn_destroy(&st->api_conn);
}

/* The log's and the records' gauges of GET /metrics. */
static void write_log_metrics(struct buf *b, const struct db_stats *ds) {
    static const char *const kinds[INDEX_KINDS] = {
        [REC_USER] = "user",
        [REC_THEME] = "theme",
        [REC_ADDRESS] = "address",
        [REC_EVENT] = "event",
        [REC_SESSION] = "session",
        [REC_ADMIN] = "admin_token",
        [REC_IDEM] = "idempotency_key",
    };
    metrics_write_gauge(b, "eventd_log_bytes",
                        "Bytes of the log (eventd.log up to its last frame; preallocated zeros "
                        "may follow: eventd_log_prealloc_bytes).",
                        (double)ds->log_bytes);
    metrics_write_gauge(b, "eventd_log_prealloc_bytes",
                        "Zeros written past the log's end for its next frames "
                        "(--log-prealloc-bytes, always mode): the file is this much larger.",
                        (double)ds->prealloc_bytes);
    metrics_write_gauge(b, "eventd_log_live_bytes",
                        "Bytes of the live records as the index holds them (a compaction "
                        "writes them in fewer: varint frames), the compaction ratio's yardstick.",
                        (double)ds->live_bytes);
    metrics_write_head(b, "eventd_records", "gauge", "Live records, by kind.");
    for (unsigned k = 0; k < INDEX_KINDS; k++)
        if (kinds[k])
            metrics_write_sample(b, "eventd_records", "kind", kinds[k], (double)ds->kind_count[k]);
    metrics_write_head(b, "eventd_record_bytes", "gauge",
                       "Bytes of the live records' frames, by kind.");
    for (unsigned k = 0; k < INDEX_KINDS; k++)
        if (kinds[k])
            metrics_write_sample(b, "eventd_record_bytes", "kind", kinds[k],
                                 (double)ds->kind_bytes[k]);
}

/* GET /metrics: the Prometheus text format (README "Metrics"). */
static void reply_metrics(struct handlers *h, struct http_request *req, struct http_response *r) {
    r->route = MR_METRICS;
    if (req->method != HTTP_GET && req->method != HTTP_HEAD) {
        http_response_error(r, ERR_METHOD_NOT_ALLOWED, NULL, NULL);
        r->extra = "Allow: GET, HEAD\r\n";
        return;
    }
    struct buf *b = &r->body;
    buf_reset(b);
    r->content_type = "text/plain; version=0.0.4; charset=utf-8";
    struct db_stats ds;
    db_stats(h->db, &ds);
    metrics_render(h->metrics, b, ds.compactions_ok, ds.compactions_failed);
    const struct server *srv = h->srv;
    metrics_write_gauge(b, "eventd_connections_open", "Open client connections.",
                        (double)(srv->nconns - srv->nclosing));
    metrics_write_head(b, "eventd_connections_refused_total", "counter",
                       "Connections closed unserved, by reason: cap (--max-connections, nothing "
                       "to close), per_address (--max-connections-per-address), peer_unknown "
                       "(reset before accept), peer_credentials (admin socket, another uid).");
    for (unsigned i = 0; i < SERVER_REFUSALS; i++)
        metrics_write_sample(b, "eventd_connections_refused_total", "reason",
                             server_refusal_label(i), (double)srv->stats_refused[i]);
    metrics_write_head(b, "eventd_connections_evicted_total", "counter",
                       "Connections closed at --max-connections with a half-sent request, to "
                       "admit a new client.");
    metrics_write_sample(b, "eventd_connections_evicted_total", NULL, NULL,
                         (double)srv->stats_evicted_half_sent);
    metrics_write_gauge(b, "eventd_draining",
                        "1 from SIGTERM on: the drain window (--drain-ms), then the stop; else 0.",
                        server_stopping(srv) ? 1 : 0);
    metrics_write_head(b, "eventd_drain_closed_total", "counter",
                       "Keep-alive connections closed after their answer in the drain window.");
    metrics_write_sample(b, "eventd_drain_closed_total", NULL, NULL,
                         (double)srv->stats_drain_closed);
    static const char *const hows[CRED_HOWS] = {"connection", "server_cache", "full"};
    metrics_write_head(b, "eventd_auth_checks_total", "counter",
                       "API requests by how their credentials were settled: connection (the "
                       "header that verified last on the connection), server_cache (one that "
                       "verified on any connection, --auth-cache-entries), full (base64, the key's "
                       "hash and the user's lookup; every wrong key too).");
    for (unsigned i = 0; i < CRED_HOWS; i++)
        metrics_write_sample(b, "eventd_auth_checks_total", "by", hows[i],
                             (double)h->creds.stats[i]);
    metrics_write_gauge(b, "eventd_changes_waiting",
                        "Callers of GET /v2/changes?wait held until a change of theirs.",
                        (double)changes_waiting(h));
    metrics_write_gauge(
        b, "eventd_connections_parked",
        "Connections whose only work is a held answer (the change feed's wait), parked "
        "on it: no read buffer, no request state.",
        (double)srv->nparked);
    if (h->log_dropped) {
        metrics_write_head(b, "eventd_access_log_dropped_total", "counter",
                           "Access log lines dropped because stderr was full (a reader that "
                           "stopped reading) or closed.");
        metrics_write_sample(b, "eventd_access_log_dropped_total", NULL, NULL,
                             (double)*h->log_dropped);
    }
    write_log_metrics(b, &ds);
    metrics_write_head(b, "eventd_fsyncs_total", "counter",
                       "fdatasyncs of the log completed (compactions' included).");
    metrics_write_sample(b, "eventd_fsyncs_total", NULL, NULL, (double)ds.syncs);
    metrics_write_head(b, "eventd_fsyncs_on_loop_total", "counter",
                       "Of those, the ones the event loop did itself (--loop-sync-max-us); the "
                       "rest ran on a worker thread.");
    metrics_write_sample(b, "eventd_fsyncs_on_loop_total", NULL, NULL, (double)ds.loop_syncs);
    metrics_write_head(b, "eventd_password_hashes_total", "counter",
                       "Argon2id hashes and checks done, by lane: signin (every sign-in, known "
                       "user or not), register (every registration, free name or taken).");
    metrics_write_sample(b, "eventd_password_hashes_total", "lane", "signin",
                         (double)h->pw.done[PWHASH_LANE_SIGNIN]);
    metrics_write_sample(b, "eventd_password_hashes_total", "lane", "register",
                         (double)h->pw.done[PWHASH_LANE_REGISTER]);
}

static enum server_headers_result on_headers(void *data, void *mem, struct http_request *req,
                                             struct http_response *r) {
    struct handlers *h = data;
    struct front_state *st = mem;
    /* The previous request on this state may have been cut short. */
    request_end(st);
    /* Most requests are the API's: one comparison, not every surface's hook. */
    struct slice path = req->path;
    if (h->api_direct && path.len > h->base_len && path.ptr[h->base_len] == '/' &&
        memcmp(path.ptr, h->set.base_path, h->base_len) == 0) {
        st->surface = SURF_API;
        return api_headers(h, &st->api_conn, &st->u.api, req, r);
    }
    if (h->set.metrics && h->metrics && slice_eq(req->path, "/metrics", 8)) {
        reply_metrics(h, req, r);
        return SERVER_ANSWERED;
    }
    enum server_headers_result res;
    if (admin_headers(h, &st->u.admin, req, r, &res)) {
        st->surface = SURF_ADMIN;
        r->route = MR_ADMIN;
        metrics_account(h->metrics, MA_ADMIN_CALL);
        return res;
    }
    if (site_headers(h, &st->u.site, req, r, &res)) {
        st->surface = SURF_SITE;
        return res;
    }
    st->surface = SURF_API;
    return api_headers(h, &st->api_conn, &st->u.api, req, r);
}

/* Whether one of the n-byte strings a and b begins with the other. */
static bool nested(const char *a, size_t an, const char *b, size_t bn) {
    return memcmp(a, b, an < bn ? an : bn) == 0;
}

/*
 * Whether every path under base_path and '/' is the API's whatever the
 * surfaces before it in on_headers say: /metrics is not under it, no admin
 * path ("/admin/...") is, and no page of the site.
 */
static bool api_paths_disjoint(const struct handlers *h) {
    char under[512];
    int n = snprintf(under, sizeof under, "%s/", h->set.base_path);
    if (n < 0 || (size_t)n >= sizeof under) return false;
    static const char metrics[] = "/metrics", admin[] = "/admin/";
    if ((size_t)n < sizeof metrics - 1 && memcmp(metrics, under, (size_t)n) == 0) return false;
    if (nested(admin, sizeof admin - 1, under, (size_t)n)) return false;
    return !site_claims_under(h, under, (size_t)n);
}

static void on_body(void *data, void *mem, const char *ptr, size_t len) {
    (void)data;
    struct front_state *st = mem;
    if (st->surface == SURF_API)
        api_body(&st->u.api, ptr, len);
    else if (st->surface == SURF_SITE)
        site_body(&st->u.site, ptr, len);
    else if (st->surface == SURF_ADMIN)
        admin_body(&st->u.admin, ptr, len);
}

static void on_complete(void *data, void *mem, struct http_request *req, struct http_response *r) {
    struct handlers *h = data;
    struct front_state *st = mem;
    switch (st->surface) {
    case SURF_API:
        api_complete(h, &st->api_conn, &st->u.api, req, r);
        break;
    case SURF_SITE:
        site_complete(h, &st->u.site, req, r);
        break;
    case SURF_ADMIN:
        admin_complete(h, &st->u.admin, req, r);
        break;
    default: /* on_headers answered: no completion comes */
        http_response_error(r, ERR_INTERNAL, NULL, NULL);
    }
    reply_answer(h, r, NULL);
    request_end(st);
}

static void on_server_gone(void *data) {
    reply_server_gone(data);
}

/* --trusted-proxies into blocks (HANDLERS_MAX_PROXIES of them): their count, or -1. */
static int parse_proxies(const struct handlers_settings *set, struct net_block *blocks, char *msg,
                         size_t msg_len) {
    char why[160];
    int n =
        net_block_parse_list(set->trusted_proxies, blocks, HANDLERS_MAX_PROXIES, why, sizeof why);
    if (n < 0) snprintf(msg, msg_len, "--trusted-proxies: %s", why);
    return n;
}

int front_check_settings(const struct handlers_settings *set, char *msg, size_t msg_len) {
    struct net_block blocks[HANDLERS_MAX_PROXIES];
    if (parse_proxies(set, blocks, msg, msg_len) < 0) return -1;
    return site_origin_check(set->site_origin, msg, msg_len);
}

int front_init(struct handlers *h, uv_loop_t *loop, struct db *db, struct server *srv,
               struct metrics *metrics, const struct handlers_settings *set,
               struct server_handler *out, char *msg, size_t msg_len) {
    memset(h, 0, sizeof *h);
    h->db = db;
    h->srv = srv;
    h->metrics = metrics;
    h->set = *set;
    const struct handlers_settings *lim = &h->set;
    int n = parse_proxies(lim, h->proxies, msg, msg_len);
    if (n < 0) return -1;
    h->nproxies = (uint32_t)n;
    if (site_init(h, msg, msg_len) < 0) return -1;
    struct throttle_policy pol = throttle_default_policy;
    pol.free_failures = lim->signin_free_failures;
    /* Registrations: the free ones, then 1 min doubling to 1 h; forgotten after a day. */
    struct throttle_policy reg = {.free_failures = lim->register_per_address,
                                  .base_delay_ms = 60 * 1000,
                                  .max_delay_ms = 60 * 60 * 1000,
                                  .window_ms = 24 * 60 * 60 * 1000};
    if (lim->register_per_minute == 0 ||
        throttle_init(&h->by_name, lim->throttle_entries, &pol) < 0 ||
        throttle_init(&h->by_addr, lim->throttle_entries, &pol) < 0 ||
        throttle_init(&h->reg_by_addr, lim->throttle_entries, &reg) < 0) {
        snprintf(msg, msg_len, "could not set up sign-in and registration throttling");
        return -1;
    }
    throttle_rate_init(&h->reg_rate, lim->register_per_minute, lim->register_per_minute);
    /* Hashing is CPU-bound: by default it leaves the loop a core of its own
     * and libuv's threadpool (4 threads) two threads for the log. */
    uint32_t conc = lim->pwhash_concurrency;
    if (conc == 0) {
        unsigned cores = uv_available_parallelism();
        conc = cores > 3 ? 2 : cores > 1 ? cores - 1 : 1;
    }
    pwhash_init(&h->pw, loop, conc, lim->pwhash_queue, lim->pwhash_register_queue);
    api_openapi_init(h);
    cred_cache_init(&h->creds, lim->auth_cache_entries);
    h->base_len = (uint32_t)strlen(h->set.base_path);
    h->api_direct = api_paths_disjoint(h);
    memset(out, 0, sizeof *out);
    out->data = h;
    out->state_size = sizeof(struct front_state);
    out->state_init = state_init;
    out->state_reset = state_reset;
    out->state_destroy = state_destroy;
    out->on_headers = on_headers;
    out->on_body = on_body;
    out->on_complete = on_complete;
    out->on_server_gone = on_server_gone;
    return 0;
}

void front_destroy(struct handlers *h) {
    api_openapi_destroy(h);
    cred_cache_destroy(&h->creds);
    throttle_destroy(&h->by_name);
    throttle_destroy(&h->by_addr);
    throttle_destroy(&h->reg_by_addr);
}
