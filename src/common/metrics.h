/*
 * metrics: the counters and histograms behind GET /metrics, and their
 * rendering in the Prometheus text exposition format 0.0.4.
 *
 * A leaf module: it knows no request, connection or record. Whoever sees an
 * event calls the matching metrics_* function on the struct metrics the
 * assembly (app) owns and lends out; gauges that other modules already keep
 * (open connections, log size, records) are written by the /metrics handler
 * with metrics_write_gauge at render time, so nothing is counted twice.
 *
 * Everything is fixed-size plain arrays: observing an event is a few
 * increments, with no allocation and no lock (loop thread only).
 */
#ifndef EVENTD_METRICS_H
#define EVENTD_METRICS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/buf.h"

/*
 * The route labels of eventd_http_requests_total. The /v2 ones are laid out
 * kind by kind in the router's action order (create, list, get, update,
 * delete), so metrics_api_route can compute them.
 */
#define METRICS_ROUTES(X)                                                                          \
    X(OTHER, "other")                                                                              \
    X(HEALTH, "health")                                                                            \
    X(METRICS, "metrics")                                                                          \
    X(THEME_CREATE, "theme_create")                                                                \
    X(THEME_LIST, "theme_list")                                                                    \
    X(THEME_GET, "theme_get")                                                                      \
    X(THEME_UPDATE, "theme_update")                                                                \
    X(THEME_DELETE, "theme_delete")                                                                \
    X(ADDRESS_CREATE, "address_create")                                                            \
    X(ADDRESS_LIST, "address_list")                                                                \
    X(ADDRESS_GET, "address_get")                                                                  \
    X(ADDRESS_UPDATE, "address_update")                                                            \
    X(ADDRESS_DELETE, "address_delete")                                                            \
    X(EVENT_CREATE, "event_create")                                                                \
    X(EVENT_LIST, "event_list")                                                                    \
    X(EVENT_GET, "event_get")                                                                      \
    X(EVENT_UPDATE, "event_update")                                                                \
    X(EVENT_DELETE, "event_delete")                                                                \
    X(SITE_REGISTER_FORM, "site_register_form")                                                    \
    X(SITE_REGISTER, "site_register")                                                              \
    X(SITE_SIGNIN_FORM, "site_signin_form")                                                        \
    X(SITE_SIGNIN, "site_signin")                                                                  \
    X(SITE_SIGNOUT, "site_signout")                                                                \
    X(SITE_ACCOUNT, "site_account")                                                                \
    X(SITE_KEY_ISSUE, "site_key_issue")                                                            \
    X(SITE_KEY_REVOKE, "site_key_revoke")                                                          \
    X(SITE_PASSWORD_FORM, "site_password_form")                                                    \
    X(SITE_PASSWORD, "site_password")                                                              \
    X(SITE_SIGNOUT_ALL, "site_signout_all")                                                        \
    X(ADMIN, "admin")                                                                              \
    X(OPENAPI, "openapi")                                                                          \
    X(CHANGES, "changes")

enum metrics_route {
#define METRICS_ROUTE_ENUM(name, label) MR_##name,
    METRICS_ROUTES(METRICS_ROUTE_ENUM)
#undef METRICS_ROUTE_ENUM
        MR_COUNT
};

/* The event labels of eventd_account_events_total. */
#define METRICS_ACCOUNT_EVENTS(X)                                                                  \
    X(REGISTRATION, "registration")                                                                \
    X(REGISTRATION_THROTTLED, "registration_throttled")                                            \
    X(SIGNIN_OK, "signin_ok")                                                                      \
    X(SIGNIN_FAILED, "signin_failed")                                                              \
    X(SIGNIN_THROTTLED, "signin_throttled")                                                        \
    X(KEY_ISSUED, "key_issued")                                                                    \
    X(KEY_REVOKED, "key_revoked")                                                                  \
    X(PASSWORD_CHANGED, "password_changed")                                                        \
    X(SIGNOUT_ALL, "signout_all")                                                                  \
    X(ADMIN_CALL, "admin_call")

enum metrics_account_event {
#define METRICS_ACCOUNT_ENUM(name, label) MA_##name,
    METRICS_ACCOUNT_EVENTS(METRICS_ACCOUNT_ENUM)
#undef METRICS_ACCOUNT_ENUM
        MA_COUNT
};

/* The result labels of eventd_idempotency_keys_total (a create with an Idempotency-Key). */
enum metrics_idem { MI_STORED, MI_REPLAYED, MI_REUSED, MI_IN_FLIGHT, MI_COUNT };

#define METRICS_BUCKETS 17  /* histogram bounds, 50 us to 10 s (metrics.c) */
#define METRICS_STATUSES 32 /* distinct status codes counted; more share code="other" */

struct metrics_histogram {
    uint64_t counts[METRICS_BUCKETS + 1]; /* per bucket, not cumulative; the last is +Inf */
    uint64_t count;
    uint64_t sum_ns; /* ns */
};

struct metrics {
    /* requests[route][slot]: slot from status_slot[code]; status_code[slot] is the label */
    uint64_t requests[MR_COUNT][METRICS_STATUSES];
    uint16_t status_code[METRICS_STATUSES]; /* 0: slot unused, 1: "other" */
    uint8_t status_slot[600];               /* by status code: slot + 1, or 0 when unseen */
    uint32_t nstatus;                       /* slots handed out */
    struct metrics_histogram latency;       /* request latency (README: what it spans) */
    struct metrics_histogram fsync;         /* time of each log batch's fdatasync */
    uint64_t account[MA_COUNT];
    uint64_t idem[MI_COUNT]; /* keyed creates by result */
    uint64_t replay_ns;      /* ns: opening and replaying the log at startup */
};

void metrics_init(struct metrics *m);

/* A response was handed to the socket: its route, status and latency in ns. */
void metrics_observe_request(struct metrics *m, uint8_t route, uint16_t status, uint64_t ns);
/* A log batch's fdatasync took ns. m may be NULL (nothing is counted). */
void metrics_observe_fsync(struct metrics *m, uint64_t ns);

static inline void metrics_account(struct metrics *m, enum metrics_account_event e) {
    if (m) m->account[e]++;
}

static inline void metrics_idem(struct metrics *m, enum metrics_idem e) {
    if (m) m->idem[e]++;
}

/* The route label of a /v2 call: kind 0..2 (theme, address, event), action 0..4 in
 * the router's order (create, list, get, update, delete). */
static inline uint8_t metrics_api_route(unsigned kind, unsigned action) {
    return (uint8_t)(MR_THEME_CREATE + kind * 5 + action);
}

/* The label of a route (e.g. "theme_create"). */
const char *metrics_route_name(uint8_t route);

/*
 * Appends every counter and histogram m holds to out, in the text format
 * (# HELP and # TYPE lines, then the samples). compactions_ok and
 * compactions_failed come from the data layer, which counts them.
 */
void metrics_render(const struct metrics *m, struct buf *out, uint64_t compactions_ok,
                    uint64_t compactions_failed);

/* Appends a gauge without labels: HELP, TYPE and one sample. */
void metrics_write_gauge(struct buf *out, const char *name, const char *help, double value);
/* Appends the HELP and TYPE lines of a metric, for samples written with metrics_write_sample. */
void metrics_write_head(struct buf *out, const char *name, const char *type, const char *help);
/* Appends one sample: name{label="value"} v (label NULL: no labels). */
void metrics_write_sample(struct buf *out, const char *name, const char *label,
                          const char *label_value, double v);

#endif
