/*
 * store: see store.h for the API and docs/STORAGE.md for the file format.
 *
 * Two chains of jobs run, each with at most one job in flight (store_sync.c
 * runs them: a plain batch on the loop thread, the rest on the threadpool,
 * and hands each back to on_batch_done; it sees struct store_sync, never the store):
 * the log chain writes (and fdatasyncs) batches of pending frames to
 * eventd.log, the compaction chain writes snapshot and tail frames to
 * eventd.log.compact. The final compaction step (sync, rename, directory
 * fsync) runs as a log-chain job, so nothing is written to the old log while
 * the switch happens, and a log failure can never race with a rename.
 *
 * Every struct store field is touched on the loop thread only. A job body
 * touches only its struct store_batch plus immutable strings (s->dir).
 */
#include "storage/store.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/metrics.h"
#include "common/varint.h"
#include "storage/logfile.h"
#include "storage/store_internal.h"

#define COMPACT_NAME STORE_LOG_NAME ".compact"
#define LAZY_WRITE_MS 2              /* interval/never: longest wait before writing */
#define LAZY_WRITE_BYTES (64u << 10) /* ... or this much pending */
#define COMPACT_CHUNK (1u << 20)     /* compaction data is written out in slices this big */

/* ---- jobs ---- */

static void start_jobs(struct store *s);

/* The next batch would be a plain one, which may sync on the loop: nothing in flight,
 * frames pending, and no failure, cut, directory sync or compaction switch owed. */
static bool plain_batch_ready(const struct store *s) {
    return !s->job && s->pending.len && !s->failing && !s->needs_cut && !s->dir_unsynced &&
           !s->compact_committing;
}

static void on_kick(uv_idle_t *h) {
    struct store *s = h->data;
    /* Still active while gathering: the next poll does not block. */
    if (store_sync_gathering(&s->sync, plain_batch_ready(s), s->pending_since)) return;
    uv_idle_stop(h);
    start_jobs(s);
}

/*
 * Jobs are started from an idle callback, not from store_append: appends made
 * by every callback of one loop iteration then go out as one batch. An idle
 * handle (unlike a check handle) also keeps the next poll from blocking, so
 * appends made outside any callback are picked up too.
 */
static void kick(struct store *s) {
    if (!s->closing && !uv_is_active((uv_handle_t *)&s->kick)) uv_idle_start(&s->kick, on_kick);
}

static void on_lazy(uv_timer_t *t) {
    start_jobs(t->data);
}

/*
 * Outside "always" nobody waits for the disk, so small batches wait up to
 * LAZY_WRITE_MS (or until LAZY_WRITE_BYTES are pending) and go out together:
 * one write (or, while the loop's writes are slow, one threadpool round
 * trip) per few hundred records instead of one per loop turn. A crash of the
 * process loses at most that much more than the page cache would keep; the
 * durability promise of these modes (the fsync interval) is unchanged.
 */
static void kick_lazily(struct store *s) {
    if (s->opts.fsync == STORE_FSYNC_ALWAYS || s->pending.len >= LAZY_WRITE_BYTES) {
        kick(s);
    } else if (!uv_is_active((uv_handle_t *)&s->lazy_timer)) {
        uv_timer_start(&s->lazy_timer, on_lazy, LAZY_WRITE_MS, 0);
    }
}

void store_sync_soon(struct store *s) {
    s->sync_wanted = true;
    if (!s->job) kick(s);
}

static void on_interval(uv_timer_t *t) {
    struct store *s = t->data;
    /* A job in flight may be writing unsynced data too: the next job syncs it. */
    if (s->file_size > s->durable_size || s->job) {
        s->sync_wanted = true;
        start_jobs(s);
    }
}

/* Interval mode: one sync at most fsync_interval_ms after data was written
 * unsynced. A one-shot timer, so an idle server does not wake up. */
static void arm_timer(struct store *s) {
    if (s->opts.fsync == STORE_FSYNC_INTERVAL && s->file_size > s->durable_size &&
        !uv_is_active((uv_handle_t *)&s->interval_timer))
        uv_timer_start(&s->interval_timer, on_interval, s->opts.fsync_interval_ms, 0);
}

/* Closes and removes the compaction file, or marks it for that once its job lands. */
static void compact_drop(struct store *s, int status, store_compact_cb *cb, int *cb_status) {
    if (s->compact_fd < 0) return;
    if (s->compact_job) {
        if (!s->compact_cancel) s->compact_cancel = status;
        return;
    }
    char *path = logfile_path(s->dir, COMPACT_NAME);
    close(s->compact_fd);
    unlink(path);
    free(path);
    s->compact_fd = -1;
    s->compact_size = 0;
    s->compact_cancel = 0;
    s->compact_committing = false;
    s->compact_dropped = status; /* what store_compact_commit reports when it comes later */
    buf_reset(&s->compact_buf);
    if (s->on_compact) {
        *cb = s->on_compact;
        *cb_status = status;
        s->on_compact = NULL;
    }
}

/* The retry timer: while failing, start_jobs waits for it. */
static void on_retry(uv_timer_t *t) {
    struct store *s = t->data;
    s->retry_due = true;
    start_jobs(s);
}

/* A batch failed: log the episode once, and retry after opts.retry_ms. */
static void episode_fail(struct store *s, const struct store_batch *b) {
    s->fail_count++;
    if (!s->failing) {
        s->failing = b->err;
        s->fail_since = uv_now(s->loop);
        LOG(LOG_ERROR,
            "store: %s %s/%s failed: %s; %s; retrying every %u ms, writes answer 503 meanwhile",
            b->err_op, s->dir, STORE_LOG_NAME, strerror(-b->err),
            s->opts.fsync == STORE_FSYNC_ALWAYS
                ? "the writes of the failed batch were not saved"
                : "acknowledged records are kept in memory until the disk takes them",
            s->opts.retry_ms);
    }
    s->retry_due = false;
    uv_timer_start(&s->retry_timer, on_retry, s->opts.retry_ms, 0);
}

static void episode_end(struct store *s) {
    if (!s->failing) return;
    LOG(LOG_WARN,
        "store: storage recovered after %" PRIu64
        " failed attempts in %.1f s: %s/%s takes writes again",
        s->fail_count, (double)(uv_now(s->loop) - s->fail_since) / 1000.0, s->dir, STORE_LOG_NAME);
    s->failing = 0;
    s->fail_count = 0;
    s->retry_due = false;
    uv_timer_stop(&s->retry_timer);
}

/* Puts frames that must be written again in front of what is pending. */
static void pending_prepend(struct store *s, const struct buf *a, const struct buf *b) {
    struct buf keep = BUF_INIT;
    if (a) buf_append(&keep, a->ptr, a->len);
    if (b) buf_append(&keep, b->ptr, b->len);
    buf_append(&keep, s->pending.ptr, s->pending.len);
    buf_destroy(&s->pending);
    s->pending = keep;
}

/*
 * A batch failed. In "always" nothing after the last durable LSN was
 * acknowledged: it is dropped and reported lost. In "interval" and "never"
 * it may have been acknowledged, so every frame stays in memory and is
 * written again by the retries: after a failed sync, every frame since the
 * last good one (kept in unsynced), since the kernel may have dropped their
 * pages unwritten and a later sync would succeed without them. needs_cut
 * says that the file could not be cut back; until it is, nothing more is
 * written.
 */
static void fail(struct store *s, struct store_batch *b, store_compact_cb *cb, int *cb_status) {
    s->needs_cut = b->cut_err != 0;
    store_prealloc_forget(s);
    s->sync_wanted = false;
    uv_timer_stop(&s->interval_timer);
    if (s->opts.fsync == STORE_FSYNC_ALWAYS) {
        s->file_size = s->durable_size;
        s->written_lsn = s->acked_lsn = s->durable_lsn;
        buf_reset(&s->pending);
        s->mark_size = STORE_HEADER_SIZE; /* the dropped frames may have held the last mark */
        if (s->mark_end > s->durable_size) s->mark_end = 0; /* ... so a close marks again */
        s->pending_lsn = s->appended_lsn;
    } else {
        uint64_t last = s->pending.len ? s->pending_lsn : b->last_lsn;
        if (b->write_failed) {
            pending_prepend(s, NULL, &b->data);
        } else if (b->sync_cut_size < b->start_size + b->data.len) {
            /* The failed sync cut the file back to its durable size (a probe, with
             * nothing written since the last good sync, cuts nothing). */
            pending_prepend(s, &s->unsynced, &b->data);
            buf_reset(&s->unsynced);
            s->file_size = s->durable_size;
            s->written_lsn = s->durable_lsn;
        }
        if (s->pending.len) s->pending_lsn = last;
    }
    /* The snapshot may hold records that were just lost, or not yet written. */
    compact_drop(s, b->err, cb, cb_status);
    episode_fail(s, b);
}

/*
 * A batch's first frame is about to go into pending: in front of it, the sync
 * mark (STORE_FRAME_SYNCED) saying how much of the log is durable, when that
 * grew since the last mark. In "always" mode that is every batch (one frame of
 * 10-13 bytes); in "interval" and "never" mark_after_sync writes the marks, and
 * a batch starts with one only when none followed the last sync (after a
 * start, or a failed batch). store_close writes the last one. Replay takes a lost
 * sector with intact frames after it for the unsynced tail of a crash unless a
 * later mark says the log was durable past it (store_replay.c). Not while the
 * compaction's switch holds the writes: they go to the new file, where this
 * file's offsets mean nothing (switch_log starts its marks afresh). Marks carry
 * no LSN and never reach the compaction's tail: only the file they describe.
 */
static void put_sync_mark(struct store *s) {
    if (s->log_version < STORE_VERSION_MARKS || s->durable_size <= s->mark_size || s->switching)
        return;
    uint64_t at = s->file_size + (s->job ? s->job->data.len : 0) + s->pending.len;
    /* A mark has no LSN: a batch of marks alone covers no more LSNs than went before. */
    if (!s->pending.len) s->pending_lsn = s->job ? s->job->last_lsn : s->written_lsn;
    uint8_t *f = (uint8_t *)buf_reserve(&s->pending, STORE_FRAME_HEADER_SIZE + VARINT_MAX);
    size_t n = varint_put(f + STORE_FRAME_HEADER_SIZE, s->durable_size);
    logfile_frame_seal(f, s->frame_key, STORE_FRAME_SYNCED, n);
    buf_commit(&s->pending, STORE_FRAME_HEADER_SIZE + n);
    s->mark_size = s->durable_size;
    s->mark_end = at + STORE_FRAME_HEADER_SIZE + n;
}

/*
 * "interval" and "never", after a sync (or a compaction's switch) that made
 * more than marks durable: a mark of its own, written like any frame (the
 * next interval's sync takes it; "never": the kernel's write-back), so that
 * what the sync covered is under a mark even when no write follows. Without
 * it, a sector an idle log lost later would pass for the unsynced tail. A
 * sync of that mark alone adds none, so an idle server stays idle. "always"
 * needs none: its next batch starts with one, and its close writes one.
 */
static void mark_after_sync(struct store *s) {
    if (s->opts.fsync == STORE_FSYNC_ALWAYS || s->closing || s->durable_size <= s->mark_end) return;
    if (!s->pending.len) s->pending_since = store_clock_ns();
    put_sync_mark(s);
    kick_lazily(s);
}

static void log_done(struct store *s, struct store_batch *b) {
    s->file_size += b->data.len;
    s->written_lsn = b->last_lsn;
    s->needs_cut = false;
    if (b->sync) {
        s->durable_size = s->file_size;
        s->durable_lsn = b->last_lsn;
        s->stats_syncs++;
        metrics_observe_fsync(s->opts.metrics, b->sync_ns);
        if (b->sync_dir) s->dir_unsynced = false;
        buf_reset(&s->unsynced);
    } else if (s->opts.fsync != STORE_FSYNC_ALWAYS) {
        /* Kept until synced: a failed sync writes it again. Bounded: reaching
         * max_unsynced_bytes makes the next job sync (in "never" too). */
        buf_append(&s->unsynced, b->data.ptr, b->data.len);
        if (s->unsynced.len >= s->opts.max_unsynced_bytes) {
            s->sync_wanted = true;
            kick(s);
        }
    }
    episode_end(s);
    if (s->opts.fsync == STORE_FSYNC_ALWAYS) s->acked_lsn = s->durable_lsn;
    s->stats_batches++;
    if (b->sync) mark_after_sync(s);
    arm_timer(s);
}

static void on_old_log_closed(uv_fs_t *req) {
    uv_fs_req_cleanup(req);
    free(req);
}

/* The commit job renamed eventd.log.compact over eventd.log: it is the log now. */
static void switch_log(struct store *s, struct store_batch *b) {
    /* The replaced log's last close frees all its blocks, which takes tens of
     * milliseconds for a big file: do it on the threadpool, not the loop. */
    uv_fs_t *req = xmalloc(sizeof *req);
    if (uv_fs_close(s->loop, req, s->fd, on_old_log_closed) < 0) {
        free(req);
        close(s->fd);
    }
    s->fd = b->compact_fd;
    s->compact_fd = -1;
    store_prealloc_forget(s);
    /* The writes held during the switch go to the new log: with its key. */
    logfile_frames_rekey((uint8_t *)s->pending.ptr, s->pending.len, s->frame_key, s->compact_key);
    s->frame_key = s->compact_key;
    s->log_version = STORE_VERSION;
    s->mark_size = STORE_HEADER_SIZE; /* its first batch says how much of it is durable */
    s->mark_end = 0;
    uint64_t size = s->compact_size + b->cdata.len;
    s->file_size = s->durable_size = size;
    s->written_lsn = s->durable_lsn = b->last_lsn;
    if (s->acked_lsn < s->durable_lsn) s->acked_lsn = s->durable_lsn;
    /* The copy of the old log's unsynced frames: the new log holds them,
     * synced. Kept, a failed sync would write them again after newer frames. */
    buf_reset(&s->unsynced);
    s->compact_size = 0;
    s->compact_committing = false;
    s->stats_batches++;
    s->stats_syncs++;
    if (!b->dir_synced) {
        /* The data is synced; only the new name may not be. Retry with the next sync. */
        s->dir_unsynced = true;
        s->sync_wanted = true;
    }
    LOG(LOG_INFO, "store: compacted %s/%s to %" PRIu64 " bytes", s->dir, STORE_LOG_NAME, size);
    mark_after_sync(s);
}

static void recycle(struct store *s, struct store_batch *b) {
    /* Reusing the buffer keeps a busy server off the heap. */
    if (!s->spare.cap && b->data.cap) {
        s->spare = b->data;
        buf_reset(&s->spare);
        b->data = (struct buf)BUF_INIT;
    }
}

/* Applies a job's results on the loop; restart starts the next jobs. Returns
 * the log part's -errno (0 for compaction jobs). */
static int job_finish(struct store *s, struct store_batch *b, bool restart) {
    store_compact_cb ccb = NULL;
    int cstatus = 0, err = 0;

    if (b->kind == JOB_PREALLOC) {
        store_prealloc_done(s, b);
    } else if (b->kind == JOB_COMPACT) {
        s->compact_job = NULL;
        if (b->cerr) {
            LOG(LOG_ERROR, "store: %s %s/%s failed: %s; compaction abandoned", b->cerr_op, s->dir,
                COMPACT_NAME, strerror(-b->cerr));
            compact_drop(s, b->cerr, &ccb, &cstatus);
        } else {
            s->compact_size += b->cdata.len;
            if (s->compact_cancel) compact_drop(s, s->compact_cancel, &ccb, &cstatus);
        }
    } else {
        s->job = NULL;
        if (b->commit) {
            s->switching = false;
            if (b->renamed) {
                switch_log(s, b);
                /* Done: the new log is in use. Only its name's sync may be owed (switch_log). */
                ccb = s->on_compact;
                s->on_compact = NULL;
                if (b->cerr)
                    LOG(LOG_ERROR, "store: %s %s failed: %s; will retry", b->cerr_op, s->dir,
                        strerror(-b->cerr));
            } else if (b->cerr) {
                LOG(LOG_ERROR, "store: %s %s/%s failed: %s; compaction abandoned", b->cerr_op,
                    s->dir, COMPACT_NAME, strerror(-b->cerr));
                compact_drop(s, b->cerr, &ccb, &cstatus);
            } /* else the log part failed first: fail() abandons the compaction */
        }
        if (!b->renamed) {
            if (b->err) {
                err = b->err;
                fail(s, b, &ccb, &cstatus);
            } else {
                log_done(s, b);
            }
        }
        recycle(s, b);
    }
    if (restart && !s->closing) start_jobs(s);
    /* Callbacks last: the state is consistent and they may append or replay. */
    if (ccb) ccb(s, cstatus);
    if (b->kind == JOB_LOG && s->on_notify) s->on_notify(s, s->acked_lsn, err);
    return err;
}

/* The sync path's store_sync_done_cb: a batch's body has run. */
static void on_batch_done(void *ctx, struct store_batch *b, bool restart) {
    job_finish(ctx, b, restart);
}

/* A frame being encoded in pending (store_frame_begin) must be sealed before anything
 * else appends or takes pending: else a batch would carry an unsealed header, and replay
 * would cut the log there. Checked in every build (not an assert: NDEBUG drops those). */
static void frame_closed(const struct store *s) {
    if (s->frame_open) {
        LOG(LOG_ERROR, "store: a frame is still being encoded: stopping");
        abort();
    }
}

static void take_pending(struct store *s, struct store_batch *b) {
    frame_closed(s);
    b->fd = s->fd;
    b->last_lsn = s->pending.len ? s->pending_lsn : s->written_lsn;
    b->data = s->pending;
    s->pending = s->spare;
    s->spare = (struct buf)BUF_INIT;
    b->start_size = s->file_size;
    b->cut_first = s->needs_cut;
    /* A failed sync cuts the file back to what is durable: after the error the kernel
     * may have dropped the pages since, marked clean, so they are never written back and
     * read as written only until evicted. "interval" and "never" keep those frames in
     * memory (unsynced), and the retries write them again. */
    b->sync_cut_size = s->durable_size;
    b->sync = s->opts.fsync == STORE_FSYNC_ALWAYS || s->sync_wanted || s->dir_unsynced;
    b->sync_dir = s->dir_unsynced;
    /* A retry proves the disk works again: it syncs, and with nothing to write
     * it asks the disk whether it would take some. */
    b->probe = s->failing && !b->data.len;
    if (s->failing) b->sync = true;
    s->sync_wanted = false;
}

static void start_jobs(struct store *s) {
    if (s->compact_fd >= 0 && !s->switching && !s->compact_job && !s->compact_cancel &&
        s->compact_buf.len >= COMPACT_CHUNK) {
        struct store_batch *b = store_batch_new(&s->sync, JOB_COMPACT);
        b->compact_fd = s->compact_fd;
        b->cdata = s->compact_buf;
        s->compact_buf = (struct buf)BUF_INIT;
        s->compact_job = b;
        store_sync_submit(&s->sync, b);
    }
    if (s->job) return;
    /* While the disk refuses writes, only the retry timer starts the next attempt. */
    if (s->failing && !s->retry_due) return;
    struct store_batch *b;
    bool commit =
        s->compact_fd >= 0 && s->compact_committing && !s->compact_job && !s->compact_cancel;
    if (store_prealloc_blocks(s, commit)) return;
    if (commit) {
        /* The switch: the log chain is idle, so every frame appended so far is
         * either on disk in the old log or in this job, and also in the tail. */
        b = store_batch_new(&s->sync, JOB_LOG);
        take_pending(s, b);
        b->commit = true;
        b->compact_fd = s->compact_fd;
        b->cdata = s->compact_buf;
        s->compact_buf = (struct buf)BUF_INIT;
        b->log_path = logfile_path(s->dir, STORE_LOG_NAME);
        b->compact_path = logfile_path(s->dir, COMPACT_NAME);
        s->switching = true;
    } else if (s->pending.len || s->sync_wanted || s->failing || s->needs_cut) {
        b = store_batch_new(&s->sync, JOB_LOG);
        take_pending(s, b);
        s->retry_due = false;
    } else {
        store_prealloc_start(s);
        return;
    }
    s->job = b;
    store_sync_submit(&s->sync, b);
    /* A plain batch may have run on the loop already: s->job is its successor or NULL. */
    store_prealloc_start(s);
}

/* ---- open, append, flush, close ---- */

int store_open(struct store *s, uv_loop_t *loop, const char *dir, const struct store_opts *opts,
               store_notify_cb on_notify) {
    memset(s, 0, sizeof *s);
    s->loop = loop;
    s->dir = xstrdup(dir);
    if (opts) {
        s->opts = *opts;
    } else {
        s->opts.fsync = STORE_FSYNC_ALWAYS;
        s->opts.fsync_interval_ms = 1000;
        s->opts.loop_sync_max_us = STORE_LOOP_SYNC_MAX_US;
    }
    if (!s->opts.fsync_interval_ms) s->opts.fsync_interval_ms = 1;
    if (!s->opts.max_unsynced_bytes) s->opts.max_unsynced_bytes = STORE_MAX_UNSYNCED_BYTES;
    if (!s->opts.retry_ms) s->opts.retry_ms = 1000;
    s->on_notify = on_notify;
    s->lock_fd = s->fd = s->compact_fd = -1;

    char *path = NULL;
    int err = logfile_mkdir_p(dir);
    if (err) goto fail;

    path = logfile_path(dir, "LOCK");
    s->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (s->lock_fd < 0) {
        err = -errno;
        goto fail;
    }
    /* flock, not fcntl locks: it belongs to this open file, so even a second
     * store_open in the same process is refused. */
    if (flock(s->lock_fd, LOCK_EX | LOCK_NB) < 0) {
        err = errno == EWOULDBLOCK ? -EWOULDBLOCK : -errno;
        goto fail;
    }
    free(path);

    /* A compaction or a --repair rewrite that was interrupted is simply forgotten:
     * until its rename, the log it would have replaced is the log. */
    static const char *const unfinished[] = {COMPACT_NAME, STORE_REPAIR_NAME};
    for (size_t i = 0; i < 2; i++) {
        path = logfile_path(dir, unfinished[i]);
        if (unlink(path) == 0) LOG(LOG_INFO, "store: removed an unfinished %s", path);
        free(path);
    }

    path = logfile_path(dir, STORE_LOG_NAME);
    s->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (s->fd < 0) {
        err = -errno;
        goto fail;
    }
    free(path);

    uv_timer_init(loop, &s->interval_timer);
    s->interval_timer.data = s;
    uv_timer_init(loop, &s->lazy_timer);
    s->lazy_timer.data = s;
    uv_idle_init(loop, &s->kick);
    s->kick.data = s;
    /* Unreferenced: a failing store alone does not keep a CLI's loop running. */
    uv_timer_init(loop, &s->retry_timer);
    s->retry_timer.data = s;
    uv_unref((uv_handle_t *)&s->retry_timer);
    store_sync_init(&s->sync, loop, s->dir, s->opts.fsync == STORE_FSYNC_ALWAYS,
                    s->opts.loop_sync_max_us, on_batch_done, s);
    return 0;

fail:
    free(path);
    if (s->fd >= 0) close(s->fd);
    if (s->lock_fd >= 0) close(s->lock_fd);
    free(s->dir);
    s->dir = NULL;
    s->fd = s->lock_fd = -1;
    return err;
}

/* The frame of n bytes at f, now in pending, is appended: its LSN. */
static uint64_t appended(struct store *s, const uint8_t *f, size_t n) {
    if (s->compact_fd >= 0 && !s->switching && !s->compact_cancel) {
        /* The copy in the compaction file carries that file's key. */
        size_t at = s->compact_buf.len;
        buf_append(&s->compact_buf, f, n);
        logfile_frames_rekey((uint8_t *)s->compact_buf.ptr + at, n, s->frame_key, s->compact_key);
    }
    uint64_t lsn = ++s->appended_lsn;
    s->pending_lsn = lsn;
    if (s->opts.fsync != STORE_FSYNC_ALWAYS) s->acked_lsn = lsn;
    if (!s->job) kick_lazily(s);
    return lsn;
}

uint64_t store_append(struct store *s, uint8_t type, const void *payload, size_t len) {
    assert(len <= STORE_MAX_PAYLOAD);
    frame_closed(s);
    size_t n = STORE_FRAME_HEADER_SIZE + len;
    if (!s->pending.len) {
        s->pending_since = store_clock_ns();
        put_sync_mark(s);
    }
    uint8_t *f = (uint8_t *)buf_reserve(&s->pending, n);
    logfile_frame_put(f, s->frame_key, type, payload, len);
    buf_commit(&s->pending, n);
    return appended(s, f, n);
}

struct buf *store_frame_begin(struct store *s) {
    frame_closed(s);
    s->frame_open = true;
    if (!s->pending.len) {
        s->pending_since = store_clock_ns();
        put_sync_mark(s);
    }
    s->frame_at = s->pending.len;
    buf_reserve(&s->pending, STORE_FRAME_HEADER_SIZE);
    buf_commit(&s->pending, STORE_FRAME_HEADER_SIZE); /* the header, sealed by store_frame_end */
    return &s->pending;
}

uint64_t store_frame_end(struct store *s, uint8_t type, size_t *frame_bytes) {
    size_t n = s->pending.len - s->frame_at;
    if (!s->frame_open || n - STORE_FRAME_HEADER_SIZE > STORE_MAX_PAYLOAD) {
        LOG(LOG_ERROR, "store: a frame of %zu bytes sealed%s: stopping", n,
            s->frame_open ? "" : " without store_frame_begin");
        abort();
    }
    s->frame_open = false;
    uint8_t *f = (uint8_t *)s->pending.ptr + s->frame_at;
    logfile_frame_seal(f, s->frame_key, type, n - STORE_FRAME_HEADER_SIZE);
    *frame_bytes = n;
    return appended(s, f, n);
}

int store_flush_sync(struct store *s) {
    frame_closed(s);
    /* Its zeros may go where this writes: let it finish first (store_prealloc_blocks). */
    if (s->prealloc_job) store_sync_wait(&s->sync, s->prealloc_job);
    /* A batch in flight that fails loses what was appended after it too. */
    if (s->job) {
        int err = store_sync_wait(&s->sync, s->job);
        if (err) return err;
    }
    if (s->fd < 0) return -EBADF;
    if (!s->pending.len && s->file_size == s->durable_size && !s->dir_unsynced && !s->needs_cut &&
        !s->failing)
        return 0;
    /* The same steps as a threadpool job, run here and now. */
    struct store_batch *b = store_batch_new(&s->sync, JOB_LOG);
    take_pending(s, b);
    b->sync = true;
    b->done = b->reaped = true;
    s->job = b;
    store_sync_run(b);
    int err = job_finish(s, b, true);
    store_batch_release(&s->sync, b);
    return err;
}

int store_close(struct store *s) {
    if (!s->dir) return 0;
    s->closing = true;
    if (s->job) store_sync_wait(&s->sync, s->job);
    if (s->compact_job) store_sync_wait(&s->sync, s->compact_job);
    store_compact_cb ccb = NULL;
    int cstatus = 0;
    compact_drop(s, -ECANCELED, &ccb, &cstatus);
    if (ccb) ccb(s, cstatus);

    int err = store_flush_sync(s);
    if (err && s->opts.fsync != STORE_FSYNC_ALWAYS && s->pending.len) {
        /* As the retry timer would: the failed sync cut the file back to the last good
         * one, and pending holds every frame since; one more attempt writes them. */
        err = store_flush_sync(s);
    }
    if (!err && s->log_version >= STORE_VERSION_MARKS && s->durable_size > s->mark_end) {
        /* A last mark, synced: at rest, every frame is under one, so a sector the
         * disk loses later is damage (store_replay.c), not an unsynced tail. */
        put_sync_mark(s);
        err = store_flush_sync(s);
    }
    if (err && s->pending.len)
        LOG(LOG_ERROR, "store: %zu bytes of records could not be written to %s/%s: %s",
            s->pending.len, s->dir, STORE_LOG_NAME, strerror(-err));
    else
        err = 0; /* nothing appended is lost ("always" answered 503 for what failed) */
    store_prealloc_cut(s);
    uv_timer_stop(&s->interval_timer);
    uv_timer_stop(&s->lazy_timer);
    uv_timer_stop(&s->retry_timer);
    uv_idle_stop(&s->kick);
    uv_close((uv_handle_t *)&s->interval_timer, NULL);
    uv_close((uv_handle_t *)&s->lazy_timer, NULL);
    uv_close((uv_handle_t *)&s->retry_timer, NULL);
    uv_close((uv_handle_t *)&s->kick, NULL);
    if (s->fd >= 0) close(s->fd);
    if (s->lock_fd >= 0) close(s->lock_fd); /* releases the flock */
    s->fd = s->lock_fd = -1;
    buf_destroy(&s->pending);
    buf_destroy(&s->spare);
    buf_destroy(&s->unsynced);
    buf_destroy(&s->compact_buf);
    store_sync_destroy(&s->sync);
    free(s->dir);
    s->dir = NULL;
    return err;
}

/* ---- compaction ---- */

int store_compact_begin(struct store *s) {
    if (s->compact_fd >= 0) return -EBUSY;
    if (s->closing || s->fd < 0) return -EINVAL;
    char *path = logfile_path(s->dir, COMPACT_NAME);
    /* O_RDWR: after the rename this is the log fd. Not O_APPEND: the log's frames are
     * written at its end with pwrite, which O_APPEND would send past the zeros. */
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int err = fd < 0 ? -errno : 0;
    free(path);
    if (err) return err;
    s->compact_fd = fd;
    s->compact_size = 0;
    s->compact_cancel = 0;
    s->compact_dropped = 0;
    s->compact_committing = false;
    s->on_compact = NULL;
    s->compact_key = logfile_new_key();
    buf_reset(&s->compact_buf);
    uint8_t h[STORE_HEADER_SIZE];
    logfile_header_put(h, STORE_VERSION, s->compact_key);
    buf_append(&s->compact_buf, h, sizeof h);
    return 0;
}

void store_compact_add(struct store *s, uint8_t type, const void *payload, size_t len) {
    if (s->compact_fd < 0 || s->compact_cancel) return; /* aborted meanwhile */
    assert(!s->compact_committing);
    assert(len <= STORE_MAX_PAYLOAD);
    size_t n = STORE_FRAME_HEADER_SIZE + len;
    logfile_frame_put((uint8_t *)buf_reserve(&s->compact_buf, n), s->compact_key, type, payload,
                      len);
    buf_commit(&s->compact_buf, n);
    if (s->compact_buf.len >= COMPACT_CHUNK && !s->compact_job) kick(s);
}

int store_compact_commit(struct store *s, store_compact_cb cb) {
    if (s->compact_fd < 0) return s->compact_dropped ? s->compact_dropped : -EINVAL;
    if (s->compact_cancel) return -ECANCELED;
    if (s->compact_committing) return -EBUSY;
    s->compact_committing = true;
    s->on_compact = cb;
    kick(s);
    return 0;
}

void store_compact_abort(struct store *s) {
    if (s->compact_fd < 0 || s->switching) return;
    store_compact_cb ccb = NULL;
    int cstatus = 0;
    compact_drop(s, -ECANCELED, &ccb, &cstatus);
    if (ccb) ccb(s, cstatus);
}
