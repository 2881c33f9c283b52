/*
 * store: the append-only log file that holds every record, its replay at
 * startup, group commit and crash-safe compaction.
 *
 * Files in the data directory:
 *   LOCK               flock()ed exclusively by the one process that owns the directory
 *   eventd.log         the log: a 16-byte file header, then framed records
 *   eventd.log.compact a compaction in progress (removed or renamed over eventd.log)
 *   eventd.log.damaged-<offset>  what --repair moved aside (never deleted)
 *
 * The store knows frames, not records: a record is (type, payload bytes),
 * and the caller encodes and decodes payloads (record.h). Format and recovery
 * rules are documented for operators in docs/STORAGE.md.
 *
 * Every append gets a log sequence number (LSN), 1, 2, 3... in append order.
 * Appends are buffered in memory on the loop thread and written one batch at
 * a time (write + fdatasync for the whole batch: group commit). Where a batch
 * runs is store_sync.c's business: in "always" mode on the loop thread right
 * after the loop turn that appended it (the answers wait for that sync
 * anyway), otherwise on libuv's threadpool. A caller acknowledges a write
 * once store_is_acked() says so; in "always" mode that is after the
 * fdatasync covering the LSN returned, in "interval" and "never" at once.
 *
 * Threading: every function here runs on the loop thread; only the internal
 * job bodies run on the threadpool, and they touch only the batch they own.
 */
#ifndef EVENTD_STORE_H
#define EVENTD_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "common/buf.h"
#include "storage/logfile.h"    /* the file format: STORE_LOG_NAME, STORE_HEADER_SIZE, ... */
#include "storage/store_sync.h" /* struct store_sync, the sync path's own state */

struct metrics;

enum store_fsync { STORE_FSYNC_ALWAYS, STORE_FSYNC_INTERVAL, STORE_FSYNC_NEVER };

/* The default of store_opts.loop_sync_max_us (eventd's --loop-sync-max-us). */
#define STORE_LOOP_SYNC_MAX_US 2000u
/* The default of store_opts.max_unsynced_bytes (eventd's --fsync-max-unsynced-bytes). */
#define STORE_MAX_UNSYNCED_BYTES (32u << 20)

struct store_opts {
    enum store_fsync fsync;
    uint32_t fsync_interval_ms;  /* interval mode: ms between fdatasyncs */
    uint32_t max_unsynced_bytes; /* interval and never: written but unsynced bytes kept in
                                  * memory; reaching this makes a sync (0: the default) */
    uint32_t loop_sync_max_us;   /* the loop writes (always mode: and syncs) the log itself while
                                  * that averages under this (0: always on a worker thread) */
    bool repair;                 /* replay: move damaged data aside instead of refusing */
    uint32_t retry_ms;           /* while the disk refuses writes: ms between retries (0: 1000) */
    struct metrics *metrics;     /* each log batch's fdatasync time goes here; NULL: nowhere.
                                  * Borrowed: must outlive the store */
};

enum store_replay_status {
    STORE_REPLAY_OK,        /* every frame read */
    STORE_REPLAY_EMPTY,     /* no log yet (a new one was created) */
    STORE_REPLAY_TRUNCATED, /* a torn tail was cut off; earlier records kept */
    STORE_REPLAY_CORRUPT,   /* damage before the tail; nothing may be served */
    STORE_REPLAY_IO,        /* the file could not be read */
};

struct store_replay_info {
    uint64_t records;       /* frames applied */
    uint64_t bytes;         /* size of the valid log, header included */
    uint64_t dropped_bytes; /* TRUNCATED: bytes cut off the tail; repair: bytes moved aside */
    uint64_t zero_bytes;    /* zeros that ended the file (after the last frame, or after what
                             * was cut): cut, not copied */
    uint64_t bad_offset;    /* CORRUPT: file offset of the first bad frame */
    char message[256];      /* human-readable outcome, names file and offset */
};

/*
 * Called once per frame during replay, in log order. Returns 0 to go on, or
 * a negative value when the payload cannot be decoded, which replay treats
 * as damage at that frame.
 */
typedef int (*store_apply_cb)(void *ctx, uint8_t type, const uint8_t *payload, size_t len);

struct store;

/*
 * Called on the loop when appends become acknowledged (status 0, every
 * LSN <= lsn is acked) or when a batch failed (status < 0, -errno).
 *
 * On failure every LSN > lsn is lost: in "always" mode that is whatever the
 * failed batch held (the store has cut the file back to its last durable
 * size and dropped those frames), and the caller must undo exactly those
 * changes before acknowledging anything else. In "interval" and "never"
 * nothing is lost (lsn is the last LSN appended): the store keeps every
 * frame and writes it when the disk takes it again.
 *
 * Either way the store is then failing (store_failing) until an attempt
 * succeeds: it retries every opts.retry_ms (with the frames it kept, or
 * with a probe that asks the disk for a page and a sync), and the caller
 * should refuse new writes meanwhile. The next status 0 ends the episode.
 */
typedef void (*store_notify_cb)(struct store *s, uint64_t lsn, int status);

/* Called on the loop when an online compaction finishes (status 0 or -errno). */
typedef void (*store_compact_cb)(struct store *s, int status);

struct store_batch;

struct store {
    uv_loop_t *loop;
    char *dir;
    struct store_opts opts;
    int lock_fd;
    int fd;                    /* eventd.log: frames are written at file_size (pwrite) */
    uint32_t frame_key;        /* eventd.log's (logfile.h; 0: a version 1 log) */
    uint32_t log_version;      /* eventd.log's format (logfile.h): sync marks from 3 on */
    uint64_t mark_size;        /* the last sync mark framed for this file said this (0: none) */
    uint64_t mark_end;         /* ... and ends at this offset of the file */
    uint64_t file_size;        /* bytes in eventd.log written by completed jobs */
    uint64_t durable_size;     /* bytes known to be on disk (fdatasync returned) */
    uint64_t appended_lsn;     /* last LSN handed out */
    uint64_t written_lsn;      /* last LSN written by a completed job */
    uint64_t durable_lsn;      /* last LSN covered by a completed fdatasync */
    uint64_t acked_lsn;        /* last LSN that may be acknowledged */
    struct buf pending;        /* frames appended since the last job took them */
    uint64_t pending_lsn;      /* last LSN inside pending */
    struct store_batch *job;   /* the job in flight, or NULL */
    uv_timer_t interval_timer; /* interval mode */
    uv_timer_t lazy_timer;     /* interval/never modes: writes small batches after a delay */
    store_notify_cb on_notify;
    void *data; /* caller's pointer */
    /* compaction state */
    int compact_fd;         /* -1 when no compaction runs */
    uint32_t compact_key;   /* eventd.log.compact's frame key: a new one each time */
    int compact_dropped;    /* why the store dropped the compaction before its commit: -errno */
    struct buf compact_buf; /* snapshot and tail frames not yet written */
    store_compact_cb on_compact;
    bool compact_committing;
    bool closing;
    uint64_t stats_batches; /* jobs completed */
    uint64_t stats_syncs;   /* fdatasyncs completed (of which the loop thread did
                             * sync.stats_loop_syncs itself) */
    /* private to store.c */
    uv_idle_t kick;                  /* starts jobs at most once per loop iteration */
    struct store_batch *compact_job; /* compaction write in flight, or NULL */
    uint64_t compact_size;           /* bytes already written to eventd.log.compact */
    struct buf spare;                /* an emptied batch buffer, swapped in for pending */
    int compact_cancel;              /* -errno: drop the compaction when its job lands */
    bool switching;                  /* the commit job owns the compaction tail */
    bool sync_wanted;                /* the interval timer (or a retry) asked for a sync */
    bool dir_unsynced;               /* a compaction rename still needs a directory fsync */
    bool needs_cut;                  /* a failed batch could not be cut off the file yet */
    bool retry_due;                  /* the retry timer fired: the next attempt may start */
    int failing;                     /* -errno of the failure episode in progress, 0 if none */
    uint64_t fail_count;             /* failed attempts in this episode */
    uint64_t fail_since;             /* uv_now() when it began */
    uv_timer_t retry_timer;          /* while failing: the next attempt */
    struct buf unsynced;             /* interval, never: frames written since the last sync */
    uint64_t pending_since;          /* store_clock_ns() of the first frame in pending */
    size_t frame_at;                 /* store_frame_begin: where its frame starts in pending */
    bool frame_open;                 /* between store_frame_begin and store_frame_end */
    struct store_sync sync;          /* how batches reach the disk (store_sync.h): only store_sync.c
                                      * changes it; it reports each batch to store.c's callback */
    /* preallocation (store_prealloc) */
    uint64_t prealloc_bytes;          /* zeros kept ahead of the log's end; 0: none */
    uint64_t prealloc_keep_free;      /* ... never leaving the disk less free than this */
    uint64_t prealloc_end;            /* the file holds zeros from file_size to here (0: none) */
    uint64_t prealloc_from;           /* where the job in flight writes its zeros */
    struct store_batch *prealloc_job; /* in flight, or NULL */
    uint32_t prealloc_epoch;    /* bumped by every cut or new file: older jobs count for nothing */
    bool prealloc_failed;       /* the last job failed: said once, retried later */
    uint64_t prealloc_retry_at; /* uv_now() before which no job starts after a failure */
    uint64_t stats_prealloc_bytes; /* zeros written ahead, in all */
};

/*
 * Opens (creating if missing) the data directory and takes its lock.
 * Returns 0, -EWOULDBLOCK when another process holds the lock (the caller
 * prints "data directory DIR is in use by another eventd"), or -errno.
 * Does not read the log: call store_replay next.
 */
int store_open(struct store *s, uv_loop_t *loop, const char *dir, const struct store_opts *opts,
               store_notify_cb on_notify);

/*
 * Reads eventd.log from the start, checking every frame, and calls apply for
 * each. A missing or empty log is created with its header (EMPTY). Zeros from
 * a frame's first byte to the end of the file end the log (preallocated
 * space): they are cut, not copied (OK, info->zero_bytes). A torn tail (a
 * frame running past end of file, or a bad last frame zero from a sector
 * boundary inside it to the end), or in a format 3 log a lost sector that no later
 * sync mark covers (the writes no sync covered, on disk in any order: store_replay.c),
 * is copied aside, cut off with ftruncate and reported as TRUNCATED. A bad frame with valid-looking
 * data after it is CORRUPT, unless opts.repair: then everything from the bad frame on is moved to
 * eventd.log.damaged-<offset>, the log is cut there, and the result is
 * TRUNCATED. May be called again after a failed batch to rebuild state.
 */
enum store_replay_status store_replay(struct store *s, store_apply_cb apply, void *ctx,
                                      struct store_replay_info *info);

/*
 * In "always" mode (other modes ignore it), from now on keeps about bytes
 * (rounded up to 4 KiB) of zeros written and synced past the log's end, jobs
 * on the threadpool writing the next ones 1 MiB at a time: frames then
 * overwrite blocks the file has already, so their fdatasync commits no
 * metadata (file size, block allocation), which halved its time on the disks
 * measured (docs/BENCHMARKS.md). While a job writes, a batch that would reach
 * its zeros waits for it (one job: at most 1 MiB and a sync). store_close
 * cuts the zeros off again, and replay takes zeros at the end of the file for
 * the log's end. 0 stops. A job that would leave its disk less than keep_free
 * (the storage guard's margin) writes nothing; the next is tried later, as
 * after a failure. The server calls it when it starts serving; the
 * command-line tools never.
 */
void store_prealloc(struct store *s, uint64_t bytes, uint64_t keep_free);

/*
 * Frames (type, payload) into the pending buffer and returns its LSN. The
 * bytes go to disk with the next batch; the returned LSN is acked when
 * store_is_acked() says so (immediately outside "always" mode).
 */
uint64_t store_append(struct store *s, uint8_t type, const void *payload, size_t len);

/*
 * store_append without a copy: begin opens a frame in the pending buffer
 * and returns that buffer, to which the caller appends the frame's payload
 * (at most STORE_MAX_PAYLOAD bytes, nothing else); end closes the frame as
 * type and returns its LSN, as store_append does. The buffer is valid, and
 * nothing else may append to the store, from begin to end, which follows
 * without a return to the loop. *frame_bytes: the frame's size, header included.
 */
struct buf *store_frame_begin(struct store *s);
uint64_t store_frame_end(struct store *s, uint8_t type, size_t *frame_bytes);

static inline bool store_is_acked(const struct store *s, uint64_t lsn) {
    return lsn <= s->acked_lsn;
}

/* -errno of the disk failure in progress (writes should be refused), or 0. */
static inline int store_failing(const struct store *s) {
    return s->failing;
}

/* Asks for an fdatasync with the next batch, whatever the mode. */
void store_sync_soon(struct store *s);

/* Test builds: (re)reads the EVENTD_FAULT_* hooks and starts their counts; until the
 * first call no fault is injected. */
static inline void store_faults_rearm(void) {
    logfile_faults_rearm();
}

/* Blocking: writes and fdatasyncs everything pending. For the CLI and shutdown. */
int store_flush_sync(struct store *s);

/*
 * Online compaction. begin opens eventd.log.compact and writes its header;
 * from then on every store_append is also copied to the compaction tail.
 * The caller feeds a snapshot of the live state with store_compact_add in
 * slices (the store writes it out on the threadpool as it grows), then calls
 * store_compact_commit: the rest is written, fdatasynced, renamed over
 * eventd.log and the directory fsynced, all on the threadpool, and cb runs
 * on the loop. Appends made meanwhile wait for the rename before they are
 * acked. Returns 0 or -errno (-EBUSY if a compaction runs already).
 */
int store_compact_begin(struct store *s);
void store_compact_add(struct store *s, uint8_t type, const void *payload, size_t len);
int store_compact_commit(struct store *s, store_compact_cb cb);
/*
 * Removes the compaction file. A commit already running on the threadpool
 * finishes instead. If a compaction write is in flight, store_compacting()
 * stays true until it lands. The cb given to commit, if any, gets -ECANCELED.
 * A failed log batch aborts a running compaction the same way (cb gets its
 * -errno), since the snapshot may hold records that were lost.
 */
void store_compact_abort(struct store *s);
static inline bool store_compacting(const struct store *s) {
    return s->compact_fd >= 0;
}
/* Bytes added for the compaction that no job has taken yet: a snapshot feeder
 * may pause while this is large (say over 8 MiB) to bound memory on a slow disk. */
static inline size_t store_compact_backlog(const struct store *s) {
    return s->compact_buf.len;
}

/*
 * Waits for the job in flight, flushes what is pending, closes every handle
 * (the loop must then run until the timer handles are closed) and releases
 * the lock. Returns 0, or the -errno of the last attempt when frames that
 * were appended (and in "interval"/"never" acknowledged) could not be
 * written: they are lost, and the caller should say so in its exit status.
 */
int store_close(struct store *s);

/* What store_copy_log copied: the log's first bytes (whole frames), and its frames. */
struct store_copy_stats {
    uint64_t bytes, frames;
};
/*
 * Copies dir's log to out_path (created; it must not exist) while a server may be
 * writing it: every frame checked as it is read, one not intact yet read again for a
 * while, the copy ended at the first that stays so. The copy is a prefix of the log cut
 * at a frame's end, which a server starts on as it is (eventd backup; store_copy.c).
 * Returns 0 or -errno (-EINVAL: not a log; -EPROTONOSUPPORT: a newer format); no file
 * is left at out_path on failure.
 */
int store_copy_log(const char *dir, const char *out_path, struct store_copy_stats *st);

#endif
