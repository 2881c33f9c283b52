/*
 * config: the descriptor table. One row per setting: flag name, environment
 * variable, type, where it goes in struct config, limits and help. Parsing,
 * validation and --help all walk this table, so a new setting is one row.
 */
#include "common/config.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

const struct config config_defaults = {
    .listen = "0.0.0.0:8080",
    .data_dir = "./data",
    .base_path = "/v2",
    .node_id = 0,
    .max_header_bytes = 8192,
    .max_body_bytes = 1048576,
    .max_connections = 10000,
    .max_connections_per_address = 256,
    .evict_half_sent_ms = 2000,
    .max_pipeline = 32,
    .max_pipeline_bytes = 1024 * 1024,
    .header_timeout_ms = 10000,
    .request_timeout_ms = 30000,
    .idle_timeout_ms = 60000,
    .idle_sweep_ms = 1000,
    .drain_ms = 5000,
    .shutdown_timeout_ms = 10000,
    .linger_ms = 5000,
    .linger_bytes = 16u << 20,
    .max_string_bytes = 255,
    .max_json_depth = 64,
    .list_default = 50,
    .list_max = 500,
    .list_max_bytes = 262144,
    .changes_max_wait_s = 60,
    .changes_max_waiters = 100,
    .changes_max_waiters_total = 500,
    .fsync = CONFIG_FSYNC_ALWAYS,
    .fsync_interval_ms = 1000,
    .fsync_max_unsynced_bytes = 32u << 20,
    .loop_sync_max_us = 2000,
    .log_prealloc_bytes = 4u << 20,
    .storage_retry_ms = 1000,
    .compact_ratio = 4.0,
    .compact_min_bytes = 16u << 20,
    .repair = false,
    .demo_user = true,
    .site = true,
    .site_path = "",
    .admin = true,
    .admin_on_listener = false,
    .cookie_secure = false,
    .password_min_bytes = 10,
    .session_ttl_s = 7 * 86400,
    .signin_free_failures = 5,
    .pwhash_concurrency = 0,
    .pwhash_queue = 64,
    .trusted_proxies = "",
    .metrics = true,
    .access_log = true,
    .sched_batch = false,
    .access_log_flush_ms = 1000,
    .access_log_buffer_bytes = 65536,
    .log_level = LOG_INFO,
    .max_records_per_user = 100000,
    .idempotency_ttl_s = 86400,
    .max_idempotency_keys_per_user = 100000,
    .max_idempotency_bytes_per_user = 64 * 1024 * 1024,
    .max_bytes_per_user = 64u << 20,
    .min_free_disk_bytes = 64u << 20,
    .max_live_bytes = 0,
    .throttle_entries = 4096,
    .auth_cache_entries = 4096,
    .register_per_address = 10,
    .register_per_minute = 60,
    .pwhash_register_queue = 8,
    .site_origin = "",
    .site_secret_file = "",
};

enum opt_type {
    OPT_STR,
    OPT_TEXT,   /* a string that may be empty */
    OPT_PREFIX, /* empty, or a path as OPT_PATH */
    OPT_U32,
    OPT_U64,
    OPT_DOUBLE,
    OPT_BOOL,
    OPT_FSYNC,
    OPT_LEVEL,
    OPT_LISTEN,
    OPT_PATH
};

struct opt {
    const char *flag; /* without "--" */
    const char *env;
    uint8_t type;
    size_t off;
    double min, max; /* numeric limits */
    const char *help;
};

#define OFF(f) offsetof(struct config, f)

static const struct opt opts[] = {
    {"listen", "EVENTD_LISTEN", OPT_LISTEN, OFF(listen), 0, 0,
     "address to listen on, HOST:PORT: an IP address, [IPv6] in brackets, not a host name "
     "(port 0: any free port)"},
    {"data", "EVENTD_DATA", OPT_STR, OFF(data_dir), 0, 0, "data directory (created if missing)"},
    {"base-path", "EVENTD_BASE_PATH", OPT_PATH, OFF(base_path), 0, 0,
     "path prefix of the API; {base_url} ends here"},
    {"node-id", "EVENTD_NODE_ID", OPT_U32, OFF(node_id), 0, 1023, /* RECORD_NODE_MAX */
     "shard number: ids carry it in their high bits; the data directory keeps it (0: unsharded)"},
    {"max-header-bytes", "EVENTD_MAX_HEADER_BYTES", OPT_U32, OFF(max_header_bytes), 256, 1 << 20,
     "request line + headers limit, bytes (431 above)"},
    {"max-body-bytes", "EVENTD_MAX_BODY_BYTES", OPT_U32, OFF(max_body_bytes), 0, 1 << 30,
     "request body limit, bytes (413 above)"},
    {"max-connections", "EVENTD_MAX_CONNECTIONS", OPT_U32, OFF(max_connections), 1, 1000000,
     "open connections limit (503 above)"},
    {"max-connections-per-address", "EVENTD_MAX_CONNECTIONS_PER_ADDRESS", OPT_U32,
     OFF(max_connections_per_address), 0, 1000000,
     "open connections per client IPv4 address or IPv6 /64 (503 above; 0: no cap; "
     "--trusted-proxies are exempt)"},
    {"evict-half-sent-ms", "EVENTD_EVICT_HALF_SENT_MS", OPT_U32, OFF(evict_half_sent_ms), 0,
     3600000,
     "at --max-connections with nothing idle, the request arriving longest is closed for a new "
     "client once it has been arriving this long, ms"},
    {"max-pipeline", "EVENTD_MAX_PIPELINE", OPT_U32, OFF(max_pipeline), 1, 1024,
     "queued responses per connection before it stops being read"},
    {"max-pipeline-bytes", "EVENTD_MAX_PIPELINE_BYTES", OPT_U32, OFF(max_pipeline_bytes), 4096,
     1 << 30,
     "bytes of queued answers per connection before it stops being read (one answer may be "
     "larger)"},
    {"header-timeout-ms", "EVENTD_HEADER_TIMEOUT_MS", OPT_U32, OFF(header_timeout_ms), 1, 3600000,
     "first byte of a request to end of headers, ms"},
    {"request-timeout-ms", "EVENTD_REQUEST_TIMEOUT_MS", OPT_U32, OFF(request_timeout_ms), 1,
     3600000, "first byte of a request to end of body, ms"},
    {"idle-timeout-ms", "EVENTD_IDLE_TIMEOUT_MS", OPT_U32, OFF(idle_timeout_ms), 1, 86400000,
     "idle keep-alive connection timeout, ms"},
    {"idle-sweep-ms", "EVENTD_IDLE_SWEEP_MS", OPT_U32, OFF(idle_sweep_ms), 1, 86400000,
     "give back idle memory this often: an idle connection keeps its handler state (credential "
     "cache) this long, then the free lists and the heap return what the period did not use, ms"},
    {"drain-ms", "EVENTD_DRAIN_MS", OPT_U32, OFF(drain_ms), 0, 3600000,
     "on SIGTERM, first drain this long: keep serving, each answer with Connection: close, "
     "/healthz 503 draining; a second SIGTERM ends it, ms (0: stop at once)"},
    {"shutdown-timeout-ms", "EVENTD_SHUTDOWN_TIMEOUT_MS", OPT_U32, OFF(shutdown_timeout_ms), 0,
     3600000, "on SIGTERM, wait this long for requests in flight, ms"},
    {"linger-ms", "EVENTD_LINGER_MS", OPT_U32, OFF(linger_ms), 0, 3600000,
     "closing after an error answer: read and discard input this long at most, ms (0: close at "
     "once)"},
    {"linger-bytes", "EVENTD_LINGER_BYTES", OPT_U32, OFF(linger_bytes), 0, 4294967295.0,
     "closing after an error answer: discard at most this many input bytes"},
    {"max-string-bytes", "EVENTD_MAX_STRING_BYTES", OPT_U32, OFF(max_string_bytes), 1, 65535,
     "longest text field value, bytes of UTF-8"},
    {"max-json-depth", "EVENTD_MAX_JSON_DEPTH", OPT_U32, OFF(max_json_depth), 2, 100000,
     "deepest nesting of arrays and objects in a /v2 body (400 deeper)"},
    {"list-default", "EVENTD_LIST_DEFAULT", OPT_U32, OFF(list_default), 1, 100000,
     "page size of list calls without ?limit"},
    {"list-max", "EVENTD_LIST_MAX", OPT_U32, OFF(list_max), 1, 100000,
     "largest ?limit of list calls"},
    {"list-max-bytes", "EVENTD_LIST_MAX_BYTES", OPT_U32, OFF(list_max_bytes), 4096, 1u << 30,
     "a list or change feed page ends after the item that takes its body past this size"},
    {"changes-max-wait-s", "EVENTD_CHANGES_MAX_WAIT_S", OPT_U32, OFF(changes_max_wait_s), 0, 3600,
     "largest ?wait of GET /v2/changes, s (0: the feed never holds a caller)"},
    {"changes-max-waiters-per-user", "EVENTD_CHANGES_MAX_WAITERS_PER_USER", OPT_U32,
     OFF(changes_max_waiters), 1, 100000,
     "held change-feed calls per user: one more answers the user's oldest at once (an empty "
     "page)"},
    {"changes-max-waiters", "EVENTD_CHANGES_MAX_WAITERS", OPT_U32, OFF(changes_max_waiters_total),
     1, 1000000,
     "held change-feed calls in all: one more answers the one whose wait ends first at once (an "
     "empty page); keep it well below --max-connections and the balancer's maxconn"},
    {"fsync", "EVENTD_FSYNC", OPT_FSYNC, OFF(fsync), 0, 0,
     "always | interval | never: when a write is acknowledged"},
    {"fsync-interval-ms", "EVENTD_FSYNC_INTERVAL_MS", OPT_U32, OFF(fsync_interval_ms), 1, 3600000,
     "interval mode: ms between fdatasyncs"},
    {"fsync-max-unsynced-bytes", "EVENTD_FSYNC_MAX_UNSYNCED_BYTES", OPT_U32,
     OFF(fsync_max_unsynced_bytes), 65536, 1073741824,
     "interval and never: bytes written since the last fdatasync that are kept in memory, to "
     "write them again if a sync fails; reaching this makes a sync"},
    {"loop-sync-max-us", "EVENTD_LOOP_SYNC_MAX_US", OPT_U32, OFF(loop_sync_max_us), 0, 10000000,
     "always mode: fdatasync on the event loop while syncs average under this, us; slower ones "
     "run on a worker thread, so that a slow disk cannot hold up reads (0: always the worker)"},
    {"log-prealloc-bytes", "EVENTD_LOG_PREALLOC_BYTES", OPT_U32, OFF(log_prealloc_bytes), 0,
     1073741824,
     "always mode: bytes of zeros the server keeps written past the log's end, so that the "
     "fdatasync of each batch commits no file size (0: off; rounded up to 4 KiB)"},
    {"storage-retry-ms", "EVENTD_STORAGE_RETRY_MS", OPT_U32, OFF(storage_retry_ms), 1, 3600000,
     "while the disk refuses writes (full, failing): ms between retries; writes get 503 meanwhile"},
    {"compact-ratio", "EVENTD_COMPACT_RATIO", OPT_DOUBLE, OFF(compact_ratio), 0, 1000,
     "compact when the log is this many times the live data (0: never; else at least 1.5)"},
    {"compact-min-bytes", "EVENTD_COMPACT_MIN_BYTES", OPT_U32, OFF(compact_min_bytes), 0,
     4294967295.0, "never compact a log smaller than this, bytes"},
    {"repair", "EVENTD_REPAIR", OPT_BOOL, OFF(repair), 0, 0,
     "start despite a damaged log: keep what precedes the damage, move the rest aside"},
    {"demo-user", "EVENTD_DEMO_USER", OPT_BOOL, OFF(demo_user), 0, 0,
     "on a first start with no users, create user 'demo' and print its key"},
    {"site", "EVENTD_SITE", OPT_BOOL, OFF(site), 0, 0,
     "serve the account site (/register, /signin, /user/api)"},
    {"site-path", "EVENTD_SITE_PATH", OPT_PREFIX, OFF(site_path), 0, 0,
     "path prefix of the account site: empty, or /SOMETHING"},
    {"admin", "EVENTD_ADMIN", OPT_BOOL, OFF(admin), 0, 0,
     "serve the admin API on the Unix socket DATA/admin.sock (the CLI uses it)"},
    {"admin-on-listener", "EVENTD_ADMIN_ON_LISTENER", OPT_BOOL, OFF(admin_on_listener), 0, 0,
     "serve the admin API on the listener too, with a Bearer token"},
    {"cookie-secure", "EVENTD_COOKIE_SECURE", OPT_BOOL, OFF(cookie_secure), 0, 0,
     "mark the site's cookies Secure (HTTPS in front)"},
    {"password-min-bytes", "EVENTD_PASSWORD_MIN_BYTES", OPT_U32, OFF(password_min_bytes), 8, 256,
     "shortest password of the account site, bytes"},
    {"session-ttl-s", "EVENTD_SESSION_TTL_S", OPT_U32, OFF(session_ttl_s), 60, 31536000,
     "lifetime of a site session, seconds"},
    {"signin-free-failures", "EVENTD_SIGNIN_FREE_FAILURES", OPT_U32, OFF(signin_free_failures), 1,
     1000, "failed sign-ins per name or address before each attempt must wait"},
    {"pwhash-concurrency", "EVENTD_PWHASH_CONCURRENCY", OPT_U32, OFF(pwhash_concurrency), 0, 64,
     "password hashes run at once on libuv's threadpool (0: one core fewer than the machine "
     "has, at least 1, at most 2)"},
    {"pwhash-queue", "EVENTD_PWHASH_QUEUE", OPT_U32, OFF(pwhash_queue), 0, 100000,
     "sign-ins' password checks waiting beyond those; more get 503"},
    {"trusted-proxies", "EVENTD_TRUSTED_PROXIES", OPT_TEXT, OFF(trusted_proxies), 0, 0,
     "comma-separated addresses or CIDR blocks whose X-Forwarded-For is believed"},
    {"metrics", "EVENTD_METRICS", OPT_BOOL, OFF(metrics), 0, 0,
     "serve GET /metrics (Prometheus text format, no authentication)"},
    {"access-log", "EVENTD_ACCESS_LOG", OPT_BOOL, OFF(access_log), 0, 0,
     "write one JSON line per response to stderr"},
    {"sched-batch", "EVENTD_SCHED_BATCH", OPT_BOOL, OFF(sched_batch), 0, 0,
     "run every thread under Linux's SCHED_BATCH policy: a woken eventd does not preempt the "
     "task on its CPU (a balancer on the same CPU) but waits its turn, then serves the requests "
     "that came meanwhile together; a CPU-bound neighbour then delays each request by its "
     "slice (README)"},
    {"access-log-flush-ms", "EVENTD_ACCESS_LOG_FLUSH_MS", OPT_U32, OFF(access_log_flush_ms), 0,
     60000,
     "access lines are buffered and written at most this many ms after the first of them (lost "
     "on kill -9); 0: at the end of each event-loop turn"},
    {"access-log-buffer-bytes", "EVENTD_ACCESS_LOG_BUFFER_BYTES", OPT_U32,
     OFF(access_log_buffer_bytes), 4096, 16777216,
     "access lines are written at once when this many bytes are buffered"},
    {"log-level", "EVENTD_LOG_LEVEL", OPT_LEVEL, OFF(log_level), 0, 0,
     "debug | info | warn | error | off"},
    {"max-records-per-user", "EVENTD_MAX_RECORDS_PER_USER", OPT_U32, OFF(max_records_per_user), 0,
     4294967295.0,
     "themes, addresses and events one user may have; more get 403 quota_exceeded (0: no limit; "
     "the admin API sets a user's own)"},
    {"max-bytes-per-user", "EVENTD_MAX_BYTES_PER_USER", OPT_U64, OFF(max_bytes_per_user), 0,
     9007199254740991.0,
     "bytes of log frames those records of one user may hold; more get 403 quota_exceeded (0: no "
     "limit)"},
    {"idempotency-ttl-s", "EVENTD_IDEMPOTENCY_TTL_S", OPT_U32, OFF(idempotency_ttl_s), 1, 315360000,
     "an Idempotency-Key of a create is kept (and its first answer replayed) at least this many "
     "seconds, then forgotten"},
    {"max-idempotency-keys-per-user", "EVENTD_MAX_IDEMPOTENCY_KEYS_PER_USER", OPT_U32,
     OFF(max_idempotency_keys_per_user), 0, 4294967295.0,
     "Idempotency-Keys one user may have kept at once; a create with a new key beyond that gets "
     "403 quota_exceeded (0: no limit)"},
    {"max-idempotency-bytes-per-user", "EVENTD_MAX_IDEMPOTENCY_BYTES_PER_USER", OPT_U64,
     OFF(max_idempotency_bytes_per_user), 0, 9007199254740991.0,
     "bytes one user's kept Idempotency-Keys may hold, their stored first answers included; a "
     "create with a new key once they hold that many gets 403 quota_exceeded (0: no limit)"},
    {"min-free-disk-bytes", "EVENTD_MIN_FREE_DISK_BYTES", OPT_U64, OFF(min_free_disk_bytes), 0,
     9007199254740991.0,
     "writes that add data get 507 while the data directory's disk has less free than this (0: "
     "no check); deletions still work"},
    {"max-live-bytes", "EVENTD_MAX_LIVE_BYTES", OPT_U64, OFF(max_live_bytes), 0, 9007199254740991.0,
     "writes that add data get 507 while the live records (held in memory) reach this many "
     "bytes (0: half the memory eventd may use, its cgroup's limit or the machine's)"},
    {"auth-cache-entries", "EVENTD_AUTH_CACHE_ENTRIES", OPT_U32, OFF(auth_cache_entries), 0,
     1048576,
     "Authorization headers that verified, kept server-wide so a header seen before (on any "
     "connection: behind a balancer, pooled connections carry many users) skips the key's "
     "full check; a power of two at or above this, 64 bytes each, 0: off"},
    {"throttle-entries", "EVENTD_THROTTLE_ENTRIES", OPT_U32, OFF(throttle_entries), 16, 1048576,
     "keys each throttle table holds (failed sign-ins by name, by address; registrations by "
     "address), about 108 bytes each with the slots of evicted throttled keys"},
    {"register-per-address", "EVENTD_REGISTER_PER_ADDRESS", OPT_U32, OFF(register_per_address), 1,
     1000000,
     "registrations per client address (IPv6: per /64) before each must wait: 1 min, doubling "
     "to 1 h; 429 meanwhile"},
    {"register-per-minute", "EVENTD_REGISTER_PER_MINUTE", OPT_U32, OFF(register_per_minute), 1,
     1000000, "registrations the whole server takes a minute, as many at once at most; 429 beyond"},
    {"pwhash-register-queue", "EVENTD_PWHASH_REGISTER_QUEUE", OPT_U32, OFF(pwhash_register_queue),
     0, 100000,
     "registrations' password hashes waiting, apart from the sign-ins' --pwhash-queue and "
     "after them; more get 503"},
    {"site-origin", "EVENTD_SITE_ORIGIN", OPT_TEXT, OFF(site_origin), 0, 0,
     "the site's public origin (https://HOST[:PORT]) that form posts' Origin must be; "
     "empty: the request's Host"},
    {"site-secret-file", "EVENTD_SITE_SECRET_FILE", OPT_TEXT, OFF(site_secret_file), 0, 0,
     "file of the secret that signs the sign-in forms' CSRF tokens (64 hex digits, created "
     "0600 if missing); empty: DATA/site.key"},
};

#define NOPTS (sizeof opts / sizeof opts[0])

int config_split_listen(const char *s, char *host, size_t host_len, int *port) {
    const char *colon;
    const char *h = s;
    size_t hl;
    if (s[0] == '[') {
        const char *end = strchr(s, ']');
        if (!end || end[1] != ':') return -1;
        h = s + 1;
        hl = (size_t)(end - h);
        colon = end + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon) return -1;
        hl = (size_t)(colon - s);
    }
    if (hl == 0 || hl >= host_len) return -1;
    memcpy(host, h, hl);
    host[hl] = '\0';
    char *end;
    errno = 0;
    long p = strtol(colon + 1, &end, 10);
    if (errno || end == colon + 1 || *end || p < 0 || p > 65535) return -1;
    *port = (int)p;
    return 0;
}

static int parse_bool(const char *v, bool *out) {
    if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on")) {
        *out = true;
        return 0;
    }
    if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "off")) {
        *out = false;
        return 0;
    }
    return -1;
}

/* Stores value v of option o into cfg; returns NULL or a reason. */
static const char *set(struct config *cfg, const struct opt *o, const char *v) {
    char *p = (char *)cfg + o->off;
    char *end;
    switch (o->type) {
    case OPT_STR:
        if (!*v) return "must not be empty";
        *(const char **)p = v;
        return NULL;
    case OPT_TEXT:
        *(const char **)p = v;
        return NULL;
    case OPT_PREFIX:
        if (!*v) {
            *(const char **)p = v;
            return NULL;
        }
        if (v[0] != '/' || v[strlen(v) - 1] == '/' || strchr(v, '?'))
            return "must be empty, or start with '/' and not end with '/' (e.g. /account)";
        *(const char **)p = v;
        return NULL;
    case OPT_PATH:
        if (v[0] != '/' || (strlen(v) > 1 && v[strlen(v) - 1] == '/') || strchr(v, '?'))
            return "must start with '/' and not end with '/' (e.g. /v2)";
        *(const char **)p = strcmp(v, "/") == 0 ? "" : v;
        return NULL;
    case OPT_LISTEN: {
        /* The address the server binds (server_start) read the same way, so that a
         * host name is refused here, before the data directory is opened. */
        char host[256];
        int port;
        struct sockaddr_in6 sa;
        if (config_split_listen(v, host, sizeof host, &port) < 0) return "must be HOST:PORT";
        if (uv_ip4_addr(host, port, (struct sockaddr_in *)&sa) != 0 &&
            uv_ip6_addr(host, port, &sa) != 0)
            return "must be an IP address and a port: IPv4 (0.0.0.0:8080) or IPv6 in brackets "
                   "([::]:8080), not a host name";
        *(const char **)p = v;
        return NULL;
    }
    case OPT_U32:
    case OPT_U64: {
        errno = 0;
        if (*v == '-' || *v == '+' || *v == ' ') return "must be a whole number";
        unsigned long long n = strtoull(v, &end, 10);
        if (errno || end == v || *end) return "must be a whole number";
        if ((double)n < o->min || (double)n > o->max) return "is out of range";
        if (o->type == OPT_U32)
            *(uint32_t *)p = (uint32_t)n;
        else
            *(uint64_t *)p = (uint64_t)n;
        return NULL;
    }
    case OPT_DOUBLE: {
        errno = 0;
        double d = strtod(v, &end);
        if (errno || end == v || *end || d != d) return "must be a number";
        if (d < o->min || d > o->max) return "is out of range";
        *(double *)p = d;
        return NULL;
    }
    case OPT_BOOL:
        return parse_bool(v, (bool *)p) < 0 ? "must be true or false" : NULL;
    case OPT_FSYNC:
        if (!strcmp(v, "always"))
            *(uint32_t *)p = CONFIG_FSYNC_ALWAYS;
        else if (!strcmp(v, "interval"))
            *(uint32_t *)p = CONFIG_FSYNC_INTERVAL;
        else if (!strcmp(v, "never"))
            *(uint32_t *)p = CONFIG_FSYNC_NEVER;
        else
            return "must be always, interval or never";
        return NULL;
    case OPT_LEVEL: {
        enum log_level l;
        if (log_level_parse(v, &l) < 0) return "must be debug, info, warn, error or off";
        *(uint32_t *)p = l;
        return NULL;
    }
    }
    return "is not supported";
}

static void describe_range(const struct opt *o, char *out, size_t n) {
    if (o->type == OPT_U32 || o->type == OPT_U64 || o->type == OPT_DOUBLE)
        snprintf(out, n, " (%.10g..%.10g)", o->min, o->max);
    else
        out[0] = '\0';
}

static const struct opt *find(const char *name, size_t len) {
    for (size_t i = 0; i < NOPTS; i++)
        if (strlen(opts[i].flag) == len && memcmp(opts[i].flag, name, len) == 0) return &opts[i];
    return NULL;
}

static bool flag_given(const struct opt *o, int argc, char **argv) {
    size_t n = strlen(o->flag);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0) continue;
        a += 2;
        if (!strncmp(a, "no-", 3) && o->type == OPT_BOOL) a += 3;
        if (!strncmp(a, o->flag, n) && (a[n] == '\0' || a[n] == '=')) return true;
    }
    return false;
}

int config_parse(struct config *cfg, int argc, char **argv, const char **pos, int max_pos,
                 int *npos) {
    *cfg = config_defaults;
    *npos = 0;
    char range[64];

    /* Environment first, so flags override it; a variable whose flag is given
     * is not even read, so a bad one cannot stop a start that overrides it. */
    for (size_t i = 0; i < NOPTS; i++) {
        const char *v = getenv(opts[i].env);
        if (!v || flag_given(&opts[i], argc, argv)) continue;
        const char *why = set(cfg, &opts[i], v);
        if (why) {
            describe_range(&opts[i], range, sizeof range);
            fprintf(stderr, "eventd: %s=%s: %s%s\n", opts[i].env, v, why, range);
            return -1;
        }
    }

    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return 1;
        if (strncmp(a, "--", 2) != 0) {
            if (*npos >= max_pos) {
                fprintf(stderr, "eventd: unexpected argument '%s' (see --help)\n", a);
                return -1;
            }
            pos[(*npos)++] = a;
            continue;
        }
        const char *name = a + 2;
        const char *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const struct opt *o = find(name, len);
        const char *v = eq ? eq + 1 : NULL;
        if (!o && len > 3 && !strncmp(name, "no-", 3) && !eq) {
            o = find(name + 3, len - 3);
            if (o && o->type == OPT_BOOL) {
                *(bool *)((char *)cfg + o->off) = false;
                continue;
            }
            o = NULL;
        }
        if (!o) {
            fprintf(stderr, "eventd: unknown flag '--%.*s' (see --help)\n", (int)len, name);
            return -1;
        }
        if (o->type == OPT_BOOL && !v) {
            *(bool *)((char *)cfg + o->off) = true;
            continue;
        }
        if (!v) {
            if (i + 1 >= argc) {
                fprintf(stderr, "eventd: flag --%s needs a value\n", o->flag);
                return -1;
            }
            v = argv[++i];
        }
        const char *why = set(cfg, o, v);
        if (why) {
            describe_range(o, range, sizeof range);
            fprintf(stderr, "eventd: --%s %s: %s%s\n", o->flag, v, why, range);
            return -1;
        }
    }
    /* A log just compacted holds its reservation frames besides the live data: at a ratio
     * near 1 it is always "too big", and compaction ran again and again (review). */
    if (cfg->compact_ratio > 0 && cfg->compact_ratio < 1.5) {
        fprintf(stderr,
                "eventd: --compact-ratio %g: 0 (never) or at least 1.5 (a fresh log is already "
                "a little over its live data)\n",
                cfg->compact_ratio);
        return -1;
    }
    if (cfg->list_default > cfg->list_max) {
        fprintf(stderr, "eventd: --list-default %u is larger than --list-max %u\n",
                cfg->list_default, cfg->list_max);
        return -1;
    }
    return 0;
}

static void show_default(const struct opt *o, char *out, size_t n) {
    const char *p = (const char *)&config_defaults + o->off;
    static const char *fs[] = {"always", "interval", "never"};
    static const char *lv[] = {"debug", "info", "warn", "error", "off"};
    switch (o->type) {
    case OPT_STR:
    case OPT_TEXT:
    case OPT_PREFIX:
    case OPT_PATH:
    case OPT_LISTEN:
        snprintf(out, n, "%s", *(const char *const *)p);
        break;
    case OPT_U32:
        snprintf(out, n, "%u", *(const uint32_t *)p);
        break;
    case OPT_U64:
        snprintf(out, n, "%llu", (unsigned long long)*(const uint64_t *)p);
        break;
    case OPT_DOUBLE:
        snprintf(out, n, "%g", *(const double *)p);
        break;
    case OPT_BOOL:
        snprintf(out, n, "%s", *(const bool *)p ? "true" : "false");
        break;
    case OPT_FSYNC:
        snprintf(out, n, "%s", fs[*(const uint32_t *)p]);
        break;
    case OPT_LEVEL:
        snprintf(out, n, "%s", lv[*(const uint32_t *)p]);
        break;
    }
}

void config_usage(FILE *out) {
    fprintf(out, "Settings (flag, environment variable, default); a flag wins over its variable.\n"
                 "Boolean flags also take --no-NAME.\n\n");
    for (size_t i = 0; i < NOPTS; i++) {
        char def[64];
        show_default(&opts[i], def, sizeof def);
        fprintf(out, "  --%-22s %-28s default %s\n      %s\n", opts[i].flag, opts[i].env, def,
                opts[i].help);
    }
}
