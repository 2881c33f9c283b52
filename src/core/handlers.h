/*
 * handlers: what every surface (api/, site/, admin/) is handed: the shared
 * context (struct handlers: the data layer, the server, the settings, the
 * throttles) and the tag of the per-request state (enum surface). The front
 * (app/front.c) owns the context and each connection's request state, and
 * routes each request to its surface; a surface gets the request at headers
 * time (it decides whether it wants the body), its body chunks, and the
 * complete request, each with its own part of the state.
 */
#ifndef EVENTD_CORE_HANDLERS_H
#define EVENTD_CORE_HANDLERS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/metrics.h"
#include "common/netaddr.h"
#include "common/pwhash.h"
#include "common/throttle.h"
#include "core/cred_cache.h"
#include "http/server.h"
#include "storage/auth.h"
#include "storage/db.h"

/*
 * The handlers' settings: app.c fills them from the configuration
 * (docs/ARCHITECTURE.md "Settings"); front_init copies them into h->set.
 */
struct handlers_settings {
    const char *base_path;              /* "/v2"; must outlive the handlers (config strings do) */
    uint32_t max_string_bytes;          /* longest text field value, bytes */
    uint32_t max_json_depth;            /* deepest nesting of a body's arrays and objects */
    uint32_t list_default;              /* page size without ?limit */
    uint32_t list_max;                  /* largest ?limit */
    uint32_t list_max_bytes;            /* a page ends once its body is past this size */
    uint32_t changes_max_wait_s;        /* largest ?wait of the change feed, s */
    uint32_t changes_max_waiters;       /* held feed calls per user; a new one answers the oldest */
    uint32_t changes_max_waiters_total; /* in all; a new one answers the first to end */
    /* accounts (docs/ACCOUNTS.md) */
    bool site;                   /* serve the account site */
    const char *site_path;       /* its base path: "" or e.g. "/account" (outlives, as base_path) */
    bool admin_on_listener;      /* the admin API on the listener too (Bearer token) */
    bool cookie_secure;          /* cookies say Secure (HTTPS in front) */
    uint32_t password_min_bytes; /* shortest password */
    uint32_t session_ttl_s;      /* a session's lifetime */
    uint32_t signin_free_failures;
    uint32_t pwhash_concurrency, pwhash_queue;
    const char *trusted_proxies; /* comma-separated addresses/CIDR blocks, or "" */
    bool metrics;                /* serve GET /metrics */
    /* quotas: a user's own limits (record.h) override these; 0: no limit */
    uint64_t max_records_per_user;   /* themes, addresses and events */
    uint64_t max_bytes_per_user;     /* their record_size bytes */
    uint64_t max_idem_keys_per_user; /* keys one user may have kept; 0: no limit */
    uint64_t max_idem_bytes;         /* their record_size bytes together; 0: no limit */
    uint32_t throttle_entries;       /* keys per throttle table */
    uint32_t auth_cache_entries;     /* slots of the server-wide credential cache; 0: off */
    uint32_t register_per_address, register_per_minute;
    uint32_t pwhash_register_queue;

    /* The account site's forms (docs/ACCOUNTS.md "CSRF"): the public origin
     * ("" or "https://host[:port]"; outlives the handlers), and the secret's
     * file (NULL or "": a random secret for this process only; read by
     * front_init only). */
    const char *site_origin;
    const char *site_secret_path;
};

#define HANDLERS_MAX_PROXIES 16

struct signin_flight;
struct changes_waiters;

struct handlers {
    struct db *db;                    /* borrowed (front_init): outlives the server */
    struct server *srv;               /* borrowed (front_init): the server these handlers serve */
    struct metrics *metrics;          /* borrowed (front_init): account events, /metrics; or NULL */
    const uint64_t *log_dropped;      /* borrowed: the access lines stderr refused, or NULL */
    struct handlers_settings set;     /* the settings (a copy) */
    struct throttle by_name, by_addr; /* failed sign-ins */
    struct throttle reg_by_addr;      /* registrations by client address */
    struct throttle_rate reg_rate;    /* registrations of the whole server */
    struct cred_cache creds;          /* credentials that verified, any connection (api) */
    struct signin_flight *verifying;  /* sign-ins whose password is being checked */
    struct pwhash pw;                 /* Argon2id jobs on the threadpool */
    struct net_block proxies[HANDLERS_MAX_PROXIES]; /* --trusted-proxies */
    uint32_t nproxies;
    uint8_t site_secret[32];         /* signs the pre-sign-in CSRF tokens (site_csrf.c) */
    struct changes_waiters *waiters; /* callers held by GET /v2/changes?wait (api_changes.c) */
    /* GET {base}/openapi.json (api/openapi.c): the document as served (its servers entry
     * naming the base path), and its ETag and Cache-Control lines; built by api_openapi_init */
    struct buf openapi_doc;
    char openapi_head[96];
    /* The front's dispatch (app/front.c): a path under base_path and '/' goes
     * straight to the API when no other surface can claim one (set at init). */
    bool api_direct;
    uint32_t base_len; /* strlen(set.base_path) */
    /* The completion path (reply.c "answers at completion"): */
    bool deferring;   /* the surface being completed took a ticket (reply_defer) */
    bool server_gone; /* reply_server_gone: the server's tickets are void */
};

/*
 * The surfaces a request can go to. Each declares its own per-request state
 * (struct api_state in api/api.h, struct site_state in site/site.h, struct
 * admin_state in admin/admin.h); a connection's state (struct front_state,
 * app/front.c) is this tag, saying which of them is live, the API's
 * connection cache (struct api_conn), and a union of the three.
 */
enum surface {
    SURF_NONE, /* between requests: no surface state is live */
    SURF_API,
    SURF_SITE,
    SURF_ADMIN,
};

#endif
