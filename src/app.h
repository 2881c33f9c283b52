/*
 * app: the service assembled: configuration, the store and its replay into
 * the index, the HTTP server wired to the handlers, signals, and online
 * compaction. main.c and the CLI subcommands drive it.
 *
 * Every change of state goes through app_put/app_delete: encode the frame,
 * append it to the log, apply it to the index. The same frames replay into
 * the same index at the next start.
 */
#ifndef EVENTD_APP_H
#define EVENTD_APP_H

#include <stdbool.h>
#include <uv.h>

#include "config.h"
#include "index.h"
#include "server.h"
#include "store.h"

struct app {
    uv_loop_t *loop;
    struct config cfg;
    struct store store;
    struct index index;
    struct server srv;
    struct buf scratch; /* frame payloads being encoded */
    uv_signal_t sig_term, sig_int, sig_usr1;
    uv_check_t check;       /* after each loop iteration: compaction due? */
    uv_idle_t compact_idle; /* drives the snapshot, one slice per loop iteration */
    uint64_t compact_next;  /* next id to snapshot */
    uint64_t compact_end;   /* ids below this are in the snapshot */
    uint64_t visible_lsn;   /* LSN of the last change the index shows */
    bool compacting;
    int compact_status; /* outcome of the last compaction: 0 or -errno */
    bool serving;
    bool store_open;
};

/*
 * Opens the data directory (taking its lock) and replays the log into the
 * index. Prints the reason on stderr and returns -1 when it cannot.
 */
int app_open(struct app *a, uv_loop_t *loop, const struct config *cfg);
/* Serves until SIGTERM/SIGINT; returns the process exit status. */
int app_serve(struct app *a);
/* Flushes and closes the store and frees the index. */
void app_close(struct app *a);

/* Appends a record (insert or replace) and applies it; takes ownership. Returns its LSN. */
uint64_t app_put(struct app *a, struct record *r);
/* Creates or replaces user id with this name and the hash of key. Returns its LSN. */
uint64_t app_put_user(struct app *a, uint64_t id, const char *name, const char *key);
/* Appends a deletion and applies it. Returns its LSN. */
uint64_t app_delete(struct app *a, uint64_t id);
/* Starts an online compaction (no-op if one runs). Returns 0 or -errno. */
int app_compact_start(struct app *a);
/* Offline compaction of an opened, not serving app: runs the loop until done. */
int app_compact_now(struct app *a);

#endif
