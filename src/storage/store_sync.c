/*
 * store_sync: how the store's batches reach the disk (API: store_sync.h).
 * store.c decides what a batch holds and what its outcome means; this file
 * runs its body (write, fdatasync, the cuts after a failure, the compaction
 * steps) and hands the results back on the loop through the store's
 * store_sync_done_cb. It reads only struct store_sync and the batch.
 *
 * Two places run a body:
 *   - the loop thread itself, for a plain batch (its write, and in "always"
 *     mode its fdatasync, nothing else) while that is fast:
 *       - "always": in the idle phase that follows the loop turn that
 *         appended its frames (once the input already waiting has joined it:
 *         gathering, below), as Redis does with appendfsync always. The
 *         acknowledgements wait for that sync anyway, and doing it here saves
 *         the threadpool's hand-off (two thread switches and the wake-up of
 *         the loop per batch, on the loop's own CPU): 10-25 % of the CPU per
 *         durable write (docs/BENCHMARKS.md, issue 11).
 *       - "interval" and "never": the write alone, into the page cache, as
 *         Redis writes its AOF on the main thread with appendfsync everysec.
 *         Nobody waits for it, but the hand-off costs the loop more than the
 *         write (about 1,200 instructions per batch; one batch per request
 *         when requests come one at a time: docs/BENCHMARKS.md, issue 20).
 *     The price: while the disk syncs (or the kernel throttles a write), the
 *     loop waits (reads too), so once that gets slow the batches go to the
 *     threadpool until it is fast again.
 *   - libuv's threadpool for everything else: the periodic sync of
 *     "interval" (up to a second of writes, which must not hold up the
 *     loop), probes, cuts, compaction.
 * io_uring (linked write + fdatasync, completion on an eventfd) was measured
 * too and did not pay: its io-wq worker switches as often as the threadpool.
 */
#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "storage/logfile.h"
#include "storage/store_internal.h"

/*
 * Plain batches run on the loop while their slow part (the fdatasync in
 * "always" mode, else the write) takes less than opts.loop_sync_max_us on
 * average (--loop-sync-max-us, default 2 ms). With the
 * server on one core the loop served more durable writes at every sync time
 * measured (0.4-1.3 ms): the threadpool's hand-off costs the loop's own CPU
 * about 0.1 ms per batch, and its thread waits for that same core. What the
 * threshold buys is a bound on how long a sync holds up everything else the
 * loop serves (reads too): past it, a stalling disk only slows the writes.
 */
void store_sync_init(struct store_sync *sy, uv_loop_t *loop, const char *dir, bool always,
                     uint32_t loop_sync_max_us, store_sync_done_cb on_done, void *ctx) {
    memset(sy, 0, sizeof *sy);
    sy->loop = loop;
    sy->dir = dir;
    sy->always = always;
    sy->loop_sync_max_ns = (uint64_t)loop_sync_max_us * 1000u;
    sy->on_done = on_done;
    sy->done_ctx = ctx;
}

void store_sync_destroy(struct store_sync *sy) {
    if (sy->spare) store_batch_free(sy->spare);
    sy->spare = NULL;
    sy->closed = true;
}

struct store_batch *store_batch_new(struct store_sync *sy, enum job_kind kind) {
    struct store_batch *b = sy->spare;
    if (b) {
        /* Every field from sy on; the mutex and the condition stay set up. */
        sy->spare = NULL;
        memset(&b->sy, 0, sizeof *b - offsetof(struct store_batch, sy));
    } else {
        b = xcalloc(1, sizeof *b);
        uv_mutex_init(&b->mu);
        uv_cond_init(&b->cv);
    }
    b->req.data = b;
    b->sy = sy;
    b->kind = kind;
    b->fd = -1;
    b->compact_fd = -1;
    b->dir = sy->dir;
    return b;
}

void store_batch_release(struct store_sync *sy, struct store_batch *b) {
    if (sy->spare || sy->closed) {
        store_batch_free(b);
        return;
    }
    /* Its buffers are the store's business, and most often given back already (store.c). */
    if (b->data.cap) buf_destroy(&b->data);
    if (b->cdata.cap) buf_destroy(&b->cdata);
    if (b->commit) {
        free(b->log_path);
        free(b->compact_path);
        b->log_path = b->compact_path = NULL; /* a spare freed at close frees them again */
    }
    sy->spare = b;
}

void store_batch_free(struct store_batch *b) {
    buf_destroy(&b->data);
    buf_destroy(&b->cdata);
    free(b->log_path);
    free(b->compact_path);
    uv_mutex_destroy(&b->mu);
    uv_cond_destroy(&b->cv);
    free(b);
}

/* ---- the bodies (blocking) ---- */

/* A write (or cut, or probe) failed: whatever part of it landed goes; what came before stays. */
static void failed_write(struct store_batch *b, int err, const char *op) {
    b->err = err;
    b->err_op = op;
    b->write_failed = true;
    b->cut_err = logfile_cut(b->fd, b->start_size);
}

/* A sync failed. The page cache may hold pages the disk never got; only the
 * last durable size is known good, and the store writes again from there
 * what it still holds. */
static void failed_sync(struct store_batch *b, int err, const char *op) {
    b->err = err;
    b->err_op = op;
    if (b->sync_cut_size < b->start_size + b->data.len)
        b->cut_err = logfile_cut(b->fd, b->sync_cut_size);
}

static void log_part(struct store_batch *b) {
    int err = 0;
    const char *op = "truncate";
    if (b->cut_first) err = logfile_cut(b->fd, b->start_size);
    if (!err && b->probe) {
        err = logfile_probe(b->fd, b->start_size);
        op = "probe";
    } else if (!err) {
        err = logfile_append(b->fd, b->data.ptr, b->data.len, b->start_size);
        op = "write";
    }
    if (err) {
        failed_write(b, err, op);
        return;
    }
    if (b->sync_dir) {
        err = logfile_sync_dir(b->dir);
        op = "fsync directory of";
    }
    if (!err && b->sync) {
        uint64_t t0 = store_clock_ns();
        err = logfile_datasync(b->fd);
        b->sync_ns = store_clock_ns() - t0;
        op = "fdatasync";
    }
    if (err) failed_sync(b, err, op);
}

static void commit_part(struct store_batch *b) {
    int err = logfile_write_all(b->compact_fd, b->cdata.ptr, b->cdata.len);
    const char *op = "write";
    if (!err) {
        /* Synced before the rename, or a crash could leave a renamed empty file. */
        err = logfile_datasync(b->compact_fd);
        op = "fdatasync";
    }
    if (!err) {
        if (rename(b->compact_path, b->log_path) < 0) {
            err = -errno;
            op = "rename";
        } else {
            b->renamed = true;
        }
    }
    if (b->renamed) {
        err = logfile_sync_dir(b->dir);
        op = "fsync directory of";
        b->dir_synced = !err;
    }
    b->cerr = err;
    b->cerr_op = op;
}

static void body(struct store_batch *b) {
    if (b->kind == JOB_PREALLOC) {
        b->err = logfile_free_bytes(b->fd) < b->fill + b->keep_free
                     ? -ENOSPC
                     : logfile_zero_fill(b->log_path, b->start_size, b->fill);
    } else if (b->kind == JOB_COMPACT) {
        b->cerr = logfile_write_all(b->compact_fd, b->cdata.ptr, b->cdata.len);
        b->cerr_op = "write";
        if (!b->cerr) {
            /* Syncing slice by slice keeps the final sync (which holds up the log) short. */
            b->cerr = logfile_datasync(b->compact_fd);
            b->cerr_op = "fdatasync";
        }
    } else {
        /* The switch's own frames go to the old log first, as any batch's: until
         * the directory sync after the rename succeeds, a crash may bring back
         * the old name, and that log must hold everything acknowledged. They are
         * in the new log too (they were in the tail). A failed write or sync
         * here fails the batch and abandons the compaction, before any rename. */
        log_part(b);
        if (b->commit && !b->err) commit_part(b);
    }
}

void store_sync_run(struct store_batch *b) {
    body(b);
}

/* ---- the threadpool ---- */

static void on_work(uv_work_t *req) {
    struct store_batch *b = req->data;
    body(b);
    uv_mutex_lock(&b->mu);
    b->done = true;
    uv_cond_signal(&b->cv);
    uv_mutex_unlock(&b->mu);
}

static void on_after_work(uv_work_t *req, int status) {
    struct store_batch *b = req->data;
    (void)status; /* jobs are never cancelled */
    if (b->reaped) {
        /* store_sync_wait handed it over already: the store may be closed by now. */
        store_batch_free(b);
        return;
    }
    b->sy->on_done(b->sy->done_ctx, b, true);
    store_batch_release(b->sy, b);
}

static void queue(struct store_sync *sy, struct store_batch *b) {
    int rc = uv_queue_work(sy->loop, &b->req, on_work, on_after_work);
    if (rc) abort(); /* only fails for a NULL callback */
}

/* ---- the loop thread ---- */

/*
 * The sync time that decides is measured on the loop only: a sync on the
 * threadpool also counts the wait of its thread for a CPU the loop is busy
 * on (on one core, 0.71 ms where the loop measured 0.35), so averaging those
 * in kept batches on the threadpool once they got there, at 22 % fewer
 * requests (docs/BENCHMARKS.md). While the average is slow, one eligible
 * batch runs on the loop as a measurement every LOOP_PROBE_MS, or every
 * 100 syncs' time if longer, so a stalling disk costs the loop at most
 * about 1 % of its time.
 */
#define LOOP_PROBE_MS 100u

/*
 * A moving average over the last few loop syncs (weight 1/4), each counted as
 * at most twice the threshold: one stray slow sync (this VM's disk has 10 ms
 * ones among 0.5 ms ones) then leaves the batches on the loop, where it used
 * to send them to the threadpool for the next few probes (100 ms each; a run
 * at 64 clients had 58-88 % of its syncs on the loop); two in a row still do.
 */
uint64_t store_sync_average(uint64_t avg, uint64_t sample, uint64_t max_ns) {
    uint64_t cap = 2 * max_ns;
    return (3 * avg + (sample < cap ? sample : cap)) / 4;
}

static void note_sync_time(struct store_sync *sy, uint64_t ns) {
    if (!ns) return;
    sy->sync_ns = store_sync_average(sy->sync_ns, ns, sy->loop_sync_max_ns);
    sy->loop_sync_at = uv_now(sy->loop);
}

static bool loop_fast(const struct store_sync *sy) {
    return sy->sync_ns < sy->loop_sync_max_ns;
}

/* A plain batch (no cut, probe or rename: in "always" mode its write and sync, else its write
 * alone), while that is fast: a slow one would hold up everything else the loop serves. */
static bool on_loop(const struct store_batch *b) {
    const struct store_sync *sy = b->sy;
    if (b->kind != JOB_LOG || b->sync != sy->always || b->commit || b->probe || b->cut_first ||
        b->sync_dir)
        return false;
    if (loop_fast(sy)) return true;
    uint64_t every = sy->sync_ns / 10000u; /* 100 syncs, in ms */
    if (every < LOOP_PROBE_MS) every = LOOP_PROBE_MS;
    uint64_t now = uv_now(sy->loop);
    return sy->loop_sync_max_ns > 0 && now >= sy->loop_sync_at && now - sy->loop_sync_at >= every;
}

/* ---- the mechanism ---- */

/*
 * Gathering: a batch about to sync on the loop first lets the loop take in
 * the input that is already waiting (its epoll set is readable), so that the
 * writes in it join this sync rather than wait for it and then pay for one of
 * their own. Without it, 64 clients settle into two groups of 32 that take
 * turns, two syncs per round; with it, one sync per round (docs/BENCHMARKS.md,
 * issue 11). It waits at most the average sync time after the batch's first
 * frame, so a stream of input that never stops costs the batch at most one
 * more sync's time; the check is one poll() of the epoll fd per loop turn.
 */
bool store_sync_gathering(const struct store_sync *sy, bool batch_ready, uint64_t pending_since) {
    if (!batch_ready || !sy->always || !loop_fast(sy)) return false;
    if (store_clock_ns() - pending_since >= sy->sync_ns) return false;
    struct pollfd p = {.fd = uv_backend_fd(sy->loop), .events = POLLIN};
    return poll(&p, 1, 0) == 1;
}

void store_sync_submit(struct store_sync *sy, struct store_batch *b) {
    if (!on_loop(b)) {
        queue(sy, b);
        return;
    }
    /* Called from the idle phase ("always") or the lazy timer, after the turn that appended
     * the frames. No restart from here: the next batch is the next turn's (store_append
     * kicks it). Outside "always" the write is what is timed. */
    if (b->sync) {
        log_part(b);
        note_sync_time(sy, b->sync_ns);
        if (!b->err) sy->stats_loop_syncs++;
    } else {
        uint64_t t0 = store_clock_ns();
        log_part(b);
        note_sync_time(sy, store_clock_ns() - t0);
    }
    b->done = b->reaped = true;
    sy->on_done(sy->done_ctx, b, false);
    store_batch_release(sy, b);
}

int store_sync_wait(struct store_sync *sy, struct store_batch *b) {
    uv_mutex_lock(&b->mu);
    while (!b->done)
        uv_cond_wait(&b->cv, &b->mu);
    uv_mutex_unlock(&b->mu);
    b->reaped = true;
    /* The log part's error (a compaction batch has none: 0). */
    int err = b->err;
    sy->on_done(sy->done_ctx, b, false);
    return err;
}
