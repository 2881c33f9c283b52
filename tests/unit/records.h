/*
 * records.h: the records the index's tests and benchmarks file (test_index.c,
 * test_index_names.c, test_db.c, tests/bench/bench_keys.c): a user by name, and an
 * idempotency key.
 */
#ifndef EVENTD_TEST_RECORDS_H
#define EVENTD_TEST_RECORDS_H

#include <stdint.h>
#include <string.h>

#include "storage/record.h"

/* A user named name, with hash as its key hash ("" for none). */
static inline struct record *test_user(uint64_t id, const char *name, const char *hash) {
    union value v[RECORD_MAX_FIELDS];
    record_defaults(&record_user, v);
    v[USER_NAME].s.ptr = name;
    v[USER_NAME].s.len = (uint32_t)strlen(name);
    v[USER_KEY_HASH].s.ptr = hash;
    v[USER_KEY_HASH].s.len = (uint32_t)strlen(hash);
    return record_build(&record_user, id, 0, v);
}

/* A key's values: key, made at created, for record rid, keeping answer (answer_len bytes). */
static inline void test_idem_vals(union value *v, const char *key, int64_t created, uint64_t rid,
                                  const char *answer, size_t answer_len) {
    record_defaults(&record_idem, v);
    v[IDEM_KEY].s.ptr = key;
    v[IDEM_KEY].s.len = (uint32_t)strlen(key);
    v[IDEM_REQUEST_HASH].s.ptr = "0123456789abcdef";
    v[IDEM_REQUEST_HASH].s.len = IDEM_HASH_BYTES;
    v[IDEM_CREATED].i = created;
    v[IDEM_STATUS].i = 200;
    v[IDEM_ANSWER].s.ptr = answer;
    v[IDEM_ANSWER].s.len = (uint32_t)answer_len;
    v[IDEM_RECORD_ID].i = rid;
}

/* User user_id's key, made at created, keeping answer (answer_len bytes) for record id - 1. */
static inline struct record *test_idem(uint64_t id, uint64_t user_id, const char *key,
                                       int64_t created, const char *answer, size_t answer_len) {
    union value v[RECORD_MAX_FIELDS];
    test_idem_vals(v, key, created, id - 1, answer, answer_len);
    return record_build(&record_idem, id, user_id, v);
}

/* User user_id's key by reference to record id - 1 (record.h, IDEM_REF_MARK), which may
 * come to hold held bytes (below 128: one byte of varint). */
static inline struct record *test_idem_ref(uint64_t id, uint64_t user_id, const char *key,
                                           uint8_t held) {
    const char ref[2] = {IDEM_REF_MARK, (char)(held & 0x7f)};
    return test_idem(id, user_id, key, 1764000000, ref, sizeof ref);
}

#endif
