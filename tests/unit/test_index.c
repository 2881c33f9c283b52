/*
 * test_index: the in-memory state: put/swap/remove/get, tombstones, shard
 * growth, per-user id lists, users by name, event links kept by swaps and
 * removals in both directions (the order db's undo uses), and index_apply
 * on every frame type, malformed payloads included.
 */
#include <malloc.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "common/varint.h"
#include "records.h"
#include "storage/index.h"
#include "storage/logfile.h"
#include "storage/record.h"

/* ---- helpers ---- */

static struct record *theme(uint64_t id, uint64_t user, const char *name) {
    union value v[RECORD_MAX_FIELDS];
    record_defaults(&record_theme, v);
    v[THEME_NAME].s.ptr = name;
    v[THEME_NAME].s.len = (uint32_t)strlen(name);
    return record_build(&record_theme, id, user, v);
}

static struct record *address(uint64_t id, uint64_t user) {
    union value v[RECORD_MAX_FIELDS];
    record_defaults(&record_address, v);
    return record_build(&record_address, id, user, v);
}

static struct record *event(uint64_t id, uint64_t user, uint64_t theme_id, uint64_t address_id) {
    union value v[RECORD_MAX_FIELDS];
    record_defaults(&record_event, v);
    v[EVENT_THEME_ID].i = theme_id;
    v[EVENT_ADDRESS_ID].i = address_id;
    return record_build(&record_event, id, user, v);
}

static struct record *user(uint64_t id, const char *name, const char *hash) {
    return test_user(id, name, hash);
}

static uint64_t link_of(const struct index *ix, uint64_t id) {
    const struct record *r = index_get(ix, id);
    CHECK(r != NULL);
    return r->event_id;
}

/* The links kept up change by change equal the ones index_relink derives from the events. */
static void check_links_derivable(struct index *ix, const uint64_t *ids, size_t n) {
    uint64_t kept[64];
    CHECK(n <= 64);
    for (size_t i = 0; i < n; i++)
        kept[i] = index_get(ix, ids[i]) ? link_of(ix, ids[i]) : 0;
    index_relink(ix);
    for (size_t i = 0; i < n; i++)
        if (index_get(ix, ids[i])) CHECK_EQ_UINT(link_of(ix, ids[i]), kept[i]);
}

static void check_list(const struct index *ix, uint64_t owner, uint8_t type, const uint64_t *want,
                       size_t n) {
    const struct id_list *l = index_owned(ix, owner, type);
    CHECK_EQ_UINT(l->len, n);
    for (size_t i = 0; i < n; i++)
        CHECK_EQ_UINT(l->ids[i], want[i]);
}

/* index_apply of a record's encoding. */
static int apply_record(struct index *ix, struct record *r) {
    struct buf b = BUF_INIT;
    record_encode(r, &b);
    int rc = index_apply(ix, r->type, (const uint8_t *)b.ptr, b.len);
    buf_destroy(&b);
    record_free(r);
    return rc;
}

static int apply_varint(struct index *ix, uint8_t type, uint64_t v) {
    uint8_t p[VARINT_MAX];
    return index_apply(ix, type, p, varint_put(p, v));
}

/* ---- put, swap, remove, get ---- */

/* A fresh index allocates nothing until a record arrives: every lookup on its shared empty tables
 * finds nothing, and nothing is written to them. */
static void test_empty_index(void) {
    struct index ix;
    index_init(&ix);
    for (uint64_t id = 0; id < 4096; id++)
        CHECK(index_get(&ix, id) == NULL);
    CHECK(index_remove(&ix, 3) == NULL);
    CHECK_EQ_INT(index_delete(&ix, 3), -1);
    CHECK(index_user_by_name(&ix, "nobody", 6) == NULL);
    CHECK_EQ_UINT(index_owned(&ix, 7, REC_THEME)->len, 0);
    index_relink(&ix);
    index_destroy(&ix);
    /* A second index starts as empty: the first one wrote nothing into the shared tables. */
    index_init(&ix);
    index_put(&ix, theme(1, 7, "one"));
    CHECK(index_get(&ix, 1) != NULL);
    CHECK(index_get(&ix, 2) == NULL);
    index_destroy(&ix);
    index_init(&ix);
    CHECK(index_get(&ix, 1) == NULL);
    CHECK_EQ_UINT(index_owned(&ix, 7, REC_THEME)->len, 0);
    index_destroy(&ix);
}

/* Reserving sizes every shard once: the records then arrive without a table growing, and records
 * already in keep their slots' contents. */
static void test_reserve(void) {
    struct index ix;
    index_init(&ix);
    index_put(&ix, theme(1, 7, "one"));
    index_reserve(&ix, 100000);
    uint32_t caps[INDEX_SHARDS];
    for (int s = 0; s < INDEX_SHARDS; s++) {
        caps[s] = ix.shards[s].cap;
        CHECK(caps[s] >= 512); /* 100,000 / 256 = 391 records, under 3/4 of 512 */
    }
    CHECK(index_get(&ix, 1) != NULL);
    for (uint64_t id = 2; id <= 100000; id++)
        index_put(&ix, theme(id, 7, "x"));
    for (int s = 0; s < INDEX_SHARDS; s++)
        CHECK_EQ_UINT(ix.shards[s].cap, caps[s]);
    for (uint64_t id = 1; id <= 100000; id++)
        if (!index_get(&ix, id)) CHECK_EQ_UINT(id, 0);
    index_reserve(&ix, 10); /* never shrinks */
    for (int s = 0; s < INDEX_SHARDS; s++)
        CHECK_EQ_UINT(ix.shards[s].cap, caps[s]);
    index_destroy(&ix);
}

static void test_put_get(void) {
    struct index ix;
    index_init(&ix);
    CHECK(index_get(&ix, 1) == NULL);
    index_put(&ix, theme(1, 7, "one"));
    const struct record *r = index_get(&ix, 1);
    CHECK(r != NULL);
    CHECK_EQ_UINT(r->id, 1);
    CHECK_EQ_UINT(r->user_id, 7);
    CHECK_EQ_MEM(record_get(r, THEME_NAME).s.ptr, record_get(r, THEME_NAME).s.len, "one");
    CHECK_EQ_UINT(ix.count, 1);
    CHECK_EQ_UINT(ix.next_id, 2);
    CHECK(index_get(&ix, 2) == NULL);
    CHECK(index_get(&ix, 0) == NULL);
    index_destroy(&ix);
}

static void test_swap_returns_replaced(void) {
    struct index ix;
    index_init(&ix);
    CHECK(index_swap(&ix, theme(5, 7, "a")) == NULL); /* nothing replaced */
    struct record *old = index_swap(&ix, theme(5, 7, "b"));
    CHECK(old != NULL);
    CHECK_EQ_MEM(record_get(old, THEME_NAME).s.ptr, record_get(old, THEME_NAME).s.len, "a");
    CHECK_EQ_MEM(record_get(index_get(&ix, 5), THEME_NAME).s.ptr,
                 record_get(index_get(&ix, 5), THEME_NAME).s.len, "b");
    CHECK_EQ_UINT(ix.count, 1);
    /* Putting the old one back (an undo) returns the newer one. */
    struct record *newer = index_swap(&ix, old);
    CHECK_EQ_MEM(record_get(newer, THEME_NAME).s.ptr, record_get(newer, THEME_NAME).s.len, "b");
    CHECK(index_get(&ix, 5) == old);
    record_free(newer);
    uint64_t one[] = {5};
    check_list(&ix, 7, REC_THEME, one, 1); /* listed once, not once per swap */
    index_destroy(&ix);
}

static void test_remove(void) {
    struct index ix;
    index_init(&ix);
    index_put(&ix, theme(1, 7, "a"));
    index_put(&ix, theme(2, 7, "b"));
    uint64_t live = ix.live_bytes;
    struct record *r = index_remove(&ix, 1);
    CHECK(r != NULL && r->id == 1);
    CHECK_EQ_UINT(ix.live_bytes, live - record_size(r));
    record_free(r);
    CHECK(index_get(&ix, 1) == NULL);
    CHECK(index_get(&ix, 2) != NULL);
    CHECK_EQ_UINT(ix.count, 1);
    CHECK(index_remove(&ix, 1) == NULL); /* absent */
    CHECK_EQ_INT(index_delete(&ix, 1), -1);
    CHECK_EQ_INT(index_delete(&ix, 2), 0);
    CHECK_EQ_UINT(ix.count, 0);
    CHECK_EQ_UINT(ix.live_bytes, 0);
    CHECK_EQ_UINT(ix.next_id, 3); /* never goes down */
    CHECK_EQ_UINT(index_owned(&ix, 7, REC_THEME)->len, 0);
    index_destroy(&ix);
}

static void test_take_id(void) {
    struct index ix;
    index_init(&ix);
    CHECK_EQ_UINT(index_take_id(&ix), 1);
    CHECK_EQ_UINT(index_take_id(&ix), 2);
    index_put(&ix, theme(100, 1, "x"));
    CHECK_EQ_UINT(index_take_id(&ix), 101);
    ix.next_id = RECORD_ID_MAX;
    CHECK_EQ_UINT(index_take_id(&ix), RECORD_ID_MAX);
    CHECK_EQ_UINT(index_take_id(&ix), 0); /* used up */
    CHECK_EQ_UINT(index_take_id(&ix), 0);
    index_destroy(&ix);
}

/* ---- tombstones ---- */

static void test_tombstones_and_reinsert(void) {
    struct index ix;
    index_init(&ix);
    /* Churn: the same ids removed and put back many times. Tombstones must be
     * reused or swept, or probing would never find an empty slot (a hang,
     * which the runner's timeout turns into a failure). */
    for (int round = 0; round < 200; round++) {
        for (uint64_t id = 1; id <= 2000; id++)
            index_put(&ix, theme(id, 1 + id % 5, "t"));
        CHECK_EQ_UINT(ix.count, 2000);
        for (uint64_t id = 1; id <= 2000; id += 1 + (uint64_t)round % 3)
            CHECK_EQ_INT(index_delete(&ix, id), 0);
        for (uint64_t id = 1; id <= 2000; id += 1 + (uint64_t)round % 3)
            CHECK(index_get(&ix, id) == NULL);
    }
    /* Fresh ids after the churn, each found, the tables still small. */
    for (uint64_t id = 2001; id <= 4000; id++)
        index_put(&ix, theme(id, 1, "n"));
    size_t cap = 0, count = 0;
    for (int s = 0; s < INDEX_SHARDS; s++) {
        CHECK(ix.shards[s].used * 4 < ix.shards[s].cap * 3);
        cap += ix.shards[s].cap;
        count += ix.shards[s].count;
    }
    CHECK_EQ_UINT(count, ix.count);
    CHECK(cap <= 16 * ix.count + 16 * INDEX_SHARDS);
    for (uint64_t id = 2001; id <= 4000; id++)
        CHECK(index_get(&ix, id) != NULL);
    index_destroy(&ix);
}

/* ---- growth ---- */

static void test_many_ids(void) {
    enum { N = 300000 };
    struct index ix;
    index_init(&ix);
    uint64_t bytes = 0;
    for (uint64_t id = 1; id <= N; id++) {
        struct record *r = theme(id, 1 + id % 1000, "x");
        bytes += record_size(r);
        index_put(&ix, r);
    }
    CHECK_EQ_UINT(ix.count, N);
    CHECK_EQ_UINT(ix.live_bytes, bytes);
    CHECK_EQ_UINT(ix.next_id, N + 1);
    size_t count = 0;
    for (int s = 0; s < INDEX_SHARDS; s++) {
        const struct index_shard *sh = &ix.shards[s];
        CHECK((sh->cap & (sh->cap - 1)) == 0);
        CHECK(sh->used * 4 < sh->cap * 3);
        CHECK(sh->count > 0); /* the hash spreads ids over every shard */
        count += sh->count;
    }
    CHECK_EQ_UINT(count, N);
    for (uint64_t id = 1; id <= N; id++) {
        const struct record *r = index_get(&ix, id);
        if (!r || r->id != id) CHECK_EQ_UINT(r ? r->id : 0, id);
    }
    CHECK(index_get(&ix, N + 1) == NULL);
    for (uint64_t id = 2; id <= N; id += 2)
        CHECK_EQ_INT(index_delete(&ix, id), 0);
    CHECK_EQ_UINT(ix.count, N / 2);
    for (uint64_t id = 1; id <= N; id++)
        if ((index_get(&ix, id) != NULL) != (id % 2 == 1)) CHECK_EQ_UINT(id, 0);
    CHECK_EQ_UINT(index_owned(&ix, 1, REC_THEME)->len, 0);        /* ids 1000, 2000...: gone */
    CHECK_EQ_UINT(index_owned(&ix, 2, REC_THEME)->len, N / 1000); /* ids 1, 1001...: kept */
    index_destroy(&ix);
}

/* Ids in runs share slots; strided ids (what deletes can leave) must still spread
 * over the shards and stay findable, through growth and deletes. */
static void test_strided_ids(void) {
    static const uint64_t strides[] = {16, 4096, UINT64_C(1) << 20, 12345, 256 * 16};
    for (size_t t = 0; t < sizeof strides / sizeof strides[0]; t++) {
        enum { N = 20000 };
        struct index ix;
        index_init(&ix);
        for (uint64_t k = 0; k < N; k++)
            index_put(&ix, theme(1 + k * strides[t], 1, "x"));
        for (uint64_t k = 0; k < N; k += 3)
            CHECK_EQ_INT(index_delete(&ix, 1 + k * strides[t]), 0);
        for (uint64_t k = 0; k < N; k += 6)
            index_put(&ix, theme(1 + k * strides[t], 1, "y"));
        size_t most = 0;
        for (int s = 0; s < INDEX_SHARDS; s++)
            if (ix.shards[s].count > most) most = ix.shards[s].count;
        CHECK(most < 4 * ix.count / INDEX_SHARDS); /* no shard takes a pattern's all */
        for (uint64_t k = 0; k < N; k++) {
            const struct record *r = index_get(&ix, 1 + k * strides[t]);
            bool live = k % 3 != 0 || k % 6 == 0;
            if ((r != NULL) != live) CHECK_EQ_UINT(k, UINT64_MAX);
            if (r && r->id != 1 + k * strides[t]) CHECK_EQ_UINT(r->id, 1 + k * strides[t]);
            if (r && index_get(&ix, 2 + k * strides[t])) CHECK_EQ_UINT(k, UINT64_MAX);
        }
        index_destroy(&ix);
    }
}

/* ---- per-user lists ---- */

static void test_owned_lists(void) {
    struct index ix;
    index_init(&ix);
    /* Out of order, as a compacted log's tail may replay. */
    uint64_t order[] = {9, 3, 7, 1, 5, 11};
    for (size_t i = 0; i < 6; i++)
        index_put(&ix, theme(order[i], 42, "t"));
    index_put(&ix, address(4, 42));
    index_put(&ix, address(6, 43));
    uint64_t themes[] = {1, 3, 5, 7, 9, 11};
    check_list(&ix, 42, REC_THEME, themes, 6);
    uint64_t addrs42[] = {4}, addrs43[] = {6};
    check_list(&ix, 42, REC_ADDRESS, addrs42, 1);
    check_list(&ix, 43, REC_ADDRESS, addrs43, 1);
    check_list(&ix, 43, REC_THEME, NULL, 0);
    check_list(&ix, 44, REC_THEME, NULL, 0); /* a user with nothing */
    check_list(&ix, 42, 99, NULL, 0);        /* not a kind */

    /* Newest first is a walk from the end. */
    const struct id_list *l = index_owned(&ix, 42, REC_THEME);
    uint64_t prev = UINT64_MAX;
    for (uint32_t i = l->len; i-- > 0;) {
        CHECK(l->ids[i] < prev);
        prev = l->ids[i];
    }
    CHECK_EQ_UINT(prev, 1);

    /* Removal from the middle, a replace that keeps the owner, one that moves it. */
    CHECK_EQ_INT(index_delete(&ix, 5), 0);
    index_put(&ix, theme(7, 42, "renamed"));
    index_put(&ix, theme(9, 43, "moved"));
    uint64_t left[] = {1, 3, 7, 11}, moved[] = {9};
    check_list(&ix, 42, REC_THEME, left, 4);
    check_list(&ix, 43, REC_THEME, moved, 1);
    index_destroy(&ix);
}

/* Many owners: the owner table grows and every list stays with its user. */
static void test_many_owners(void) {
    struct index ix;
    index_init(&ix);
    uint64_t id = 1;
    for (uint64_t u = 1; u <= 500; u++)
        for (int k = 0; k < 3; k++)
            index_put(&ix, theme(1000 + id++, u, "t"));
    for (uint64_t u = 1; u <= 500; u++) {
        const struct id_list *l = index_owned(&ix, u, REC_THEME);
        CHECK_EQ_UINT(l->len, 3);
        for (uint32_t k = 0; k < 3; k++)
            CHECK_EQ_UINT(index_get(&ix, l->ids[k])->user_id, u);
    }
    index_destroy(&ix);
}

/* ---- users by name ---- */

static void test_users_by_name(void) {
    struct index ix;
    index_init(&ix);
    index_put(&ix, user(1, "alice", "h1"));
    index_put(&ix, user(2, "alicia", "h2"));
    index_put(&ix, theme(3, 1, "alice")); /* a theme's name is not a user's */
    CHECK_EQ_UINT(index_user_by_name(&ix, "alice", 5)->id, 1);
    CHECK_EQ_UINT(index_user_by_name(&ix, "alicia", 6)->id, 2);
    CHECK(index_user_by_name(&ix, "ali", 3) == NULL);
    CHECK(index_user_by_name(&ix, "alice2", 6) == NULL);
    CHECK(index_user_by_name(&ix, "", 0) == NULL);
    CHECK(index_user_by_name(&ix, "alicia", 5) == NULL); /* <ptr, len>: "alici" */
    CHECK_EQ_UINT(index_user_by_name(&ix, "alice and more", 5)->id, 1);
    uint64_t users[] = {1, 2};
    check_list(&ix, UINT64_MAX, REC_USER, users, 2); /* users are listed under UINT64_MAX */
    index_destroy(&ix);
}

static void test_user_rename_and_remove(void) {
    struct index ix;
    index_init(&ix);
    index_put(&ix, user(1, "old", "h"));
    /* A rename is a replace: the old name goes, the new one finds the same id. */
    struct record *before = index_swap(&ix, user(1, "new", "h"));
    CHECK(index_user_by_name(&ix, "old", 3) == NULL);
    CHECK_EQ_UINT(index_user_by_name(&ix, "new", 3)->id, 1);
    /* Undone: the old name is back, the new one gone. */
    record_free(index_swap(&ix, before));
    CHECK_EQ_UINT(index_user_by_name(&ix, "old", 3)->id, 1);
    CHECK(index_user_by_name(&ix, "new", 3) == NULL);
    /* A key rotation keeps the name. */
    index_put(&ix, user(1, "old", "rotated"));
    const struct record *u = index_user_by_name(&ix, "old", 3);
    CHECK_EQ_MEM(record_get(u, USER_KEY_HASH).s.ptr, record_get(u, USER_KEY_HASH).s.len, "rotated");
    /* Removed, then the name taken by another id. */
    CHECK_EQ_INT(index_delete(&ix, 1), 0);
    CHECK(index_user_by_name(&ix, "old", 3) == NULL);
    index_put(&ix, user(2, "old", "h2"));
    CHECK_EQ_UINT(index_user_by_name(&ix, "old", 3)->id, 2);
    index_destroy(&ix);
}

/* Many users through renames and removals: the names table grows and sweeps deleted marks. */
static void test_many_users_churn(void) {
    struct index ix;
    index_init(&ix);
    char name[32];
    for (int round = 0; round < 20; round++) {
        for (uint64_t id = 1; id <= 300; id++) {
            snprintf(name, sizeof name, "u%d-%" PRIu64, round, id);
            index_put(&ix, user(id, name, "h")); /* renames every user of the last round */
        }
        for (uint64_t id = 1; id <= 300; id++) {
            snprintf(name, sizeof name, "u%d-%" PRIu64, round, id);
            const struct record *u = index_user_by_name(&ix, name, strlen(name));
            CHECK(u != NULL && u->id == id);
            if (round > 0) {
                snprintf(name, sizeof name, "u%d-%" PRIu64, round - 1, id);
                CHECK(index_user_by_name(&ix, name, strlen(name)) == NULL);
            }
        }
        for (uint64_t id = 1; id <= 300; id += 7)
            CHECK_EQ_INT(index_delete(&ix, id), 0);
    }
    for (int i = 0; i < NAME_SHARDS; i++)
        CHECK(ix.names[i].used * 2 <= ix.names[i].cap);
    index_destroy(&ix);
}

/* ---- event links ---- */

static void test_links_set_and_cleared(void) {
    struct index ix;
    index_init(&ix);
    index_put(&ix, theme(1, 9, "t1"));
    index_put(&ix, theme(2, 9, "t2"));
    index_put(&ix, address(3, 9));
    index_put(&ix, event(4, 9, 1, 3));
    CHECK_EQ_UINT(link_of(&ix, 1), 4);
    CHECK_EQ_UINT(link_of(&ix, 2), 0);
    CHECK_EQ_UINT(link_of(&ix, 3), 4);
    /* An update of a linked theme keeps the link. */
    index_put(&ix, theme(1, 9, "t1 again"));
    CHECK_EQ_UINT(link_of(&ix, 1), 4);
    /* The event moves to theme 2 and drops its address. */
    index_put(&ix, event(4, 9, 2, 0));
    CHECK_EQ_UINT(link_of(&ix, 1), 0);
    CHECK_EQ_UINT(link_of(&ix, 2), 4);
    CHECK_EQ_UINT(link_of(&ix, 3), 0);
    /* A link to a record of the wrong kind or to nothing is not made. */
    index_put(&ix, event(5, 9, 3, 1)); /* theme id 3 is an address, address id 1 a theme */
    CHECK_EQ_UINT(link_of(&ix, 3), 0);
    CHECK_EQ_UINT(link_of(&ix, 1), 0);
    index_put(&ix, event(6, 9, 77, 78));
    CHECK(index_get(&ix, 77) == NULL);
    /* Removing the event clears its links. */
    CHECK_EQ_INT(index_delete(&ix, 4), 0);
    CHECK_EQ_UINT(link_of(&ix, 2), 0);
    uint64_t ids[] = {1, 2, 3};
    check_links_derivable(&ix, ids, 3);
    index_destroy(&ix);
}

/*
 * db's undo: each change keeps (id, what it replaced); a failed batch puts
 * them back newest first, index_swap for a replaced or deleted record,
 * index_remove for a created one. Links must come back with them.
 */
struct change {
    uint64_t id;
    struct record *old;
};

static void change_put(struct index *ix, struct change *c, size_t *n, struct record *r) {
    c[*n].id = r->id;
    c[*n].old = index_swap(ix, r);
    (*n)++;
}

static void change_delete(struct index *ix, struct change *c, size_t *n, uint64_t id) {
    c[*n].id = id;
    c[*n].old = index_remove(ix, id);
    CHECK(c[*n].old != NULL);
    (*n)++;
}

static void undo_all(struct index *ix, struct change *c, size_t n) {
    while (n-- > 0)
        record_free(c[n].old ? index_swap(ix, c[n].old) : index_remove(ix, c[n].id));
}

static void test_links_through_undo(void) {
    struct index ix;
    index_init(&ix);
    index_put(&ix, theme(1, 9, "t1"));
    index_put(&ix, theme(2, 9, "t2"));
    index_put(&ix, address(3, 9));
    index_put(&ix, event(4, 9, 1, 3));
    uint64_t ids[] = {1, 2, 3, 4};
    struct change c[16];
    size_t n = 0;

    /* The event replaced (moved to theme 2), then undone. */
    change_put(&ix, c, &n, event(4, 9, 2, 0));
    CHECK_EQ_UINT(link_of(&ix, 1), 0);
    CHECK_EQ_UINT(link_of(&ix, 2), 4);
    undo_all(&ix, c, n);
    n = 0;
    CHECK_EQ_UINT(link_of(&ix, 1), 4);
    CHECK_EQ_UINT(link_of(&ix, 2), 0);
    CHECK_EQ_UINT(link_of(&ix, 3), 4);
    check_links_derivable(&ix, ids, 4);

    /* The event removed, then restored. */
    change_delete(&ix, c, &n, 4);
    CHECK_EQ_UINT(link_of(&ix, 1), 0);
    CHECK_EQ_UINT(link_of(&ix, 3), 0);
    undo_all(&ix, c, n);
    n = 0;
    CHECK_EQ_UINT(link_of(&ix, 1), 4);
    CHECK_EQ_UINT(link_of(&ix, 3), 4);

    /* A created event removed by the undo: its links go. */
    change_put(&ix, c, &n, theme(5, 9, "t5"));
    change_put(&ix, c, &n, event(6, 9, 5, 0));
    CHECK_EQ_UINT(link_of(&ix, 5), 6);
    undo_all(&ix, c, n);
    n = 0;
    CHECK(index_get(&ix, 5) == NULL && index_get(&ix, 6) == NULL);
    CHECK_EQ_UINT(link_of(&ix, 1), 4);

    /* A batch mixing everything: the event deleted, its theme then updated and
     * deleted, the address updated, a new event on theme 2. All undone. */
    change_delete(&ix, c, &n, 4);
    change_put(&ix, c, &n, theme(1, 9, "t1 v2"));
    change_delete(&ix, c, &n, 1);
    change_put(&ix, c, &n, address(3, 9));
    change_put(&ix, c, &n, event(7, 9, 2, 3));
    CHECK_EQ_UINT(link_of(&ix, 2), 7);
    CHECK_EQ_UINT(link_of(&ix, 3), 7);
    undo_all(&ix, c, n);
    n = 0;
    CHECK(index_get(&ix, 7) == NULL);
    CHECK_EQ_MEM(record_get(index_get(&ix, 1), THEME_NAME).s.ptr,
                 record_get(index_get(&ix, 1), THEME_NAME).s.len, "t1");
    CHECK_EQ_UINT(link_of(&ix, 1), 4);
    CHECK_EQ_UINT(link_of(&ix, 2), 0);
    CHECK_EQ_UINT(link_of(&ix, 3), 4);
    check_links_derivable(&ix, ids, 4);
    uint64_t themes[] = {1, 2};
    check_list(&ix, 9, REC_THEME, themes, 2);
    index_destroy(&ix);
}

/* ---- index_apply ---- */

static void test_apply_records(void) {
    struct index ix;
    index_init(&ix);
    CHECK_EQ_INT(apply_record(&ix, user(1, "u", "h")), 0);
    CHECK_EQ_INT(apply_record(&ix, theme(2, 1, "t")), 0);
    CHECK_EQ_INT(apply_record(&ix, address(3, 1)), 0);
    CHECK_EQ_INT(apply_record(&ix, event(4, 1, 2, 3)), 0);
    CHECK_EQ_UINT(ix.count, 4);
    CHECK_EQ_UINT(index_user_by_name(&ix, "u", 1)->id, 1);
    CHECK_EQ_UINT(index_get(&ix, 2)->type, REC_THEME);
    CHECK_EQ_UINT(index_get(&ix, 3)->type, REC_ADDRESS);
    CHECK_EQ_UINT(index_get(&ix, 4)->type, REC_EVENT);
    CHECK_EQ_UINT(link_of(&ix, 2), 4);
    /* A later frame of the same id replaces. */
    CHECK_EQ_INT(apply_record(&ix, theme(2, 1, "t2")), 0);
    CHECK_EQ_MEM(record_get(index_get(&ix, 2), THEME_NAME).s.ptr,
                 record_get(index_get(&ix, 2), THEME_NAME).s.len, "t2");
    CHECK_EQ_UINT(ix.count, 4);
    CHECK_EQ_UINT(ix.next_id, 5);
    index_destroy(&ix);
}

static void test_apply_delete(void) {
    struct index ix;
    index_init(&ix);
    CHECK_EQ_INT(apply_record(&ix, theme(2, 1, "t")), 0);
    CHECK_EQ_INT(apply_varint(&ix, REC_DELETE, 2), 0);
    CHECK(index_get(&ix, 2) == NULL);
    CHECK_EQ_UINT(ix.count, 0);
    /* An absent id is fine (a compacted log may hold the delete only), and
     * still counts as used: its id is never handed out again. */
    CHECK_EQ_INT(apply_varint(&ix, REC_DELETE, 2), 0);
    CHECK_EQ_INT(apply_varint(&ix, REC_DELETE, 1000), 0);
    CHECK_EQ_UINT(ix.count, 0);
    CHECK_EQ_UINT(ix.next_id, 1001);
    CHECK_EQ_UINT(index_take_id(&ix), 1001);
    index_destroy(&ix);
}

static void test_apply_next_id(void) {
    struct index ix;
    index_init(&ix);
    CHECK_EQ_UINT(ix.id_floor, 0);
    CHECK_EQ_INT(apply_varint(&ix, REC_NEXT_ID, 65537), 0);
    CHECK_EQ_UINT(ix.id_floor, 65537);
    CHECK_EQ_UINT(ix.next_id, 1); /* a reservation, not a record: db raises next_id from it */
    /* The last one holds, also when it is lower: a clean close gave ids back. */
    CHECK_EQ_INT(apply_varint(&ix, REC_NEXT_ID, 131073), 0);
    CHECK_EQ_INT(apply_varint(&ix, REC_NEXT_ID, 70000), 0);
    CHECK_EQ_UINT(ix.id_floor, 70000);
    /* The end of the id space is a valid reservation. */
    CHECK_EQ_INT(apply_varint(&ix, REC_NEXT_ID, RECORD_ID_MAX + 1), 0);
    CHECK_EQ_UINT(ix.id_floor, RECORD_ID_MAX + 1);
    index_destroy(&ix);
}

static void test_apply_rejects_malformed(void) {
    struct index ix;
    index_init(&ix);
    CHECK_EQ_INT(apply_record(&ix, theme(2, 1, "t")), 0);
    CHECK_EQ_INT(apply_varint(&ix, REC_NEXT_ID, 100), 0);
    uint64_t count = ix.count, next = ix.next_id, floor = ix.id_floor;

    /* REC_DELETE and REC_NEXT_ID: empty, zero, trailing bytes, overlong varints. */
    static const uint8_t zero[] = {0}, trailing[] = {2, 0}, cut[] = {0x82},
                         eleven[] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 1};
    uint8_t types[] = {REC_DELETE, REC_NEXT_ID};
    for (int t = 0; t < 2; t++) {
        CHECK_EQ_INT(index_apply(&ix, types[t], zero, 0), -1);
        CHECK_EQ_INT(index_apply(&ix, types[t], zero, 1), -1);
        CHECK_EQ_INT(index_apply(&ix, types[t], trailing, 2), -1);
        CHECK_EQ_INT(index_apply(&ix, types[t], cut, 1), -1);
        CHECK_EQ_INT(index_apply(&ix, types[t], eleven, sizeof eleven), -1);
    }
    CHECK_EQ_INT(apply_varint(&ix, REC_NEXT_ID, RECORD_ID_MAX + 2), -1);
    CHECK_EQ_INT(apply_varint(&ix, REC_NEXT_ID, UINT64_MAX), -1);

    /* Unknown frame types. */
    uint8_t p[VARINT_MAX];
    size_t n = varint_put(p, 2);
    uint8_t unknown[] = {0, 5, 15, 19, 255};
    for (size_t i = 0; i < sizeof unknown; i++)
        CHECK_EQ_INT(index_apply(&ix, unknown[i], p, n), -1);

    /* Records: every truncation, a trailing byte, a record under the wrong type, id 0. */
    struct buf b = BUF_INIT;
    struct record *r = theme(3, 1, "a theme");
    record_encode(r, &b);
    record_free(r);
    for (size_t len = 0; len < b.len; len++)
        CHECK_EQ_INT(index_apply(&ix, REC_THEME, (const uint8_t *)b.ptr, len), -1);
    buf_append_char(&b, 0);
    CHECK_EQ_INT(index_apply(&ix, REC_THEME, (const uint8_t *)b.ptr, b.len), -1);
    CHECK_EQ_INT(index_apply(&ix, REC_EVENT, (const uint8_t *)b.ptr, b.len - 1), -1);
    buf_reset(&b);
    r = theme(0, 1, "x"); /* ids start at 1 */
    record_encode(r, &b);
    record_free(r);
    CHECK_EQ_INT(index_apply(&ix, REC_THEME, (const uint8_t *)b.ptr, b.len), -1);
    buf_reset(&b);
    r = theme(RECORD_ID_MAX + 1, 1, "x");
    record_encode(r, &b);
    record_free(r);
    CHECK_EQ_INT(index_apply(&ix, REC_THEME, (const uint8_t *)b.ptr, b.len), -1);
    buf_destroy(&b);

    /* Nothing of it reached the index. */
    CHECK_EQ_UINT(ix.count, count);
    CHECK_EQ_UINT(ix.next_id, next);
    CHECK_EQ_UINT(ix.id_floor, floor);
    CHECK(index_get(&ix, 3) == NULL);
    index_destroy(&ix);
}

/* No valid log holds a delete of an id above RECORD_ID_MAX: accepting one
 * raises next_id past the id space (UINT64_MAX even wraps it to 0). */
static void test_apply_rejects_delete_beyond_id_space(void) {
    struct index ix;
    index_init(&ix);
    CHECK_EQ_INT(apply_varint(&ix, REC_DELETE, UINT64_MAX), -1);
    CHECK_EQ_INT(apply_varint(&ix, REC_DELETE, RECORD_ID_MAX + 1), -1);
    CHECK_EQ_UINT(ix.next_id, 1);
    index_destroy(&ix);
}

/* Only users have user_id 0 (the owner table's empty mark): a theme owned by
 * 0 is not a valid record, and must not claim an empty owner slot. */
static void test_apply_rejects_unowned_record(void) {
    struct index ix;
    index_init(&ix);
    CHECK_EQ_INT(apply_record(&ix, theme(1, 0, "nobody's")), -1);
    CHECK(index_get(&ix, 1) == NULL);
    index_destroy(&ix);
}

/* ---- quota usage ---- */

static struct record *session(uint64_t id, uint64_t user) {
    union value v[RECORD_MAX_FIELDS];
    record_defaults(&record_session, v);
    return record_build(&record_session, id, user, v);
}

/* A user's themes, addresses and events count; its sessions and other users' records do not. */
static void test_usage_counts_data_not_sessions(void) {
    struct index ix;
    index_init(&ix);
    struct record *t = theme(2, 1, "t"), *a = address(3, 1), *e = event(4, 1, 2, 3);
    uint64_t bytes = (uint64_t)record_size(t) + record_size(a) + record_size(e);
    index_put(&ix, user(1, "u", "h"));
    index_put(&ix, t);
    index_put(&ix, a);
    index_put(&ix, e);
    index_put(&ix, session(5, 1));
    index_put(&ix, theme(6, 7, "another user's"));
    struct index_usage u = index_usage(&ix, 1);
    CHECK_EQ_UINT(u.records, 3);
    CHECK_EQ_UINT(u.bytes, bytes);
    index_destroy(&ix);
}

static void test_usage_of_a_user_without_records_is_zero(void) {
    struct index ix;
    index_init(&ix);
    struct index_usage u = index_usage(&ix, 42);
    CHECK_EQ_UINT(u.records, 0);
    CHECK_EQ_UINT(u.bytes, 0);
    index_destroy(&ix);
}

/* A replacement counts its new size; a removal gives everything back. */
static void test_usage_follows_swap_and_remove(void) {
    struct index ix;
    index_init(&ix);
    index_put(&ix, theme(2, 1, "short"));
    struct record *longer = theme(2, 1, "a much longer name than before");
    uint32_t size = record_size(longer);
    record_free(index_swap(&ix, longer));
    CHECK_EQ_UINT(index_usage(&ix, 1).records, 1);
    CHECK_EQ_UINT(index_usage(&ix, 1).bytes, size);
    /* db's undo puts the old record back with a swap: the count follows. */
    struct record *old = index_swap(&ix, theme(2, 1, "short"));
    CHECK_EQ_UINT(index_usage(&ix, 1).bytes, record_size(index_get(&ix, 2)));
    record_free(old);
    CHECK_EQ_INT(index_delete(&ix, 2), 0);
    CHECK_EQ_UINT(index_usage(&ix, 1).records, 0);
    CHECK_EQ_UINT(index_usage(&ix, 1).bytes, 0);
    index_destroy(&ix);
}

/* Replay (index_apply of the frames) gives the usage the live changes gave. */
static void test_usage_after_replay(void) {
    struct index ix;
    index_init(&ix);
    CHECK_EQ_INT(apply_record(&ix, user(1, "u", "h")), 0);
    CHECK_EQ_INT(apply_record(&ix, theme(2, 1, "one")), 0);
    CHECK_EQ_INT(apply_record(&ix, theme(3, 1, "two")), 0);
    CHECK_EQ_INT(apply_record(&ix, theme(2, 1, "one, renamed")), 0);
    CHECK_EQ_INT(apply_varint(&ix, REC_DELETE, 3), 0);
    struct record *want = theme(2, 1, "one, renamed");
    CHECK_EQ_UINT(index_usage(&ix, 1).records, 1);
    CHECK_EQ_UINT(index_usage(&ix, 1).bytes, record_size(want));
    record_free(want);
    index_destroy(&ix);
}

/* The lower bound: the one search behind list pages and removal. */
static uint64_t lb_ids[] = {3, 5, 9, 12};
static const struct id_list lb_list = {lb_ids, 4, 4};

static void test_lower_bound_empty_list(void) {
    static const struct id_list empty;
    CHECK_EQ_INT(id_list_lower_bound(&empty, 7), 0);
}

static void test_lower_bound_below_every_id(void) {
    CHECK_EQ_INT(id_list_lower_bound(&lb_list, 1), 0);
}

static void test_lower_bound_exact_id(void) {
    CHECK_EQ_INT(id_list_lower_bound(&lb_list, 3), 0);
    CHECK_EQ_INT(id_list_lower_bound(&lb_list, 9), 2);
    CHECK_EQ_INT(id_list_lower_bound(&lb_list, 12), 3);
}

static void test_lower_bound_between_ids(void) {
    CHECK_EQ_INT(id_list_lower_bound(&lb_list, 4), 1);
    CHECK_EQ_INT(id_list_lower_bound(&lb_list, 10), 3);
}

static void test_lower_bound_above_every_id(void) {
    CHECK_EQ_INT(id_list_lower_bound(&lb_list, 13), 4);
    CHECK_EQ_INT(id_list_lower_bound(&lb_list, UINT64_MAX), 4);
}

/* ---- idempotency keys ---- */

static struct record *idem_at(uint64_t id, uint64_t user, const char *key, size_t answer_len,
                              int64_t created) {
    static char answer[1024];
    memset(answer, 'a', sizeof answer);
    return test_idem(id, user, key, created, answer, answer_len);
}

static struct record *idem(uint64_t id, uint64_t user, const char *key, size_t answer_len) {
    return idem_at(id, user, key, answer_len, 1764000000);
}

static void test_idem_keys_by_user_and_key(void) {
    struct index ix;
    index_init(&ix);
    index_put(&ix, idem(10, 1, "k1", 10));
    index_put(&ix, idem(11, 2, "k1", 10));
    index_put(&ix, user(3, "k1", "h")); /* a user's name is not a key */
    CHECK_EQ_UINT(index_idem_get(&ix, 1, "k1", 2)->id, 10);
    CHECK_EQ_UINT(index_idem_get(&ix, 2, "k1", 2)->id, 11);
    CHECK(index_idem_get(&ix, 3, "k1", 2) == NULL);
    CHECK(index_idem_get(&ix, 1, "k", 1) == NULL);
    CHECK_EQ_UINT(index_user_by_name(&ix, "k1", 2)->id, 3);
    index_delete(&ix, 10);
    CHECK(index_idem_get(&ix, 1, "k1", 2) == NULL);
    CHECK_EQ_UINT(index_idem_get(&ix, 2, "k1", 2)->id, 11);
    index_put(&ix, idem(11, 2, "k2", 10)); /* replaced under another key */
    CHECK(index_idem_get(&ix, 2, "k1", 2) == NULL);
    CHECK_EQ_UINT(index_idem_get(&ix, 2, "k2", 2)->id, 11);
    CHECK_EQ_UINT(index_owned(&ix, 2, REC_IDEM)->len, 1);
    index_destroy(&ix);
}

/* A REC_KEYED payload of t and its key k (record.h), as db_keyed_begin/_end write it. */
static void keyed_encode(const struct record *t, const struct record *k, struct buf *b) {
    size_t at = record_keyed_open(t->type, b);
    record_encode(t, b);
    record_keyed_close(b, at);
    record_encode(k, b);
}

static void test_apply_keyed_frame(void) {
    struct index ix;
    index_init(&ix);
    struct buf b = BUF_INIT;
    struct record *t = theme(5, 1, "keyed"), *k = idem(6, 1, "k1", 40);
    keyed_encode(t, k, &b);
    CHECK_EQ_INT(index_apply(&ix, REC_KEYED, (const uint8_t *)b.ptr, b.len), 0);
    CHECK(index_get(&ix, 5) != NULL && index_get(&ix, 5)->type == REC_THEME);
    CHECK_EQ_UINT(index_idem_get(&ix, 1, "k1", 2)->id, 6);
    /* Cut anywhere, the frame is refused whole. */
    for (size_t n = 0; n < b.len; n++)
        CHECK_EQ_INT(index_apply(&ix, REC_KEYED, (const uint8_t *)b.ptr, n), -1);
    /* A key of another user than its record's is damage. */
    struct record *k2 = idem(8, 2, "k2", 10), *t2 = theme(7, 1, "other");
    buf_reset(&b);
    keyed_encode(t2, k2, &b);
    CHECK_EQ_INT(index_apply(&ix, REC_KEYED, (const uint8_t *)b.ptr, b.len), -1);
    CHECK(index_get(&ix, 7) == NULL);
    record_free(t);
    record_free(k);
    record_free(t2);
    record_free(k2);
    buf_destroy(&b);
    index_destroy(&ix);
}

/*
 * A log holding two keys of one user and name: an online compaction forgets an expired
 * key without a frame, and when it then fails (or the server is killed) the log it leaves
 * holds the old key before the one made again with that name. The newer is the key,
 * whichever order the frames come in; the older is not filed.
 */
static void test_replay_keeps_the_newer_of_two_keys_alike(void) {
    struct index ix;
    index_init(&ix);
    struct buf b = BUF_INIT;
    struct record *t1 = theme(5, 1, "first"), *k1 = idem(6, 1, "K", 40);
    struct record *t2 = theme(7, 1, "again"), *k2 = idem_at(8, 1, "K", 40, 1764000100);
    struct record *k3 = idem(9, 1, "K", 40);
    keyed_encode(t1, k1, &b);
    CHECK_EQ_INT(index_apply(&ix, REC_KEYED, (const uint8_t *)b.ptr, b.len), 0);
    buf_reset(&b);
    keyed_encode(t2, k2, &b);
    CHECK_EQ_INT(index_apply(&ix, REC_KEYED, (const uint8_t *)b.ptr, b.len), 0);
    CHECK_EQ_UINT(index_idem_get(&ix, 1, "K", 1)->id, 8);
    CHECK(index_get(&ix, 6) == NULL);
    CHECK(index_get(&ix, 5) != NULL && index_get(&ix, 7) != NULL);
    CHECK_EQ_UINT(index_owned(&ix, 1, REC_IDEM)->len, 1);
    CHECK_EQ_UINT(index_idem_bytes(&ix, 1), record_size(k2));
    /* An older image after the newer (a compacted log's order by id, other nodes'
     * ids after this node's): not filed. */
    buf_reset(&b);
    record_encode(k3, &b); /* created as k1, before k2 */
    CHECK_EQ_INT(index_apply(&ix, REC_IDEM, (const uint8_t *)b.ptr, b.len), 0);
    CHECK(index_get(&ix, 9) == NULL);
    CHECK_EQ_UINT(index_idem_get(&ix, 1, "K", 1)->id, 8);
    CHECK_EQ_UINT(index_owned(&ix, 1, REC_IDEM)->len, 1);
    record_free(t1);
    record_free(k1);
    record_free(t2);
    record_free(k2);
    record_free(k3);
    buf_destroy(&b);
    index_destroy(&ix);
}

/*
 * What a key costs in memory (docs/STORAGE.md "Idempotency keys"): 100,000
 * keys of 36 bytes, one user, measured as the heap and the record slabs grow;
 * by reference to their records (the API's keys in a log of format 4), and
 * each keeping a 330-byte answer (a theme's: older logs, exports). Printed,
 * and bounded.
 */
/* answer 0: by reference. */
static double idem_memory_per_key(size_t answer) {
    enum { N = 100000 };
    struct index ix;
    index_init(&ix);
    index_put(&ix, user(1, "alice", "h"));
    struct mallinfo2 m0 = mallinfo2();
    size_t slab0 = record_mapped();
    char key[40];
    for (uint64_t i = 0; i < N; i++) {
        snprintf(key, sizeof key, "%08llx-0000-4000-8000-000000000000", (unsigned long long)i);
        index_put(&ix, answer ? idem(100 + 2 * i, 1, key, answer)
                              : test_idem_ref(100 + 2 * i, 1, key, 100));
    }
    struct mallinfo2 m1 = mallinfo2();
    size_t heap = (m1.uordblks + m1.hblkhd) - (m0.uordblks + m0.hblkhd);
    size_t slab = record_mapped() - slab0;
    double per = (double)(heap + slab) / N;
    char what[32];
    snprintf(what, sizeof what, answer ? "%zu-byte answers" : "answers by reference", answer);
    fprintf(stderr,
            "idempotency key memory: %.0f bytes per key (%zu heap + %zu slab for %d keys, %s)\n",
            per, heap, slab, N, what);
    CHECK_EQ_UINT(index_idem_get(&ix, 1, "00000007-0000-4000-8000-000000000000", 36)->id, 114);
    index_destroy(&ix);
    return per;
}

static void test_idem_memory_per_key(void) {
    CHECK(idem_memory_per_key(0) < 250);
    CHECK(idem_memory_per_key(330) < 330 + 300);
}

/*
 * A key answers by reference to the record before it (record.h, idem_by_ref)
 * until that record is replaced or removed: then it keeps the record's payload
 * as it was (index.c, idem_hold), counted in the user's key bytes. Only the
 * key right after its record, of its user, with no answer of its own, is such
 * a key.
 */
static void test_a_key_by_reference_keeps_its_record_as_created(void) {
    struct index ix;
    index_init(&ix);
    struct record *first = theme(10, 1, "first");
    first->rev = 7;
    index_put(&ix, first);
    struct record *k = test_idem_ref(11, 1, "k1", 90);
    k->rev = 7;
    index_put(&ix, k);
    /* Counted with what it may come to hold. */
    CHECK_EQ_UINT(index_idem_bytes(&ix, 1), record_size(k) + 90);
    record_free(index_swap(&ix, theme(10, 1, "renamed")));
    const struct record *held = index_get(&ix, 11);
    CHECK(held != k && held->rev == 7);
    union value a = record_get(held, IDEM_ANSWER);
    CHECK(a.s.len > 2 && a.s.ptr[0] == IDEM_SNAPSHOT_MARK && a.s.ptr[1] == REC_THEME);
    struct record *was = record_decode(REC_THEME, (const uint8_t *)a.s.ptr + 2, a.s.len - 2);
    CHECK(was && was->id == 10 && was->user_id == 1);
    CHECK_EQ_STR(record_get(was, THEME_NAME).s.ptr, "first");
    record_free(was);
    CHECK_EQ_UINT(index_idem_bytes(&ix, 1), record_size(held));
    CHECK(index_idem_get(&ix, 1, "k1", 2) == held); /* filed by name anew */
    /* Held once: a later change leaves it as it is. */
    CHECK_EQ_INT(index_delete(&ix, 10), 0);
    CHECK(index_get(&ix, 11) == held);

    /* A removal holds too. */
    index_put(&ix, theme(20, 1, "gone"));
    index_put(&ix, test_idem_ref(21, 1, "k2", 90));
    CHECK_EQ_INT(index_delete(&ix, 20), 0);
    a = record_get(index_get(&ix, 21), IDEM_ANSWER);
    CHECK(a.s.len > 2 && a.s.ptr[0] == IDEM_SNAPSHOT_MARK);

    /* Not by reference: a key with an answer of its own, another user's key, a key
     * of another record. */
    index_put(&ix, theme(30, 1, "a"));
    struct record *own = idem(31, 1, "k3", 40);
    index_put(&ix, own);
    index_put(&ix, theme(40, 1, "b"));
    struct record *other = test_idem_ref(41, 2, "k4", 90);
    index_put(&ix, other);
    index_put(&ix, theme(50, 1, "c"));
    struct record *far = test_idem_ref(51, 1, "k5", 90);
    index_put(&ix, far);
    index_put(&ix, theme(52, 1, "d"));
    union value v[RECORD_MAX_FIELDS];
    record_values(far, v);
    v[IDEM_RECORD_ID].i = 52;
    record_free(index_swap(&ix, record_build(&record_idem, 51, 1, v)));
    far = (struct record *)index_get(&ix, 51);
    for (uint64_t id = 30; id <= 52; id += 10)
        CHECK_EQ_INT(index_delete(&ix, id), 0);
    CHECK(index_get(&ix, 31) == own && index_get(&ix, 41) == other && index_get(&ix, 51) == far);
    /* The byte counts come back to nothing: a key is counted alike in and out. */
    for (uint64_t id = 11; id <= 51; id += 10)
        CHECK_EQ_INT(index_delete(&ix, id), 0);
    CHECK_EQ_UINT(index_idem_bytes(&ix, 1), 0);
    CHECK_EQ_UINT(index_idem_bytes(&ix, 2), 0);
    index_destroy(&ix);
}

/* A key by reference whose size says more than a frame can hold (a damaged log, its CRC
 * right) counts at most a frame's payload in the user's key bytes (index.c, owned_bytes):
 * a size near 2^64 wrapped the sum to less than the key's own size. */
static void test_a_damaged_reference_size_does_not_wrap_the_key_bytes(void) {
    struct index ix;
    index_init(&ix);
    index_put(&ix, theme(10, 1, "first"));
    uint8_t ref[1 + 10] = {IDEM_REF_MARK};
    size_t n = varint_put(ref + 1, UINT64_MAX);
    struct record *k = test_idem(11, 1, "k1", 1764000000, (const char *)ref, 1 + n);
    index_put(&ix, k);
    CHECK_EQ_UINT(index_idem_bytes(&ix, 1), record_size(k) + STORE_MAX_PAYLOAD);
    CHECK_EQ_INT(index_delete(&ix, 11), 0);
    CHECK_EQ_UINT(index_idem_bytes(&ix, 1), 0);
    index_destroy(&ix);
}

/* Keys expire and come anew: the tables must be sized by the keys kept, not by
 * every key ever filed (they doubled on deleted marks alone), and each shard
 * finds its own after any churn. */
static void test_idem_key_churn_keeps_the_tables_small(void) {
    enum { N = 200000, LIVE = 1000 };
    struct index ix;
    index_init(&ix);
    index_put(&ix, user(1, "alice", "h"));
    char key[40];
    for (uint64_t i = 0; i < N; i++) {
        snprintf(key, sizeof key, "k-%08llx", (unsigned long long)i);
        index_put(&ix, idem(100 + i, 1, key, 10));
        if (i >= LIVE) CHECK_EQ_INT(index_delete(&ix, 100 + i - LIVE), 0);
    }
    size_t cap = 0, live = 0;
    for (int i = 0; i < NAME_SHARDS; i++) {
        cap += ix.keys[i].cap;
        live += ix.keys[i].live;
        CHECK(ix.keys[i].used * 2 <= ix.keys[i].cap);
    }
    CHECK_EQ_UINT(live, LIVE);
    CHECK(cap <= (size_t)NAME_SHARDS * 64); /* a few times LIVE; N before */
    for (uint64_t i = N - LIVE; i < N; i += 97) {
        snprintf(key, sizeof key, "k-%08llx", (unsigned long long)i);
        CHECK_EQ_UINT(index_idem_get(&ix, 1, key, strlen(key))->id, 100 + i);
    }
    snprintf(key, sizeof key, "k-%08llx", (unsigned long long)(N - LIVE - 1));
    CHECK(index_idem_get(&ix, 1, key, strlen(key)) == NULL);
    index_destroy(&ix);
}

/* Two records of one name (an import may hold two keys alike): deleting either takes
 * out its own entry, so that the shards' live counts fall back to nothing. */
static void test_duplicate_names_leave_no_entry(void) {
    struct index ix;
    index_init(&ix);
    index_put(&ix, idem(10, 1, "k", 10));
    index_put(&ix, idem(11, 1, "k", 10));
    index_put(&ix, user(20, "ann", "h"));
    index_put(&ix, user(21, "ann", "h"));
    CHECK_EQ_INT(index_delete(&ix, 11), 0); /* the second: the search meets the first's entry */
    CHECK_EQ_INT(index_delete(&ix, 21), 0);
    CHECK_EQ_UINT(index_idem_get(&ix, 1, "k", 1)->id, 10);
    CHECK_EQ_UINT(index_user_by_name(&ix, "ann", 3)->id, 20);
    CHECK_EQ_INT(index_delete(&ix, 10), 0);
    CHECK_EQ_INT(index_delete(&ix, 20), 0);
    size_t live = 0;
    for (int i = 0; i < NAME_SHARDS; i++)
        live += ix.keys[i].live + ix.names[i].live;
    CHECK_EQ_UINT(live, 0);
    CHECK(index_idem_get(&ix, 1, "k", 1) == NULL);
    CHECK(index_user_by_name(&ix, "ann", 3) == NULL);
    index_destroy(&ix);
}

static const struct check_case cases[] = {
    CHECK_CASE(test_idem_keys_by_user_and_key),
    CHECK_CASE(test_apply_keyed_frame),
    CHECK_CASE(test_replay_keeps_the_newer_of_two_keys_alike),
    CHECK_CASE(test_idem_memory_per_key),
    CHECK_CASE(test_a_key_by_reference_keeps_its_record_as_created),
    CHECK_CASE(test_a_damaged_reference_size_does_not_wrap_the_key_bytes),
    CHECK_CASE(test_idem_key_churn_keeps_the_tables_small),
    CHECK_CASE(test_duplicate_names_leave_no_entry),
    CHECK_CASE(test_empty_index),
    CHECK_CASE(test_reserve),
    CHECK_CASE(test_put_get),
    CHECK_CASE(test_swap_returns_replaced),
    CHECK_CASE(test_remove),
    CHECK_CASE(test_take_id),
    CHECK_CASE(test_tombstones_and_reinsert),
    CHECK_CASE(test_many_ids),
    CHECK_CASE(test_strided_ids),
    CHECK_CASE(test_owned_lists),
    CHECK_CASE(test_many_owners),
    CHECK_CASE(test_users_by_name),
    CHECK_CASE(test_user_rename_and_remove),
    CHECK_CASE(test_many_users_churn),
    CHECK_CASE(test_links_set_and_cleared),
    CHECK_CASE(test_links_through_undo),
    CHECK_CASE(test_apply_records),
    CHECK_CASE(test_apply_delete),
    CHECK_CASE(test_apply_next_id),
    CHECK_CASE(test_apply_rejects_malformed),
    CHECK_CASE(test_apply_rejects_delete_beyond_id_space),
    CHECK_CASE(test_apply_rejects_unowned_record),
    CHECK_CASE(test_usage_counts_data_not_sessions),
    CHECK_CASE(test_usage_of_a_user_without_records_is_zero),
    CHECK_CASE(test_usage_follows_swap_and_remove),
    CHECK_CASE(test_usage_after_replay),
    CHECK_CASE(test_lower_bound_empty_list),
    CHECK_CASE(test_lower_bound_below_every_id),
    CHECK_CASE(test_lower_bound_exact_id),
    CHECK_CASE(test_lower_bound_between_ids),
    CHECK_CASE(test_lower_bound_above_every_id),
};

int main(int argc, char **argv) {
    return check_run(argc, argv, cases, CHECK_COUNT(cases));
}
