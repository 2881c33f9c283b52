/*
 * index_names: the index's tables of ids by the hash of a name (index.h):
 * users by name, and REC_IDEM records by (user, key).
 */
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "storage/index.h"
#include "storage/index_internal.h"

#define NAME_MIN_CAP 16 /* a shard's table, once allocated */

/* A shard that never held a name points at this shared, read-only table with
 * one empty slot: lookups find nothing in it, and the first insert allocates. */
static const struct name_entry no_names[1];

void names_init(struct index *ix) {
    for (int i = 0; i < NAME_SHARDS; i++)
        ix->names[i] = ix->keys[i] = (struct name_table){(struct name_entry *)no_names, 1, 0, 0};
}

void names_destroy(struct index *ix) {
    for (int i = 0; i < NAME_SHARDS; i++) {
        if (ix->names[i].slots != no_names) free(ix->names[i].slots);
        if (ix->keys[i].slots != no_names) free(ix->keys[i].slots);
    }
}

/*
 * Two tables of ids by the hash of a name: users by name, and REC_IDEM
 * records by (user, key). Open addressing with the hash kept beside the id,
 * so that probing and growing never touch a record (a cache miss each); a
 * match is confirmed on the record. 16 bytes a slot, at a load of at most
 * one half.
 */
#define NAME_GONE UINT64_MAX /* a deleted entry */

_Static_assert(sizeof((struct index *)0)->name_key == crypto_shorthash_KEYBYTES, "name_key");

/* SipHash-2-4 of the name under the index's secret key, then the user's seed: nobody can
 * aim names at one probe run without the key. */
static uint64_t name_hash(const struct index *ix, uint64_t seed, const char *p, size_t n) {
    uint64_t h;
    crypto_shorthash((unsigned char *)&h, (const unsigned char *)p, n, ix->name_key);
    return h ^ seed;
}

/* The shard of h's table: by h's top bits (its low bits pick the slot). */
static struct name_table *table_of(const struct index *ix, uint8_t type, uint64_t h) {
    const struct name_table *t = type == REC_USER ? ix->names : ix->keys;
    return (struct name_table *)&t[h >> 56];
}

/* The name a record is filed under in its table. */
static union value name_of(const struct record *r) {
    return record_get(r, r->type == REC_USER ? USER_NAME : IDEM_KEY);
}

static uint64_t name_seed(uint8_t type, uint64_t user_id) {
    return type == REC_USER ? 0 : mix(user_id);
}

/* The slot of t (h's shard) holding a record of this type, user (REC_IDEM) and name, or NULL. */
static struct name_entry *name_find(const struct index *ix, const struct name_table *t, uint64_t h,
                                    uint8_t type, uint64_t user_id, const char *p, size_t n) {
    size_t mask = t->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        struct name_entry *e = &t->slots[i];
        if (e->id == 0) return NULL;
        if (e->id == NAME_GONE || e->hash != h) continue;
        const struct record *u = index_get(ix, e->id);
        if (!u || u->type != type || (type != REC_USER && u->user_id != user_id)) continue;
        union value v = name_of(u);
        if (v.s.len == n && memcmp(v.s.ptr, p, n) == 0) return e;
    }
}

static struct name_entry *name_slot(const struct index *ix, uint8_t type, uint64_t user_id,
                                    const char *p, size_t n) {
    uint64_t h = name_hash(ix, name_seed(type, user_id), p, n);
    return name_find(ix, table_of(ix, type, h), h, type, user_id, p, n);
}

/* Files (id, h) in t, which has room. */
static void name_place(struct name_table *t, uint64_t id, uint64_t h) {
    size_t mask = t->cap - 1, i = h & mask;
    while (t->slots[i].id && t->slots[i].id != NAME_GONE)
        i = (i + 1) & mask;
    if (!t->slots[i].id) t->used++;
    t->live++;
    t->slots[i] = (struct name_entry){id, h};
}

void name_insert(struct index *ix, const struct record *u) {
    union value v = name_of(u);
    uint64_t h = name_hash(ix, name_seed(u->type, u->user_id), v.s.ptr, v.s.len);
    struct name_table *t = table_of(ix, u->type, h);
    if ((t->used + 1) * 2 > t->cap) {
        /* Twice the size when over a quarter of it is live; else the same size,
         * the deleted marks dropped (keys expire and come anew: growing on the
         * marks alone would size the table by every key ever filed). */
        struct name_entry *old = t->slots;
        size_t old_cap = t->cap;
        t->cap = (t->live + 1) * 4 > old_cap ? old_cap * 2 : old_cap;
        if (t->cap < NAME_MIN_CAP) t->cap = NAME_MIN_CAP;
        t->slots = xcalloc(t->cap, sizeof *t->slots);
        t->used = t->live = 0;
        for (size_t i = 0; i < old_cap; i++)
            if (old[i].id && old[i].id != NAME_GONE) name_place(t, old[i].id, old[i].hash);
        if (old != no_names) free(old);
    }
    name_place(t, u->id, h);
}

/* Takes out u's own entry, by its id: with two records of one name (an import may hold
 * two keys alike), a search by name would find the other's and leave u's live for good. */
void name_remove(struct index *ix, const struct record *u) {
    union value v = name_of(u);
    uint64_t h = name_hash(ix, name_seed(u->type, u->user_id), v.s.ptr, v.s.len);
    struct name_table *t = table_of(ix, u->type, h);
    size_t mask = t->cap - 1;
    for (size_t i = h & mask; t->slots[i].id; i = (i + 1) & mask) {
        if (t->slots[i].id == u->id && t->slots[i].hash == h) {
            t->slots[i].id = NAME_GONE;
            t->live--;
            return;
        }
    }
}

const struct record *index_idem_get(const struct index *ix, uint64_t user_id, const char *ptr,
                                    size_t len) {
    struct name_entry *e = name_slot(ix, REC_IDEM, user_id, ptr, len);
    return e ? index_get(ix, e->id) : NULL;
}

const struct record *index_user_by_name(const struct index *ix, const char *ptr, size_t len) {
    struct name_entry *e = name_slot(ix, REC_USER, 0, ptr, len);
    return e ? index_get(ix, e->id) : NULL;
}
