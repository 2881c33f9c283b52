/*
 * store: see store.h for the API and docs/STORAGE.md for the file format.
 *
 * Two chains of threadpool jobs run, each with at most one job in flight:
 * the log chain writes (and fdatasyncs) batches of pending frames to
 * eventd.log, the compaction chain writes snapshot and tail frames to
 * eventd.log.compact. The final compaction step (sync, rename, directory
 * fsync) runs as a log-chain job, so nothing is written to the old log while
 * the switch happens, and a log failure can never race with a rename.
 *
 * Every struct store field is touched on the loop thread only. A job body
 * touches only its struct store_batch plus immutable strings (s->dir).
 */
#include "store.h"

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

#include "crc32c.h"
#include "log.h"

#define COMPACT_NAME STORE_LOG_NAME ".compact"
#define DAMAGED_NAME STORE_LOG_NAME ".damaged-"
#define READ_CHUNK (4u << 20)        /* replay reads this much per pread */
#define LAZY_WRITE_MS 2              /* interval/never: longest wait before writing */
#define LAZY_WRITE_BYTES (64u << 10) /* ... or this much pending */
#define COMPACT_CHUNK (1u << 20)     /* compaction data is written out in slices this big */

enum job_kind { JOB_LOG, JOB_COMPACT };

struct store_batch {
    uv_work_t req;
    struct store *s; /* read on the loop thread only */
    enum job_kind kind;
    /* done/cv let store_flush_sync wait for the body without running the loop,
     * which it may not do: it is called from loop callbacks. */
    uv_mutex_t mu;
    uv_cond_t cv;
    bool done;   /* the body has returned its results */
    bool reaped; /* finished on the loop already; the after-work callback only frees */
    /* log part */
    int fd;
    struct buf data;       /* frames for eventd.log */
    uint64_t last_lsn;     /* LSN of the last frame in data, or the last one written */
    uint64_t durable_size; /* bytes: where a failure cuts the log back to */
    bool sync;             /* fdatasync after the write */
    bool sync_dir;         /* fsync the directory first (retrying a compaction rename) */
    /* compaction part */
    int compact_fd;
    struct buf cdata; /* frames for eventd.log.compact */
    bool commit;      /* then fdatasync it, rename it over eventd.log, fsync the dir */
    const char *dir;
    char *log_path;
    char *compact_path;
    /* results */
    int err; /* log part, -errno */
    const char *err_op;
    int cut_err; /* the cut back after a failure, -errno */
    int cerr;    /* compaction part, -errno */
    const char *cerr_op;
    bool renamed;
    bool dir_synced;
};

/* EVENTD_FAULT_FSYNC_AFTER=N (a test hook): data syncs after the first N fail with EIO. */
static long fault_after = -1;
static long fault_count;

static inline void put_le32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static inline uint32_t get_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static char *path_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + 1 + strlen(name) + 1;
    char *p = xmalloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static int write_all(int fd, const void *ptr, size_t len) {
    const char *p = ptr;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (n == 0) return -EIO; /* cannot happen on a regular file; do not spin */
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* fdatasync for appended data and compaction files: the only syncs the fault hook hits. */
static int data_sync(int fd) {
    if (fault_after >= 0 && __atomic_fetch_add(&fault_count, 1, __ATOMIC_RELAXED) >= fault_after)
        return -EIO;
    while (fdatasync(fd) < 0) {
        if (errno != EINTR) return -errno;
    }
    return 0;
}

static int sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -errno;
    int err = 0;
    while (fsync(fd) < 0) {
        if (errno != EINTR) {
            err = -errno;
            break;
        }
    }
    close(fd);
    return err;
}

/* Cuts a file to size and makes that durable, so records reported lost stay lost. */
static int cut_back(int fd, uint64_t size) {
    while (ftruncate(fd, (off_t)size) < 0) {
        if (errno != EINTR) return -errno;
    }
    while (fsync(fd) < 0) {
        if (errno != EINTR) return -errno;
    }
    return 0;
}

static int mkdir_p(const char *dir) {
    char *p = xstrdup(dir);
    int err = 0;
    for (char *q = p + 1;; q++) {
        if (*q != '/' && *q != '\0') continue;
        char c = *q;
        *q = '\0';
        if (mkdir(p, 0700) < 0 && errno != EEXIST) {
            err = -errno;
            break;
        }
        *q = c;
        if (!c) break;
    }
    free(p);
    if (err) return err;
    struct stat st;
    if (stat(dir, &st) < 0) return -errno;
    return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

static void frame_put(uint8_t *out, uint8_t type, const void *payload, size_t len) {
    put_le32(out + 4, (uint32_t)len);
    out[8] = type;
    if (len) memcpy(out + STORE_FRAME_HEADER_SIZE, payload, len);
    /* The checksum covers length, type and payload: bytes 4.. of the frame. */
    put_le32(out, crc32c(0, out + 4, 5 + len));
}

static void header_put(uint8_t out[STORE_HEADER_SIZE]) {
    memcpy(out, STORE_MAGIC, 8);
    put_le32(out + 8, STORE_VERSION);
    put_le32(out + 12, 0);
}

uint32_t store_crc32c(uint32_t crc, const void *ptr, size_t len) {
    return crc32c(crc, ptr, len);
}

size_t store_put_varint(uint8_t *out, uint64_t v) {
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

size_t store_get_varint(const uint8_t *p, size_t len, uint64_t *v) {
    uint64_t x = 0;
    for (size_t i = 0; i < len && i < 10; i++) {
        /* The tenth byte holds bit 63 only; anything more would overflow. */
        if (i == 9 && p[i] > 1) return 0;
        x |= (uint64_t)(p[i] & 0x7f) << (7 * i);
        if (!(p[i] & 0x80)) {
            *v = x;
            return i + 1;
        }
    }
    return 0;
}

/* ---- jobs ---- */

static void start_jobs(struct store *s);

static void on_kick(uv_idle_t *h) {
    struct store *s = h->data;
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
 * one threadpool round trip per few hundred records instead of one per loop
 * turn, which is most of the store's CPU cost under load. A crash of the
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

static struct store_batch *batch_new(struct store *s, enum job_kind kind) {
    struct store_batch *b = xcalloc(1, sizeof *b);
    b->req.data = b;
    b->s = s;
    b->kind = kind;
    b->fd = -1;
    b->compact_fd = -1;
    b->dir = s->dir;
    uv_mutex_init(&b->mu);
    uv_cond_init(&b->cv);
    return b;
}

static void batch_free(struct store_batch *b) {
    buf_destroy(&b->data);
    buf_destroy(&b->cdata);
    free(b->log_path);
    free(b->compact_path);
    uv_mutex_destroy(&b->mu);
    uv_cond_destroy(&b->cv);
    free(b);
}

static void log_part(struct store_batch *b) {
    int err = write_all(b->fd, b->data.ptr, b->data.len);
    const char *op = "write";
    if (!err && b->sync_dir) {
        err = sync_dir(b->dir);
        op = "fsync directory of";
    }
    if (!err && b->sync) {
        err = data_sync(b->fd);
        op = "fdatasync";
    }
    if (err) {
        b->err = err;
        b->err_op = op;
        /* After a failed fdatasync the page cache may hold pages the disk
         * never got; only the last durable size is known good. */
        b->cut_err = cut_back(b->fd, b->durable_size);
    }
}

static void commit_part(struct store_batch *b) {
    int err = write_all(b->compact_fd, b->cdata.ptr, b->cdata.len);
    const char *op = "write";
    if (!err) {
        /* Synced before the rename, or a crash could leave a renamed empty file. */
        err = data_sync(b->compact_fd);
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
        err = sync_dir(b->dir);
        op = "fsync directory of";
        b->dir_synced = !err;
    }
    b->cerr = err;
    b->cerr_op = op;
}

static void on_work(uv_work_t *req) {
    struct store_batch *b = req->data;
    if (b->kind == JOB_COMPACT) {
        b->cerr = write_all(b->compact_fd, b->cdata.ptr, b->cdata.len);
        b->cerr_op = "write";
        if (!b->cerr) {
            /* Syncing slice by slice keeps the final sync (which holds up the log) short. */
            b->cerr = data_sync(b->compact_fd);
            b->cerr_op = "fdatasync";
        }
    } else {
        if (b->commit) commit_part(b);
        /* Once renamed, the new log already holds these frames (they were in the tail). */
        if (!b->renamed) log_part(b);
    }
    uv_mutex_lock(&b->mu);
    b->done = true;
    uv_cond_signal(&b->cv);
    uv_mutex_unlock(&b->mu);
}

/* Closes and removes the compaction file, or marks it for that once its job lands. */
static void compact_drop(struct store *s, int status, store_compact_cb *cb, int *cb_status) {
    if (s->compact_fd < 0) return;
    if (s->compact_job) {
        if (!s->compact_cancel) s->compact_cancel = status;
        return;
    }
    char *path = path_join(s->dir, COMPACT_NAME);
    close(s->compact_fd);
    unlink(path);
    free(path);
    s->compact_fd = -1;
    s->compact_size = 0;
    s->compact_cancel = 0;
    s->compact_committing = false;
    buf_reset(&s->compact_buf);
    if (s->on_compact) {
        *cb = s->on_compact;
        *cb_status = status;
        s->on_compact = NULL;
    }
}

/*
 * A batch failed: everything after the last durable LSN is lost. cut_err
 * says whether the file could be cut back; until it is, nothing more is
 * written (it would land after records reported lost).
 */
static void fail(struct store *s, int err, int cut_err, store_compact_cb *cb, int *cb_status) {
    s->file_size = s->durable_size;
    s->written_lsn = s->durable_lsn;
    s->acked_lsn = s->durable_lsn;
    buf_reset(&s->pending);
    s->pending_lsn = s->appended_lsn;
    s->sync_wanted = false;
    s->failed = cut_err != 0;
    uv_timer_stop(&s->interval_timer);
    /* The snapshot may hold records that were just lost. */
    compact_drop(s, err, cb, cb_status);
}

static void log_done(struct store *s, struct store_batch *b) {
    s->file_size += b->data.len;
    s->written_lsn = b->last_lsn;
    if (b->sync) {
        s->durable_size = s->file_size;
        s->durable_lsn = b->last_lsn;
        s->stats_syncs++;
        if (b->sync_dir) s->dir_unsynced = false;
    }
    if (s->opts.fsync == STORE_FSYNC_ALWAYS) s->acked_lsn = s->durable_lsn;
    s->stats_batches++;
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
    uint64_t size = s->compact_size + b->cdata.len;
    s->file_size = s->durable_size = size;
    s->written_lsn = s->durable_lsn = b->last_lsn;
    if (s->acked_lsn < s->durable_lsn) s->acked_lsn = s->durable_lsn;
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
static int finish_job(struct store *s, struct store_batch *b, bool restart) {
    store_compact_cb ccb = NULL;
    int cstatus = 0, err = 0;

    if (b->kind == JOB_COMPACT) {
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
                ccb = s->on_compact;
                s->on_compact = NULL;
                cstatus = b->cerr;
                if (b->cerr)
                    LOG(LOG_ERROR, "store: %s %s failed: %s; will retry", b->cerr_op, s->dir,
                        strerror(-b->cerr));
            } else {
                LOG(LOG_ERROR, "store: %s %s/%s failed: %s; compaction abandoned", b->cerr_op,
                    s->dir, COMPACT_NAME, strerror(-b->cerr));
                compact_drop(s, b->cerr, &ccb, &cstatus);
            }
        }
        if (!b->renamed) {
            if (b->err) {
                err = b->err;
                LOG(LOG_ERROR,
                    "store: %s %s/%s failed: %s; cut back to %" PRIu64
                    " bytes, records after LSN %" PRIu64 " are lost",
                    b->err_op, s->dir, STORE_LOG_NAME, strerror(-err), s->durable_size,
                    s->durable_lsn);
                fail(s, err, b->cut_err, &ccb, &cstatus);
            } else {
                log_done(s, b);
            }
        }
        recycle(s, b);
    }
    if (restart && !s->closing) start_jobs(s);
    /* Callbacks last: the state is consistent and they may append or replay. */
    if (ccb) ccb(s, cstatus);
    if (b->kind == JOB_LOG && s->on_notify)
        s->on_notify(s, err ? s->durable_lsn : s->acked_lsn, err);
    return err;
}

static void on_after_work(uv_work_t *req, int status) {
    struct store_batch *b = req->data;
    (void)status; /* jobs are never cancelled */
    if (!b->reaped) finish_job(b->s, b, true);
    batch_free(b);
}

/* Waits for a job's body on the loop thread and applies its results. */
static int reap(struct store *s, struct store_batch *b) {
    uv_mutex_lock(&b->mu);
    while (!b->done)
        uv_cond_wait(&b->cv, &b->mu);
    uv_mutex_unlock(&b->mu);
    b->reaped = true;
    return finish_job(s, b, false);
}

static void queue(struct store *s, struct store_batch *b) {
    int rc = uv_queue_work(s->loop, &b->req, on_work, on_after_work);
    assert(rc == 0);
    (void)rc;
}

static void take_pending(struct store *s, struct store_batch *b) {
    b->fd = s->fd;
    b->last_lsn = s->pending.len ? s->pending_lsn : s->written_lsn;
    b->data = s->pending;
    s->pending = s->spare;
    s->spare = (struct buf)BUF_INIT;
    b->durable_size = s->durable_size;
    b->sync = s->opts.fsync == STORE_FSYNC_ALWAYS || s->sync_wanted || s->dir_unsynced;
    b->sync_dir = s->dir_unsynced;
    s->sync_wanted = false;
}

static void start_jobs(struct store *s) {
    if (s->compact_fd >= 0 && !s->switching && !s->compact_job && !s->compact_cancel &&
        s->compact_buf.len >= COMPACT_CHUNK) {
        struct store_batch *b = batch_new(s, JOB_COMPACT);
        b->compact_fd = s->compact_fd;
        b->cdata = s->compact_buf;
        s->compact_buf = (struct buf)BUF_INIT;
        s->compact_job = b;
        queue(s, b);
    }
    if (s->job || s->failed) return;
    struct store_batch *b;
    if (s->compact_fd >= 0 && s->compact_committing && !s->compact_job && !s->compact_cancel) {
        /* The switch: the log chain is idle, so every frame appended so far is
         * either on disk in the old log or in this job, and also in the tail. */
        b = batch_new(s, JOB_LOG);
        take_pending(s, b);
        b->commit = true;
        b->compact_fd = s->compact_fd;
        b->cdata = s->compact_buf;
        s->compact_buf = (struct buf)BUF_INIT;
        b->log_path = path_join(s->dir, STORE_LOG_NAME);
        b->compact_path = path_join(s->dir, COMPACT_NAME);
        s->switching = true;
    } else if (s->pending.len || s->sync_wanted) {
        b = batch_new(s, JOB_LOG);
        take_pending(s, b);
    } else {
        return;
    }
    s->job = b;
    queue(s, b);
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
    }
    if (!s->opts.fsync_interval_ms) s->opts.fsync_interval_ms = 1;
    s->on_notify = on_notify;
    s->lock_fd = s->fd = s->compact_fd = -1;

    const char *fault = getenv("EVENTD_FAULT_FSYNC_AFTER");
    fault_after = fault && *fault ? strtol(fault, NULL, 10) : -1;
    fault_count = 0;

    char *path = NULL;
    int err = mkdir_p(dir);
    if (err) goto fail;

    path = path_join(dir, "LOCK");
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

    /* A compaction that was interrupted is simply forgotten. */
    path = path_join(dir, COMPACT_NAME);
    if (unlink(path) == 0) LOG(LOG_INFO, "store: removed an unfinished %s", path);
    free(path);

    path = path_join(dir, STORE_LOG_NAME);
    s->fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
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

uint64_t store_append(struct store *s, uint8_t type, const void *payload, size_t len) {
    assert(len <= STORE_MAX_PAYLOAD);
    size_t n = STORE_FRAME_HEADER_SIZE + len;
    uint8_t *f = (uint8_t *)buf_reserve(&s->pending, n);
    frame_put(f, type, payload, len);
    buf_commit(&s->pending, n);
    if (s->compact_fd >= 0 && !s->switching && !s->compact_cancel)
        buf_append(&s->compact_buf, f, n);
    uint64_t lsn = ++s->appended_lsn;
    s->pending_lsn = lsn;
    if (s->opts.fsync != STORE_FSYNC_ALWAYS) s->acked_lsn = lsn;
    if (!s->job) kick_lazily(s);
    return lsn;
}

int store_flush_sync(struct store *s) {
    /* A batch in flight that fails loses what was appended after it too. */
    if (s->job) {
        int err = reap(s, s->job);
        if (err) return err;
    }
    if (s->fd < 0) return -EBADF;
    if (s->failed) {
        int err = cut_back(s->fd, s->durable_size);
        if (err) return err;
        s->failed = false;
    }
    if (!s->pending.len && s->file_size == s->durable_size && !s->dir_unsynced) return 0;

    store_compact_cb ccb = NULL;
    int cstatus = 0;
    uint64_t last = s->pending.len ? s->pending_lsn : s->written_lsn;
    size_t n = s->pending.len;
    int err = write_all(s->fd, s->pending.ptr, n);
    const char *op = "write";
    if (!err && s->dir_unsynced) {
        err = sync_dir(s->dir);
        op = "fsync directory of";
    }
    if (!err) {
        err = data_sync(s->fd);
        op = "fdatasync";
    }
    if (err) {
        int cut_err = cut_back(s->fd, s->durable_size);
        LOG(LOG_ERROR,
            "store: %s %s/%s failed: %s; cut back to %" PRIu64 " bytes, records after LSN %" PRIu64
            " are lost",
            op, s->dir, STORE_LOG_NAME, strerror(-err), s->durable_size, s->durable_lsn);
        fail(s, err, cut_err, &ccb, &cstatus);
    } else {
        s->file_size += n;
        s->durable_size = s->file_size;
        s->written_lsn = s->durable_lsn = last;
        if (s->acked_lsn < last) s->acked_lsn = last;
        buf_reset(&s->pending);
        s->dir_unsynced = false;
        s->sync_wanted = false;
        s->stats_batches++;
        s->stats_syncs++;
        uv_timer_stop(&s->interval_timer);
    }
    if (!s->closing) start_jobs(s);
    if (ccb) ccb(s, cstatus);
    if (s->on_notify) s->on_notify(s, err ? s->durable_lsn : s->acked_lsn, err);
    return err;
}

int store_close(struct store *s) {
    if (!s->dir) return 0;
    s->closing = true;
    int err = s->job ? reap(s, s->job) : 0;
    if (s->compact_job) reap(s, s->compact_job);
    store_compact_cb ccb = NULL;
    int cstatus = 0;
    compact_drop(s, -ECANCELED, &ccb, &cstatus);
    if (ccb) ccb(s, cstatus);

    int ferr = store_flush_sync(s);
    if (!err) err = ferr;
    uv_timer_stop(&s->interval_timer);
    uv_timer_stop(&s->lazy_timer);
    uv_idle_stop(&s->kick);
    uv_close((uv_handle_t *)&s->interval_timer, NULL);
    uv_close((uv_handle_t *)&s->lazy_timer, NULL);
    uv_close((uv_handle_t *)&s->kick, NULL);
    if (s->fd >= 0) close(s->fd);
    if (s->lock_fd >= 0) close(s->lock_fd); /* releases the flock */
    s->fd = s->lock_fd = -1;
    buf_destroy(&s->pending);
    buf_destroy(&s->spare);
    buf_destroy(&s->compact_buf);
    free(s->dir);
    s->dir = NULL;
    return err;
}

/* ---- compaction ---- */

int store_compact_begin(struct store *s) {
    if (s->compact_fd >= 0) return -EBUSY;
    if (s->closing || s->fd < 0) return -EINVAL;
    char *path = path_join(s->dir, COMPACT_NAME);
    /* O_APPEND and O_RDWR: after the rename this is the log fd. */
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
    int err = fd < 0 ? -errno : 0;
    free(path);
    if (err) return err;
    s->compact_fd = fd;
    s->compact_size = 0;
    s->compact_cancel = 0;
    s->compact_committing = false;
    s->on_compact = NULL;
    buf_reset(&s->compact_buf);
    uint8_t h[STORE_HEADER_SIZE];
    header_put(h);
    buf_append(&s->compact_buf, h, sizeof h);
    return 0;
}

void store_compact_add(struct store *s, uint8_t type, const void *payload, size_t len) {
    if (s->compact_fd < 0 || s->compact_cancel) return; /* aborted meanwhile */
    assert(!s->compact_committing);
    assert(len <= STORE_MAX_PAYLOAD);
    size_t n = STORE_FRAME_HEADER_SIZE + len;
    frame_put((uint8_t *)buf_reserve(&s->compact_buf, n), type, payload, len);
    buf_commit(&s->compact_buf, n);
    if (s->compact_buf.len >= COMPACT_CHUNK && !s->compact_job) kick(s);
}

int store_compact_commit(struct store *s, store_compact_cb cb) {
    if (s->compact_fd < 0) return -EINVAL;
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

/* ---- replay ---- */

/* A window over the log file, refilled with large preads. */
struct reader {
    int fd;
    uint8_t *buf;
    size_t cap;    /* bytes allocated */
    size_t len;    /* bytes held */
    uint64_t base; /* file offset of buf[0] */
    uint64_t size; /* file size */
    int err;       /* -errno of a failed read */
};

/* The n bytes at file offset off, or NULL when the file ends first or a read fails. */
static const uint8_t *reader_at(struct reader *r, uint64_t off, size_t n) {
    if (off >= r->base && off + n <= r->base + r->len) return r->buf + (off - r->base);
    if (off > r->size || n > r->size - off) return NULL;
    size_t keep = 0;
    if (off >= r->base && off < r->base + r->len) {
        keep = (size_t)(r->base + r->len - off);
        memmove(r->buf, r->buf + (off - r->base), keep);
    }
    r->base = off;
    r->len = keep;
    if (n > r->cap) {
        r->cap = n > READ_CHUNK ? n : READ_CHUNK;
        r->buf = xrealloc(r->buf, r->cap);
    }
    while (r->len < n) {
        size_t want = r->cap - r->len;
        uint64_t left = r->size - (r->base + r->len);
        if (want > left) want = (size_t)left;
        ssize_t got = pread(r->fd, r->buf + r->len, want, (off_t)(r->base + r->len));
        if (got < 0) {
            if (errno == EINTR) continue;
            r->err = -errno;
            return NULL;
        }
        if (got == 0) {
            r->err = -EIO; /* the file shrank under us */
            return NULL;
        }
        r->len += (size_t)got;
    }
    return r->buf;
}

/* 1 if everything from off to the end is zero bytes, 0 if not, -errno. */
static int zeros_from(struct reader *r, uint64_t off) {
    while (off < r->size) {
        size_t n = r->size - off > READ_CHUNK ? READ_CHUNK : (size_t)(r->size - off);
        const uint8_t *p = reader_at(r, off, n);
        if (!p) return r->err;
        for (size_t i = 0; i < n; i++)
            if (p[i]) return 0;
        off += n;
    }
    return 1;
}

/*
 * 1 if a frame with a good checksum starts anywhere from off on, 0 if not,
 * -errno. Tells a torn last frame from a damaged length field in the middle
 * of the log, which would otherwise silently cut every record after it.
 */
static int frame_follows(struct reader *r, uint64_t off) {
    for (; off + STORE_FRAME_HEADER_SIZE <= r->size; off++) {
        const uint8_t *h = reader_at(r, off, STORE_FRAME_HEADER_SIZE);
        if (!h) return r->err;
        uint32_t crc = get_le32(h), len = get_le32(h + 4);
        if (len > STORE_MAX_PAYLOAD || len > r->size - off - STORE_FRAME_HEADER_SIZE) continue;
        const uint8_t *f = reader_at(r, off, STORE_FRAME_HEADER_SIZE + len);
        if (!f) return r->err;
        if (crc32c(0, f + 4, 5 + (size_t)len) == crc) return 1;
    }
    return 0;
}

/* Copies everything from off to a new eventd.log.damaged-<off>[.N], synced. */
static int move_aside(struct store *s, struct reader *r, uint64_t off, char *name, size_t cap) {
    int fd = -1, err = 0;
    char *path = NULL;
    for (int i = 0; i < 1000 && fd < 0; i++) {
        if (i)
            snprintf(name, cap, "%s%" PRIu64 ".%d", DAMAGED_NAME, off, i);
        else
            snprintf(name, cap, "%s%" PRIu64, DAMAGED_NAME, off);
        free(path);
        path = path_join(s->dir, name);
        /* O_EXCL: an earlier repair's file is never overwritten. */
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0) {
        err = errno == EEXIST ? -EEXIST : -errno;
        goto out;
    }
    for (uint64_t p = off; p < r->size;) {
        size_t n = r->size - p > READ_CHUNK ? READ_CHUNK : (size_t)(r->size - p);
        const uint8_t *d = reader_at(r, p, n);
        if (!d) {
            err = r->err;
            goto out;
        }
        if ((err = write_all(fd, d, n))) goto out;
        p += n;
    }
    while (fdatasync(fd) < 0) {
        if (errno != EINTR) {
            err = -errno;
            goto out;
        }
    }
    if ((err = sync_dir(s->dir))) goto out;
    /* Only now, with the copy safe, is the log cut. */
    err = cut_back(s->fd, off);
out:
    if (fd >= 0) close(fd);
    free(path);
    return err;
}

static int write_header(struct store *s) {
    uint8_t h[STORE_HEADER_SIZE];
    header_put(h);
    int err = cut_back(s->fd, 0);
    if (!err) err = write_all(s->fd, h, sizeof h);
    if (!err && fdatasync(s->fd) < 0) err = -errno;
    /* The log file may be new: make its name durable too. */
    if (!err) err = sync_dir(s->dir);
    return err;
}

enum store_replay_status store_replay(struct store *s, store_apply_cb apply, void *ctx,
                                      struct store_replay_info *info) {
    memset(info, 0, sizeof *info);
    const char *file = STORE_LOG_NAME;
    const char *dir = s->dir ? s->dir : "?";
    struct reader r = {.fd = s->fd};
    enum store_replay_status status;
    const char *why = NULL;
    int err = 0;

    if (s->fd < 0) {
        err = -EBADF;
        goto io;
    }
    if (s->job) reap(s, s->job);
    if (s->failed) {
        /* The failed batch could not be cut off: the lost records must not come back. */
        if ((err = cut_back(s->fd, s->durable_size))) goto io;
        s->failed = false;
        start_jobs(s); /* appends held back meanwhile */
    }
    struct stat st;
    if (fstat(s->fd, &st) < 0) {
        err = -errno;
        goto io;
    }
    r.size = (uint64_t)st.st_size;

    if (r.size < STORE_HEADER_SIZE) {
        /* Empty, or a header torn while the log was created (a prefix of it, or zeros). */
        uint8_t h[STORE_HEADER_SIZE], got[STORE_HEADER_SIZE];
        header_put(h);
        const uint8_t *p = r.size ? reader_at(&r, 0, (size_t)r.size) : NULL;
        if (r.size && !p) {
            err = r.err;
            goto io;
        }
        if (r.size) memcpy(got, p, (size_t)r.size);
        bool torn = r.size == 0 || memcmp(got, h, (size_t)r.size) == 0;
        for (size_t i = 0; !torn && i < r.size; i++)
            torn = got[i] == 0;
        if (!torn) {
            snprintf(info->message, sizeof info->message,
                     "%s/%s is not an eventd log (%" PRIu64 " bytes, no header)", dir, file,
                     r.size);
            status = STORE_REPLAY_CORRUPT;
            goto out;
        }
        if (r.size)
            LOG(LOG_WARN, "store: rewrote the torn %" PRIu64 "-byte header of %s/%s", r.size, dir,
                file);
        if ((err = write_header(s))) goto io;
        s->file_size = s->durable_size = STORE_HEADER_SIZE;
        info->bytes = STORE_HEADER_SIZE;
        snprintf(info->message, sizeof info->message, "%s/%s: created a new log", dir, file);
        status = STORE_REPLAY_EMPTY;
        goto out;
    }

    const uint8_t *h = reader_at(&r, 0, STORE_HEADER_SIZE);
    if (!h) {
        err = r.err;
        goto io;
    }
    if (memcmp(h, STORE_MAGIC, 8) != 0) {
        snprintf(info->message, sizeof info->message,
                 "%s/%s is not an eventd log (bad magic at offset 0)", dir, file);
        status = STORE_REPLAY_CORRUPT;
        goto out;
    }
    uint32_t version = get_le32(h + 8);
    if (version != STORE_VERSION) {
        if (version > STORE_VERSION)
            snprintf(info->message, sizeof info->message,
                     "%s/%s was written by a newer eventd (format %" PRIu32 ")", dir, file,
                     version);
        else
            snprintf(info->message, sizeof info->message, "%s/%s has an unknown format %" PRIu32,
                     dir, file, version);
        status = STORE_REPLAY_CORRUPT;
        goto out;
    }

    uint64_t pos = STORE_HEADER_SIZE, records = 0;
    bool torn = false;
    while (pos < r.size) {
        const uint8_t *fh = reader_at(&r, pos, STORE_FRAME_HEADER_SIZE);
        if (!fh) {
            if (r.err) goto io_read;
            why = "incomplete frame header";
            torn = true;
            break;
        }
        uint32_t crc = get_le32(fh), len = get_le32(fh + 4);
        uint8_t type = fh[8];
        if (len > STORE_MAX_PAYLOAD || len > r.size - pos - STORE_FRAME_HEADER_SIZE) {
            why = "frame length runs past the end of the file";
            int found = frame_follows(&r, pos + 1);
            if (found < 0) goto io_read;
            torn = !found;
            break;
        }
        const uint8_t *f = reader_at(&r, pos, STORE_FRAME_HEADER_SIZE + len);
        if (!f) goto io_read;
        if (crc32c(0, f + 4, 5 + (size_t)len) != crc) {
            why = "bad checksum";
            int z = zeros_from(&r, pos + STORE_FRAME_HEADER_SIZE + len);
            if (z < 0) goto io_read;
            torn = z;
            break;
        }
        if (apply && apply(ctx, type, f + STORE_FRAME_HEADER_SIZE, len) < 0) {
            /* A checksummed frame was fully written: not a torn tail, never cut silently. */
            why = "record that cannot be decoded";
            break;
        }
        records++;
        pos += STORE_FRAME_HEADER_SIZE + len;
    }
    info->records = records;
    info->bytes = pos;

    if (pos == r.size) {
        status = STORE_REPLAY_OK;
        snprintf(info->message, sizeof info->message,
                 "%s/%s: %" PRIu64 " records, %" PRIu64 " bytes", dir, file, records, pos);
    } else if (torn) {
        if ((err = cut_back(s->fd, pos))) goto io;
        info->dropped_bytes = r.size - pos;
        LOG(LOG_WARN,
            "store: dropped %" PRIu64 " bytes of a torn record at offset %" PRIu64 " of %s/%s (%s)",
            info->dropped_bytes, pos, dir, file, why);
        snprintf(info->message, sizeof info->message,
                 "%s/%s: dropped %" PRIu64 " bytes of a torn record at offset %" PRIu64, dir, file,
                 info->dropped_bytes, pos);
        status = STORE_REPLAY_TRUNCATED;
    } else if (s->opts.repair) {
        char name[64];
        if ((err = move_aside(s, &r, pos, name, sizeof name))) goto io;
        info->dropped_bytes = r.size - pos;
        LOG(LOG_WARN,
            "store: repair moved %" PRIu64 " bytes from offset %" PRIu64 " of %s/%s (%s) to %s",
            info->dropped_bytes, pos, dir, file, why, name);
        snprintf(info->message, sizeof info->message,
                 "%s/%s: moved %" PRIu64 " damaged bytes from offset %" PRIu64 " to %s", dir, file,
                 info->dropped_bytes, pos, name);
        status = STORE_REPLAY_TRUNCATED;
    } else {
        info->bad_offset = pos;
        snprintf(info->message, sizeof info->message,
                 "%s/%s is damaged at offset %" PRIu64 " (%s) with %" PRIu64
                 " bytes after it; start with --repair to move them aside",
                 dir, file, pos, why, r.size - pos);
        status = STORE_REPLAY_CORRUPT;
        goto out;
    }
    /* The previous process may have died with unsynced pages in the cache:
     * what we now call durable must be on disk. */
    while (fdatasync(s->fd) < 0) {
        if (errno != EINTR) {
            err = -errno;
            goto io;
        }
    }
    s->file_size = s->durable_size = pos;
    goto out;

io_read:
    err = r.err ? r.err : -EIO;
io:
    snprintf(info->message, sizeof info->message, "%s/%s: %s", dir, file, strerror(-err));
    status = STORE_REPLAY_IO;
out:
    free(r.buf);
    return status;
}
