/*
 * test_index_names: the index's name tables (users by name, idempotency keys
 * by user and key) against a plain model, through random creates, renames,
 * key rotations, type changes, deletes, undos and stale-key replacements,
 * with every shard pushed through growth and through rehashes that only drop
 * deleted marks; each shard's counts are checked against its slots.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "records.h"
#include "storage/index.h"
#include "storage/record.h"

enum { IDS = 1 << 18, LIVE_MAX = 1 << 16, KEY_USERS = 40, KEYS_PER_USER = 2000, ROUNDS = 300000 };

static uint64_t rng_state = 0x9e3779b97f4a7c15u;

static uint64_t rnd(uint64_t n) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state % n;
}

static struct record *user(uint64_t id, const char *name) {
    return test_user(id, name, "");
}

static struct record *idem(uint64_t id, uint64_t user_id, const char *key) {
    return test_idem(id, user_id, key, 0, "", 0);
}

static struct record *theme(uint64_t id, uint64_t user_id) {
    union value v[RECORD_MAX_FIELDS];
    record_defaults(&record_theme, v);
    return record_build(&record_theme, id, user_id, v);
}

/* The model: what each id holds (0 nothing, else its type), its name or key, its user. */
struct slot {
    uint8_t type;
    uint32_t at; /* its place in live[type] */
    uint64_t user_id;
    char name[24];
};

static struct slot model[IDS];
static uint64_t next_id = 1, name_serial;
/* The ids of each type held, to pick from. */
static uint64_t live[REC_KIND_MAX + 1][LIVE_MAX];
static uint32_t live_len[REC_KIND_MAX + 1];

/* Sets id's type in the model, keeping the lists of ids by type. */
static void set_type(uint64_t id, uint8_t type) {
    struct slot *s = &model[id];
    if (s->type) {
        uint64_t last = live[s->type][--live_len[s->type]];
        live[s->type][s->at] = last;
        model[last].at = s->at;
    }
    s->type = type;
    if (type) {
        CHECK(live_len[type] < LIVE_MAX);
        s->at = live_len[type];
        live[type][live_len[type]++] = id;
    }
}

/* The id holding each (user, key) of the key pool, or 0. */
static uint64_t key_holder[KEY_USERS + 1][KEYS_PER_USER];

static void key_name(char *out, size_t n, uint64_t key) {
    snprintf(out, n, "key-%llu", (unsigned long long)key);
}

/* Each shard's used and live against its slots; the tables' live total against the model. */
static void check_tables(const struct index *ix, size_t *mark_rehashes, size_t *prev_used,
                         size_t *prev_cap) {
    size_t live_total = 0, want = 0;
    for (int i = 0; i < 2 * NAME_SHARDS; i++) {
        const struct name_table *t = i < NAME_SHARDS ? &ix->names[i] : &ix->keys[i - NAME_SHARDS];
        size_t used = 0, live = 0;
        for (size_t j = 0; j < t->cap; j++) {
            used += t->slots[j].id != 0;
            live += t->slots[j].id != 0 && t->slots[j].id != UINT64_MAX;
        }
        CHECK_EQ_UINT(t->used, used);
        CHECK_EQ_UINT(t->live, live);
        CHECK(t->used * 2 <= t->cap);
        if (t->used < prev_used[i] && t->cap == prev_cap[i]) mark_rehashes[i]++;
        prev_used[i] = t->used;
        prev_cap[i] = t->cap;
        live_total += live;
    }
    for (uint64_t id = 1; id < next_id; id++)
        want += model[id].type == REC_USER || model[id].type == REC_IDEM;
    CHECK_EQ_UINT(live_total, want);
}

static void check_lookups(const struct index *ix) {
    for (uint64_t id = 1; id < next_id; id++) {
        const struct slot *s = &model[id];
        const struct record *r = NULL;
        if (s->type == REC_USER)
            r = index_user_by_name(ix, s->name, strlen(s->name));
        else if (s->type == REC_IDEM)
            r = index_idem_get(ix, s->user_id, s->name, strlen(s->name));
        if (s->type == REC_USER || s->type == REC_IDEM) CHECK(r != NULL && r->id == id);
    }
    char key[24];
    for (uint64_t u = 1; u <= KEY_USERS; u++)
        for (uint64_t k = 0; k < KEYS_PER_USER; k++) {
            key_name(key, sizeof key, k);
            const struct record *r = index_idem_get(ix, u, key, strlen(key));
            CHECK_EQ_UINT(r ? r->id : 0, key_holder[u][k]);
        }
}

/* Puts r (id's new content) in index and model; sometimes swaps the old back and forth
 * (db's undo order). */
static void put(struct index *ix, struct record *r) {
    struct slot *s = &model[r->id];
    if (s->type == REC_IDEM) key_holder[s->user_id][strtoull(s->name + 4, NULL, 10)] = 0;
    set_type(r->id, r->type);
    s->user_id = r->user_id;
    s->name[0] = '\0';
    if (r->type == REC_USER || r->type == REC_IDEM) {
        union value v = record_get(r, r->type == REC_USER ? USER_NAME : IDEM_KEY);
        memcpy(s->name, v.s.ptr, v.s.len);
        s->name[v.s.len] = '\0';
    }
    if (r->type == REC_IDEM) key_holder[r->user_id][strtoull(s->name + 4, NULL, 10)] = r->id;
    struct record *old = index_swap(ix, r);
    if (old && rnd(8) == 0) { /* undone, then done again */
        struct record *now = index_swap(ix, old);
        CHECK(now == r);
        CHECK(index_swap(ix, now) == old);
    }
    record_free(old);
}

static void drop(struct index *ix, uint64_t id) {
    struct slot *s = &model[id];
    if (s->type == REC_IDEM) key_holder[s->user_id][strtoull(s->name + 4, NULL, 10)] = 0;
    CHECK_EQ_INT(index_delete(ix, id), s->type ? 0 : -1);
    set_type(id, 0);
}

/* A random id of this type, or 0. */
static uint64_t pick(uint8_t type) {
    return live_len[type] ? live[type][rnd(live_len[type])] : 0;
}

/* One random change, about as many creates as deletes once the tables hold about
 * users and keys of each. */
static void step(struct index *ix, uint32_t users, uint32_t keys) {
    char name[24];
    uint64_t id, u = 1 + rnd(KEY_USERS), k = rnd(KEYS_PER_USER);
    switch (rnd(10)) {
    case 0:
    case 1: /* a new user, or one fewer */
        if (live_len[REC_USER] >= users) {
            if ((id = pick(REC_USER))) drop(ix, id);
            break;
        }
        snprintf(name, sizeof name, "user-%llu", (unsigned long long)name_serial++);
        put(ix, user(next_id++, name));
        break;
    case 2: /* a rename, or a key rotation under the same name */
        if (!(id = pick(REC_USER))) break;
        if (rnd(2))
            snprintf(name, sizeof name, "user-%llu", (unsigned long long)name_serial++);
        else
            snprintf(name, sizeof name, "%s", model[id].name);
        put(ix, user(id, name));
        break;
    case 3:
    case 4:
    case 5: /* a key (a stale one of the same key deleted first, as the API does), or one fewer */
        if (live_len[REC_IDEM] >= keys) {
            if ((id = pick(REC_IDEM))) drop(ix, id);
            break;
        }
        key_name(name, sizeof name, k);
        if (key_holder[u][k]) drop(ix, key_holder[u][k]);
        put(ix, idem(next_id++, u, name));
        break;
    case 6: /* a key record given another key, or another user, in place */
        key_name(name, sizeof name, k);
        if (!(id = pick(REC_IDEM)) || key_holder[u][k]) break;
        put(ix, idem(id, u, name));
        break;
    case 7: /* a named record turned into an unnamed one, or back */
        if ((id = pick(rnd(2) ? REC_USER : REC_IDEM))) {
            put(ix, theme(id, u));
        } else if ((id = pick(REC_THEME)) && !key_holder[u][k]) {
            key_name(name, sizeof name, k);
            put(ix, idem(id, u, name));
        }
        break;
    case 8: /* a key used again (its stale record deleted first) */
        if (!(id = pick(REC_IDEM))) break;
        snprintf(name, sizeof name, "%s", model[id].name);
        u = model[id].user_id;
        drop(ix, id);
        put(ix, idem(next_id++, u, name));
        break;
    default:
        if ((id = pick(rnd(2) ? REC_USER : REC_IDEM))) drop(ix, id);
        break;
    }
}

static void test_name_tables_against_a_model(void) {
    static size_t mark_rehashes[2 * NAME_SHARDS], prev_used[2 * NAME_SHARDS],
        prev_cap[2 * NAME_SHARDS];
    struct index ix;
    index_init(&ix);
    for (int i = 0; i < ROUNDS && next_id + 2 < IDS; i++) {
        bool thin = i > ROUNDS / 3;
        step(&ix, thin ? 700 : 2500, thin ? 800 : 2500);
        if (i % 256 == 0) check_tables(&ix, mark_rehashes, prev_used, prev_cap);
        if (i % 20000 == 0) check_lookups(&ix);
    }
    check_tables(&ix, mark_rehashes, prev_used, prev_cap);
    check_lookups(&ix);
    /* Every shard of both tables grew, and dropped its deleted marks at its size. */
    size_t without = 0;
    for (int i = 0; i < 2 * NAME_SHARDS; i++) {
        const struct name_table *t = i < NAME_SHARDS ? &ix.names[i] : &ix.keys[i - NAME_SHARDS];
        without += t->cap < 32 || !mark_rehashes[i];
    }
    CHECK_EQ_UINT(without, 0);
    /* Everything deleted: every shard is left with no live entry. */
    for (uint64_t id = 1; id < next_id; id++)
        if (model[id].type) drop(&ix, id);
    check_tables(&ix, mark_rehashes, prev_used, prev_cap);
    index_destroy(&ix);
}

static const struct check_case cases[] = {
    CHECK_CASE(test_name_tables_against_a_model),
};

int main(int argc, char **argv) {
    return check_run(argc, argv, cases, CHECK_COUNT(cases));
}
