/*
 * store_sync: how the store's batches reach the disk. store.c decides what
 * a batch holds and what its outcome means; this file runs its body (write,
 * fdatasync, the cuts after a failure, the compaction steps) somewhere off
 * the request path and hands the results back on the loop.
 *
 * EXPERIMENT (issue 11): EVENTD_SYNC picks the mechanism for plain log
 * batches (write + optional fdatasync, nothing else):
 *   threadpool   libuv's threadpool (uv_queue_work), as before
 *   loop         on the loop thread, in the idle phase that follows the loop
 *                turn that appended the frames (Redis's appendfsync always)
 *   loop_dsync   the same with one pwritev2(RWF_DSYNC) instead of write + fdatasync
 *   uring        io_uring: linked write + fdatasync submitted from the loop, the
 *                completion through an eventfd watched by a uv_poll_t
 *   uring_dsync  io_uring: one write with RWF_DSYNC
 * Everything else (probes, cuts, compaction) always runs on the threadpool.
 */
#include <errno.h>
#include <sched.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include "log.h"
#include "logfile.h"
#include "store_internal.h"

enum mech { MECH_THREADPOOL, MECH_LOOP, MECH_URING };

struct store_sync {
    enum mech mech;
    bool dsync; /* one write with RWF_DSYNC instead of write + fdatasync */
    struct io_uring ring;
    int efd;
    uv_poll_t *poll;              /* its own allocation: it outlives a ring given up on */
    struct store_batch *inflight; /* the batch on the ring, or NULL */
};

struct store_batch *store_batch_new(struct store *s, enum job_kind kind) {
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

/* The write and sync of a plain batch as one pwritev2(RWF_DSYNC), with the fault hooks. */
static int dsync_write(struct store_batch *b, const char **op) {
    *op = "write";
    if (logfile_fault_write()) return -ENOSPC;
    bool sync_fault = logfile_fault_sync();
    const char *p = b->data.ptr;
    size_t len = b->data.len;
    *op = "pwritev2(RWF_DSYNC)";
    while (len) {
        struct iovec iov = {(void *)p, len};
        ssize_t n = pwritev2(b->fd, &iov, 1, -1, sync_fault ? 0 : RWF_DSYNC);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (n == 0) return -EIO;
        p += n;
        len -= (size_t)n;
    }
    return sync_fault ? -EIO : 0;
}

static void log_part(struct store_batch *b, bool dsync) {
    int err = 0;
    const char *op = "truncate";
    if (dsync && b->sync && b->data.len && !b->cut_first && !b->probe && !b->sync_dir) {
        /* In "always" mode start_size is the durable size: a failure cuts back there. */
        err = dsync_write(b, &op);
        if (err) failed_sync(b, err, op);
        return;
    }
    if (b->cut_first) err = logfile_cut(b->fd, b->start_size);
    if (!err && b->probe) {
        err = logfile_probe(b->fd, b->start_size);
        op = "probe";
    } else if (!err) {
        err = logfile_append(b->fd, b->data.ptr, b->data.len);
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
        err = logfile_datasync(b->fd);
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

/* The rest of a batch whose io_uring part did not end cleanly: the same
 * outcome the threadpool body would have reached. */
static void ring_rest(struct store_batch *b) {
    size_t len = b->data.len;
    if (b->ring_wres < 0) {
        failed_write(b, (int)b->ring_wres, "write");
        return;
    }
    if ((size_t)b->ring_wres < len) {
        /* A short write: the rest, then the sync the link dropped. */
        int err = logfile_write_all(b->fd, b->data.ptr + b->ring_wres, len - (size_t)b->ring_wres);
        if (err) {
            failed_write(b, err, "write");
            return;
        }
        if (b->sync && (err = logfile_datasync(b->fd))) failed_sync(b, err, "fdatasync");
        return;
    }
    if (b->sync && b->ring_sres < 0) failed_sync(b, b->ring_sres, "fdatasync");
}

static void body(struct store_batch *b) {
    if (b->kind == JOB_COMPACT) {
        b->cerr = logfile_write_all(b->compact_fd, b->cdata.ptr, b->cdata.len);
        b->cerr_op = "write";
        if (!b->cerr) {
            /* Syncing slice by slice keeps the final sync (which holds up the log) short. */
            b->cerr = logfile_datasync(b->compact_fd);
            b->cerr_op = "fdatasync";
        }
    } else if (b->ring_waiting < 0) {
        ring_rest(b);
    } else {
        if (b->commit) commit_part(b);
        /* Once renamed, the new log already holds these frames (they were in the tail). */
        if (!b->renamed) log_part(b, false);
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
    if (!b->reaped) store_job_finish(b->s, b, true);
    store_batch_free(b);
}

static void queue(struct store *s, struct store_batch *b) {
    int rc = uv_queue_work(s->loop, &b->req, on_work, on_after_work);
    if (rc) abort(); /* only fails for a NULL callback */
}

/* ---- io_uring ---- */

/* A plain batch: a write and maybe its sync, nothing else. */
static bool plain(const struct store_batch *b) {
    return b->kind == JOB_LOG && !b->commit && !b->probe && !b->cut_first && !b->sync_dir &&
           (b->data.len || b->sync);
}

static void ring_cqes(struct store_sync *ss, struct store_batch *b, bool wait) {
    while (b->ring_waiting > 0) {
        struct io_uring_cqe *cqe;
        int rc = wait ? io_uring_wait_cqe(&ss->ring, &cqe) : io_uring_peek_cqe(&ss->ring, &cqe);
        if (rc == -EINTR) continue;
        if (rc < 0) return; /* peek: nothing more now */
        if (cqe->user_data == 1)
            b->ring_wres = cqe->res;
        else
            b->ring_sres = cqe->res;
        io_uring_cqe_seen(&ss->ring, cqe);
        b->ring_waiting--;
    }
}

/* The ring's part of b is over: true when it ended cleanly. */
static bool ring_clean(struct store_batch *b) {
    if (b->ring_wres < 0 || (size_t)b->ring_wres < b->data.len) return false;
    return !b->sync || b->ring_sres == 0;
}

static void on_ring(uv_poll_t *h, int status, int events) {
    struct store *s = h->data;
    struct store_sync *ss = s->sync;
    uint64_t n;
    if (read(ss->efd, &n, sizeof n) < 0) { /* EAGAIN: a blocking wait took them */
    }
    struct store_batch *b = ss->inflight;
    if (!b) return;
    ring_cqes(ss, b, false);
    if (b->ring_waiting) return;
    ss->inflight = NULL;
    uv_unref((uv_handle_t *)ss->poll);
    if (!ring_clean(b)) {
        b->ring_waiting = -1; /* the threadpool finishes it (the cuts block) */
        queue(s, b);
        return;
    }
    b->done = true;
    store_job_finish(s, b, true);
    store_batch_free(b);
}

static void free_handle(uv_handle_t *h) {
    free(h);
}

/* Stops using the ring (closing, or a ring that refused work). */
static void ring_exit(struct store_sync *ss) {
    uv_close((uv_handle_t *)ss->poll, free_handle);
    ss->poll = NULL;
    io_uring_queue_exit(&ss->ring);
    close(ss->efd);
    ss->efd = -1;
    ss->mech = MECH_THREADPOOL;
}

static void ring_submit(struct store *s, struct store_batch *b) {
    struct store_sync *ss = s->sync;
    struct io_uring_sqe *sqe;
    b->ring_wres = (ssize_t)b->data.len;
    b->ring_sres = 0;
    if (b->data.len && logfile_fault_write()) {
        b->ring_wres = -ENOSPC;
    } else {
        bool sync_fault = b->sync && logfile_fault_sync();
        if (sync_fault) b->ring_sres = -EIO;
        bool sync = b->sync && !sync_fault;
        if (b->data.len) {
            sqe = io_uring_get_sqe(&ss->ring);
            io_uring_prep_write(sqe, b->fd, b->data.ptr, (unsigned)b->data.len, b->start_size);
            if (sync && ss->dsync) {
                sqe->rw_flags = RWF_DSYNC;
                sync = false;
            }
            if (sync) sqe->flags |= IOSQE_IO_LINK;
            sqe->user_data = 1;
            b->ring_waiting++;
        }
        if (sync) {
            sqe = io_uring_get_sqe(&ss->ring);
            io_uring_prep_fsync(sqe, b->fd, IORING_FSYNC_DATASYNC);
            sqe->user_data = 2;
            b->ring_waiting++;
        }
    }
    if (b->ring_waiting) {
        int rc;
        while ((rc = io_uring_submit(&ss->ring)) == -EINTR) {
        }
        if (rc < 0) {
            /* The ring refuses work: drop it (with what it holds) and use the threadpool. */
            LOG(LOG_WARN,
                "store: io_uring submit failed (%s): log writes go through the threadpool",
                strerror(-rc));
            ring_exit(ss);
            b->ring_waiting = -1;
            b->ring_wres = 0; /* nothing written: the threadpool writes it all */
            queue(s, b);
            return;
        }
    }
    ss->inflight = b;
    uv_ref((uv_handle_t *)ss->poll);
    if (!b->ring_waiting) {
        /* An injected fault: no I/O, finish through the poll callback's path. */
        uint64_t one = 1;
        if (write(ss->efd, &one, sizeof one) < 0) abort();
    }
}

static bool ring_init(struct store *s, struct store_sync *ss) {
    int rc = io_uring_queue_init(8, &ss->ring, 0);
    if (rc < 0) {
        LOG(LOG_WARN, "store: io_uring unavailable (%s): log writes go through the threadpool",
            strerror(-rc));
        return false;
    }
    ss->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ss->poll = xmalloc(sizeof *ss->poll);
    if (ss->efd < 0 || io_uring_register_eventfd(&ss->ring, ss->efd) < 0 ||
        uv_poll_init(s->loop, ss->poll, ss->efd) < 0) {
        LOG(LOG_WARN,
            "store: io_uring eventfd setup failed (%s): log writes go through the threadpool",
            strerror(errno));
        if (ss->efd >= 0) close(ss->efd);
        free(ss->poll);
        io_uring_queue_exit(&ss->ring);
        return false;
    }
    /* The kernel's io-wq workers (which run the fdatasync) would otherwise run
     * on any CPU of the cpuset, ignoring the CPUs the process was given (taskset). */
    cpu_set_t cpus;
    if (sched_getaffinity(0, sizeof cpus, &cpus) == 0)
        io_uring_register_iowq_aff(&ss->ring, sizeof cpus, &cpus);
    ss->poll->data = s;
    uv_poll_start(ss->poll, UV_READABLE, on_ring);
    uv_unref((uv_handle_t *)ss->poll); /* only a batch in flight keeps the loop alive */
    return true;
}

/* ---- the mechanism ---- */

void store_sync_init(struct store *s) {
    struct store_sync *ss = xcalloc(1, sizeof *ss);
    ss->efd = -1;
    s->sync = ss;
    const char *m = getenv("EVENTD_SYNC");
    if (!m || !*m) m = "threadpool";
    ss->dsync = strstr(m, "_dsync") != NULL;
    if (!strncmp(m, "loop", 4)) ss->mech = MECH_LOOP;
    if (!strncmp(m, "uring", 5)) ss->mech = ring_init(s, ss) ? MECH_URING : MECH_THREADPOOL;
}

void store_sync_submit(struct store *s, struct store_batch *b) {
    struct store_sync *ss = s->sync;
    if (ss->mech == MECH_URING && plain(b)) {
        ring_submit(s, b);
    } else if (ss->mech == MECH_LOOP && plain(b)) {
        /* Called from the idle phase, right after the turn that appended the frames. */
        log_part(b, ss->dsync);
        b->done = b->reaped = true;
        store_job_finish(s, b, false);
        store_batch_free(b);
    } else {
        queue(s, b);
    }
}

int store_sync_wait(struct store *s, struct store_batch *b) {
    struct store_sync *ss = s->sync;
    if (ss->inflight == b) {
        ring_cqes(ss, b, true);
        ss->inflight = NULL;
        uv_unref((uv_handle_t *)ss->poll);
        if (!ring_clean(b)) {
            b->ring_waiting = -1;
            ring_rest(b);
        }
        b->done = b->reaped = true;
        int err = store_job_finish(s, b, false);
        store_batch_free(b);
        return err;
    }
    uv_mutex_lock(&b->mu);
    while (!b->done)
        uv_cond_wait(&b->cv, &b->mu);
    uv_mutex_unlock(&b->mu);
    b->reaped = true;
    return store_job_finish(s, b, false);
}

void store_sync_close(struct store *s) {
    struct store_sync *ss = s->sync;
    if (!ss) return;
    if (ss->mech == MECH_URING) ring_exit(ss);
    free(ss);
    s->sync = NULL;
}
