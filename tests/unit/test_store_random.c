/*
 * test_store_random: the store against a model, under random appends (both
 * APIs), compactions begun and committed, flushes, and injected write, fsync
 * and directory fsync failures, in every fsync mode. Then a replay must find
 * no damage (a frame under the wrong key shows as a bad checksum), every
 * acknowledged record (in interval and never: every record not reported
 * lost), and no record reported lost in always mode. Seeds SEED.. SEED+N-1
 * (default 1 and 20; written by a review, 2026-11-28, that ran 300).
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "common/log.h"
#include "scratch_dir.h"
#include "storage/store.h"
#include "storage/store_internal.h"

#define MAXID 200000
enum { ST_NONE, ST_PENDING, ST_ACKED, ST_LOST };
static uint8_t state[MAXID]; /* by lsn == id in one session */
static uint8_t seen[MAXID];
static uint64_t nids;
static int mode;
static int compact_status = 1;
static int n_ok, n_fail, n_dirunsynced, n_switch_pending;

static void on_notify(struct store *s, uint64_t lsn, int status) {
    (void)s;
    for (uint64_t i = 1; i <= nids; i++) {
        if (state[i] != ST_PENDING) continue;
        if (i <= lsn)
            state[i] = ST_ACKED;
        else if (status && mode == STORE_FSYNC_ALWAYS)
            state[i] = ST_LOST;
    }
}
static void on_compact(struct store *s, int status) {
    (void)s;
    compact_status = status;
    if (status == 0)
        n_ok++;
    else
        n_fail++;
    if (s->dir_unsynced) n_dirunsynced++;
    if (s->pending.len) n_switch_pending++;
}
static int collect(void *ctx, uint8_t type, const uint8_t *p, size_t len) {
    (void)ctx;
    (void)type;
    CHECK(len >= 8);
    uint64_t id;
    memcpy(&id, p, 8);
    CHECK(id > 0 && id < MAXID);
    seen[id] = 1;
    return 0;
}
static size_t payload(uint64_t id, uint8_t *p) {
    size_t len = 8 + (size_t)(rand() % 200);
    memcpy(p, &id, 8);
    for (size_t k = 8; k < len; k++)
        p[k] = (uint8_t)(id * 31 + k);
    return len;
}
static void arm(const char *which, int after, int times) {
    unsetenv("EVENTD_FAULT_FSYNC_AFTER");
    unsetenv("EVENTD_FAULT_WRITE_AFTER");
    unsetenv("EVENTD_FAULT_DIRSYNC_AFTER");
    unsetenv("EVENTD_FAULT_TIMES");
    if (which) {
        char a[16], t[16];
        snprintf(a, sizeof a, "%d", after);
        snprintf(t, sizeof t, "%d", times);
        setenv(which, a, 1);
        setenv("EVENTD_FAULT_TIMES", t, 1);
    }
    store_faults_rearm();
}

static void one(unsigned seed, int m) {
    srand(seed);
    mode = m;
    memset(state, 0, sizeof state);
    memset(seen, 0, sizeof seen);
    nids = 0;
    char *dir = tmpdir("rstore");
    uv_loop_t loop;
    uv_loop_init(&loop);
    struct store s;
    struct store_opts o = {.fsync = (enum store_fsync)m,
                           .fsync_interval_ms = 2,
                           .loop_sync_max_us = (rand() % 2) ? STORE_LOOP_SYNC_MAX_US : 0,
                           .retry_ms = 1};
    CHECK_EQ_INT(store_open(&s, &loop, dir, &o, on_notify), 0);
    struct store_replay_info info;
    CHECK_EQ_INT(store_replay(&s, collect, NULL, &info), STORE_REPLAY_EMPTY);
    uint8_t p[256];
    for (int step = 0; step < 400; step++) {
        int op = rand() % 100;
        if (op < 40) {
            int k = 1 + rand() % 4;
            for (int j = 0; j < k && nids + 1 < MAXID; j++) {
                uint64_t id = nids + 1;
                size_t len = payload(id, p);
                uint64_t lsn;
                if (rand() % 2) {
                    lsn = store_append(&s, 1, p, len);
                } else {
                    size_t fb;
                    struct buf *b = store_frame_begin(&s);
                    buf_append(b, p, len);
                    lsn = store_frame_end(&s, 1, &fb);
                }
                CHECK_EQ_UINT(lsn, id);
                nids = id;
                state[id] = store_is_acked(&s, lsn) ? ST_ACKED : ST_PENDING;
            }
        } else if (op < 60) {
            uv_run(&loop, UV_RUN_NOWAIT);
        } else if (op < 66) {
            if (!store_compacting(&s) && !store_failing(&s) && store_compact_begin(&s) == 0) {
                for (uint64_t i = 1; i <= nids; i++)
                    if (state[i] != ST_LOST) store_compact_add(&s, 2, p, payload(i, p));
            }
        } else if (op < 72) {
            if (store_compacting(&s) && !s.compact_committing)
                (void)store_compact_commit(&s, on_compact);
        } else if (op < 76) {
            int err = store_flush_sync(&s);
            if (err && mode == STORE_FSYNC_ALWAYS)
                for (uint64_t i = 1; i <= nids; i++)
                    if (state[i] == ST_PENDING && i > s.durable_lsn) state[i] = ST_LOST;
            if (!err)
                for (uint64_t i = 1; i <= nids; i++)
                    if (state[i] == ST_PENDING) state[i] = ST_ACKED;
        } else if (op < 82) {
            static const char *w[] = {"EVENTD_FAULT_FSYNC_AFTER", "EVENTD_FAULT_WRITE_AFTER",
                                      "EVENTD_FAULT_DIRSYNC_AFTER"};
            arm(w[rand() % 3], rand() % 4, 1 + rand() % 3);
        } else if (op < 85) {
            arm(NULL, 0, 0);
        } else {
            usleep(500 + rand() % 2500);
            uv_run(&loop, UV_RUN_NOWAIT);
        }
    }
    arm(NULL, 0, 0);
    for (int i = 0; i < 2000 && (store_failing(&s) || s.job || s.compact_job || s.pending.len ||
                                 (store_compacting(&s) && s.compact_committing));
         i++) {
        usleep(1000);
        uv_run(&loop, UV_RUN_NOWAIT);
    }
    int cerr = store_close(&s);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK_EQ_INT(uv_loop_close(&loop), 0);
    CHECK_EQ_INT(cerr, 0);

    uv_loop_init(&loop);
    CHECK_EQ_INT(store_open(&s, &loop, dir, &o, NULL), 0);
    enum store_replay_status st = store_replay(&s, collect, NULL, &info);
    if (st != STORE_REPLAY_OK) fprintf(stderr, "seed %u mode %d: %s\n", seed, m, info.message);
    CHECK_EQ_INT(st, STORE_REPLAY_OK);
    for (uint64_t i = 1; i <= nids; i++) {
        if ((state[i] == ST_ACKED || (mode != STORE_FSYNC_ALWAYS && state[i] != ST_LOST)) &&
            !seen[i]) {
            fprintf(stderr, "seed %u mode %d: id %llu (state %d) missing\n", seed, m,
                    (unsigned long long)i, state[i]);
            CHECK(0);
        }
        if (state[i] == ST_LOST && seen[i]) {
            fprintf(stderr, "seed %u mode %d: lost id %llu came back\n", seed, m,
                    (unsigned long long)i);
            CHECK(0);
        }
    }
    store_close(&s);
    uv_run(&loop, UV_RUN_DEFAULT);
    uv_loop_close(&loop);
    rmrf(dir);
}

static void test_random_operations_and_faults_against_a_model(void) {
    log_threshold = LOG_OFF;
    unsigned base = getenv("SEED") ? (unsigned)atoi(getenv("SEED")) : 1;
    unsigned n = getenv("N") ? (unsigned)atoi(getenv("N")) : 20;
    for (unsigned k = 0; k < n; k++)
        for (int m = 0; m < 3; m++)
            one(base + k, m);
    fprintf(stderr,
            "compactions ok %d failed %d, directory unsynced %d, pending at the switch %d\n", n_ok,
            n_fail, n_dirunsynced, n_switch_pending);
    /* The run reached the cases it is for. */
    CHECK(n_ok > 0 && n_fail > 0 && n_switch_pending > 0);
}

static const struct check_case cases[] = {
    CHECK_CASE(test_random_operations_and_faults_against_a_model)};
int main(int argc, char **argv) {
    return check_run(argc, argv, cases, CHECK_COUNT(cases));
}
