/* test_cred_cache: the server-wide cache of verified credentials: exact matches of the token
 * only, a slot's new entry replaces the old, long tokens and the off switch, drop, no token
 * kept in memory, cred_same. */
#include <sodium.h>
#include <string.h>

#include "check.h"
#include "core/cred_cache.h"

static const uint8_t hash_a[CRED_KEY_HASH_BYTES] = {1, 2, 3};

static void test_finds_exactly_what_was_put(void) {
    struct cred_cache cc;
    cred_cache_init(&cc, 64);
    const char *h = "YWxpY2U6c2VjcmV0LWtleS0xMjM0NTY3ODkw";
    size_t n = strlen(h);
    CHECK(cred_cache_find(&cc, h, n) == NULL);
    cred_cache_put(&cc, h, n, 7, hash_a, 3);
    struct cred_entry *e = cred_cache_find(&cc, h, n);
    CHECK(e != NULL);
    CHECK_EQ_UINT(e->user_id, 7);
    CHECK_EQ_UINT(e->gen, 3);
    CHECK(memcmp(e->hash, hash_a, sizeof hash_a) == 0);
    /* Every one-byte change, and every prefix, misses. */
    char v[200];
    for (size_t i = 0; i < n; i++) {
        memcpy(v, h, n);
        v[i] ^= 1;
        CHECK(cred_cache_find(&cc, v, n) == NULL);
        CHECK(cred_cache_find(&cc, h, i) == NULL);
    }
    memcpy(v, h, n);
    v[n] = 'A';
    CHECK(cred_cache_find(&cc, v, n + 1) == NULL);
    cred_cache_destroy(&cc);
}

/* Direct-mapped: with one slot, a second header replaces the first. */
static void test_a_new_entry_replaces_its_slot(void) {
    struct cred_cache cc;
    cred_cache_init(&cc, 1);
    cred_cache_put(&cc, "b25lOmE=", 8, 1, hash_a, 0);
    cred_cache_put(&cc, "dHdvOmI=", 8, 2, hash_a, 0);
    CHECK(cred_cache_find(&cc, "b25lOmE=", 8) == NULL);
    CHECK_EQ_UINT(cred_cache_find(&cc, "dHdvOmI=", 8)->user_id, 2);
    cred_cache_destroy(&cc);
}

static void test_long_tokens_and_off(void) {
    struct cred_cache cc;
    char big[CRED_TOKEN_MAX + 1];
    memset(big, 'A', sizeof big);
    cred_cache_init(&cc, 16);
    cred_cache_put(&cc, big, CRED_TOKEN_MAX + 1, 5, hash_a, 0);
    CHECK(cred_cache_find(&cc, big, CRED_TOKEN_MAX + 1) == NULL);
    cred_cache_put(&cc, big, CRED_TOKEN_MAX, 5, hash_a, 0);
    CHECK(cred_cache_find(&cc, big, CRED_TOKEN_MAX) != NULL);
    cred_cache_put(&cc, "", 0, 5, hash_a, 0);
    CHECK(cred_cache_find(&cc, "", 0) == NULL);
    cred_cache_destroy(&cc);
    cred_cache_init(&cc, 0);
    cred_cache_put(&cc, "Basic x", 7, 5, hash_a, 0);
    CHECK(cred_cache_find(&cc, "Basic x", 7) == NULL);
    cred_cache_destroy(&cc);
}

static void test_drop_and_sizes(void) {
    struct cred_cache cc;
    cred_cache_init(&cc, 100); /* rounded up to 128 */
    CHECK_EQ_UINT(cc.mask, 127);
    cred_cache_put(&cc, "YWJjOmQ=", 8, 9, hash_a, 0);
    cred_cache_drop(cred_cache_find(&cc, "YWJjOmQ=", 8));
    CHECK(cred_cache_find(&cc, "YWJjOmQ=", 8) == NULL);
    CHECK_EQ_UINT(sizeof(struct cred_entry), 64); /* README's and SCALING.md's figure */
    cred_cache_destroy(&cc);
    cred_cache_init(&cc, 0xffffffffu); /* capped */
    CHECK_EQ_UINT(cc.mask, (1u << 20) - 1);
    cred_cache_destroy(&cc);
}

/* Two caches' keys differ, so the same header lands in unrelated slots (checked through a
 * one-in-a-million coincidence bound: 64 headers, 1024 slots, not all in the same slots). */
static void test_slots_are_keyed(void) {
    struct cred_cache a, b;
    cred_cache_init(&a, 1024);
    cred_cache_init(&b, 1024);
    int same = 0;
    char h[32];
    for (int i = 0; i < 64; i++) {
        int n = snprintf(h, sizeof h, "dXNlcj%d", i);
        cred_cache_put(&a, h, (size_t)n, 1, hash_a, 0);
        cred_cache_put(&b, h, (size_t)n, 1, hash_a, 0);
        same += cred_cache_find(&a, h, (size_t)n) - a.slots ==
                cred_cache_find(&b, h, (size_t)n) - b.slots;
    }
    CHECK(same < 64);
    cred_cache_destroy(&a);
    cred_cache_destroy(&b);
}

/* An entry holds the token's tag, never the token: no key stays readable in memory after
 * its rotation until the slot is reused. */
static void test_no_token_is_kept(void) {
    struct cred_cache cc;
    cred_cache_init(&cc, 1);
    const char *t = "c2VjcmV0LXVzZXI6c2VjcmV0LWtleQ==";
    cred_cache_put(&cc, t, strlen(t), 3, hash_a, 0);
    const unsigned char *p = (const unsigned char *)cc.slots;
    for (size_t i = 0; i + 4 <= sizeof *cc.slots; i++)
        CHECK(memcmp(p + i, t, 4) != 0 && memcmp(p + i, "secr", 4) != 0);
    cred_cache_destroy(&cc);
}

static void test_cred_same(void) {
    const char *x = "0123456789abcdefghijklmnopqrstuvwxyz0123456789";
    char y[64];
    for (size_t n = 0; n <= strlen(x); n++) {
        memcpy(y, x, n);
        CHECK(cred_same(x, y, n));
        for (size_t i = 0; i < n; i++) {
            y[i] ^= 0x20;
            CHECK(!cred_same(x, y, n));
            y[i] ^= 0x20;
        }
    }
}

static const struct check_case cases[] = {
    CHECK_CASE(test_finds_exactly_what_was_put),
    CHECK_CASE(test_a_new_entry_replaces_its_slot),
    CHECK_CASE(test_long_tokens_and_off),
    CHECK_CASE(test_no_token_is_kept),
    CHECK_CASE(test_drop_and_sizes),
    CHECK_CASE(test_slots_are_keyed),
    CHECK_CASE(test_cred_same),
};

int main(int argc, char **argv) {
    if (sodium_init() < 0) return 1;
    return check_run(argc, argv, cases, CHECK_COUNT(cases));
}
