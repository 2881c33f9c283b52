/*
 * index_internal: what index.c, index_names.c and index_changes.c share (not for
 * other files).
 */
#ifndef EVENTD_INDEX_INTERNAL_H
#define EVENTD_INDEX_INTERNAL_H

#include <stdint.h>

#include "storage/index.h"

static inline uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= UINT64_C(0xff51afd7ed558ccd);
    x ^= x >> 33;
    return x;
}

/* A user's entry in the owners' table (index.c). */
struct owner {
    uint64_t user_id; /* 0: empty slot */
    struct id_list lists[REC_KIND_MAX + 1];
    struct index_changes changes; /* the change feed's (index.h) */
    uint64_t quota_bytes;         /* record_size of its records of the kinds the quota counts */
    uint64_t idem_bytes;          /* owned_bytes of its idempotency keys */
};

/* User user_id's entry, made when create (index.c); NULL when absent and not create. */
struct owner *owner_get(struct index *ix, uint64_t user_id, bool create);
/* index_changes.c: index_change_add to owner o's list. */
void change_append(struct index *ix, struct owner *o, uint64_t rev, uint64_t id, uint8_t type,
                   uint8_t op);

/* index_names.c: the tables of ids by name (users by name, REC_IDEM records by
 * user and key). names_init leaves them empty without allocating. */
void names_init(struct index *ix);
void names_destroy(struct index *ix);
/* Files r (REC_USER or REC_IDEM) under its name; takes it out again. */
void name_insert(struct index *ix, const struct record *r);
void name_remove(struct index *ix, const struct record *r);

#endif
