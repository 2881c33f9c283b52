/*
 * store internals shared by store.c (the state machine: batches, LSNs,
 * failure episodes, compaction) and store_sync.c (how a batch reaches the
 * disk: the one replaceable piece, behind store_sync.h): the batch, which
 * the store fills, the sync path runs, and the store reads back in its
 * store_sync_done_cb. Not for other modules.
 */
#ifndef EVENTD_STORE_INTERNAL_H
#define EVENTD_STORE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "common/buf.h"
#include "storage/store_sync.h" /* not store.h: the sync path never sees struct store */

enum job_kind { JOB_LOG, JOB_COMPACT, JOB_PREALLOC };

struct store_batch {
    /* mu/cv let store_flush_sync wait for the body without running the loop,
     * which it may not do: it is called from loop callbacks. They are set up
     * once and kept when the sync path reuses the batch, as is req (which
     * uv_queue_work sets up for each use); every field from sy on is cleared
     * for each use (store_batch_new). */
    uv_mutex_t mu;
    uv_cond_t cv;
    uv_work_t req;
    struct store_sync *sy; /* the sync path that runs it; read on the loop thread only */
    enum job_kind kind;
    bool done;   /* the body has returned its results */
    bool reaped; /* finished on the loop already; the after-work callback only frees */
    /* log part */
    int fd;
    struct buf data; /* frames for eventd.log */
    uint64_t
        start_size;    /* bytes in eventd.log before this write: a failed write is cut back here */
    uint64_t last_lsn; /* LSN of the last frame in data, or the last one written */
    uint64_t sync_cut_size; /* bytes: where a failed sync cuts the log back to */
    bool cut_first;         /* cut the file to start_size before writing (an earlier cut failed) */
    bool probe;             /* no data: check that the disk takes space and syncs */
    bool sync;              /* fdatasync after the write */
    bool sync_dir;          /* fsync the directory first (retrying a compaction rename) */
    /* preallocation: zeros [start_size, start_size + fill) of fd, then fdatasync */
    uint64_t fill;
    uint64_t keep_free; /* ... unless that would leave the disk less free than this: -ENOSPC */
    uint32_t epoch;     /* the store's prealloc_epoch when it started */
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
    bool write_failed; /* err came from the cut, the probe or the write, not from the sync */
    int cut_err;       /* the cut back after a failure, -errno */
    int cerr;          /* compaction part, -errno */
    const char *cerr_op;
    bool renamed;
    bool dir_synced;
    uint64_t sync_ns; /* how long the log's fdatasync took, 0 if none ran */
};

/*
 * A new empty batch of this kind, to run through sy (store_sync.c): the one
 * sy keeps from an earlier batch (store_batch_release), cleared, when it has
 * one, so a busy store does not allocate one per batch.
 */
struct store_batch *store_batch_new(struct store_sync *sy, enum job_kind kind);
/* Done with b (loop thread): sy keeps it for the next store_batch_new, or frees it. */
void store_batch_release(struct store_sync *sy, struct store_batch *b);
void store_batch_free(struct store_batch *b);

/* Preallocation (store_prealloc.c), for store.c. */
struct store;
/* A cut or a new file: the zeros past the log's end are gone, or not known to be there. */
void store_prealloc_forget(struct store *s);
/* Starts the job that writes the next zeros, when they are due and none is in flight. */
void store_prealloc_start(struct store *s);
/* Whether the next log job must wait for the zeros' job in flight (commit: a switch). */
bool store_prealloc_blocks(const struct store *s, bool commit);
/* A JOB_PREALLOC came back (loop thread). */
void store_prealloc_done(struct store *s, struct store_batch *b);
/* At close: cuts the zeros off, so that a log at rest ends with its last frame. */
void store_prealloc_cut(struct store *s);

#endif
