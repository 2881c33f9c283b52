/*
 * config: every setting of eventd in one descriptor table that drives the
 * command-line flags, the environment variables, --help and validation.
 * Defaults live in one const struct (config_defaults). A flag wins over its
 * environment variable, which wins over the default.
 */
#ifndef EVENTD_CONFIG_H
#define EVENTD_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "common/log.h"

/*
 * The durability modes of --fsync. The settings do not depend on the store:
 * the assembly (app.c) maps these to the store's modes.
 */
enum config_fsync { CONFIG_FSYNC_ALWAYS, CONFIG_FSYNC_INTERVAL, CONFIG_FSYNC_NEVER };

/*
 * The string settings (listen, data_dir, base_path) are never copied: they
 * point into argv, into the environment (getenv) or at static strings.
 * They stay valid for the life of the process as long as argv and the
 * environment are left alone (no setenv or putenv of an EVENTD_ variable
 * after config_parse); a copied struct config points at the same strings.
 */
struct config {
    const char *listen; /* HOST:PORT */
    const char *data_dir;
    const char *base_path;     /* "/v2": clients point {base_url} here */
    uint32_t node_id;          /* shard number (ids in its own range, record.h); 0: unsharded */
    uint32_t max_header_bytes; /* request line + headers, bytes */
    uint32_t max_body_bytes;   /* bytes */
    uint32_t max_connections;
    uint32_t max_connections_per_address; /* per IPv4 address or IPv6 /64; 0: no cap */
    uint32_t evict_half_sent_ms;  /* at the cap, a request arriving this long may be closed */
    uint32_t max_pipeline;        /* queued responses per connection before reads pause */
    uint32_t max_pipeline_bytes;  /* ... or queued answer bytes */
    uint32_t header_timeout_ms;   /* first byte of a request to end of headers */
    uint32_t request_timeout_ms;  /* first byte of a request to end of body */
    uint32_t idle_timeout_ms;     /* keep-alive connection with nothing to do */
    uint32_t idle_sweep_ms;       /* idle memory given back this often (server.h) */
    uint32_t drain_ms;            /* SIGTERM: serve with Connection: close this long first */
    uint32_t shutdown_timeout_ms; /* SIGTERM: wait this long for requests in flight */
    uint32_t linger_ms;           /* a connection closing after an error reads this long at most */
    uint32_t linger_bytes;        /* ... and discards at most this many bytes */
    uint32_t max_string_bytes;    /* longest text field value, bytes of UTF-8 */
    uint32_t max_json_depth;      /* deepest nesting of a /v2 body's arrays and objects */
    uint32_t list_default;        /* page size of list calls without ?limit */
    uint32_t list_max;            /* largest ?limit */
    uint32_t list_max_bytes;      /* a page ends once its body is past this size */
    uint32_t changes_max_wait_s;  /* largest ?wait of the change feed, s */
    uint32_t changes_max_waiters; /* held feed calls per user */
    uint32_t changes_max_waiters_total; /* held feed calls in all */
    uint32_t fsync;                     /* enum config_fsync */
    uint32_t fsync_interval_ms;
    uint32_t fsync_max_unsynced_bytes;
    uint32_t loop_sync_max_us;
    /* always mode: zeros kept written past the log's end */
    uint32_t log_prealloc_bytes;
    uint32_t storage_retry_ms;  /* while the disk refuses writes: ms between retries */
    double compact_ratio;       /* compact when log bytes > ratio * live bytes; 0: never */
    uint32_t compact_min_bytes; /* ... and the log is at least this big */
    bool repair;                /* replay: move damaged data aside instead of refusing */
    bool demo_user;             /* first start with no users: create "demo" */
    bool site;                  /* serve the account site */
    const char *site_path;      /* its base path: "" or "/..." */
    bool admin;                 /* serve the admin API on DATA/admin.sock */
    bool admin_on_listener;     /* ... and on the listener, with a Bearer token */
    bool cookie_secure;         /* cookies say Secure */
    uint32_t password_min_bytes;
    uint32_t session_ttl_s;
    uint32_t signin_free_failures;
    uint32_t pwhash_concurrency; /* password hashes at once on the threadpool */
    uint32_t pwhash_queue;       /* ... and waiting beyond them (503 past that) */
    const char *trusted_proxies; /* comma-separated addresses / CIDR blocks */
    bool metrics;                /* serve GET /metrics */
    bool access_log;             /* one JSON line per response on stderr */
    bool sched_batch;            /* every thread under SCHED_BATCH (app.c) */
    uint32_t log_level;          /* enum log_level */
    /* the access log's buffer: written at most flush_ms after its first line (0: at the loop
     * turn's end), or at once when it holds buffer_bytes */
    uint32_t access_log_flush_ms;     /* ms */
    uint32_t access_log_buffer_bytes; /* bytes */
    /* quotas and the storage guard (docs/ACCOUNTS.md, docs/STORAGE.md) */
    uint32_t max_records_per_user;          /* a user's themes, addresses and events; 0: no limit */
    uint64_t max_bytes_per_user;            /* ... and their frame bytes; 0: no limit */
    uint32_t idempotency_ttl_s;             /* Idempotency-Key kept at least this long, s */
    uint32_t max_idempotency_keys_per_user; /* a user's keys kept at once; 0: no limit */
    uint64_t max_idempotency_bytes_per_user; /* their bytes, answers included; 0: no limit */
    uint64_t min_free_disk_bytes;   /* writes get 507 below this free on the data's disk; 0: off */
    uint64_t max_live_bytes;        /* ... and with this much live data; 0: half the memory */
    uint32_t throttle_entries;      /* keys each throttle table holds (sign-in names, addresses) */
    uint32_t auth_cache_entries;    /* slots of the server-wide credential cache (0: off) */
    uint32_t register_per_address;  /* registrations per client address before each waits */
    uint32_t register_per_minute;   /* registrations the server takes a minute (and at once) */
    uint32_t pwhash_register_queue; /* registrations' hashes waiting (503 past that) */

    /* The account site's forms: the public origin their posts' Origin must be
     * ("https://host", or "": the request's Host), and the file of the secret
     * that signs their CSRF tokens ("": DATA/site.key). */
    const char *site_origin;
    const char *site_secret_file;
};

extern const struct config config_defaults;

/*
 * Parses argv (after the subcommand) and the environment into cfg, which
 * starts as config_defaults. Positional arguments are stored in pos (up to
 * max_pos), pointing into argv; cfg's strings point into argv or the
 * environment (see struct config). Returns 0, 1 if --help was handled, or
 * -1 after printing one line on stderr for a bad flag or value (the caller
 * exits 2).
 */
int config_parse(struct config *cfg, int argc, char **argv, const char **pos, int max_pos,
                 int *npos);

/* Prints the settings table for --help. */
void config_usage(FILE *out);

/* Splits "HOST:PORT" ("[::1]:80" too); returns 0 or -1. host is written NUL-terminated. */
int config_split_listen(const char *s, char *host, size_t host_len, int *port);

#endif
