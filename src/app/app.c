/*
 * app: see app.h. The order of app_serve is the order of a start: listen,
 * create the demo user if the directory has no user, install the signals,
 * run the loop; SIGTERM drains the server (--drain-ms), shuts it down, then
 * the loop stops.
 */
#include "app/app.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/api.h"
#include "app/cli.h"
#include "common/log.h"
#include "storage/auth.h"

/* The store's durability mode for the --fsync setting (enum config_fsync). */
static enum store_fsync store_fsync_of(uint32_t mode) {
    switch (mode) {
    case CONFIG_FSYNC_INTERVAL:
        return STORE_FSYNC_INTERVAL;
    case CONFIG_FSYNC_NEVER:
        return STORE_FSYNC_NEVER;
    default:
        return STORE_FSYNC_ALWAYS;
    }
}

/* --sched-batch. Behind a balancer on the same CPU, a request wakes the shard
 * while the balancer still has others to pass on; under the default policy the
 * shard preempts it at once, answers the one request, and sleeps again, so both
 * switch once or twice a request. A SCHED_BATCH task is not run before its turn
 * when it wakes, so the balancer finishes its batch and the shard then reads
 * every request that came meanwhile: measured, context switches per GET fell
 * from 1.5 to 0.1 and CPU per GET by a fifth (docs/BENCHMARKS.md). The price:
 * beside a task that never sleeps, each request waits out that task's slice
 * (3.7 ms instead of 0.1), so it is off unless asked for (docker/compose.yaml
 * asks). Its share of the CPU (nice value) is unchanged. The policy is the
 * calling thread's, and threads inherit it: this runs before the store,
 * libuv's pool and every other thread start. No privilege is needed; a
 * refusal (a seccomp filter) is not fatal. */
static void set_sched_policy(const struct config *cfg) {
    if (!cfg->sched_batch) return;
    struct sched_param sp = {.sched_priority = 0};
    if (sched_setscheduler(0, SCHED_BATCH, &sp) < 0)
        LOG(LOG_WARN, "--sched-batch: cannot switch to SCHED_BATCH (%s); the default policy stays",
            strerror(errno));
}

/* For the start's log line: the policy the process runs under, which an
 * operator may also have set from outside (chrt). */
static const char *sched_policy_name(int policy) {
    switch (policy) {
    case SCHED_OTHER:
        return "default";
    case SCHED_BATCH:
        return "batch";
    case SCHED_IDLE:
        return "idle";
    case SCHED_FIFO:
        return "fifo";
    case SCHED_RR:
        return "rr";
    default:
        return "unknown";
    }
}

int app_open(struct app *a, uv_loop_t *loop, const struct config *cfg) {
    memset(a, 0, sizeof *a);
    a->loop = loop;
    a->cfg = *cfg;
    metrics_init(&a->metrics);
    log_threshold = (enum log_level)cfg->log_level;
    set_sched_policy(cfg);
    /* libuv's threadpool (4 threads unless UV_THREADPOOL_SIZE says) is shared by the
     * password hashes and the log's fdatasyncs: more than 2 hashes at once get threads
     * of their own, so the log keeps two (review, 2026-11-28: with 4, a sign-in flood
     * held creates for 60 ms). Read at the pool's first use, which is later. */
    if (cfg->pwhash_concurrency > 2 && !getenv("UV_THREADPOOL_SIZE")) {
        char n[16];
        snprintf(n, sizeof n, "%u", cfg->pwhash_concurrency + 2);
        setenv("UV_THREADPOOL_SIZE", n, 1);
    }
    if (auth_init() < 0) {
        fprintf(stderr, "eventd: libsodium failed to initialize\n");
        return -1;
    }
    struct db_settings set = app_db_settings(cfg, &a->metrics);
    char msg[512];
#ifdef EVENTD_FAULT_HOOKS
    /* Test builds: a replay that takes EVENTD_FAULT_REPLAY_PAUSE_MS longer (test_drain.py). */
    const char *pause = getenv("EVENTD_FAULT_REPLAY_PAUSE_MS");
    if (pause && *pause) {
        fprintf(stderr, "eventd: test hook: replay paused for %s ms\n", pause);
        uv_sleep((unsigned)strtoul(pause, NULL, 10));
    }
#endif
    uint64_t t0 = uv_hrtime();
    if (db_open(&a->db, loop, cfg->data_dir, &set, msg, sizeof msg) < 0) {
        fprintf(stderr, "eventd: %s\n", msg);
        return -1;
    }
    a->metrics.replay_ns = uv_hrtime() - t0;
    return 0;
}

struct db_settings app_db_settings(const struct config *cfg, struct metrics *metrics) {
    return (struct db_settings){
        .store_opts = {.fsync = store_fsync_of(cfg->fsync),
                       .fsync_interval_ms = cfg->fsync_interval_ms,
                       .max_unsynced_bytes = cfg->fsync_max_unsynced_bytes,
                       .loop_sync_max_us = cfg->loop_sync_max_us,
                       .repair = cfg->repair,
                       .retry_ms = cfg->storage_retry_ms,
                       .metrics = metrics},
        .node_id = cfg->node_id,
        .max_live_bytes = app_max_live_bytes(cfg),
        .min_free_disk = cfg->min_free_disk_bytes,
        .idem_ttl_s = cfg->idempotency_ttl_s,
    };
}

uint64_t app_max_live_bytes(const struct config *cfg) {
    if (cfg->max_live_bytes) return cfg->max_live_bytes;
    /* Half of what the process may use: the rest is for the index's tables, buffers,
     * connections and a compaction (docs/STORAGE.md). */
    uint64_t mem = uv_get_total_memory(), limit = uv_get_constrained_memory();
    if (limit && limit < mem) mem = limit;
    return mem / 2;
}

/* The data layer's acknowledgements release (or fail) the responses waiting for them. */
static void on_db_ack(void *ctx, uint64_t lsn, int status) {
    struct app *a = ctx;
    if (!a->serving) return;
    if (status == 0)
        server_acked(&a->srv, lsn);
    else
        server_fail_after(&a->srv, lsn);
}

static void flush_access_log(void *al) {
    access_log_flush(al);
}

/* A response left: count it and write its access log line. */
static void on_sent(void *ctx, const struct server_sent *s) {
    struct app *a = ctx;
    const struct http_response *r = s->r;
    metrics_observe_request(&a->metrics, r->route, r->status, s->ns);
    if (!a->alog.on) return;
    struct access_entry e = {
        .method = r->method,
        .status = r->status,
        .path = {r->path.ptr, r->path.len},
        .request_id = {r->request_id, r->request_id_len},
        .bytes = s->bytes,
        .us = s->ns / 1000,
        .user_id = r->user_id,
        .family = s->family,
        .addr = s->addr,
    };
    access_log_write(&a->alog, &e);
}

static void on_drained(struct server *srv) {
    struct app *a = (struct app *)((char *)srv - offsetof(struct app, srv));
    LOG(LOG_INFO, "shutdown: connections closed");
    uv_stop(a->loop);
}

static const char *signal_name(int signum) {
    return signum == SIGTERM ? "SIGTERM" : "SIGINT";
}

static void end_now(int signum) {
    static const char msg[] = "eventd: a signal during the stop: exiting now\n";
    ssize_t n = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)n;
    _exit(128 + signum);
}

/* Once the stop runs, the next SIGTERM or SIGINT ends the process at once
 * (status 128 + the signal's number, as a shell reports a killed one). Not
 * left to the default action, which PID 1 (a container's process) does not
 * have: there the signal would be ignored. */
static void end_on_next_signal(struct app *a) {
    uv_signal_stop(&a->sig_term); /* libuv puts back SIG_DFL; replaced below */
    uv_signal_stop(&a->sig_int);
    struct sigaction sa = {.sa_handler = end_now};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

/*
 * SIGTERM or SIGINT: the drain window first (--drain-ms: /healthz says
 * draining, so the balancer's health check takes this shard out while it
 * still serves), then the shutdown. A second signal during the window skips
 * the rest of it; once the shutdown runs, the next one ends the process at
 * once (end_on_next_signal).
 */
static void on_signal(uv_signal_t *h, int signum) {
    struct app *a = h->data;
    if (signum == SIGUSR1) {
        int rc = db_compact_start(&a->db, NULL, NULL);
        if (rc < 0) LOG(LOG_WARN, "compaction not started: %s", strerror(-rc));
        return;
    }
    if (a->srv.shutting_down) {
        /* The window ended on its own: the shutdown runs already. */
        LOG(LOG_INFO, "%s: stopping already; the next one ends the process", signal_name(signum));
        end_on_next_signal(a);
        return;
    }
    if (!server_draining(&a->srv) && a->cfg.drain_ms > 0) {
        LOG(LOG_INFO,
            "%s: draining for %u ms (/healthz answers 503 draining, every answer closes its "
            "connection; a second SIGTERM stops now), then stopping",
            signal_name(signum), a->cfg.drain_ms);
        /* The drain first: the held feed callers' answers then carry Connection: close. */
        server_drain(&a->srv, a->cfg.drain_ms, on_drained);
        changes_release(&a->handlers);
        return;
    }
    LOG(LOG_INFO, "%s: stopping%s (waiting up to %u ms for requests in flight)",
        signal_name(signum), server_draining(&a->srv) ? ", the drain cut short" : "",
        a->cfg.shutdown_timeout_ms);
    end_on_next_signal(a);
    changes_release(&a->handlers);
    server_shutdown(&a->srv, on_drained);
}

static void on_check(uv_check_t *h) {
    struct app *a = h->data;
    db_maybe_compact(&a->db, a->cfg.compact_ratio, a->cfg.compact_min_bytes);
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

/* Each module's settings, from the configuration (app.h). */
struct server_settings app_server_settings(const struct config *cfg) {
    return (struct server_settings){
        .listen = cfg->listen,
        .trusted_proxies = cfg->trusted_proxies,
        .max_header_bytes = cfg->max_header_bytes,
        .max_body_bytes = cfg->max_body_bytes,
        .max_connections = cfg->max_connections,
        .max_connections_per_address = cfg->max_connections_per_address,
        .evict_half_sent_ms = cfg->evict_half_sent_ms,
        .max_pipeline = cfg->max_pipeline,
        .max_pipeline_bytes = cfg->max_pipeline_bytes,
        .header_timeout_ms = cfg->header_timeout_ms,
        .request_timeout_ms = cfg->request_timeout_ms,
        .idle_timeout_ms = cfg->idle_timeout_ms,
        .shutdown_timeout_ms = cfg->shutdown_timeout_ms,
        .linger_ms = cfg->linger_ms,
        .linger_bytes = cfg->linger_bytes,
        .idle_sweep_ms = cfg->idle_sweep_ms,
    };
}

struct handlers_settings app_handlers_settings(const struct config *cfg, const char *secret_path) {
    return (struct handlers_settings){
        .base_path = cfg->base_path,
        .max_string_bytes = cfg->max_string_bytes,
        .max_json_depth = cfg->max_json_depth,
        .list_default = cfg->list_default,
        .list_max = cfg->list_max,
        .list_max_bytes = cfg->list_max_bytes,
        .changes_max_wait_s = cfg->changes_max_wait_s,
        .changes_max_waiters = cfg->changes_max_waiters,
        .changes_max_waiters_total = cfg->changes_max_waiters_total,
        .site = cfg->site,
        .site_path = cfg->site_path,
        .admin_on_listener = cfg->admin && cfg->admin_on_listener,
        .cookie_secure = cfg->cookie_secure,
        .password_min_bytes = cfg->password_min_bytes,
        .session_ttl_s = cfg->session_ttl_s,
        .signin_free_failures = cfg->signin_free_failures,
        .pwhash_concurrency = cfg->pwhash_concurrency,
        .pwhash_queue = cfg->pwhash_queue,
        .trusted_proxies = cfg->trusted_proxies,
        .metrics = cfg->metrics,
        .max_records_per_user = cfg->max_records_per_user,
        .max_bytes_per_user = cfg->max_bytes_per_user,
        .max_idem_keys_per_user = cfg->max_idempotency_keys_per_user,
        .max_idem_bytes = cfg->max_idempotency_bytes_per_user,
        .throttle_entries = cfg->throttle_entries,
        .auth_cache_entries = cfg->auth_cache_entries,
        .register_per_address = cfg->register_per_address,
        .register_per_minute = cfg->register_per_minute,
        .pwhash_register_queue = cfg->pwhash_register_queue,
        .site_origin = cfg->site_origin,
        .site_secret_path = secret_path,
    };
}

/*
 * stderr that a stalled reader can fill (a pipe or FIFO: a paused `| less`,
 * a log collector that stopped reading) must never block the event loop.
 * fd 2 becomes a private non-blocking open of the same pipe, so the caller's
 * description, which other processes share, keeps its mode. A full pipe then
 * refuses lines: the access log counts them (eventd_access_log_dropped_total),
 * a server log line is lost. A socket (journald's stream) cannot be opened
 * again: its description is made non-blocking. Files and terminals never fill.
 */
static void stderr_nonblocking(void) {
    struct stat st;
    if (fstat(STDERR_FILENO, &st) < 0) return;
    if (S_ISFIFO(st.st_mode)) {
        int fd = open("/proc/self/fd/2", O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        if (fd < 0 && errno == ENXIO) return; /* no reader: writes fail at once anyway */
        if (fd >= 0 && dup2(fd, STDERR_FILENO) >= 0) {
            close(fd);
            return;
        }
        if (fd >= 0) close(fd);
        /* Another user's pipe (a root supervisor's, to a server that runs as another
         * uid) cannot be opened again: its shared description becomes non-blocking,
         * which its other writers see too; a blocked loop would be worse. */
        LOG(LOG_INFO, "stderr: a pipe that cannot be opened again (%s): made non-blocking",
            strerror(errno));
    }
    if (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)) {
        int fl = fcntl(STDERR_FILENO, F_GETFL);
        if (fl >= 0) fcntl(STDERR_FILENO, F_SETFL, fl | O_NONBLOCK);
    }
}

int app_check_settings(const struct config *cfg, char *msg, size_t msg_len) {
    struct handlers_settings hs = app_handlers_settings(cfg, "");
    return front_check_settings(&hs, msg, msg_len);
}

int app_serve(struct app *a) {
    raise_fd_limit(&a->cfg);
    char secret_path[4096];
    if (a->cfg.site_secret_file[0])
        snprintf(secret_path, sizeof secret_path, "%s", a->cfg.site_secret_file);
    else
        snprintf(secret_path, sizeof secret_path, "%s/%s", a->cfg.data_dir, APP_SITE_SECRET);
    struct handlers_settings hs = app_handlers_settings(&a->cfg, secret_path);
    struct server_settings ss = app_server_settings(&a->cfg);
    struct server_handler handler;
    char msg[512];
    /* The handlers borrow the server before it starts: they use it only once requests come. */
    if (front_init(&a->handlers, a->loop, &a->db, &a->srv, &a->metrics, &hs, &handler, msg,
                   sizeof msg) < 0) {
        fprintf(stderr, "eventd: %s\n", msg);
        return 2;
    }
    int rc = server_start(&a->srv, a->loop, &ss, &handler);
    if (rc < 0) {
        fprintf(stderr, "eventd: cannot listen on %s: %s\n", a->cfg.listen, uv_strerror(rc));
        front_destroy(&a->handlers);
        return 1;
    }
    struct access_log_settings als = {.on = a->cfg.access_log,
                                      .flush_ms = a->cfg.access_log_flush_ms,
                                      .buffer_bytes = a->cfg.access_log_buffer_bytes};
    stderr_nonblocking();
    access_log_init(&a->alog, a->loop, STDERR_FILENO, &als);
    if (als.on) a->handlers.log_dropped = &a->alog.dropped;
    if (als.on) {
        /* Buffered access lines go out before any later log line, and before a crash
         * (abort, failed assert, out of memory) ends the process. */
        log_before_write(flush_access_log, &a->alog);
        access_log_catch_fatal(&a->alog);
    }
    server_on_sent(&a->srv, on_sent, a);
    if (a->cfg.admin) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", a->cfg.data_dir, APP_ADMIN_SOCKET);
        if ((rc = server_listen_local(&a->srv, path)) < 0) {
            /* The API still works; only the local admin socket (the CLI's way in) is missing. */
            LOG(LOG_WARN, "admin API: cannot listen on %s: %s (the CLI cannot reach this server)",
                path, uv_strerror(rc));
        }
    }
    a->serving = true;
    a->srv.acked_lsn = db_acked_lsn(&a->db);
    db_on_ack(&a->db, on_db_ack, a);
    if (a->cfg.demo_user) cli_demo_user(&a->db, &a->cfg, a->srv.bound);
    store_faults_rearm(); /* test builds: injected faults count from here */
    db_prealloc(&a->db, a->cfg.log_prealloc_bytes);

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
    on_check(&a->check); /* a log of format 1 is compacted (keyed) now, not at the first request */

    LOG(LOG_INFO, "eventd %s listening on %s (data %s, fsync %s, scheduling %s)", EVENTD_VERSION,
        a->srv.bound, a->cfg.data_dir,
        (const char *[]){"always", "interval", "never"}[a->cfg.fsync],
        sched_policy_name(sched_getscheduler(0)));
    uv_run(a->loop, UV_RUN_DEFAULT);

    a->serving = false;
    db_on_ack(&a->db, NULL, NULL);
    uv_close((uv_handle_t *)&a->check, NULL);
    uv_close((uv_handle_t *)&a->sig_term, NULL);
    uv_close((uv_handle_t *)&a->sig_int, NULL);
    uv_close((uv_handle_t *)&a->sig_usr1, NULL);
    signal(SIGUSR1, SIG_IGN); /* libuv restored the default, which ends the process */
    /* Password jobs still on the threadpool finish later: server_destroy tells the
     * handlers (on_server_gone), so they do not answer. */
    changes_close(&a->handlers);
    a->serving_done = true;
    server_destroy(&a->srv);
    log_before_write(NULL, NULL);
    access_log_close(&a->alog);
    if (a->cfg.admin) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", a->cfg.data_dir, APP_ADMIN_SOCKET);
        unlink(path);
    }
    return 0;
}

int app_close(struct app *a) {
    int rc = db_close(&a->db);
    /* Let every closed handle's callback run so the loop can be closed. */
    uv_run(a->loop, UV_RUN_DEFAULT);
    if (a->serving_done) front_destroy(&a->handlers);
    return rc;
}
