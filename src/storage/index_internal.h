/*
 * index_internal: what index.c and index_names.c share (not for other files).
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

/* index_names.c: the tables of ids by name (users by name, REC_IDEM records by
 * user and key). names_init leaves them empty without allocating. */
void names_init(struct index *ix);
void names_destroy(struct index *ix);
/* Files r (REC_USER or REC_IDEM) under its name; takes it out again. */
void name_insert(struct index *ix, const struct record *r);
void name_remove(struct index *ix, const struct record *r);

#endif
