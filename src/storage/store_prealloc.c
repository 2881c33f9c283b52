/*
 * store_prealloc: the zeros kept written past the log's end in "always" mode
 * (store_prealloc in store.h; docs/STORAGE.md, "Preallocation"), so that a
 * batch's fdatasync overwrites blocks the file has and commits no metadata.
 * Jobs on the threadpool write them (store_sync.c runs JOB_PREALLOC); the
 * rest of the store asks here when to start one, whether a batch must wait
 * for one, and forgets them when a cut or a new file takes them away.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/log.h"
#include "storage/logfile.h"
#include "storage/store.h"
#include "storage/store_internal.h"

#define PREALLOC_GAP (64u << 10)  /* zeros start this far past the log's end, when behind */
#define PREALLOC_RETRY_MS 10000u  /* after a failed preallocation, the next one's delay */
#define PREALLOC_CHUNK (1u << 20) /* zeros one job writes, at most: what a batch may wait for */

/* A cut or a new file: the zeros past the log's end are gone, or not known to be there. */
void store_prealloc_forget(struct store *s) {
    s->prealloc_end = 0;
    s->prealloc_epoch++;
}

void store_prealloc_done(struct store *s, struct store_batch *b) {
    s->prealloc_job = NULL;
    free(b->log_path);
    b->log_path = NULL;
    if (b->err) {
        if (!s->prealloc_failed)
            LOG(b->err == -ENOSPC ? LOG_INFO : LOG_WARN,
                "store: could not preallocate %" PRIu64 " bytes at offset %" PRIu64
                " of %s/%s: %s; appending without, trying again every %u s",
                b->fill, b->start_size, s->dir, STORE_LOG_NAME,
                b->err == -ENOSPC ? "the disk has too little free space" : strerror(-b->err),
                PREALLOC_RETRY_MS / 1000u);
        s->prealloc_failed = true;
        s->prealloc_retry_at = uv_now(s->loop) + PREALLOC_RETRY_MS;
        return;
    }
    if (s->prealloc_failed)
        LOG(LOG_INFO, "store: preallocating %s/%s again", s->dir, STORE_LOG_NAME);
    s->prealloc_failed = false;
    s->stats_prealloc_bytes += b->fill;
    if (b->epoch == s->prealloc_epoch) s->prealloc_end = b->start_size + b->fill;
}

static uint64_t round_up_4k(uint64_t n) {
    return (n + 4095u) / 4096u * 4096u;
}

/*
 * Preallocation (store_prealloc): the next zeros, in jobs of at most
 * PREALLOC_CHUNK (a batch that reaches zeros being written waits for one
 * job, never for all of prealloc_bytes), while fewer than prealloc_bytes less
 * one chunk (half, when they are a chunk or less) are left past everything
 * written or about to be. They go on where the last ones ended, or a gap past
 * the log's end when the log has caught up (the frames of the gap are
 * appended as without preallocation).
 */
void store_prealloc_start(struct store *s) {
    if (!s->prealloc_bytes || s->prealloc_job || s->closing || s->failing || s->needs_cut ||
        s->compact_committing || s->switching || s->fd < 0 ||
        uv_now(s->loop) < s->prealloc_retry_at)
        return;
    uint64_t end = s->file_size + (s->job ? s->job->data.len : 0) + s->pending.len;
    uint64_t fill = s->prealloc_bytes < PREALLOC_CHUNK ? s->prealloc_bytes : PREALLOC_CHUNK;
    uint64_t ahead = s->prealloc_bytes > PREALLOC_CHUNK ? s->prealloc_bytes - PREALLOC_CHUNK
                                                        : s->prealloc_bytes / 2;
    if (s->prealloc_end >= end + ahead) return;
    struct store_batch *b = store_batch_new(&s->sync, JOB_PREALLOC);
    b->fd = s->fd; /* for its free space; the zeros go through a file of their own */
    b->log_path = logfile_path(s->dir, STORE_LOG_NAME);
    b->start_size = s->prealloc_end > end ? s->prealloc_end : round_up_4k(end + PREALLOC_GAP);
    b->fill = fill;
    b->keep_free = s->prealloc_keep_free;
    b->epoch = s->prealloc_epoch;
    s->prealloc_from = b->start_size;
    s->prealloc_job = b;
    store_sync_submit(&s->sync, b); /* never on the loop (store_sync.c: plain batches only) */
}

/* While zeros are being written, nothing may be written where they go, nor cut (a cut
 * under the job leaves a hole: harmless, but no longer preallocated), nor the file
 * switched (the job writes to its fd). The job's end starts the jobs again. */
bool store_prealloc_blocks(const struct store *s, bool commit) {
    return s->prealloc_job && (commit || s->failing || s->needs_cut ||
                               s->file_size + s->pending.len > s->prealloc_from);
}

void store_prealloc(struct store *s, uint64_t bytes, uint64_t keep_free) {
    s->prealloc_bytes = s->opts.fsync == STORE_FSYNC_ALWAYS ? round_up_4k(bytes) : 0;
    s->prealloc_keep_free = keep_free;
    store_prealloc_start(s);
}

/* At close: the zeros past the log's end go, so that the file at rest ends with the log.
 * Replay would take them for its end anyway. */
void store_prealloc_cut(struct store *s) {
    struct stat st;
    if (!s->prealloc_bytes || s->fd < 0 || fstat(s->fd, &st) < 0 ||
        (uint64_t)st.st_size <= s->file_size)
        return;
    int err = logfile_cut(s->fd, s->file_size);
    if (err)
        LOG(LOG_WARN, "store: could not cut the preallocated zeros off %s/%s: %s", s->dir,
            STORE_LOG_NAME, strerror(-err));
}
