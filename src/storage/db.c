/*
 * db: see db.h.
 *
 * Replay happens in db_open, before anything can listen, so no request ever
 * sees a partial state. Online compaction snapshots the index in slices of
 * about a millisecond, one per loop turn, so the loop keeps serving; records
 * changed meanwhile also reach the new file through the store's tail copy,
 * and the last image of each record wins at replay.
 */
#include "storage/db.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>

#include "common/log.h"
#include "common/varint.h"
#include "storage/auth.h"

#define COMPACT_SLICE_IDS 5000         /* ids examined per slice: about a millisecond */
#define COMPACT_MAX_BACKLOG (8u << 20) /* snapshot bytes waiting for the disk, at most */

static const char *replay_name[] = {"ok", "empty", "truncated", "corrupt", "io"};

/* ---- undo ---- */

static void undo_push(struct db *db, uint64_t lsn, uint64_t id, struct record *old) {
    if (db->undo_head + db->undo_len == db->undo_cap) {
        if (db->undo_head) {
            memmove(db->undo, db->undo + db->undo_head, db->undo_len * sizeof *db->undo);
            db->undo_head = 0;
        }
        if (db->undo_len == db->undo_cap) {
            db->undo_cap = db->undo_cap ? db->undo_cap * 2 : 256;
            db->undo = xrealloc(db->undo, db->undo_cap * sizeof *db->undo);
        }
    }
    db->undo[db->undo_head + db->undo_len++] = (struct db_undo){lsn, id, db->index.rev, old};
}

/* The changes up to lsn are durable: what they replaced can go. */
static void undo_release(struct db *db, uint64_t lsn) {
    while (db->undo_len && db->undo[db->undo_head].lsn <= lsn) {
        record_free(db->undo[db->undo_head].old);
        db->undo_head++;
        db->undo_len--;
    }
    if (!db->undo_len) db->undo_head = 0;
}

/* The changes after lsn were lost: take them back, newest first. */
static void undo_after(struct db *db, uint64_t lsn) {
    size_t undone = 0;
    uint64_t from = UINT64_MAX; /* the rev of the oldest change taken back */
    for (size_t i = db->undo_len; i > 0 && db->undo[db->undo_head + i - 1].lsn > lsn; i--)
        from = db->undo[db->undo_head + i - 1].rev;
    while (db->undo_len) {
        struct db_undo *u = &db->undo[db->undo_head + db->undo_len - 1];
        if (u->lsn <= lsn) break;
        struct record *cur =
            u->old ? index_swap(&db->index, u->old) : index_remove(&db->index, u->id);
        const struct record *any = u->old ? u->old : cur;
        if (any)
            index_change_undo(&db->index, any->user_id, any->type, u->id, u->rev, u->old, from);
        record_free(cur);
        db->undo_len--;
        undone++;
    }
    index_change_undo_done(&db->index);
    if (undone)
        LOG(LOG_DEBUG, "db: undid %zu changes after LSN %llu", undone, (unsigned long long)lsn);
}

/* ---- ids ---- */

/* Appends a frame whose payload is one varint; to the compaction file instead if compact. */
static uint64_t append_varint(struct db *db, uint8_t type, uint64_t v, bool compact) {
    uint8_t p[VARINT_MAX];
    size_t n = varint_put(p, v);
    if (!compact) {
        db->appended += STORE_FRAME_HEADER_SIZE + n;
        return store_append(&db->store, type, p, n);
    }
    store_compact_add(&db->store, type, p, n);
    return 0;
}

/*
 * Ids and revs are reserved ahead of use by a frame of the log (REC_NEXT_ID:
 * every id below it; REC_REV_FLOOR: every rev up to it), which replay goes on
 * from. Revs need it as ids do: a change's rev is handed out at once (in a
 * cursor, an ETag), and a change can be undone (a failed batch) or lost (a
 * crash in interval or never mode), so the log's highest rev does not bound
 * the revs handed out. In always mode a value is shown only once its batch,
 * with the frame, is durable; in the other modes the frame is synced soon,
 * half a block ahead of need.
 */
static void reserve(struct db *db, struct db_reservation *r, uint64_t to) {
    r->frame_lsn = append_varint(db, r->frame_type, to, false);
    r->frame_next = to;
    r->reserved = to;
    if (db->store.opts.fsync != STORE_FSYNC_ALWAYS) store_sync_soon(&db->store);
}

/* Called with every store notification: is the newest reservation on disk? */
static void settle(struct db *db, struct db_reservation *r, int status) {
    if (r->frame_lsn && db->store.durable_lsn >= r->frame_lsn) {
        r->durable = r->frame_next;
        r->frame_lsn = 0;
    } else if (status < 0 && db->store.opts.fsync == STORE_FSYNC_ALWAYS && r->frame_lsn &&
               r->frame_lsn > db->store.acked_lsn) {
        /* The reservation was in the lost batch: only what is durable holds. */
        r->reserved = r->durable;
        r->frame_lsn = 0;
    }
}

int db_take_id(struct db *db, uint64_t *id) {
    uint64_t next = db->index.next_id, end = db->index.id_max + 1;
    if (next >= end) return -ERANGE;
    if (db->ids.reserved < next + DB_ID_BLOCK / 2 && !db->ids.frame_lsn) {
        uint64_t to = next + DB_ID_BLOCK;
        reserve(db, &db->ids, to > end ? end : to);
    }
    /* In "always" the record's own sync covers the reservation before it is acknowledged. */
    uint64_t limit =
        db->store.opts.fsync == STORE_FSYNC_ALWAYS ? db->ids.reserved : db->ids.durable;
    if (next >= limit) return -EAGAIN;
    db->index.next_id = next + 1;
    *id = next;
    return 0;
}

/* ---- changes ---- */

static void snapshot(struct db *db, const struct record *r, bool may_drop);

/* Whether compaction's slices have passed id: this node's ids first, in order,
 * then other nodes' (imported), in their sorted list's order. */
static bool compact_reached(const struct db *db, uint64_t id) {
    if (db->compact_snapped) return true;
    if (id >= db->index.id_min && id < db->compact_end) return id < db->compact_next;
    return db->compact_next >= db->compact_end && id < db->compact_foreign_next;
}

/*
 * A compaction writes every record as it was when it began (its horizon);
 * the changes made since reach the new log by its tail. A record about to
 * change that its slices have not reached yet is written now, as it is
 * before the change, and skipped when they reach it (snapshot()): otherwise
 * the new log would hold its new state twice (a second change entry, out of
 * rev order, at replay) or, deleted, not at all (its deletion lost from the
 * change feed).
 */
static void compact_before_change(struct db *db, uint64_t id) {
    if (!db->compacting) return;
    const struct record *r = index_get(&db->index, id);
    if (!r || r->rev > db->compact_horizon || compact_reached(db, id)) return;
    snapshot(db, r, false);
}

/* The common tail of every change: apply, remember how to undo it, maybe ack at once. */
static uint64_t changed(struct db *db, uint64_t lsn, uint64_t id, struct record *old) {
    db->visible_lsn = lsn;
    if (store_is_acked(&db->store, lsn)) {
        record_free(old);
        if (db->on_ack) db->on_ack(db->ack_ctx, lsn, 0);
    } else {
        undo_push(db, lsn, id, old);
    }
    return lsn;
}

/*
 * Starts the REC_REV frame of the next change, encoded straight into the
 * store's pending batch (no copy): the change's rev is the next. *out is the
 * buffer the rest of its payload goes to, until rev_append closes the frame.
 */
static uint64_t rev_begin(struct db *db, uint8_t type, struct buf **out) {
    assert(!db->keyed.r); /* no change between db_keyed_begin and db_keyed_end */
    uint64_t rev = ++db->index.rev;
    if (rev + DB_REV_BLOCK / 2 > db->revs.reserved && !db->revs.frame_lsn)
        reserve(db, &db->revs, rev + DB_REV_BLOCK);
    *out = store_frame_begin(&db->store);
    record_rev_head(rev, type, *out);
    return rev;
}

/* Closes the REC_REV frame rev_begin started: its LSN. */
static uint64_t rev_append(struct db *db) {
    size_t n;
    uint64_t lsn = store_frame_end(&db->store, REC_REV, &n);
    db->appended += n;
    return lsn;
}

uint64_t db_put(struct db *db, struct record *r) {
    compact_before_change(db, r->id);
    struct buf *out;
    r->rev = rev_begin(db, r->type, &out);
    record_encode(r, out);
    uint64_t lsn = rev_append(db);
    uint64_t id = r->id;
    struct record *old = index_swap_change(&db->index, r);
    return changed(db, lsn, id, old);
}

const struct record *db_put_values(struct db *db, const struct kind_desc *k, uint64_t id,
                                   uint64_t user_id, const union value *vals, uint32_t given,
                                   uint64_t *lsn) {
    compact_before_change(db, id);
    struct buf *out;
    uint64_t rev = rev_begin(db, k->type, &out);
    struct record *r = record_build_encode(k, id, user_id, vals, given, out);
    r->rev = rev;
    *lsn = rev_append(db);
    struct record *old = index_swap_change(&db->index, r);
    changed(db, *lsn, id, old);
    return r;
}

const struct record *db_keyed_begin(struct db *db, const struct kind_desc *k, uint64_t id,
                                    uint64_t user_id, const union value *vals, uint32_t given) {
    compact_before_change(db, id);
    struct buf *out;
    uint64_t rev = rev_begin(db, REC_KEYED, &out);
    size_t at = record_keyed_open(k->type, out);
    struct record *r = record_build_encode(k, id, user_id, vals, given, out);
    record_keyed_close(out, at);
    r->rev = rev;
    db->keyed = (struct db_keyed){r, out};
    return r;
}

uint64_t db_keyed_end(struct db *db, uint64_t key_id, const union value *key_vals) {
    struct record *r = db->keyed.r;
    struct record *key = record_build_encode(&record_idem, key_id, r->user_id, key_vals,
                                             record_all_fields(&record_idem), db->keyed.out);
    key->rev = r->rev;
    db->keyed = (struct db_keyed){NULL, NULL};
    uint64_t lsn = rev_append(db);
    uint64_t id = r->id;
    struct record *old = index_swap_change(&db->index, r);
    /* Two changes under one LSN: an undo takes back the key first, then the record. */
    if (store_is_acked(&db->store, lsn))
        record_free(old);
    else
        undo_push(db, lsn, id, old);
    return changed(db, lsn, key_id, index_swap(&db->index, key));
}

bool db_unacked(const struct db *db, uint64_t id) {
    for (size_t i = db->undo_len; i > 0; i--) {
        const struct db_undo *u = &db->undo[db->undo_head + i - 1];
        if (u->id == id && !store_is_acked(&db->store, u->lsn)) return true;
    }
    return false;
}

uint64_t db_delete(struct db *db, uint64_t id) {
    compact_before_change(db, id);
    struct buf *out;
    uint64_t rev = rev_begin(db, REC_DELETE, &out);
    uint8_t *p = (uint8_t *)buf_reserve(out, VARINT_MAX);
    buf_commit(out, varint_put(p, id));
    uint64_t lsn = rev_append(db);
    struct record *old = index_remove(&db->index, id);
    if (old) index_change_add(&db->index, old->user_id, rev, id, old->type, INDEX_OP_DELETE);
    if (id >= db->index.next_id) db->index.next_id = id + 1;
    return changed(db, lsn, id, old);
}

uint64_t db_put_account(struct db *db, uint64_t id, struct slice name, struct slice key_hash,
                        struct slice password_hash) {
    union value v[RECORD_MAX_FIELDS];
    record_defaults(&record_user, v);
    const struct record *old = db_get(db, id);
    if (old && old->type == REC_USER) {
        v[USER_MAX_RECORDS] = record_get(old, USER_MAX_RECORDS);
        v[USER_MAX_BYTES] = record_get(old, USER_MAX_BYTES);
    }
    v[USER_NAME].s.ptr = name.ptr;
    v[USER_NAME].s.len = (uint32_t)name.len;
    v[USER_KEY_HASH].s.ptr = key_hash.ptr;
    v[USER_KEY_HASH].s.len = (uint32_t)key_hash.len;
    v[USER_PASSWORD_HASH].s.ptr = password_hash.ptr;
    v[USER_PASSWORD_HASH].s.len = (uint32_t)password_hash.len;
    return db_put(db, record_build(&record_user, id, 0, v));
}

uint64_t db_put_user(struct db *db, uint64_t id, const char *name, const char *key) {
    uint8_t hash[AUTH_HASH_BYTES];
    auth_hash_key(key, strlen(key), hash);
    /* A new key keeps the account's password. */
    struct slice pw = {"", 0};
    const struct record *old = db_get(db, id);
    if (old && old->type == REC_USER) {
        pw.ptr = record_get(old, USER_PASSWORD_HASH).s.ptr;
        pw.len = record_get(old, USER_PASSWORD_HASH).s.len;
    }
    return db_put_account(db, id, (struct slice){name, strlen(name)},
                          (struct slice){(const char *)hash, AUTH_HASH_BYTES}, pw);
}

uint64_t db_put_user_limits(struct db *db, uint64_t id, uint64_t max_records, uint64_t max_bytes) {
    const struct record *old = db_get(db, id);
    union value v[RECORD_MAX_FIELDS];
    record_values(old, v);
    v[USER_MAX_RECORDS].i = max_records;
    v[USER_MAX_BYTES].i = max_bytes;
    return db_put(db, record_build(&record_user, id, 0, v));
}

/* ---- the guard ---- */

/* Reads the free space of the log's filesystem (what an unprivileged writer may use). */
static void read_free_disk(struct db *db, uint64_t now) {
    struct db_guard *g = &db->guard;
    struct statvfs vfs;
    g->checked = true;
    g->checked_ms = now;
    g->appended_at_check = db->appended;
    if (fstatvfs(db->store.fd, &vfs) < 0) {
        /* Unknown: let writes through rather than refuse them on a guess. */
        LOG(LOG_WARN, "free disk check: fstatvfs: %s", strerror(errno));
        g->free_at_check = UINT64_MAX;
    } else {
        g->free_at_check = (uint64_t)vfs.f_bavail * (uint64_t)vfs.f_frsize;
    }
    /* What db_room's inline test compares: the appends that leave at least min_free_disk. */
    uint64_t spare = g->free_at_check >= g->min_free_disk ? g->free_at_check - g->min_free_disk : 0;
    g->append_below = g->free_at_check < g->min_free_disk  ? 0
                      : spare >= UINT64_MAX - db->appended ? UINT64_MAX
                                                           : db->appended + spare + 1;
}

/* db_room when its inline test does not settle it: the same verdict, in full. */
int db_room_check(struct db *db) {
    struct db_guard *g = &db->guard;
    int rc = 0;
    if (g->max_live_bytes && db->index.live_bytes >= g->max_live_bytes) rc = -ENOMEM;
    if (!rc && g->min_free_disk) {
        uint64_t now = uv_now(db->loop);
        if (!g->checked || now - g->checked_ms >= DB_DISK_CHECK_MS) read_free_disk(db, now);
        uint64_t since = db->appended - g->appended_at_check;
        uint64_t free = g->free_at_check > since ? g->free_at_check - since : 0;
        if (free < g->min_free_disk) rc = -ENOSPC;
    }
    if (rc && !g->warned) {
        LOG(LOG_WARN, "refusing writes that add data: %s",
            rc == -ENOMEM ? "the live data reached --max-live-bytes"
                          : "the free disk is below --min-free-disk-bytes");
    }
    g->warned = rc != 0;
    return rc;
}

static void on_store_notify(struct store *s, uint64_t lsn, int status) {
    struct db *db = s->data;
    if (status < 0) {
        /* Exactly the changes the store lost are undone; in "interval" and
         * "never" it lost none (lsn is the last appended). */
        undo_after(db, lsn);
        if (db->visible_lsn > lsn) db->visible_lsn = lsn;
    }
    undo_release(db, lsn);
    settle(db, &db->ids, status);
    settle(db, &db->revs, status);
    if (db->on_ack) db->on_ack(db->ack_ctx, lsn, status);
}

void db_on_ack(struct db *db, db_ack_cb cb, void *ctx) {
    db->on_ack = cb;
    db->ack_ctx = ctx;
}

/* ---- open and close ---- */

static int replay(struct db *db, char *msg, size_t msg_len) {
    struct store_replay_info info;
    memset(&info, 0, sizeof info);
    uint64_t t0 = uv_hrtime();
    struct index_replay z = {.ix = &db->index};
    struct stat st_log;
    if (fstat(db->store.fd, &st_log) == 0) z.file_bytes = (uint64_t)st_log.st_size;
    enum store_replay_status st = store_replay(&db->store, index_replay_apply, &z, &info);
    if (st == STORE_REPLAY_CORRUPT || st == STORE_REPLAY_IO) {
        snprintf(msg, msg_len, "%s", info.message[0] ? info.message : replay_name[st]);
        return -1;
    }
    index_relink(&db->index);
    db->opened_empty = !db->index.written;
    if (db->index.id_floor > db->index.next_id) db->index.next_id = db->index.id_floor;
    if (db->index.rev_floor > db->index.rev) db->index.rev = db->index.rev_floor;
    double ms = (double)(uv_hrtime() - t0) / 1e6;
    LOG(LOG_INFO, "replayed %llu records (%llu bytes) in %.1f ms: %s; %zu live",
        (unsigned long long)info.records, (unsigned long long)info.bytes, ms, replay_name[st],
        db->index.count);
    return 0;
}

/*
 * The node id check of db_open, after replay. A directory without a REC_NODE
 * frame is node 0's; it may become node N only while it holds no data
 * (fresh, or only id reservations), and then the frame goes first into the
 * log, ahead of the reservation db_open syncs with it.
 */
static int check_node(struct db *db, const char *dir, uint32_t node, char *msg, size_t msg_len) {
    struct index *ix = &db->index;
    if (ix->node_recorded && ix->node_id == node) return 0;
    if (ix->node_recorded) {
        snprintf(msg, msg_len,
                 "data directory %s belongs to node %u, not to --node-id %u: a shard's data "
                 "never changes node (start it with --node-id %u, or move users with eventd "
                 "export/import)",
                 dir, ix->node_id, node, ix->node_id);
        return -1;
    }
    if (node == 0) return 0;
    if (ix->written) {
        snprintf(msg, msg_len,
                 "data directory %s holds data written without a node id (node 0, unsharded), "
                 "not by --node-id %u: start it without --node-id, or move its users into a "
                 "new shard with eventd export/import",
                 dir, node);
        return -1;
    }
    index_set_node(ix, node);
    ix->node_recorded = true;
    append_varint(db, REC_NODE, node, false);
    LOG(LOG_INFO, "data directory %s recorded as node %u", dir, node);
    return 0;
}

int db_open(struct db *db, uv_loop_t *loop, const char *dir, const struct db_settings *set,
            char *msg, size_t msg_len) {
    memset(db, 0, sizeof *db);
    db->loop = loop;
    db->idem_ttl_s = set->idem_ttl_s;
    db->guard.max_live_bytes = set->max_live_bytes;
    db->guard.min_free_disk = set->min_free_disk;
    index_init(&db->index);
    buf_init(&db->scratch, 4096);
    int rc = store_open(&db->store, loop, dir, &set->store_opts, on_store_notify);
    if (rc == -EWOULDBLOCK) {
        snprintf(msg, msg_len, "data directory %s is in use by another eventd process", dir);
        return -1;
    }
    if (rc < 0) {
        snprintf(msg, msg_len, "cannot open data directory %s: %s", dir, strerror(-rc));
        return -1;
    }
    db->store.data = db;
    db->open = true;
    uv_idle_init(loop, &db->compact_idle);
    db->compact_idle.data = db;
    if (replay(db, msg, msg_len) < 0) return -1;
    if (check_node(db, dir, set->node_id, msg, msg_len) < 0) return -1;
    /* Ids below what the log reserved may have been handed out before a crash. */
    db->ids = (struct db_reservation){REC_NEXT_ID, db->index.next_id, db->index.next_id, 0, 0};
    if (db->index.next_id <= db->index.id_max)
        reserve(db, &db->ids, db->index.next_id + DB_ID_BLOCK);
    /* Revs up to the log's floor may have been handed out before a crash: go on above. */
    db->revs = (struct db_reservation){REC_REV_FLOOR, db->index.rev, db->index.rev, 0, 0};
    reserve(db, &db->revs, db->index.rev + DB_REV_BLOCK);
    rc = store_flush_sync(&db->store);
    /* interval/never: that sync left a sync mark pending (store.c, mark_after_sync): written
     * and synced here too, so that the server starts with nothing owed to the disk. */
    if (rc == 0) rc = store_flush_sync(&db->store);
    if (rc < 0) {
        snprintf(msg, msg_len, "cannot write to %s/%s: %s", dir, STORE_LOG_NAME, strerror(-rc));
        return -1;
    }
    db->revs.durable = db->revs.reserved;
    db->revs.frame_lsn = 0;
    return 0;
}

int db_close(struct db *db) {
    if (!db->open) return 0;
    if (db->compacting) store_compact_abort(&db->store);
    /* Give back the reserved ids nobody got: replay takes the last reservation. */
    if (!store_failing(&db->store) && db->ids.reserved > db->index.next_id) {
        append_varint(db, REC_NEXT_ID, db->index.next_id, false);
    }
    if (!store_failing(&db->store) && db->revs.reserved > db->index.rev)
        append_varint(db, REC_REV_FLOOR, db->index.rev, false);
    uv_close((uv_handle_t *)&db->compact_idle, NULL);
    int rc = store_close(&db->store);
    if (rc < 0) LOG(LOG_ERROR, "closing the log: %s", strerror(-rc));
    undo_release(db, UINT64_MAX);
    free(db->undo);
    index_destroy(&db->index);
    buf_destroy(&db->scratch);
    db->open = false;
    return rc;
}

/* ---- compaction ---- */

static void compact_done(struct db *db, int status) {
    db->compacting = false;
    db->compact_status = status;
    if (status < 0) {
        db->stats_compactions_failed++;
        db->compact_retry_at = uv_now(db->loop) + DB_COMPACT_RETRY_MS;
    } else {
        db->stats_compactions_ok++;
    }
    if (db->on_compacted) db->on_compacted(db->compact_ctx, status);
}

static void on_compacted(struct store *s, int status) {
    struct db *db = s->data;
    if (status == 0) {
        db->index.rev_horizon = db->compact_horizon;
        index_changes_trim(&db->index);
    }
    if (status < 0)
        LOG(LOG_ERROR, "compaction failed: %s", strerror(-status));
    else
        LOG(LOG_INFO, "compaction done: log is %llu bytes", (unsigned long long)s->file_size);
    compact_done(db, status);
}

/*
 * An expired idempotency key is forgotten: left out of the new log, and when
 * may_drop, dropped from memory too, without a frame (if this compaction
 * fails, a restart reads it again, expired still). The foreign ids' pass may
 * not drop: it walks a list that a removal would shift.
 */
static void snapshot(struct db *db, const struct record *r, bool may_drop) {
    /* Changed since the start: written as it was then by compact_before_change, and
     * its change is in the tail. */
    if (!r || r->rev > db->compact_horizon) return;
    if (r->type == REC_IDEM && db_idem_expired(db, r, db->compact_now_s)) {
        if (may_drop && !db_unacked(db, r->id)) index_delete(&db->index, r->id);
        return;
    }
    buf_reset(&db->scratch);
    record_rev_head(r->rev, r->type, &db->scratch);
    record_encode(r, &db->scratch);
    store_compact_add(&db->store, REC_REV, db->scratch.ptr, db->scratch.len);
}

/*
 * One slice per loop iteration, from an idle handle: between two slices the
 * loop polls for I/O (an idle handle makes that poll not block), so requests
 * are served between slices. A zero-delay timer would not do: libuv runs a
 * timer re-armed from its own callback again in the same pass.
 */
static void compact_slice(uv_idle_t *h) {
    struct db *db = h->data;
    if (store_compact_backlog(&db->store) > COMPACT_MAX_BACKLOG) return; /* the disk is behind */
    uint64_t stop = db->compact_next + COMPACT_SLICE_IDS;
    if (stop > db->compact_end) stop = db->compact_end;
    for (uint64_t id = db->compact_next; id < stop; id++)
        snapshot(db, index_get(&db->index, id), true);
    db->compact_next = stop;
    if (stop < db->compact_end) return;
    /* Then the records of other nodes (imported), by position in their sorted list,
     * found again by id each slice since deletions between slices shift it. */
    const struct id_list *f = &db->index.foreign;
    uint32_t i = id_list_lower_bound(f, db->compact_foreign_next);
    for (uint32_t n = 0; i < f->len && n < COMPACT_SLICE_IDS; i++, n++)
        snapshot(db, index_get(&db->index, f->ids[i]), false);
    if (i < f->len) {
        db->compact_foreign_next = f->ids[i];
        return;
    }
    uv_idle_stop(&db->compact_idle);
    db->compact_snapped = true;
    int rc = store_compact_commit(&db->store, on_compacted);
    if (rc < 0) {
        LOG(LOG_ERROR, "compaction failed: %s", strerror(-rc));
        store_compact_abort(&db->store);
        compact_done(db, rc);
    }
}

int db_compact_start(struct db *db, db_compact_cb cb, void *ctx) {
    if (db->compacting) return -EBUSY;
    if (store_failing(&db->store)) return store_failing(&db->store);
    int rc = store_compact_begin(&db->store);
    if (rc < 0) return rc;
    db->compacting = true;
    db->compact_status = 0;
    db->compact_now_s = (uint64_t)time(NULL);
    db->on_compacted = cb;
    db->compact_ctx = ctx;
    LOG(LOG_INFO, "compaction started: log %llu bytes, live data about %llu bytes",
        (unsigned long long)db->store.file_size, (unsigned long long)db->index.live_bytes);
    /* The node first (replay checks every later frame against it), then the id reservation,
     * so ids handed out or reserved are never handed out again. */
    if (db->index.node_recorded) append_varint(db, REC_NODE, db->index.node_id, true);
    uint64_t next = db->ids.reserved > db->index.next_id ? db->ids.reserved : db->index.next_id;
    append_varint(db, REC_NEXT_ID, next, true);
    /* Then the revs: the counter, and the horizon: the deletions made so far are not in the
     * new log, the changes made from now on are (the store copies them into its tail). */
    {
        uint8_t p[2 * VARINT_MAX];
        size_t n = varint_put(p, db->index.rev);
        n += varint_put(p + n, db->index.rev);
        store_compact_add(&db->store, REC_REVS, p, n);
        db->compact_horizon = db->index.rev;
        uint64_t floor = db->revs.reserved > db->index.rev ? db->revs.reserved : db->index.rev;
        append_varint(db, REC_REV_FLOOR, floor, true);
    }
    /* This node's ids are dense from id_min; other nodes' are in the foreign list. */
    db->compact_next = db->index.id_min;
    db->compact_end = db->index.next_id;
    db->compact_foreign_next = 0;
    db->compact_snapped = false;
    uv_idle_start(&db->compact_idle, compact_slice);
    return 0;
}

void db_maybe_compact(struct db *db, double ratio, uint64_t min_bytes) {
    if (db->compacting || ratio <= 0 || store_failing(&db->store) ||
        uv_now(db->loop) < db->compact_retry_at)
        return;
    uint64_t size = db->store.file_size;
    /* A log of an older format (logfile.h: version 1's frames have no key, version 2
     * has no sync marks, version 3 no keys by reference) is rewritten in this one at
     * once (once: after a failure, the ratio decides as for any log). */
    bool old = db->store.log_version < STORE_VERSION && db->compact_status == 0;
    if (size < min_bytes && !old) return;
    if (old || (double)size > ratio * (double)(db->index.live_bytes + STORE_HEADER_SIZE))
        db_compact_start(db, NULL, NULL);
}

static void stop_loop(void *ctx, int status) {
    uv_stop(ctx);
}

int db_compact_now(struct db *db) {
    int rc = db_compact_start(db, stop_loop, db->loop);
    if (rc < 0) return rc;
    uv_run(db->loop, UV_RUN_DEFAULT);
    return db->compact_status;
}

uint64_t db_admin_token(const struct db *db, const char *name) {
    const struct index *ix = &db->index;
    const struct id_list *l = index_owned(ix, UINT64_MAX, REC_ADMIN);
    size_t n = strlen(name);
    for (uint32_t i = 0; i < l->len; i++) {
        union value v = record_get(index_get(ix, l->ids[i]), ADMIN_NAME);
        if (v.s.len == n && memcmp(v.s.ptr, name, n) == 0) return l->ids[i];
    }
    return 0;
}

void db_stats(const struct db *db, struct db_stats *out) {
    out->log_bytes = db->store.file_size;
    out->prealloc_bytes = db->store.prealloc_end > db->store.file_size
                              ? db->store.prealloc_end - db->store.file_size
                              : 0;
    out->live_bytes = db->index.live_bytes;
    memcpy(out->kind_count, db->index.kind_count, sizeof out->kind_count);
    memcpy(out->kind_bytes, db->index.kind_bytes, sizeof out->kind_bytes);
    out->syncs = db->store.stats_syncs;
    out->loop_syncs = db->store.sync.stats_loop_syncs;
    out->compactions_ok = db->stats_compactions_ok;
    out->compactions_failed = db->stats_compactions_failed;
}

int db_sync_now(struct db *db) {
    return store_flush_sync(&db->store);
}

void db_prealloc(struct db *db, uint64_t bytes) {
    /* Never into the storage guard's margin: those bytes are for writes, not zeros. */
    store_prealloc(&db->store, bytes, db->guard.min_free_disk);
}
