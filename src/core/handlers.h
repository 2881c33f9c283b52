/*
 * handlers: what every surface (api/, site/, admin/) is handed: the shared
 * context (struct handlers: the data layer, the server, the settings, the
 * throttles) and the per-request state. The front (app/front.c) owns both
 * and routes each request to its surface; a surface gets the request at
 * headers time (it decides whether it wants the body), its body chunks, and
 * the complete request.
 */
#ifndef EVENTD_CORE_HANDLERS_H
#define EVENTD_CORE_HANDLERS_H

#include <stdbool.h>
#include <stdint.h>

#include "common/metrics.h"
#include "common/netaddr.h"
#include "common/pwhash.h"
#include "common/throttle.h"
#include "core/account_body.h"
#include "core/json.h"
#include "core/router.h"
#include "http/server.h"
#include "storage/auth.h"
#include "storage/db.h"

/* The settings the endpoints need, copied from the configuration. */
struct handler_limits {
    const char *base_path;       /* "/v2"; must outlive the handlers (config strings do) */
    uint32_t max_string_bytes;   /* longest text field value, bytes */
    uint32_t list_default;       /* page size without ?limit */
    uint32_t list_max;           /* largest ?limit */
    uint32_t changes_max_wait_s; /* largest ?wait of the change feed, s */
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
    uint32_t throttle_entries;       /* keys per throttle table */
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
    struct db *db;           /* borrowed: outlives the server */
    struct server *srv;      /* borrowed: set by the assembly once the server exists */
    struct metrics *metrics; /* borrowed: set by the assembly (account events, /metrics); or NULL */
    struct handler_limits lim;
    struct throttle by_name, by_addr;               /* failed sign-ins */
    struct throttle reg_by_addr;                    /* registrations by client address */
    struct throttle_rate reg_rate;                  /* registrations of the whole server */
    struct signin_flight *verifying;                /* sign-ins whose password is being checked */
    struct pwhash pw;                               /* Argon2id jobs on the threadpool */
    struct net_block proxies[HANDLERS_MAX_PROXIES]; /* --trusted-proxies */
    uint32_t nproxies;
    uint8_t site_secret[32];         /* signs the pre-sign-in CSRF tokens (site_csrf.c) */
    struct changes_waiters *waiters; /* callers held by GET /v2/changes?wait (api_changes.c) */
    /* GET {base}/openapi.json (api/openapi.c): the document as served (its servers entry
     * naming the base path), and its ETag and Cache-Control lines; built by api_openapi_init */
    struct buf openapi_doc;
    char openapi_head[96];
};

enum surface { SURF_API, SURF_SITE, SURF_ADMIN };

/* Room for a crypto_generichash_state (384 bytes, 64-aligned) at any alignment. */
#define IDEM_HASH_STATE_BYTES (384 + 64)

struct req_state {
    uint8_t surface; /* enum surface */
    /* /v2 */
    struct arena arena;
    struct json_decoder dec;
    struct route route;
    /* The caller, by id: a record pointer could be freed (a rotated key, an
     * undone write) between the headers and the end of the body. */
    uint64_t user_id;
    bool decoding;
    /* A create with an Idempotency-Key: the key (validated, copied from the
     * header) and the running BLAKE2b of the request (kind, then body). The
     * hash state lives in hash_mem, aligned by idem_hash_state(). */
    bool idem;
    uint8_t idem_key_len;
    char idem_key[IDEM_KEY_MAX];
    unsigned char hash_mem[IDEM_HASH_STATE_BYTES];
    /* The Authorization header that last verified on this connection, and
     * what it verified as: a keep-alive client skips the base64 and the hash. */
    struct buf auth_seen;
    uint64_t auth_user_id;
    uint8_t auth_hash[AUTH_HASH_BYTES];
    /* account site and admin API */
    uint8_t page;  /* site.c / admin.c route */
    bool json;     /* answer JSON */
    char name[68]; /* admin: the path's username */
    /* admin on the listener: the token that let the request in (0: the
     * admin socket, no token), and its hash, checked again at completion */
    uint64_t admin_token_id;
    uint8_t admin_token_hash[AUTH_HASH_BYTES];
    struct account_body body;
};

#endif
