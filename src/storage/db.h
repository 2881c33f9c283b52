/*
 * db: the data layer: the index and the log behind it. Every change goes
 * through db_put/db_delete: encode the frame, append it to the store, apply
 * it to the index. The same frames replay into the same index at the next
 * start. The layers above read records only through db's lookups (db_get,
 * db_owned, db_user_by_name, db_stats, ...), never the index or the store
 * inside (tests/lint/layers.py checks the index).
 *
 * Until the store acknowledges a change (in "always" mode: until the
 * fdatasync that covers it returns), db keeps what the change replaced, so
 * that a failed batch is undone exactly: the records it created are removed,
 * the ones it replaced or deleted come back. Nothing else in memory moves,
 * and nothing is freed that a request may still hold: requests hold ids,
 * never record pointers across loop turns.
 *
 * Ids are reserved ahead of use in blocks with a REC_NEXT_ID frame that is
 * synced before any id of its block is handed out (in "always" mode the
 * covering sync does that), so an id is never handed out twice, even after
 * a crash that lost acknowledged records in "interval" or "never" mode. A
 * clean close gives back the unused rest of the block.
 *
 * A shard (node id N > 0) hands out ids of its own range only (record.h).
 * The node id is recorded durably in the log (a REC_NODE frame, written by
 * the first open under that node id, kept by compaction), and the
 * directory refuses to open under any other node id.
 *
 * Acknowledgements go up through db_ack_cb, which the assembly (app) wires
 * to the server: db knows nothing of connections.
 *
 * Threading: loop thread only.
 */
#ifndef EVENTD_DB_H
#define EVENTD_DB_H

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "storage/auth.h"
#include "storage/index.h"
#include "storage/store.h"

#define DB_ID_BLOCK 65536u      /* ids reserved by one synced REC_NEXT_ID frame */
#define DB_REV_BLOCK (1u << 20) /* revs reserved by one REC_REV_FLOOR frame */

/*
 * Called when every LSN <= lsn is acknowledged (status 0), or after a
 * failed batch (status -errno): then every LSN > lsn was lost and has been
 * undone in the index, and responses waiting for such an LSN must fail.
 */
typedef void (*db_ack_cb)(void *ctx, uint64_t lsn, int status);

/* Called when a compaction ends: status 0 or -errno. */
typedef void (*db_compact_cb)(void *ctx, int status);

/* Values reserved ahead of use by a frame in the log (db.c: reserve, settle). */
struct db_reservation {
    uint8_t frame_type; /* REC_NEXT_ID or REC_REV_FLOOR */
    uint64_t reserved;  /* by a frame in the log */
    uint64_t durable;   /* ... by a frame known to be on disk */
    uint64_t frame_lsn; /* LSN of the newest reservation frame, 0 once settled */
    uint64_t frame_next;
};

struct db_undo {
    uint64_t lsn;       /* the change's LSN */
    uint64_t id;        /* the record it changed */
    uint64_t rev;       /* the change's rev */
    struct record *old; /* what the change replaced (owned), or NULL if id was absent */
};

/*
 * The server-wide guard (db_room): writes that add data are refused while
 * the live data is over max_live_bytes or the data directory's filesystem
 * has less than min_free_disk free, before memory or the disk runs out.
 * The free space is read with fstatvfs at most every DB_DISK_CHECK_MS (when
 * a write asks); in between, what this process appended since is taken off
 * the last reading, so eventd's own writes count at once.
 */
#define DB_DISK_CHECK_MS 1000
/* After a failed compaction, the next automatic one waits this long: a disk too full for
 * the new log would otherwise fail one per loop turn. */
#define DB_COMPACT_RETRY_MS 10000
struct db_guard {
    uint64_t max_live_bytes;    /* 0: no limit */
    uint64_t min_free_disk;     /* bytes; 0: not checked */
    uint64_t free_at_check;     /* bytes free for us at the last reading */
    uint64_t appended_at_check; /* db->appended then */
    uint64_t checked_ms;        /* uv_now then */
    uint64_t append_below;      /* db->appended below this keeps min_free_disk free (0: none) */
    bool checked;               /* a reading was taken */
    bool warned;                /* the refusal was logged since the guard last let writes in */
};

/* A keyed create between db_keyed_begin and db_keyed_end: its record, and the frame's buffer. */
struct db_keyed {
    struct record *r;
    struct buf *out;
};

struct db {
    uv_loop_t *loop;
    struct store store;
    struct index index;
    struct buf scratch;   /* a compaction snapshot frame's payload being encoded */
    struct db_undo *undo; /* changes not yet acknowledged, oldest first, from undo_head */
    size_t undo_head, undo_len, undo_cap;
    uint64_t visible_lsn; /* LSN of the last change the index shows */
    /* Ids below ids.reserved (REC_NEXT_ID), and revs up to revs.reserved
     * (REC_REV_FLOOR), are reserved by a frame in the log: what was handed out
     * is never handed out again after a restart, even a rev whose change was
     * undone or lost in a crash. */
    struct db_reservation ids, revs;
    db_ack_cb on_ack;
    void *ack_ctx;
    /* compaction */
    uv_idle_t compact_idle;        /* drives the snapshot, one slice per loop iteration */
    uint64_t compact_next;         /* next id to snapshot */
    uint64_t compact_end;          /* ids below this are in the snapshot */
    uint64_t compact_foreign_next; /* then: next id of index.foreign to snapshot */
    bool compact_snapped;          /* every slice done: the commit is in flight */
    bool compacting;
    bool opened_empty;         /* db_opened_empty */
    int compact_status;        /* outcome of the last compaction: 0 or -errno */
    uint64_t compact_retry_at; /* uv_now() before which no automatic one starts (a failure) */
    uint64_t stats_compactions_ok, stats_compactions_failed; /* finished compactions */
    db_compact_cb on_compacted;
    void *compact_ctx;
    uint64_t compact_now_s;   /* Unix time the compaction began (key expiry), s */
    uint64_t compact_horizon; /* the rev counter then: the new log's horizon (index.h) */
    uint32_t idem_ttl_s;      /* idempotency keys live this long, s */
    bool open;
    uint64_t appended;     /* frame bytes this process appended to the log */
    struct db_keyed keyed; /* the create db_keyed_begin encoded, until db_keyed_end */
    struct db_guard guard;
};

/*
 * Opens the data directory (taking its lock), replays the log into the
 * index, checks or records node_id (0: unsharded, else 1..RECORD_NODE_MAX)
 * and reserves the first block of ids. A directory recorded under another
 * node id, or one holding data of node 0 (no REC_NODE frame) opened as
 * node N > 0, is refused. Returns 0, or -1 after writing the reason (naming
 * the directory, the damaged offset or both node ids) to msg.
 */
/*
 * The data layer's settings (docs/ARCHITECTURE.md "Settings"): app.c fills
 * them from the configuration; db_open copies them.
 */
struct db_settings {
    struct store_opts store_opts; /* the log's (store.h) */
    uint32_t node_id;             /* 0: unsharded, else 1..RECORD_NODE_MAX (--node-id) */
    uint64_t max_live_bytes;      /* the guard (struct db_guard): live data at most; 0: no check */
    uint64_t min_free_disk;       /* ... and free disk at least, bytes; 0: no check */
    uint32_t idem_ttl_s;          /* idempotency keys kept this long (--idempotency-ttl-s), s */
};
int db_open(struct db *db, uv_loop_t *loop, const char *dir, const struct db_settings *set,
            char *msg, size_t msg_len);
/*
 * Flushes (giving back unused reserved ids), closes the store and frees the
 * index; the loop must then run until the closed handles' callbacks ran.
 * Returns 0 or the -errno of the last flush.
 */
int db_close(struct db *db);

/* Where acknowledgements go. ctx is the caller's; cb may be NULL. */
void db_on_ack(struct db *db, db_ack_cb cb, void *ctx);

/* 0 if writes are accepted, or the -errno of the disk failure in progress. */
static inline int db_writable(const struct db *db) {
    return store_failing(&db->store);
}

/*
 * 0 when a write that adds data may go ahead, -ENOMEM when the live data
 * is at max_live_bytes, -ENOSPC when the free disk is below min_free_disk.
 * Deletions never ask: they free space. A system call at most every
 * DB_DISK_CHECK_MS, else a few comparisons.
 */
int db_room_check(struct db *db);
static inline int db_room(struct db *db) {
    /* The common case without a call: under both limits, the reading fresh, nothing refused. */
    const struct db_guard *g = &db->guard;
    if ((!g->max_live_bytes || db->index.live_bytes < g->max_live_bytes) && !g->warned &&
        (!g->min_free_disk ||
         (db->appended < g->append_below && uv_now(db->loop) - g->checked_ms < DB_DISK_CHECK_MS)))
        return 0;
    return db_room_check(db);
}
/* The guard's thresholds (db_settings), for naming the one that refused. */
static inline uint64_t db_max_live_bytes(const struct db *db) {
    return db->guard.max_live_bytes;
}
static inline uint64_t db_min_free_disk(const struct db *db) {
    return db->guard.min_free_disk;
}
/* This server's node (--node-id): 0 unsharded, else 1..RECORD_NODE_MAX. */
static inline uint32_t db_node_id(const struct db *db) {
    return db->index.node_id;
}

/*
 * The next id for a new record. Returns 0, -ERANGE when the node's id space
 * (2^43 ids for a shard, 2^53 unsharded) is used up, or -EAGAIN when the next reserved block is not
 * yet on disk (only on a disk slower than a block of creates: answer 503, retry).
 */
int db_take_id(struct db *db, uint64_t *id);

/* Appends a record (insert or replace) and applies it; takes ownership of r. Returns its LSN. */
uint64_t db_put(struct db *db, struct record *r);
/*
 * db_put of record_build(k, id, user_id, vals), built and encoded in one pass
 * (record_build_encode: outside given, vals must hold k's defaults).
 * Returns the record (the index's: valid as db_get's) and its LSN in *lsn.
 */
const struct record *db_put_values(struct db *db, const struct kind_desc *k, uint64_t id,
                                   uint64_t user_id, const union value *vals, uint32_t given,
                                   uint64_t *lsn);
/*
 * A create and its idempotency key (a REC_IDEM record of the same user) in
 * one REC_KEYED frame, applied together, durable or undone together.
 * db_keyed_begin builds the record as db_put_values does, encoded straight
 * into the frame it opens, and returns it (not yet in the index) so that
 * the caller can render the answer the key keeps; db_keyed_end builds the
 * key from key_vals (record_idem's fields) after it, closes the frame,
 * applies both and returns the LSN. Nothing may change db in between.
 */
const struct record *db_keyed_begin(struct db *db, const struct kind_desc *k, uint64_t id,
                                    uint64_t user_id, const union value *vals, uint32_t given);
uint64_t db_keyed_end(struct db *db, uint64_t key_id, const union value *key_vals);
/* True while a change of id waits for its acknowledgement (an fdatasync in "always"). */
bool db_unacked(const struct db *db, uint64_t id);

/*
 * Idempotency keys are kept at least ttl_s seconds from their creation
 * (--idempotency-ttl-s), then forgotten: ignored by lookups at once,
 * dropped from memory and the log by the next compaction.
 */
#define DB_IDEM_TTL_S 86400u
/* Key k (a REC_IDEM record) is past its time at Unix time now_s. */
static inline bool db_idem_expired(const struct db *db, const struct record *k, uint64_t now_s) {
    return record_get(k, IDEM_CREATED).i + db->idem_ttl_s <= now_s;
}

/* Appends a deletion of id and applies it. Returns its LSN. */
uint64_t db_delete(struct db *db, uint64_t id);
/*
 * Creates or replaces user id: its name, the hash of its API key (empty: no
 * key) and the Argon2id hash of its password (empty: none). The slices are
 * copied; a replaced user keeps its own quota limits. Returns its LSN.
 */
uint64_t db_put_account(struct db *db, uint64_t id, struct slice name, struct slice key_hash,
                        struct slice password_hash);
/*
 * Replaces user id (which must exist) with its own quota limits set: field
 * USER_MAX_RECORDS and USER_MAX_BYTES values as stored (record.h: limit + 1,
 * 0 for the server's default). Returns its LSN.
 */
uint64_t db_put_user_limits(struct db *db, uint64_t id, uint64_t max_records, uint64_t max_bytes);
/* The id of the admin token named name, or 0. */
uint64_t db_admin_token(const struct db *db, const char *name);
/* Creates or replaces user id with this name and the hash of key, keeping its password. */
uint64_t db_put_user(struct db *db, uint64_t id, const char *name, const char *key);

/*
 * ---- Reads: the surfaces reach records only through these ----
 *
 * A record returned is the index's, read-only: valid until the next
 * db_put/db_delete of that id, or the undo of a failed batch, so never kept
 * across loop turns (keep its id). A list returned is valid until the next
 * change of the db.
 */

/* The record with this id, or NULL. */
static inline const struct record *db_get(const struct db *db, uint64_t id) {
    return index_get(&db->index, id);
}
/* The record with this id if it is of this type and user_id's, else NULL (another user's too). */
static inline const struct record *db_get_owned(const struct db *db, uint64_t id, uint8_t type,
                                                uint64_t user_id) {
    const struct record *r = index_get(&db->index, id);
    return r && r->type == type && r->user_id == user_id ? r : NULL;
}
/* The record that field `field` of rec refers to (record_ref: an event's theme or address), or
 * NULL. */
static inline const struct record *db_get_ref(const struct db *db, const struct record *rec,
                                              int field) {
    uint64_t id = record_ref(rec, field);
    return id ? index_get(&db->index, id) : NULL;
}
/* An id of this node's own range that it has not handed out yet: a record
 * there (an import) would move its next id past it, and a compaction walks
 * the own range up to the next id. */
static inline bool db_id_unissued(const struct db *db, uint64_t id) {
    return id >= db->index.next_id && id <= db->index.id_max;
}
/* The log held no record when it was opened (a new data directory; id and rev
 * reservations do not count): the demo user is made only then. */
static inline bool db_opened_empty(const struct db *db) {
    return db->opened_empty;
}
/* Changes whenever a user record changes (index_users_gen): equal to an earlier value, every
 * user record is as it was then. */
static inline uint64_t db_users_gen(const struct db *db) {
    return index_users_gen(&db->index);
}
/* The user named <ptr, len>, or NULL. */
static inline const struct record *db_user_by_name(const struct db *db, const char *ptr,
                                                   size_t len) {
    return index_user_by_name(&db->index, ptr, len);
}
/* user_id's idempotency key <ptr, len> (a REC_IDEM record, maybe expired: db_idem_expired), or
 * NULL. */
static inline const struct record *db_idem_get(const struct db *db, uint64_t user_id,
                                               const char *ptr, size_t len) {
    return index_idem_get(&db->index, user_id, ptr, len);
}
/*
 * user_id's ids of one kind, ascending (an empty list when none). The users
 * and the admin tokens own themselves: DB_SYSTEM with REC_USER, REC_ADMIN.
 */
#define DB_SYSTEM UINT64_MAX
static inline const struct id_list *db_owned(const struct db *db, uint64_t user_id, uint8_t type) {
    return index_owned(&db->index, user_id, type);
}
/* How many: db_owned's length. */
static inline uint32_t db_count(const struct db *db, uint64_t user_id, uint8_t type) {
    return index_owned(&db->index, user_id, type)->len;
}
/* The bytes of user_id's idempotency keys together (index_idem_bytes). */
static inline uint64_t db_idem_bytes(const struct db *db, uint64_t user_id) {
    return index_idem_bytes(&db->index, user_id);
}
/* What user_id's quota counts (index_usage): one lookup. */
static inline struct index_usage db_usage(const struct db *db, uint64_t user_id) {
    return index_usage(&db->index, user_id);
}
/* The user behind an Authorization header value, or NULL (auth_check over the db's users). */
static inline const struct record *db_auth_check(const struct db *db, struct slice header) {
    return auth_check(&db->index, header);
}
/* A decoy user for the name <ptr, len> (auth_decoy_user), or NULL when there are no users. */
static inline const struct record *db_auth_decoy(const struct db *db, const char *ptr, size_t len) {
    return auth_decoy_user(&db->index, ptr, len);
}
/* Whether a new idempotency key may answer by reference to its record (record.h,
 * idem_by_ref): only in a log of format 4 (logfile.h), which an eventd that would
 * replay such a key's answer (a mark and a size, not a body) refuses as newer. An
 * older log is rewritten in format 4 by the compaction of the first start
 * (db_maybe_compact). */
static inline bool db_idem_by_ref(const struct db *db) {
    return db->store.log_version >= STORE_VERSION;
}

/* How long idempotency keys are kept (struct db_settings), s. */
static inline uint32_t db_idem_ttl(const struct db *db) {
    return db->idem_ttl_s;
}

/* The figures /metrics shows, read at once by db_stats. */
struct db_stats {
    uint64_t log_bytes;               /* the log's size, bytes (up to its last frame) */
    uint64_t prealloc_bytes;          /* zeros preallocated past it */
    uint64_t live_bytes;              /* the live records' frames: what compaction keeps */
    uint64_t kind_count[INDEX_KINDS]; /* live records by type */
    uint64_t kind_bytes[INDEX_KINDS]; /* their frames' bytes by type */
    uint64_t syncs;                   /* fdatasyncs of the log done (compactions' too) */
    uint64_t loop_syncs;              /* of those, done on the loop thread */
    uint64_t compactions_ok;          /* compactions finished */
    uint64_t compactions_failed;      /* ... and failed */
};
void db_stats(const struct db *db, struct db_stats *out);

/* Writes and syncs every change appended so far, waiting for it (offline tools). 0 or -errno. */
int db_sync_now(struct db *db);

/* The last LSN acknowledged (db_ack_cb's lsn so far): where a new listener of acks starts. */
static inline uint64_t db_acked_lsn(const struct db *db) {
    return db->store.acked_lsn;
}

/* The rev counter: the newest change's rev (docs/STORAGE.md "Revisions"). */
static inline uint64_t db_rev(const struct db *db) {
    return db->index.rev;
}
/* The log's horizon: every change with a rev above it is in the log. */
static inline uint64_t db_rev_horizon(const struct db *db) {
    return db->index.rev_horizon;
}
/* The user's changes (index.h, the change feed's), valid as db_owned's list. */
static inline const struct index_changes *db_changes(const struct db *db, uint64_t user_id) {
    return index_changes_of(&db->index, user_id);
}
/* What a change shows while current: its record, NULL for a deletion, or INDEX_CHANGE_STALE. */
static inline const struct record *db_change_current(const struct db *db,
                                                     const struct index_change *c) {
    return index_change_current(&db->index, c);
}

/* The LSN a response must wait for to show no change that could still be lost. */
static inline uint64_t db_visible_lsn(const struct db *db) {
    return db->visible_lsn;
}

/* The server's preallocation of the log (store_prealloc): bytes of zeros past its end. */
void db_prealloc(struct db *db, uint64_t bytes);
/* Starts an online compaction (no-op if one runs). Returns 0 or -errno. cb may be NULL. */
int db_compact_start(struct db *db, db_compact_cb cb, void *ctx);
/* Starts one if the log is over ratio x the live data and at least min_bytes (ratio 0: never),
 * and no compaction failed in the last DB_COMPACT_RETRY_MS. */
void db_maybe_compact(struct db *db, double ratio, uint64_t min_bytes);
/* Offline compaction of an open db that is not serving: runs the loop until done. 0 or -errno. */
int db_compact_now(struct db *db);

#endif
