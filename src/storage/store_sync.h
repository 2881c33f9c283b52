/*
 * store_sync: how the store's batches reach the disk (store_sync.c), behind
 * a narrow interface. The store (store.c) decides what a batch holds and
 * what its outcome means; the sync path runs the batch's body (on the loop
 * thread or on libuv's threadpool), keeps the one state of its own that
 * picks between them (the loop's recent sync time), and hands each finished
 * batch back through the store_sync_done_cb the store registered. It never
 * reads the store: what it needs comes in struct store_sync (set once by
 * store_sync_init) or as arguments.
 *
 * The batch itself (struct store_batch) is shared by both sides and lives in
 * store_internal.h. Not for modules outside the store.
 *
 * Threading: every function here runs on the loop thread; only the batch
 * bodies run on the threadpool, and they touch only their batch.
 */
#ifndef EVENTD_STORE_SYNC_H
#define EVENTD_STORE_SYNC_H

#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <uv.h>

struct store_batch;

/*
 * The store's clock for timing its batches, ns: CLOCK_MONOTONIC, the clock
 * uv_hrtime reads. A durable write reads it three or four times (its first
 * frame, the gathering test, the sync's start and end), so it is read here
 * without libuv's wrapper, which costs about as much again as the read.
 */
static inline uint64_t store_clock_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/*
 * Called on the loop when a submitted batch's body has run: its results are
 * in the batch, for the store to apply. restart is true when the call comes
 * from the threadpool's completion (the store may start its next jobs from
 * here), false when it comes from inside store_sync_submit (a batch run on
 * the loop) or store_sync_wait. The batch is the sync path's to free (or keep
 * for reuse) after the call, except after store_sync_wait (below).
 */
typedef void (*store_sync_done_cb)(void *ctx, struct store_batch *b, bool restart);

struct store_sync {
    uv_loop_t *loop;
    const char *dir;           /* the data directory (the store's; outlives every batch) */
    bool always;               /* "always" mode: plain batches sync (on the loop or not) */
    uint64_t loop_sync_max_ns; /* plain batches run on the loop below this sync_ns */
    uint64_t sync_ns;          /* recent time of a plain batch on the loop, ns (a moving average):
                                * its fdatasync in "always" mode, else its write */
    uint64_t loop_sync_at;     /* uv_now() of the last plain batch run on the loop */
    uint64_t stats_loop_syncs; /* log fdatasyncs the loop thread did itself */
    store_sync_done_cb on_done;
    void *done_ctx;
    struct store_batch *spare; /* a finished batch kept for the next one (store_internal.h) */
    bool closed;               /* store_sync_destroy ran: finished batches are freed */
};

/*
 * Sets up sy for a store in dir (borrowed: must outlive sy's batches) on
 * loop: "always" mode or not, the --loop-sync-max-us threshold (0: never on
 * the loop), and where finished batches go (on_done with ctx).
 */
void store_sync_init(struct store_sync *sy, uv_loop_t *loop, const char *dir, bool always,
                     uint32_t loop_sync_max_us, store_sync_done_cb on_done, void *ctx);

/* Frees what sy keeps. Batches still in flight free themselves when they land. */
void store_sync_destroy(struct store_sync *sy);

/*
 * True while a plain "always" batch that would block the loop for its sync
 * should first let the loop take in input that is already waiting (the
 * store's kick asks every loop turn). batch_ready: the store's next batch
 * would be such a plain batch (nothing in flight, frames pending, no failure,
 * cut, directory sync or compaction switch owed); pending_since:
 * store_clock_ns() of its first frame.
 */
bool store_sync_gathering(const struct store_sync *sy, bool batch_ready, uint64_t pending_since);

/* The loop's sync-time average after one more loop sync of sample ns (max_ns: the threshold). */
uint64_t store_sync_average(uint64_t avg, uint64_t sample, uint64_t max_ns);

/*
 * Starts a batch (from store_batch_new with this sy). on_done runs on the
 * loop when it is done: before this returns for a plain batch that runs on
 * the loop thread, else from the threadpool's completion.
 */
void store_sync_submit(struct store_sync *sy, struct store_batch *b);

/*
 * Blocking: waits for a submitted batch and hands it to on_done (restart
 * false). Returns the log part's -errno, 0 for a compaction batch. b is
 * freed later by its own threadpool completion, which then only frees it.
 */
int store_sync_wait(struct store_sync *sy, struct store_batch *b);

/* Runs a log batch's body here and now (store_flush_sync), with no hand-off. */
void store_sync_run(struct store_batch *b);

#endif
