/*
 * index: the in-memory state rebuilt from the log: id -> record, each
 * user's records of each kind in id order, users by name, idempotency keys
 * by user and key, the next id, and the event links (a theme's or address's
 * EventID).
 *
 * The index owns every record in it. index_apply has the store_apply_cb
 * shape, so replay feeds the log straight into it; the live server applies
 * the same frames it appends, so memory and log can never disagree.
 */
#ifndef EVENTD_INDEX_H
#define EVENTD_INDEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "storage/record.h"

struct id_list {
    uint64_t *ids; /* ascending */
    uint32_t len;
    uint32_t cap;
};

/* The position of the first id >= id in l (l->len when there is none). */
uint32_t id_list_lower_bound(const struct id_list *l, uint64_t id);

struct owner; /* one user's record lists */

/* A table slot keeps the id beside the pointer, so probing never touches a record. */
struct index_slot {
    uint64_t id;
    struct record *r; /* NULL empty, or the tombstone mark of a deleted slot (index.c) */
};

/*
 * The id table is split in INDEX_SHARDS open-addressing tables by hash, so
 * that growing one rehashes 1/256 of the records: a pause of microseconds to
 * a millisecond or two, never a whole-table stop.
 */
#define INDEX_SHARDS 256
#define INDEX_KINDS 8 /* record types are below this (record.h) */

struct index_shard {
    struct index_slot *slots;
    uint32_t cap;   /* power of two */
    uint32_t count; /* live records */
    uint32_t used;  /* live + tombstones */
};

/* Ids by the hash of a name (index.c): users by name, idempotency keys by user and key.
 * Each is NAME_SHARDS tables by the hash's top bits, as the id table is split, so that
 * growing one rehashes a 256th of the names: a single table of two million keys stopped
 * the loop for 50 ms when it doubled (tests/bench/bench_keys.c). */
#define NAME_SHARDS 256
#define OWNER_SHARDS 256
struct name_entry {
    uint64_t id;   /* 0 empty */
    uint64_t hash; /* of the name (and user) */
};
struct name_table {
    struct name_entry *slots;
    size_t cap;  /* power of two */
    size_t used; /* live + deleted marks */
    size_t live;
};

struct index {
    struct index_shard shards[INDEX_SHARDS];
    size_t count;                         /* live records */
    size_t events;                        /* live events: without any, no EventID needs relinking */
    struct name_table names[NAME_SHARDS]; /* users by name */
    struct name_table keys[NAME_SHARDS];  /* REC_IDEM records by user and key */
    /* The name tables' SipHash key, drawn at index_init: names and idempotency keys are
     * chosen by clients, and with a hash they could compute they could choose names that
     * share one probe run and make every insert and lookup in it slow. */
    unsigned char name_key[16];
    /* Users' lists, quotas and change feeds by user id, open addressing, in
     * OWNER_SHARDS tables by the id's hash (each grown on its own, as the id table). */
    struct owner_table {
        struct owner *slots;
        size_t cap;
        size_t count;
    } owners[OWNER_SHARDS];
    uint64_t next_id;   /* above every id of this node seen; never goes down */
    uint64_t id_floor;  /* replay: the last REC_NEXT_ID frame (ids below it may be taken) */
    uint64_t rev_floor; /* replay: the last REC_REV_FLOOR frame (revs up to it may be taken) */
    uint64_t id_min;    /* the ids this node hands out: id_min..id_max (record.h) */
    uint64_t id_max;
    uint32_t node_id;           /* from a REC_NODE frame; 0 without one */
    bool node_recorded;         /* a REC_NODE frame was applied */
    bool written;               /* a record or a deletion was applied: the log holds data */
    uint64_t rev;               /* the rev counter: the highest rev applied or handed out */
    uint64_t rev_horizon;       /* every change with a rev above it is in the log (REC_REVS) */
    uint64_t users_gen;         /* counts the changes of REC_USER records (puts, swaps and
                                 * removals, undo and replay included): index_users_gen */
    struct id_list foreign;     /* ids of records outside id_min..id_max (imported), ascending */
    uint64_t live_bytes;        /* encoded payload bytes of live records (frames included) */
    struct index_slot *scratch; /* a shard's live slots while it grows */
    /* An undo's changes to list again (index_change_undo), merged into their lists once
     * the undo is done (index_change_undo_done). */
    struct index_relist *relist;
    size_t relist_len, relist_cap;
    uint64_t undo_moved; /* change-list entries an undo moved or wrote (its cost, for tests) */
    size_t scratch_cap;
    /* The same two by record type (enum rec_type below INDEX_KINDS), for /metrics. */
    uint64_t kind_count[INDEX_KINDS];
    uint64_t kind_bytes[INDEX_KINDS];
};

void index_init(struct index *ix);
void index_destroy(struct index *ix);

/*
 * Applies one log frame. Returns 0, or -1 if the payload is malformed. A
 * change frame not wrapped in REC_REV (an older log's) takes the next rev.
 */
int index_apply(void *ix, uint8_t type, const uint8_t *payload, size_t len);

/*
 * Inserts or replaces; takes ownership of r. Returns the record it replaced
 * (now the caller's, to free with record_free or to put back later), or NULL.
 */
struct record *index_swap(struct index *ix, struct record *r);
/*
 * index_swap of a change made at r->rev, which the change feed lists too
 * (index_change_add with INDEX_OP_UPDATE, or INDEX_OP_CREATE when r is new),
 * with one lookup of r's owner for both.
 */
struct record *index_swap_change(struct index *ix, struct record *r);
/* index_swap, freeing the replaced record. */
void index_put(struct index *ix, struct record *r);
/* Removes the record and returns it (now the caller's), or NULL if absent. */
struct record *index_remove(struct index *ix, uint64_t id);
/* index_remove, freeing the record; returns 0 or -1 if absent. */
int index_delete(struct index *ix, uint64_t id);
/*
 * The record with this id, or NULL: read-only (records change only by a
 * put, swap or removal; the index alone updates their event links). Valid
 * until the next put, swap or removal of that id (including a db undo):
 * never keep it across loop turns.
 */
const struct record *index_get(const struct index *ix, uint64_t id);
/*
 * A value that changes whenever a REC_USER record is put, replaced or
 * removed: while it is what it was, every user record is the one it was
 * then (same pointer, same fields). Never repeats.
 */
static inline uint64_t index_users_gen(const struct index *ix) {
    return ix->users_gen;
}
/* The user with this name, or NULL. Valid as index_get's result. */
const struct record *index_user_by_name(const struct index *ix, const char *ptr, size_t len);

/* The user's REC_IDEM record with this key, or NULL. Valid as index_get's result. */
const struct record *index_idem_get(const struct index *ix, uint64_t user_id, const char *ptr,
                                    size_t len);

/* A user's ids of one kind, ascending; an empty list when none. Valid until
 * the next change of the index. */
const struct id_list *index_owned(const struct index *ix, uint64_t user_id, uint8_t type);

/*
 * What a user's quota counts (docs/ACCOUNTS.md): its live records of the
 * kinds record_type_in_quota names, and the sum of their record_size. Kept
 * up to date by every put, swap and removal (replay and undo included), so
 * reading it is one lookup.
 */
struct index_usage {
    uint64_t records;
    uint64_t bytes;
};
struct index_usage index_usage(const struct index *ix, uint64_t user_id);
/* The record_size of the user's idempotency keys (REC_IDEM records) together, and of the
 * records that keys by reference may come to hold (record.h, IDEM_REF_MARK). */
uint64_t index_idem_bytes(const struct index *ix, uint64_t user_id);

/*
 * Makes node the owner of this index's id space (record.h): next_id moves
 * into node's range, and from now on only ids in that range raise it, so
 * records imported from other nodes keep their ids without taking this
 * node's. Called by replay for a REC_NODE frame and by db for a new shard.
 */
void index_set_node(struct index *ix, uint32_t node);

/* Hands out the next id (<= id_max) or 0 when the node's id space is used up. */
uint64_t index_take_id(struct index *ix);

/*
 * Sizes every shard's table for about `records` records, so that they arrive
 * without the table growing (each growth rehashes and moves it). Only ever
 * grows a table. Replay calls it once it can estimate the log's records.
 */
void index_reserve(struct index *ix, size_t records);

/*
 * Replay's apply callback (store_replay's ctx: a struct index_replay with
 * ix and the log's size set, the rest zero): index_apply, and after the
 * first INDEX_SIZING_FRAMES frames, whose mean size estimates how many the
 * whole file holds, index_reserve for that many. Growing the index shard by
 * shard as records arrive rehashed and moved every table several times: a
 * quarter of replay's time. Frames that delete or replace make the estimate
 * high, by at most what compaction leaves dead; later frames larger than the
 * first ones make it high too, but then the records are larger in
 * proportion, and the index's resident pages stay under 256 B per record (a
 * 4 KiB page per run of 16 ids) whatever the tables' size.
 */
#define INDEX_SIZING_FRAMES 4096
struct index_replay {
    struct index *ix;
    uint64_t file_bytes;  /* the log's size */
    uint64_t frames;      /* frames seen, up to INDEX_SIZING_FRAMES */
    uint64_t frame_bytes; /* their bytes, headers included */
};
int index_replay_apply(void *ctx, uint8_t type, const uint8_t *payload, size_t len);

/*
 * The change feed's index (README "The change feed"): each user's changes
 * of the kinds record_type_in_quota names, with a rev above the horizon, in
 * rev order: 16 bytes a change, at most one per change frame of the log
 * since its last compaction (changes at or below the horizon are dropped
 * when a compaction ends: index_changes_trim). A change superseded by a later one stays
 * listed until the list next fills; a reader shows one only while it is
 * current: index_change_current.
 */
enum index_op { INDEX_OP_CREATE = 1, INDEX_OP_UPDATE = 2, INDEX_OP_DELETE = 3 };
struct index_change {
    uint64_t rev;
    uint64_t word; /* id (bits 0..52), type (53..55), enum index_op (56..57) */
};
static inline uint64_t index_change_id(const struct index_change *c) {
    return c->word & RECORD_ID_MAX;
}
static inline uint8_t index_change_type(const struct index_change *c) {
    return (uint8_t)(c->word >> 53 & 7);
}
static inline uint8_t index_change_op(const struct index_change *c) {
    return (uint8_t)(c->word >> 56 & 3);
}
struct index_changes {
    struct index_change *v; /* ascending rev */
    uint32_t len, cap;
};
/* Records a change of user's record id (type, op) made at rev; ignored for other kinds or a
 * rev at or below the horizon. */
void index_change_add(struct index *ix, uint64_t user_id, uint64_t rev, uint64_t id, uint8_t type,
                      uint8_t op);
/* After a compaction raised the horizon: every list drops its changes at or below it, and
 * gives back the room it no longer needs (a user who stopped writing would keep them). */
void index_changes_trim(struct index *ix);
/* The change of user's record id (type) made at rev was undone (a failed batch), and the
 * record is restored (NULL: absent): the change leaves the list, and restored's own
 * change is listed again if it had left. undone_from: the rev of the oldest change the
 * undo takes back (a restored state at or above it is taken back too, and not listed).
 * The listings wait for index_change_undo_done, called once the undo is over: merged
 * list by list, so that an undo of n changes costs about n, not n times a list. */
void index_change_undo(struct index *ix, uint64_t user_id, uint8_t type, uint64_t id, uint64_t rev,
                       const struct record *restored, uint64_t undone_from);
void index_change_undo_done(struct index *ix);
struct index_relist {
    uint64_t user_id;
    struct index_change c;
};
/* The user's changes (an empty list when none): valid until the next change of the index. */
const struct index_changes *index_changes_of(const struct index *ix, uint64_t user_id);
/* The position of the first change with a rev above rev. */
uint32_t index_changes_after(const struct index_changes *l, uint64_t rev);
/* The record a current change shows (NULL for a deletion), or the tombstone mark
 * INDEX_CHANGE_STALE when the change is no longer what the index holds. */
#define INDEX_CHANGE_STALE ((const struct record *)(uintptr_t)1)
const struct record *index_change_current(const struct index *ix, const struct index_change *c);

/* Recomputes every theme's and address's EventID from the events (after replay). */
void index_relink(struct index *ix);

#endif
