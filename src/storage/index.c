/*
 * index: open-addressing hash tables keyed by id (records) and by user id
 * (each user's id lists), plus a small name table for users.
 *
 * Ids are handed out in increasing order, so appending to a user's list
 * keeps it sorted, and "newest first" is a walk from the end. Deleting from
 * the middle of a list is a memmove; lists are per user and per kind, so
 * they stay short next to the whole table.
 */
#include "storage/index.h"
#include "storage/index_internal.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/slab.h"
#include "storage/logfile.h"

#include "common/varint.h"

#define TOMBSTONE ((struct record *)(uintptr_t)1)

/*
 * What r adds to its owner's byte count: its size, and for an idempotency key by
 * reference the size of the record it may come to hold (record.h, IDEM_REF_MARK),
 * so that --max-idempotency-bytes-per-user bounds what the keys may hold, not only
 * what they hold now. A function of r alone: the same when r is filed and when it
 * goes.
 */
static uint64_t owned_bytes(const struct record *r, uint64_t size) {
    if (r->type != REC_IDEM) return size;
    union value a = record_get(r, IDEM_ANSWER);
    uint64_t held = 0;
    if (a.s.len >= 2 && (uint8_t)a.s.ptr[0] == IDEM_REF_MARK)
        varint_get((const uint8_t *)a.s.ptr + 1, a.s.len - 1, &held);
    /* No record is larger than a frame: a damaged size cannot wrap the user's count. */
    return size + (held < STORE_MAX_PAYLOAD ? held : STORE_MAX_PAYLOAD);
}

/* The owner's byte count that a record of this type adds to, or NULL. */
static uint64_t *bytes_of(struct owner *o, uint8_t type) {
    if (!o) return NULL;
    if (record_type_in_quota(type)) return &o->quota_bytes;
    return type == REC_IDEM ? &o->idem_bytes : NULL;
}

#define SHARD_MIN_CAP 16

/*
 * A shard that never held a record points at this shared, read-only table
 * of empty slots, so an empty index costs no allocation (and none to free):
 * lookups find nothing in it, and the first insert gives the shard its own
 * table of the same size, at the same slot.
 */
static const struct index_slot no_slots[SHARD_MIN_CAP];
static bool shard_allocated(const struct index_shard *sh) {
    return sh->slots != no_slots;
}
static const struct owner no_owners[1];
#define OWNER_MIN_CAP 8 /* an owner table shard, once allocated */

/*
 * Where an id lives: runs of ID_RUN consecutive ids share a shard and sit in
 * consecutive slots from a hashed start. Ids are handed out in order, so
 * replay and creates fill a table a few cache lines at a time instead of
 * one random page per record (a TLB miss each, which a virtual machine
 * makes expensive), while the hash of id / ID_RUN still spreads any pattern
 * of ids over the shards and slots.
 */
#define ID_RUN 16
static inline uint64_t id_hash(uint64_t id) {
    return mix(id / ID_RUN);
}
static inline size_t id_home(uint64_t h, uint64_t id, size_t mask) {
    return (size_t)(h + id % ID_RUN) & mask;
}

static bool foreign(const struct index *ix, uint64_t id);

void index_init(struct index *ix) {
    memset(ix, 0, sizeof *ix);
    for (int i = 0; i < INDEX_SHARDS; i++) {
        ix->shards[i].cap = SHARD_MIN_CAP;
        ix->shards[i].slots = (struct index_slot *)no_slots; /* never written: see no_slots */
    }
    for (int i = 0; i < OWNER_SHARDS; i++) /* the owner and name tables too start empty */
        ix->owners[i] = (struct owner_table){(struct owner *)no_owners, 1, 0};
    names_init(ix);
    ix->next_id = 1;
    randombytes_buf(ix->name_key, sizeof ix->name_key);
    ix->id_min = record_node_id_min(0);
    ix->id_max = record_node_id_max(0);
}

/* Runs body with r bound to each live record. */
#define EACH_RECORD(ix, r, body)                                                                   \
    for (int s_ = 0; s_ < INDEX_SHARDS; s_++)                                                      \
        for (uint32_t i_ = 0; shard_allocated(&(ix)->shards[s_]) && i_ < (ix)->shards[s_].cap;     \
             i_++) {                                                                               \
            struct record *r = (ix)->shards[s_].slots[i_].r;                                       \
            if (!r || r == TOMBSTONE) continue;                                                    \
            body;                                                                                  \
        }

static void table_free(struct index_slot *t, uint32_t cap);

void index_destroy(struct index *ix) {
    EACH_RECORD(ix, r, record_free(r));
    for (int i = 0; i < INDEX_SHARDS; i++)
        if (shard_allocated(&ix->shards[i])) table_free(ix->shards[i].slots, ix->shards[i].cap);
    free(ix->scratch);
    free(ix->relist);
    for (int t = 0; t < OWNER_SHARDS; t++) {
        struct owner_table *ot = &ix->owners[t];
        for (size_t i = 0; i < ot->cap; i++) {
            for (int k = 0; k <= REC_KIND_MAX; k++)
                free(ot->slots[i].lists[k].ids);
            free(ot->slots[i].changes.v);
        }
        if (ot->slots != no_owners) free(ot->slots);
    }
    names_destroy(ix);
    free(ix->foreign.ids);
    memset(ix, 0, sizeof *ix);
}

static struct index_shard *shard_of(const struct index *ix, uint64_t h) {
    return (struct index_shard *)&ix->shards[h >> 56];
}

/* Slot holding id, or the slot where it would go (first tombstone seen, else empty). */
static struct index_slot *find_slot(const struct index *ix, uint64_t id, bool *found) {
    uint64_t h = id_hash(id);
    const struct index_shard *sh = shard_of(ix, h);
    size_t mask = sh->cap - 1, i = id_home(h, id, mask);
    struct index_slot *insert = NULL;
    for (;;) {
        struct index_slot *sl = &sh->slots[i];
        if (!sl->r) {
            *found = false;
            return insert ? insert : sl;
        }
        if (sl->r == TOMBSTONE) {
            if (!insert) insert = sl;
        } else if (sl->id == id) {
            *found = true;
            return sl;
        }
        i = (i + 1) & mask;
    }
}

/*
 * Shard tables. Growing one keeps its pages: the live slots are copied to a
 * scratch array (reused, so it stays in the cache), the table is extended
 * in place (mremap for a mapped one) and cleared, and the slots go back in.
 * Only the added half is new memory, so filling the index touches each
 * page of its final size once instead of every page of every size on the
 * way (fresh pages are the expensive part of replay, most of all in a
 * virtual machine). Small tables, ASan builds (whose leak checker must see
 * the records the tables point to) and a process that asked glibc for huge
 * pages (slab_hugepages) use malloc.
 */
#define TABLE_MAP_MIN (16u << 10) /* bytes: tables this big are mapped */

static bool table_mapped(size_t bytes) {
    return bytes >= TABLE_MAP_MIN && !slab_asan() && !slab_hugepages();
}

static void table_free(struct index_slot *t, uint32_t cap) {
    size_t bytes = (size_t)cap * sizeof *t;
    if (table_mapped(bytes))
        munmap(t, bytes);
    else
        free(t);
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

static void *map_or_die(void *old, size_t old_bytes, size_t bytes) {
    void *p = old ? mremap(old, old_bytes, bytes, MREMAP_MAYMOVE)
                  : mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "out of memory (mapping %zu bytes)\n", bytes);
        abort();
    }
    /* The hash writes all over the new pages at once: fault them in with one
     * call rather than one fault each (where the kernel cannot, they fault
     * in one by one). */
    (void)madvise((char *)p + old_bytes, bytes - old_bytes, MADV_POPULATE_WRITE);
    return p;
}

/* t (old_cap slots) as a zeroed table of cap >= old_cap slots, its pages kept. */
static struct index_slot *table_regrow(struct index_slot *t, uint32_t old_cap, uint32_t cap) {
    size_t old_bytes = (size_t)old_cap * sizeof *t, bytes = (size_t)cap * sizeof *t;
    if (table_mapped(old_bytes)) {
        if (bytes != old_bytes) t = map_or_die(t, old_bytes, bytes); /* the added part is zero */
        memset(t, 0, old_bytes);
    } else if (table_mapped(bytes)) {
        free(t);
        t = map_or_die(NULL, 0, bytes);
    } else {
        t = xrealloc(t, bytes);
        memset(t, 0, bytes);
    }
    return t;
}

/* Rehashes sh into a table of cap slots (a power of two, at least sh->cap), dropping tombstones. */
static void rehash(struct index *ix, struct index_shard *sh, uint32_t cap) {
    uint32_t old_cap = sh->cap, n = 0;
    if (ix->scratch_cap < sh->count) {
        ix->scratch_cap = sh->count * 2;
        free(ix->scratch);
        ix->scratch = xmalloc(ix->scratch_cap * sizeof *ix->scratch);
    }
    for (uint32_t i = 0; i < old_cap; i++)
        if (sh->slots[i].r && sh->slots[i].r != TOMBSTONE) ix->scratch[n++] = sh->slots[i];
    sh->slots = table_regrow(shard_allocated(sh) ? sh->slots : NULL, old_cap, cap);
    sh->cap = cap;
    sh->used = sh->count;
    for (uint32_t i = 0; i < n; i++) {
        const struct index_slot *e = &ix->scratch[i];
        size_t j = id_home(id_hash(e->id), e->id, cap - 1);
        while (sh->slots[j].r)
            j = (j + 1) & (cap - 1);
        sh->slots[j] = *e;
    }
}

static void grow(struct index *ix, struct index_shard *sh) {
    /* Twice the live size (at least as big): tombstones alone only need a rehash. */
    rehash(ix, sh, sh->count * 2 >= sh->cap ? sh->cap * 2 : sh->cap);
}

void index_reserve(struct index *ix, size_t records) {
    /* Per shard: the mean, 5 % for the hash's spread, and room to stay under 3/4 full. */
    uint64_t per = records / INDEX_SHARDS + records / INDEX_SHARDS / 20 + SHARD_MIN_CAP;
    if (per > UINT32_MAX / 2) per = UINT32_MAX / 2;
    uint32_t cap = SHARD_MIN_CAP;
    while ((uint64_t)cap * 3 <= per * 4)
        cap *= 2;
    for (int i = 0; i < INDEX_SHARDS; i++)
        if (ix->shards[i].cap < cap) rehash(ix, &ix->shards[i], cap);
}

const struct record *index_get(const struct index *ix, uint64_t id) {
    bool found;
    struct index_slot *sl = find_slot(ix, id, &found);
    return found ? sl->r : NULL;
}

/*
 * The record with this id, to change in place, or NULL. The one way to a
 * mutable record: only the index changes its records (their event links),
 * and only while applying a change, so that every reader sees what the log
 * says.
 */
static struct record *get_mut(struct index *ix, uint64_t id) {
    bool found;
    struct index_slot *sl = find_slot(ix, id, &found);
    return found ? sl->r : NULL;
}

/* The user's entry (its shard: the hash's top bits; its slot: the low ones). */
struct owner *owner_get(struct index *ix, uint64_t user_id, bool create) {
    uint64_t h = mix(user_id);
    struct owner_table *t = &ix->owners[h >> 56];
    size_t mask = t->cap - 1, i = h & mask;
    while (t->slots[i].user_id) {
        if (t->slots[i].user_id == user_id) return &t->slots[i];
        i = (i + 1) & mask;
    }
    if (!create) return NULL;
    if ((t->count + 1) * 2 > t->cap) {
        struct owner *old = t->slots;
        size_t old_cap = t->cap;
        t->cap = old_cap < OWNER_MIN_CAP ? OWNER_MIN_CAP : old_cap * 2;
        t->slots = xcalloc(t->cap, sizeof *t->slots);
        for (size_t j = 0; j < old_cap; j++) {
            if (!old[j].user_id) continue;
            size_t k = mix(old[j].user_id) & (t->cap - 1);
            while (t->slots[k].user_id)
                k = (k + 1) & (t->cap - 1);
            t->slots[k] = old[j];
        }
        if (old != no_owners) free(old);
        return owner_get(ix, user_id, true);
    }
    t->slots[i].user_id = user_id;
    t->count++;
    return &t->slots[i];
}

static void list_insert(struct id_list *l, uint64_t id) {
    if (l->len == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 8;
        l->ids = xrealloc(l->ids, l->cap * sizeof *l->ids);
    }
    /* Ids arrive ascending except when replaying a compacted log's tail. */
    uint32_t i = l->len;
    while (i > 0 && l->ids[i - 1] > id)
        i--;
    if (i > 0 && l->ids[i - 1] == id) return;
    if (i < l->len) memmove(l->ids + i + 1, l->ids + i, (l->len - i) * sizeof *l->ids);
    l->ids[i] = id;
    l->len++;
}

uint32_t id_list_lower_bound(const struct id_list *l, uint64_t id) {
    /* Binary search: lists can be long for a busy user. */
    uint32_t lo = 0, hi = l->len;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (l->ids[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void list_remove(struct id_list *l, uint64_t id) {
    uint32_t lo = id_list_lower_bound(l, id);
    if (lo < l->len && l->ids[lo] == id) {
        memmove(l->ids + lo, l->ids + lo + 1, (l->len - lo - 1) * sizeof *l->ids);
        l->len--;
    }
}

static uint64_t owner_key(const struct record *r) {
    /* Users own nothing; they are listed under UINT64_MAX, which no user id
     * reaches (ids stop at 2^53) and which, unlike 0, is not the empty-slot mark. */
    return record_type_is_system(r->type) ? UINT64_MAX : r->user_id;
}

static void set_link(struct index *ix, uint64_t target, uint8_t type, uint64_t event_id,
                     uint64_t only_if) {
    struct record *t = target ? get_mut(ix, target) : NULL;
    if (t && t->type == type && (only_if == UINT64_MAX || t->event_id == only_if))
        t->event_id = event_id;
}

static void unlink_event(struct index *ix, const struct record *ev) {
    set_link(ix, record_ref(ev, EVENT_THEME_ID), REC_THEME, 0, ev->id);
    set_link(ix, record_ref(ev, EVENT_ADDRESS_ID), REC_ADDRESS, 0, ev->id);
}

static void link_event(struct index *ix, const struct record *ev) {
    set_link(ix, record_ref(ev, EVENT_THEME_ID), REC_THEME, ev->id, UINT64_MAX);
    set_link(ix, record_ref(ev, EVENT_ADDRESS_ID), REC_ADDRESS, ev->id, UINT64_MAX);
}

static bool named(uint8_t type) {
    return type == REC_USER || type == REC_IDEM;
}

/*
 * r is about to be replaced or removed: a key that answers by reference to it
 * (record.h, idem_by_ref) keeps r's payload instead, so that its answer stays
 * the record as it was created. On every path that replaces or removes a
 * record (the API's writes, their undo, replay, import, purges), so a replay
 * arrives at the same keys as the server that wrote the log. Only a key whose
 * id follows its record's answers by reference: one lookup a change.
 */
static void idem_hold(struct index *ix, const struct record *r) {
    if (!record_type_in_quota(r->type) || r->id >= RECORD_ID_MAX) return;
    const struct record *k = get_mut(ix, r->id + 1);
    if (!k || !idem_by_ref(k, r->id) || k->user_id != r->user_id) return;
    /* The record as created has the key's rev (one frame, db_keyed_end): any other is a
     * later version filed after the created one was lost (a --repair cut its frame). The
     * key is left by reference, and answers that its answer is lost (json_record.c). */
    if (r->rev != k->rev) return;
    struct buf snap = BUF_INIT;
    uint8_t head[2] = {IDEM_SNAPSHOT_MARK, r->type};
    buf_append(&snap, head, sizeof head);
    record_encode(r, &snap);
    union value v[RECORD_MAX_FIELDS];
    record_values(k, v);
    v[IDEM_ANSWER].s.ptr = snap.ptr;
    v[IDEM_ANSWER].s.len = (uint32_t)snap.len;
    struct record *held = record_build(&record_idem, k->id, k->user_id, v);
    held->rev = k->rev;
    buf_destroy(&snap);
    record_free(index_swap(ix, held)); /* a key: its own swap holds nothing */
}

void index_put(struct index *ix, struct record *r) {
    record_free(index_swap(ix, r));
}

/*
 * index_swap's work. *own is set to r's owner when it was looked up on the
 * way (else NULL), so that the change feed's entry needs no second lookup:
 * valid until the owner table next changes (owner_get with create).
 */
static struct record *swap(struct index *ix, struct record *r, struct owner **own) {
    struct record *old = NULL;
    bool found;
    uint64_t size = record_size(r);
    struct index_slot *sl = find_slot(ix, r->id, &found);
    *own = NULL;
    /* Replaces the key's slot, not r's: sl stays where it is. */
    if (found) idem_hold(ix, sl->r);
    if (r->type == REC_USER || (found && sl->r->type == REC_USER)) ix->users_gen++;
    if (found && named(sl->r->type)) name_remove(ix, sl->r);
    if (found) {
        old = sl->r;
        uint64_t old_size = record_size(old);
        ix->live_bytes -= old_size;
        ix->kind_count[old->type % INDEX_KINDS]--;
        ix->kind_bytes[old->type % INDEX_KINDS] -= old_size;
        if (old->type == REC_EVENT)
            unlink_event(ix, old);
        else
            r->event_id = old->event_id;
        if (old->type != r->type || old->user_id != r->user_id) {
            struct owner *o = owner_get(ix, owner_key(old), false);
            if (o) list_remove(&o->lists[old->type], old->id);
            uint64_t *b = bytes_of(o, old->type);
            if (b) *b -= owned_bytes(old, old_size);
            o = owner_get(ix, owner_key(r), true);
            list_insert(&o->lists[r->type], r->id);
            if ((b = bytes_of(o, r->type))) *b += owned_bytes(r, size);
            *own = o;
        } else if (record_type_in_quota(r->type) || r->type == REC_IDEM) {
            struct owner *o = owner_get(ix, owner_key(r), false);
            uint64_t *b = bytes_of(o, r->type);
            if (b) *b += owned_bytes(r, size) - owned_bytes(old, old_size);
            *own = o;
        }
        ix->events += (size_t)(r->type == REC_EVENT) - (size_t)(old->type == REC_EVENT);
        sl->r = r;
    } else {
        struct index_shard *sh = shard_of(ix, id_hash(r->id));
        if (!shard_allocated(sh)) {
            sh->slots = xcalloc(SHARD_MIN_CAP, sizeof *sh->slots);
            sl = &sh->slots[sl - no_slots];
        }
        if (!sl->r) sh->used++;
        *sl = (struct index_slot){r->id, r};
        sh->count++;
        ix->count++;
        if (r->type == REC_EVENT) ix->events++;
        struct owner *o = owner_get(ix, owner_key(r), true);
        list_insert(&o->lists[r->type], r->id);
        uint64_t *b = bytes_of(o, r->type);
        if (b) *b += owned_bytes(r, size);
        *own = o;
        if (foreign(ix, r->id)) list_insert(&ix->foreign, r->id);
        if (sh->used * 4 >= sh->cap * 3) grow(ix, sh);
    }
    ix->live_bytes += size;
    ix->kind_count[r->type % INDEX_KINDS]++;
    ix->kind_bytes[r->type % INDEX_KINDS] += size;
    if (r->type == REC_EVENT) link_event(ix, r);
    if (named(r->type)) name_insert(ix, r);
    if (r->id >= ix->next_id && r->id <= ix->id_max) ix->next_id = r->id + 1;
    return old;
}

struct record *index_swap(struct index *ix, struct record *r) {
    struct owner *o;
    return swap(ix, r, &o);
}

struct record *index_swap_change(struct index *ix, struct record *r) {
    struct owner *o;
    struct record *old = swap(ix, r, &o);
    if (record_type_in_quota(r->type) && r->rev > ix->rev_horizon)
        change_append(ix, o ? o : owner_get(ix, r->user_id, true), r->rev, r->id, r->type,
                      old ? INDEX_OP_UPDATE : INDEX_OP_CREATE);
    return old;
}

int index_delete(struct index *ix, uint64_t id) {
    struct record *r = index_remove(ix, id);
    record_free(r);
    return r ? 0 : -1;
}

struct record *index_remove(struct index *ix, uint64_t id) {
    bool found;
    struct index_slot *sl = find_slot(ix, id, &found);
    if (!found) return NULL;
    struct record *r = sl->r;
    idem_hold(ix, r);
    if (r->type == REC_USER) ix->users_gen++;
    if (r->type == REC_EVENT) unlink_event(ix, r);
    if (named(r->type)) name_remove(ix, r);
    struct owner *o = owner_get(ix, owner_key(r), false);
    if (o) list_remove(&o->lists[r->type], r->id);
    uint64_t *b = bytes_of(o, r->type);
    if (b) *b -= owned_bytes(r, record_size(r));
    if (foreign(ix, id)) list_remove(&ix->foreign, id);
    {
        uint64_t size = record_size(r);
        ix->live_bytes -= size;
        ix->kind_count[r->type % INDEX_KINDS]--;
        ix->kind_bytes[r->type % INDEX_KINDS] -= size;
    }
    sl->r = TOMBSTONE;
    shard_of(ix, id_hash(id))->count--;
    ix->count--;
    if (r->type == REC_EVENT) ix->events--;
    return r;
}

const struct id_list *index_owned(const struct index *ix, uint64_t user_id, uint8_t type) {
    static const struct id_list empty;
    struct owner *o = owner_get((struct index *)ix, user_id, false);
    return o && type <= REC_KIND_MAX ? &o->lists[type] : &empty;
}

struct index_usage index_usage(const struct index *ix, uint64_t user_id) {
    struct index_usage u = {0, 0};
    const struct owner *o = owner_get((struct index *)ix, user_id, false);
    if (!o) return u;
    for (uint8_t t = 1; t <= REC_KIND_MAX; t++)
        if (record_type_in_quota(t)) u.records += o->lists[t].len;
    u.bytes = o->quota_bytes;
    return u;
}

uint64_t index_idem_bytes(const struct index *ix, uint64_t user_id) {
    const struct owner *o = owner_get((struct index *)ix, user_id, false);
    return o ? o->idem_bytes : 0;
}

static bool foreign(const struct index *ix, uint64_t id) {
    return id < ix->id_min || id > ix->id_max;
}

void index_set_node(struct index *ix, uint32_t node) {
    ix->node_id = node;
    ix->id_min = record_node_id_min(node);
    ix->id_max = record_node_id_max(node);
    /* What node 0 reserved before (a fresh directory) says nothing about this range. */
    if (ix->next_id < ix->id_min || ix->next_id > ix->id_max + 1) ix->next_id = ix->id_min;
    if (ix->id_floor < ix->id_min || ix->id_floor > ix->id_max + 1) ix->id_floor = 0;
    /* Normally empty here (the node frame comes first); a crafted log may differ. */
    ix->foreign.len = 0;
    EACH_RECORD(ix, r, if (foreign(ix, r->id)) list_insert(&ix->foreign, r->id));
}

uint64_t index_take_id(struct index *ix) {
    if (ix->next_id > ix->id_max) return 0;
    return ix->next_id++;
}

void index_relink(struct index *ix) {
    /* Records are built with no link and only events set one: with no event
     * every link is 0 already, and a walk would touch every record for nothing. */
    if (!ix->events) return;
    EACH_RECORD(ix, r, if (r->type != REC_EVENT) r->event_id = 0);
    EACH_RECORD(ix, r, if (r->type == REC_EVENT) link_event(ix, r));
}

/*
 * Replay of key k (REC_IDEM): whether to file it. The API files a key anew only once the
 * user's key of that name is gone or expired, and then deletes that one; but an online
 * compaction forgets expired keys without a frame (db.c, snapshot), so a log whose
 * compaction failed or was killed holds both. Filed side by side, a lookup could meet
 * the old one first, take it for expired and create the record again: the newer (by
 * creation time, then id) is the user's key, and the other is taken out (false: k is).
 */
static bool idem_newest(struct index *ix, const struct record *k) {
    union value name = record_get(k, IDEM_KEY);
    const struct record *o = index_idem_get(ix, k->user_id, name.s.ptr, name.s.len);
    if (!o || o->id == k->id) return true;
    uint64_t kc = (uint64_t)record_get(k, IDEM_CREATED).i,
             oc = (uint64_t)record_get(o, IDEM_CREATED).i;
    if (oc > kc || (oc == kc && o->id > k->id)) return false;
    record_free(index_remove(ix, o->id));
    return true;
}

/* Applies a change frame (record.h: record_type_is_change) made at revision rev. */
static int apply_change(struct index *ix, uint8_t type, const uint8_t *payload, size_t len,
                        uint64_t rev) {
    uint64_t v = 0;
    switch (type) {
    case REC_DELETE: {
        if (varint_get(payload, len, &v) != len || v == 0 || v > RECORD_ID_MAX) return -1;
        /* absent is fine: a compacted log may hold the delete only */
        struct record *old = index_remove(ix, v);
        if (old) index_change_add(ix, old->user_id, rev, v, old->type, INDEX_OP_DELETE);
        record_free(old);
        if (v >= ix->next_id && v <= ix->id_max) ix->next_id = v + 1;
        ix->written = true;
        return 0;
    }
    case REC_KEYED: {
        uint8_t t;
        const uint8_t *rec, *key;
        size_t rec_len, key_len;
        if (record_keyed_split(payload, len, &t, &rec, &rec_len, &key, &key_len) < 0) return -1;
        struct record *r = record_decode(t, rec, rec_len);
        struct record *k = record_decode(REC_IDEM, key, key_len);
        if (!r || !k || k->user_id != r->user_id) {
            record_free(r);
            record_free(k);
            return -1;
        }
        r->rev = k->rev = rev;
        record_free(index_swap_change(ix, r));
        if (idem_newest(ix, k))
            index_put(ix, k);
        else
            record_free(k);
        ix->written = true;
        return 0;
    }
    default: {
        /* The id's table slot is a cache miss in a big table: ask for it now,
         * so that it arrives while the payload is decoded. */
        if (varint_get(payload, len, &v)) {
            uint64_t h = id_hash(v);
            const struct index_shard *sh = shard_of(ix, h);
            __builtin_prefetch(&sh->slots[id_home(h, v, sh->cap - 1)], 1);
        }
        struct record *r = record_decode(type, payload, len);
        if (!r) return -1;
        r->rev = rev;
        if (r->type == REC_IDEM && !idem_newest(ix, r)) {
            record_free(r);
            ix->written = true;
            return 0;
        }
        record_free(index_swap_change(ix, r));
        ix->written = true;
        return 0;
    }
    }
}

int index_apply(void *ctx, uint8_t type, const uint8_t *payload, size_t len) {
    struct index *ix = ctx;
    uint64_t v = 0;
    switch (type) {
    case REC_NEXT_ID:
        if (varint_get(payload, len, &v) != len || v == 0 || v > RECORD_ID_MAX + 1) return -1;
        ix->id_floor = v; /* the last one holds: a clean close gives back unused ids */
        return 0;
    case REC_REV_FLOOR:
        if (varint_get(payload, len, &v) != len) return -1;
        ix->rev_floor = v; /* the last one holds: a clean close gives back unused revs */
        return 0;
    case REC_NODE:
        if (varint_get(payload, len, &v) != len || v == 0 || v > RECORD_NODE_MAX) return -1;
        /* A directory belongs to one node: a second, different frame is damage. */
        if (ix->node_recorded && v != ix->node_id) return -1;
        index_set_node(ix, (uint32_t)v);
        ix->node_recorded = true;
        return 0;
    case REC_REV: {
        uint8_t t;
        const uint8_t *inner;
        size_t inner_len;
        if (record_rev_split(payload, len, &v, &t, &inner, &inner_len) < 0) return -1;
        if (apply_change(ix, t, inner, inner_len, v) < 0) return -1;
        if (v > ix->rev) ix->rev = v;
        return 0;
    }
    case REC_REVS: {
        uint64_t h = 0;
        size_t n = varint_get(payload, len, &v);
        if (!n || varint_get(payload + n, len - n, &h) != len - n || h > v) return -1;
        if (v > ix->rev) ix->rev = v;
        ix->rev_horizon = h;
        return 0;
    }
    default:
        /* An older log's change frame: its rev is implicit, the counter's next. */
        if (apply_change(ix, type, payload, len, ix->rev + 1) < 0) return -1;
        ix->rev++;
        return 0;
    }
}

int index_replay_apply(void *ctx, uint8_t type, const uint8_t *payload, size_t len) {
    struct index_replay *z = ctx;
    if (z->frames < INDEX_SIZING_FRAMES) {
        z->frame_bytes += STORE_FRAME_HEADER_SIZE + len;
        if (++z->frames == INDEX_SIZING_FRAMES)
            index_reserve(z->ix, (size_t)(z->file_bytes / (z->frame_bytes / INDEX_SIZING_FRAMES)));
    }
    return index_apply(z->ix, type, payload, len);
}
