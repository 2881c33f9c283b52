/* metrics: see metrics.h. */
#include "common/metrics.h"

#include <stdio.h>
#include <string.h>

/* Histogram bounds in ns: 50 us .. 10 s, the usual 1-2.5-5 steps. */
static const uint64_t bounds_ns[METRICS_BUCKETS] = {
    50000,     100000,     250000,     500000,     1000000,     2500000,
    5000000,   10000000,   25000000,   50000000,   100000000,   250000000,
    500000000, 1000000000, 2500000000, 5000000000, 10000000000,
};
static const char *const bounds_label[METRICS_BUCKETS] = {
    "5e-05", "0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025",
    "0.05",  "0.1",    "0.25",    "0.5",    "1",     "2.5",    "5",     "10",
};

static const char *const route_names[MR_COUNT] = {
#define METRICS_ROUTE_NAME(name, label) label,
    METRICS_ROUTES(METRICS_ROUTE_NAME)
#undef METRICS_ROUTE_NAME
};

static const char *const account_names[MA_COUNT] = {
#define METRICS_ACCOUNT_NAME(name, label) label,
    METRICS_ACCOUNT_EVENTS(METRICS_ACCOUNT_NAME)
#undef METRICS_ACCOUNT_NAME
};

void metrics_init(struct metrics *m) {
    memset(m, 0, sizeof *m);
}

const char *metrics_route_name(uint8_t route) {
    return route < MR_COUNT ? route_names[route] : route_names[MR_OTHER];
}

static void observe(struct metrics_histogram *h, uint64_t ns) {
    unsigned i = 0;
    while (i < METRICS_BUCKETS && ns > bounds_ns[i])
        i++;
    h->counts[i]++;
    h->count++;
    h->sum_ns += ns;
}

/* The slot of a status code: handed out on first sight, so the table needs no
 * list of codes; past METRICS_STATUSES - 1 codes the last slot says "other". */
static unsigned status_slot(struct metrics *m, uint16_t status) {
    if (status < sizeof m->status_slot && m->status_slot[status])
        return m->status_slot[status] - 1u;
    if (status >= sizeof m->status_slot || m->nstatus >= METRICS_STATUSES - 1) {
        m->status_code[METRICS_STATUSES - 1] = 1;
        return METRICS_STATUSES - 1;
    }
    unsigned slot = m->nstatus++;
    m->status_code[slot] = status;
    m->status_slot[status] = (uint8_t)(slot + 1);
    return slot;
}

void metrics_observe_request(struct metrics *m, uint8_t route, uint16_t status, uint64_t ns) {
    if (route >= MR_COUNT) route = MR_OTHER;
    m->requests[route][status_slot(m, status)]++;
    /* A change feed call may be held for up to --changes-max-wait-s by the
     * client's own choice (?wait): it would drown the others' latency. */
    if (route != MR_CHANGES) observe(&m->latency, ns);
}

void metrics_observe_fsync(struct metrics *m, uint64_t ns) {
    if (m) observe(&m->fsync, ns);
}

/* ---- rendering (not hot: a scrape every few seconds) ---- */

static void append_value(struct buf *out, double v) {
    if (v >= 0 && v < 9007199254740992.0 && v == (double)(uint64_t)v) {
        buf_append_u64(out, (uint64_t)v);
        return;
    }
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, "%.15g", v);
    buf_append(out, tmp, (size_t)n);
}

void metrics_write_head(struct buf *out, const char *name, const char *type, const char *help) {
    buf_append_str(out, "# HELP ");
    buf_append_str(out, name);
    buf_append_char(out, ' ');
    buf_append_str(out, help);
    buf_append_str(out, "\n# TYPE ");
    buf_append_str(out, name);
    buf_append_char(out, ' ');
    buf_append_str(out, type);
    buf_append_char(out, '\n');
}

void metrics_write_sample(struct buf *out, const char *name, const char *label,
                          const char *label_value, double v) {
    buf_append_str(out, name);
    if (label) {
        buf_append_char(out, '{');
        buf_append_str(out, label);
        buf_append_str(out, "=\"");
        buf_append_str(out, label_value); /* our own fixed labels: nothing to escape */
        buf_append_str(out, "\"}");
    }
    buf_append_char(out, ' ');
    append_value(out, v);
    buf_append_char(out, '\n');
}

void metrics_write_gauge(struct buf *out, const char *name, const char *help, double value) {
    metrics_write_head(out, name, "gauge", help);
    metrics_write_sample(out, name, NULL, NULL, value);
}

static void write_histogram(struct buf *out, const char *name, const char *help,
                            const struct metrics_histogram *h) {
    char sample[96];
    metrics_write_head(out, name, "histogram", help);
    snprintf(sample, sizeof sample, "%s_bucket", name);
    uint64_t cum = 0;
    for (unsigned i = 0; i < METRICS_BUCKETS; i++) {
        cum += h->counts[i];
        metrics_write_sample(out, sample, "le", bounds_label[i], (double)cum);
    }
    cum += h->counts[METRICS_BUCKETS];
    metrics_write_sample(out, sample, "le", "+Inf", (double)cum);
    snprintf(sample, sizeof sample, "%s_sum", name);
    metrics_write_sample(out, sample, NULL, NULL, (double)h->sum_ns / 1e9);
    snprintf(sample, sizeof sample, "%s_count", name);
    metrics_write_sample(out, sample, NULL, NULL, (double)h->count);
}

void metrics_render(const struct metrics *m, struct buf *out, uint64_t compactions_ok,
                    uint64_t compactions_failed) {
    static const char req[] = "eventd_http_requests_total";
    metrics_write_head(out, req, "counter",
                       "HTTP responses handed to the socket, by route and status code.");
    for (unsigned r = 0; r < MR_COUNT; r++) {
        for (unsigned s = 0; s < METRICS_STATUSES; s++) {
            if (!m->requests[r][s]) continue;
            char code[8];
            if (m->status_code[s] == 1)
                memcpy(code, "other", 6);
            else
                snprintf(code, sizeof code, "%u", m->status_code[s]);
            buf_append_str(out, req);
            buf_append_str(out, "{route=\"");
            buf_append_str(out, route_names[r]);
            buf_append_str(out, "\",code=\"");
            buf_append_str(out, code);
            buf_append_str(out, "\"} ");
            buf_append_u64(out, m->requests[r][s]);
            buf_append_char(out, '\n');
        }
    }
    write_histogram(out, "eventd_http_request_duration_seconds",
                    "From the request's first byte read to its response handed to the socket.",
                    &m->latency);
    write_histogram(out, "eventd_fsync_duration_seconds", "Time of each log batch's fdatasync.",
                    &m->fsync);
    static const char acc[] = "eventd_account_events_total";
    metrics_write_head(out, acc, "counter",
                       "Account events: registrations, sign-ins, API keys, admin API calls.");
    for (unsigned e = 0; e < MA_COUNT; e++)
        metrics_write_sample(out, acc, "event", account_names[e], (double)m->account[e]);
    static const char idem[] = "eventd_idempotency_keys_total";
    static const char *const idem_names[MI_COUNT] = {"stored", "replayed", "reused", "in_flight"};
    metrics_write_head(out, idem, "counter",
                       "Creates with an Idempotency-Key, by result: stored (a new key and "
                       "record), replayed, reused (422), in_flight (409).");
    for (unsigned e = 0; e < MI_COUNT; e++)
        metrics_write_sample(out, idem, "result", idem_names[e], (double)m->idem[e]);
    static const char comp[] = "eventd_compactions_total";
    metrics_write_head(out, comp, "counter", "Log compactions finished, by result.");
    metrics_write_sample(out, comp, "result", "ok", (double)compactions_ok);
    metrics_write_sample(out, comp, "result", "failed", (double)compactions_failed);
    metrics_write_gauge(out, "eventd_replay_seconds", "Time to open and replay the log at startup.",
                        (double)m->replay_ns / 1e9);
}
