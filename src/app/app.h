/*
 * app: the service assembled: the configuration, the data layer (db) and
 * the HTTP server wired to the handlers, signals, and the compaction check.
 * Assembly only: the work is done by the modules it wires together. main.c
 * drives it; the CLI subcommands (cli.h) use its db.
 */
#ifndef EVENTD_APP_H
#define EVENTD_APP_H

#include <stdbool.h>
#include <uv.h>

#include "app/front.h"
#include "common/config.h"
#include "common/metrics.h"
#include "http/access_log.h"
#include "http/server.h"
#include "storage/db.h"

struct app {
    uv_loop_t *loop;
    struct config cfg; /* a copy; its strings point into argv or the environment */
    struct db db;
    struct handlers handlers;
    struct server srv;
    struct metrics metrics; /* GET /metrics; lent to the store and the handlers */
    struct access_log alog; /* one JSON line per response on stderr */
    uv_signal_t sig_term, sig_int, sig_usr1;
    uv_check_t check; /* after each loop iteration: compaction due? */
    bool serving;
    bool serving_done; /* app_serve ran: the handlers are to be destroyed */
};

#define APP_ADMIN_SOCKET "admin.sock" /* in the data directory */
#define APP_SITE_SECRET "site.key"    /* in the data directory, without --site-secret-file */

/*
 * Opens the data directory (taking its lock) and replays the log. Prints
 * the reason on stderr and returns -1 when it cannot.
 */
int app_open(struct app *a, uv_loop_t *loop, const struct config *cfg);
/* The guard's live data limit: --max-live-bytes, or for 0 half the memory eventd may use. */
uint64_t app_max_live_bytes(const struct config *cfg);
/*
 * Each module's settings from the configuration: the one place where a
 * module's settings struct is filled (docs/ARCHITECTURE.md "Settings").
 * The strings point into cfg's (they live as long as the process);
 * secret_path (the CSRF secret's file) is the caller's, read by front_init.
 */
/* The data layer's settings; metrics (borrowed by the store) may be NULL. */
struct db_settings app_db_settings(const struct config *cfg, struct metrics *metrics);
struct server_settings app_server_settings(const struct config *cfg);
struct handlers_settings app_handlers_settings(const struct config *cfg, const char *secret_path);
/* The settings a server checks before it opens its data directory (front_check_settings):
 * 0, or -1 after writing the reason to msg. */
int app_check_settings(const struct config *cfg, char *msg, size_t msg_len);
/* Serves until SIGTERM/SIGINT; returns the process exit status. */
int app_serve(struct app *a);
/*
 * Flushes and closes the data layer and runs the loop until every handle
 * closed. Returns 0, or -errno when records could not be written.
 */
int app_close(struct app *a);

#endif
