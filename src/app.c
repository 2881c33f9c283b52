/*
 * app: see app.h.
 *
 * Replay happens before the listener opens, so no request ever sees a
 * partial state. Online compaction snapshots the index in slices of about a
 * millisecond, one per loop turn, so the loop keeps serving; records changed
 * meanwhile also reach the new file through the store's tail copy, and the
 * last image of each record wins at replay.
 */
#include "app.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "auth.h"
#include "handlers.h"
#include "log.h"

#define COMPACT_SLICE_IDS 5000         /* ids examined per slice: about a millisecond */
#define COMPACT_MAX_BACKLOG (8u << 20) /* snapshot bytes waiting for the disk, at most */

static const char *replay_name[] = {"ok", "empty", "truncated", "corrupt", "io"};

static int replay(struct app *a) {
    struct store_replay_info info;
    memset(&info, 0, sizeof info);
    uint64_t t0 = uv_hrtime();
    enum store_replay_status st = store_replay(&a->store, index_apply, &a->index, &info);
    if (st == STORE_REPLAY_CORRUPT || st == STORE_REPLAY_IO) {
        fprintf(stderr, "eventd: %s\n", info.message[0] ? info.message : replay_name[st]);
        if (st == STORE_REPLAY_CORRUPT)
            fprintf(stderr, "eventd: start with --repair to keep the records before the damage "
                            "and move the rest aside\n");
        return -1;
    }
    index_relink(&a->index);
    double ms = (double)(uv_hrtime() - t0) / 1e6;
    LOG(LOG_INFO, "replayed %llu records (%llu bytes) in %.1f ms: %s; %zu live",
        (unsigned long long)info.records, (unsigned long long)info.bytes, ms, replay_name[st],
        a->index.count);
    return 0;
}

static void on_store_notify(struct store *s, uint64_t lsn, int status) {
    struct app *a = s->data;
    if (status == 0) {
        if (a->serving) server_acked(&a->srv, lsn);
        return;
    }
    /* The store cut the log back to what is durable; memory must follow, and
     * every response waiting for a lost write becomes a 503. */
    LOG(LOG_ERROR, "log write failed (%s): writes after LSN %llu are lost and answered 503",
        strerror(-status), (unsigned long long)lsn);
    uint64_t next_id = a->index.next_id;
    index_reset(&a->index);
    if (replay(a) < 0) LOG(LOG_ERROR, "could not rebuild the state from the log");
    /* Ids handed out to lost writes are not handed out again: their 503s named none,
     * but keeping ids monotonic costs nothing. */
    if (a->index.next_id < next_id) a->index.next_id = next_id;
    a->visible_lsn = lsn; /* memory now shows exactly what is durable */
    if (a->serving) server_fail_after(&a->srv, lsn);
}

int app_open(struct app *a, uv_loop_t *loop, const struct config *cfg) {
    memset(a, 0, sizeof *a);
    a->loop = loop;
    a->cfg = *cfg;
    log_threshold = (enum log_level)cfg->log_level;
    index_init(&a->index);
    buf_init(&a->scratch, 4096);
    if (auth_init() < 0) {
        fprintf(stderr, "eventd: libsodium failed to initialize\n");
        return -1;
    }
    struct store_opts so = {.fsync = (enum store_fsync)cfg->fsync,
                            .fsync_interval_ms = cfg->fsync_interval_ms,
                            .repair = cfg->repair};
    int rc = store_open(&a->store, loop, cfg->data_dir, &so, on_store_notify);
    if (rc == -EWOULDBLOCK) {
        fprintf(stderr, "eventd: data directory %s is in use by another eventd process\n",
                cfg->data_dir);
        return -1;
    }
    if (rc < 0) {
        fprintf(stderr, "eventd: cannot open data directory %s: %s\n", cfg->data_dir,
                strerror(-rc));
        return -1;
    }
    a->store.data = a;
    a->store_open = true;
    uv_idle_init(loop, &a->compact_idle);
    a->compact_idle.data = a;
    return replay(a);
}

uint64_t app_put(struct app *a, struct record *r) {
    buf_reset(&a->scratch);
    record_encode(r, &a->scratch);
    uint64_t lsn = store_append(&a->store, r->type, a->scratch.ptr, a->scratch.len);
    index_put(&a->index, r);
    a->visible_lsn = lsn;
    if (a->serving && store_is_acked(&a->store, lsn)) server_acked(&a->srv, lsn);
    return lsn;
}

uint64_t app_delete(struct app *a, uint64_t id) {
    uint8_t p[10];
    size_t n = store_put_varint(p, id);
    uint64_t lsn = store_append(&a->store, REC_DELETE, p, n);
    index_delete(&a->index, id);
    a->visible_lsn = lsn;
    if (a->serving && store_is_acked(&a->store, lsn)) server_acked(&a->srv, lsn);
    return lsn;
}

/* ---- compaction ---- */

static void on_compacted(struct store *s, int status) {
    struct app *a = s->data;
    a->compacting = false;
    if (status < 0)
        LOG(LOG_ERROR, "compaction failed: %s", strerror(-status));
    else
        LOG(LOG_INFO, "compaction done: log is %llu bytes", (unsigned long long)s->file_size);
    if (!a->serving) uv_stop(a->loop);
}

/*
 * One slice per loop iteration, from an idle handle: between two slices the
 * loop polls for I/O (an idle handle makes that poll not block), so requests
 * are served between slices. A zero-delay timer would not do: libuv runs a
 * timer re-armed from its own callback again in the same pass.
 */
static void compact_slice(uv_idle_t *h) {
    struct app *a = h->data;
    if (store_compact_backlog(&a->store) > COMPACT_MAX_BACKLOG) return; /* the disk is behind */
    uint64_t stop = a->compact_next + COMPACT_SLICE_IDS;
    if (stop > a->compact_end) stop = a->compact_end;
    for (uint64_t id = a->compact_next; id < stop; id++) {
        struct record *r = index_get(&a->index, id);
        if (!r) continue;
        buf_reset(&a->scratch);
        record_encode(r, &a->scratch);
        store_compact_add(&a->store, r->type, a->scratch.ptr, a->scratch.len);
    }
    a->compact_next = stop;
    if (stop < a->compact_end) return;
    uv_idle_stop(&a->compact_idle);
    int rc = store_compact_commit(&a->store, on_compacted);
    if (rc < 0) {
        LOG(LOG_ERROR, "compaction failed: %s", strerror(-rc));
        store_compact_abort(&a->store);
        a->compacting = false;
        a->compact_status = rc;
        if (!a->serving) uv_stop(a->loop);
    }
}

int app_compact_start(struct app *a) {
    if (a->compacting) return -EBUSY;
    int rc = store_compact_begin(&a->store);
    if (rc < 0) return rc;
    a->compacting = true;
    LOG(LOG_INFO, "compaction started: log %llu bytes, live data about %llu bytes",
        (unsigned long long)a->store.file_size, (unsigned long long)a->index.live_bytes);
    /* The id high-water mark first, so deleted ids are never handed out again. */
    uint8_t p[10];
    size_t n = store_put_varint(p, a->index.next_id);
    store_compact_add(&a->store, REC_NEXT_ID, p, n);
    a->compact_next = 1;
    a->compact_end = a->index.next_id;
    uv_idle_start(&a->compact_idle, compact_slice);
    return 0;
}

int app_compact_now(struct app *a) {
    int rc = app_compact_start(a);
    if (rc < 0) return rc;
    uv_run(a->loop, UV_RUN_DEFAULT);
    return 0;
}

static void maybe_compact(struct app *a) {
    if (a->compacting || a->cfg.compact_ratio <= 0) return;
    uint64_t size = a->store.file_size;
    if (size < a->cfg.compact_min_bytes) return;
    if ((double)size > a->cfg.compact_ratio * (double)(a->index.live_bytes + STORE_HEADER_SIZE))
        app_compact_start(a);
}

/* ---- serving ---- */

static void on_drained(struct server *srv) {
    struct app *a = (struct app *)((char *)srv - offsetof(struct app, srv));
    LOG(LOG_INFO, "shutdown: connections closed");
    uv_stop(a->loop);
}

static void on_signal(uv_signal_t *h, int signum) {
    struct app *a = h->data;
    if (signum == SIGUSR1) {
        int rc = app_compact_start(a);
        if (rc < 0) LOG(LOG_WARN, "compaction not started: %s", strerror(-rc));
        return;
    }
    LOG(LOG_INFO, "%s: stopping (waiting up to %u ms for requests in flight)",
        signum == SIGTERM ? "SIGTERM" : "SIGINT", a->cfg.shutdown_timeout_ms);
    uv_signal_stop(&a->sig_term);
    uv_signal_stop(&a->sig_int);
    server_shutdown(&a->srv, on_drained);
}

uint64_t app_put_user(struct app *a, uint64_t id, const char *name, const char *key) {
    uint8_t hash[AUTH_HASH_BYTES];
    auth_hash_key(key, strlen(key), hash);
    union value v[RECORD_MAX_FIELDS];
    record_defaults(&record_user, v);
    v[USER_NAME].s.ptr = name;
    v[USER_NAME].s.len = (uint32_t)strlen(name);
    v[USER_KEY_HASH].s.ptr = (const char *)hash;
    v[USER_KEY_HASH].s.len = AUTH_HASH_BYTES;
    return app_put(a, record_build(&record_user, id, 0, v));
}

static void create_demo_user(struct app *a) {
    const struct id_list *users = index_owned(&a->index, UINT64_MAX, REC_USER);
    if (users->len || !a->cfg.demo_user) return;
    char key[AUTH_KEY_CHARS + 1];
    auth_new_key(key);
    app_put_user(a, index_take_id(&a->index), "demo", key);
    int rc = store_flush_sync(&a->store);
    if (rc < 0) {
        LOG(LOG_ERROR, "could not save the demo user: %s", strerror(-rc));
        return;
    }
    /* A wildcard address is reached as localhost. */
    const char *host = a->srv.bound;
    const char *port = strrchr(host, ':');
    bool wildcard = !strncmp(host, "0.0.0.0:", 8) || !strncmp(host, "[::]:", 5);
    printf("Created user \"demo\" (no users existed). Its API key, shown only this once:\n"
           "  %s\n"
           "Try it:\n"
           "  curl -u demo:%s -H 'Cache-Control: no-cache' -d '{\"Theme\":{\"Name\":\"first\"}}' "
           "http://%s%s%s/theme\n"
           "(start with --no-demo-user to skip this)\n",
           key, key, wildcard ? "localhost" : "", wildcard ? port : host, a->cfg.base_path);
    fflush(stdout);
}

static void on_check(uv_check_t *h) {
    maybe_compact(h->data);
}

/* Every connection is a descriptor: lift the soft limit to the hard one, as
 * servers do, and say so if even that is below what --max-connections needs. */
static void raise_fd_limit(const struct config *cfg) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0) return;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
        getrlimit(RLIMIT_NOFILE, &rl);
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (rlim_t)cfg->max_connections + 64)
        LOG(LOG_WARN,
            "open-file limit %llu is below --max-connections %u (+64): raise it (ulimit -n) or "
            "lower --max-connections",
            (unsigned long long)rl.rlim_cur, cfg->max_connections);
}

int app_serve(struct app *a) {
    raise_fd_limit(&a->cfg);
    struct server_app sa;
    handlers_init(a, &sa);
    int rc = server_start(&a->srv, a->loop, &a->cfg, &sa);
    if (rc < 0) {
        fprintf(stderr, "eventd: cannot listen on %s: %s\n", a->cfg.listen, uv_strerror(rc));
        return 1;
    }
    a->serving = true;
    a->srv.acked_lsn = a->store.acked_lsn;
    create_demo_user(a);

    uv_signal_init(a->loop, &a->sig_term);
    uv_signal_init(a->loop, &a->sig_int);
    uv_signal_init(a->loop, &a->sig_usr1);
    a->sig_term.data = a->sig_int.data = a->sig_usr1.data = a;
    uv_signal_start(&a->sig_term, on_signal, SIGTERM);
    uv_signal_start(&a->sig_int, on_signal, SIGINT);
    uv_signal_start(&a->sig_usr1, on_signal, SIGUSR1);
    uv_check_init(a->loop, &a->check);
    a->check.data = a;
    uv_check_start(&a->check, on_check);

    LOG(LOG_INFO, "eventd %s listening on %s (data %s, fsync %s)", EVENTD_VERSION, a->srv.bound,
        a->cfg.data_dir, (const char *[]){"always", "interval", "never"}[a->cfg.fsync]);
    uv_run(a->loop, UV_RUN_DEFAULT);

    a->serving = false;
    uv_close((uv_handle_t *)&a->check, NULL);
    uv_close((uv_handle_t *)&a->sig_term, NULL);
    uv_close((uv_handle_t *)&a->sig_int, NULL);
    uv_close((uv_handle_t *)&a->sig_usr1, NULL);
    server_destroy(&a->srv);
    return 0;
}

void app_close(struct app *a) {
    if (a->compacting) store_compact_abort(&a->store);
    if (a->store_open) {
        uv_close((uv_handle_t *)&a->compact_idle, NULL);
        int rc = store_close(&a->store);
        if (rc < 0) LOG(LOG_ERROR, "closing the log: %s", strerror(-rc));
        a->store_open = false;
    }
    /* Let every closed handle's callback run so the loop can be closed. */
    uv_run(a->loop, UV_RUN_DEFAULT);
    index_destroy(&a->index);
    buf_destroy(&a->scratch);
}
