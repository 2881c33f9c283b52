/*
 * test_throttle: the sign-in throttle: free failures, the doubling delay
 * and its cap, Retry-After rounding, decay after the window, success
 * forgetting a key, binary keys, eviction order (forgotten, then keys under
 * their free failures, then the throttled key whose wait ends first), a
 * flood of keys, the refused capacities and policies, and the token bucket.
 */
#include "common/throttle.h"

#include <errno.h>

#include "check.h"

#define S 1000u /* ms per second */

static const struct throttle_policy policy = {
    .free_failures = 3,
    .base_delay_ms = 1 * S,
    .max_delay_ms = 60 * S,
    .window_ms = 600 * S,
};

#define KEY(s) s, strlen(s)

/* The one slot an eviction filled (exactly one must be). */
static const struct throttle_slot *only_slot(const struct throttle *t) {
    const struct throttle_slot *found = NULL;
    unsigned n = 0;
    for (uint32_t i = 0; i < t->nslots; i++)
        if (t->slots[i].count) {
            found = &t->slots[i];
            n++;
        }
    CHECK_EQ_UINT(n, 1);
    return found;
}

/* A fixed hash key instead of the random one: which keys share a slot is then fixed, and
 * the slot tests' keys are chosen not to (a failure says so, naming the check). */
static void fixed_key(struct throttle *t) {
    for (unsigned i = 0; i < sizeof t->hash_key; i++)
        t->hash_key[i] = (unsigned char)i;
}

static void fail_n(struct throttle *t, const char *key, unsigned n, uint64_t now) {
    for (unsigned i = 0; i < n; i++)
        throttle_fail(t, KEY(key), now);
}

static void test_free_failures(void) {
    struct throttle t;
    CHECK_EQ_INT(throttle_init(&t, 16, &policy), 0);
    CHECK_EQ_UINT(throttle_check(&t, KEY("alice"), 0), 0);
    fail_n(&t, "alice", 2, 100);
    CHECK_EQ_UINT(throttle_check(&t, KEY("alice"), 100), 0);
    CHECK_EQ_UINT(throttle_failures(&t, KEY("alice"), 100), 2);
    throttle_fail(&t, KEY("alice"), 100); /* the third: now the next must wait 1 s */
    CHECK_EQ_UINT(throttle_check(&t, KEY("alice"), 100), 1);
    CHECK_EQ_UINT(throttle_check(&t, KEY("alice"), 1099), 1);
    CHECK_EQ_UINT(throttle_check(&t, KEY("alice"), 1100), 0);
    CHECK_EQ_UINT(throttle_check(&t, KEY("bob"), 100), 0); /* keys are independent */
    throttle_destroy(&t);
}

static void test_doubling_and_cap(void) {
    struct throttle t;
    CHECK_EQ_INT(throttle_init(&t, 16, &policy), 0);
    fail_n(&t, "k", 3, 0);
    uint64_t now = 0;
    uint64_t want[] = {1, 2, 4, 8, 16, 32, 60, 60, 60};
    for (size_t i = 0; i < CHECK_COUNT(want); i++) {
        CHECK_EQ_UINT(throttle_check(&t, KEY("k"), now), want[i]);
        now += want[i] * S;
        CHECK_EQ_UINT(throttle_check(&t, KEY("k"), now - 1), 1);
        CHECK_EQ_UINT(throttle_check(&t, KEY("k"), now), 0);
        throttle_fail(&t, KEY("k"), now);
    }
    /* Thousands of failures later the delay is still the cap (no overflow). */
    fail_n(&t, "k", 5000, now);
    CHECK_EQ_UINT(throttle_check(&t, KEY("k"), now), 60);
    throttle_destroy(&t);
}

static void test_retry_after_rounds_up(void) {
    struct throttle t;
    CHECK_EQ_INT(throttle_init(&t, 16, &policy), 0);
    fail_n(&t, "k", 5, 10 * S); /* 4 s delay */
    CHECK_EQ_UINT(throttle_check(&t, KEY("k"), 10 * S), 4);
    CHECK_EQ_UINT(throttle_check(&t, KEY("k"), 10 * S + 1), 4);
    CHECK_EQ_UINT(throttle_check(&t, KEY("k"), 11 * S), 3);
    CHECK_EQ_UINT(throttle_check(&t, KEY("k"), 13 * S + 999), 1);
    /* A clock read before the failure never gives more than the delay. */
    CHECK_EQ_UINT(throttle_check(&t, KEY("k"), 0), 4);
    throttle_destroy(&t);
}

static void test_decay(void) {
    struct throttle t;
    CHECK_EQ_INT(throttle_init(&t, 16, &policy), 0);
    fail_n(&t, "k", 10, 0);
    CHECK(throttle_check(&t, KEY("k"), 0) > 0);
    CHECK_EQ_UINT(throttle_failures(&t, KEY("k"), 600 * S - 1), 10);
    CHECK_EQ_UINT(throttle_failures(&t, KEY("k"), 600 * S), 0);
    CHECK_EQ_UINT(throttle_check(&t, KEY("k"), 600 * S), 0);
    /* After decay the count starts over: free failures again. */
    throttle_fail(&t, KEY("k"), 600 * S);
    CHECK_EQ_UINT(throttle_failures(&t, KEY("k"), 600 * S), 1);
    CHECK_EQ_UINT(throttle_check(&t, KEY("k"), 600 * S), 0);
    /* The window runs from the latest failure, not the first. */
    fail_n(&t, "j", 3, 0);
    throttle_fail(&t, KEY("j"), 500 * S);
    CHECK_EQ_UINT(throttle_failures(&t, KEY("j"), 700 * S), 4);
    throttle_destroy(&t);
}

static void test_success_forgets(void) {
    struct throttle t;
    CHECK_EQ_INT(throttle_init(&t, 16, &policy), 0);
    fail_n(&t, "alice", 6, 0);
    CHECK(throttle_check(&t, KEY("alice"), 0) > 0);
    throttle_success(&t, KEY("alice"));
    CHECK_EQ_UINT(throttle_check(&t, KEY("alice"), 0), 0);
    CHECK_EQ_UINT(throttle_failures(&t, KEY("alice"), 0), 0);
    CHECK_EQ_UINT(t.used, 0);
    throttle_success(&t, KEY("nobody")); /* unknown: nothing happens */
    fail_n(&t, "alice", 2, 0);
    CHECK_EQ_UINT(throttle_check(&t, KEY("alice"), 0), 0);
    throttle_destroy(&t);
}

static void test_binary_keys(void) {
    struct throttle t;
    CHECK_EQ_INT(throttle_init(&t, 16, &policy), 0);
    const unsigned char v4[4] = {127, 0, 0, 1};
    const unsigned char v4b[4] = {127, 0, 0, 2};
    unsigned char v6[16] = {0};
    v6[15] = 1;
    for (int i = 0; i < 3; i++) {
        throttle_fail(&t, v4, sizeof v4, 0);
        throttle_fail(&t, v6, sizeof v6, 0);
    }
    CHECK_EQ_UINT(throttle_check(&t, v4, sizeof v4, 0), 1);
    CHECK_EQ_UINT(throttle_check(&t, v6, sizeof v6, 0), 1);
    CHECK_EQ_UINT(throttle_check(&t, v4b, sizeof v4b, 0), 0);
    CHECK_EQ_UINT(throttle_check(&t, v6, 15, 0), 0); /* the length is part of the key */
    CHECK_EQ_UINT(throttle_check(&t, "", 0, 0), 0);
    throttle_destroy(&t);
}

static void test_evicts_least_recent(void) {
    struct throttle t;
    CHECK_EQ_INT(throttle_init(&t, 3, &policy), 0);
    throttle_fail(&t, KEY("a"), 1);
    throttle_fail(&t, KEY("b"), 2);
    throttle_fail(&t, KEY("c"), 3);
    throttle_fail(&t, KEY("a"), 4); /* a is now the most recent */
    throttle_fail(&t, KEY("d"), 5); /* full: b goes */
    CHECK_EQ_UINT(t.used, 3);
    CHECK_EQ_UINT(throttle_failures(&t, KEY("b"), 5), 0);
    CHECK_EQ_UINT(throttle_failures(&t, KEY("a"), 5), 2);
    CHECK_EQ_UINT(throttle_failures(&t, KEY("c"), 5), 1);
    CHECK_EQ_UINT(throttle_failures(&t, KEY("d"), 5), 1);
    throttle_destroy(&t);
}

static void test_eviction_spares_throttled_keys(void) {
    struct throttle t;
    CHECK_EQ_INT(throttle_init(&t, 4, &policy), 0);
    fail_n(&t, "victim", 10, 0); /* the oldest entry, and throttled */
    char key[16];
    for (unsigned i = 0; i < 1000; i++) {
        snprintf(key, sizeof key, "flood%u", i);
        throttle_fail(&t, KEY(key), 1 + i);
        CHECK_EQ_UINT(throttle_failures(&t, KEY(key), 1 + i), 1); /* never fails open */
    }
    CHECK_EQ_UINT(throttle_failures(&t, KEY("victim"), 1000), 10);
    CHECK(throttle_check(&t, KEY("victim"), 1000) > 0);
    throttle_destroy(&t);
}

static void test_eviction_when_all_throttled(void) {
    struct throttle t;
    CHECK_EQ_INT(throttle_init(&t, 2, &policy), 0);
    fixed_key(&t);
    fail_n(&t, "a", 3, 1);
    fail_n(&t, "b", 3, 2);
    fail_n(&t, "c", 3, 3); /* only throttled keys, equal waits: the least recent (a) goes */
    CHECK_EQ_UINT(t.used, 2);
    CHECK_EQ_UINT(only_slot(&t)->last_ms, 1); /* a's, kept in its slot */
    CHECK_EQ_UINT(throttle_failures(&t, KEY("a"), 3), 3);
    CHECK_EQ_UINT(throttle_check(&t, KEY("a"), 3), 1); /* still throttled without an entry */
    CHECK_EQ_UINT(throttle_failures(&t, KEY("b"), 3), 3);
    CHECK_EQ_UINT(throttle_failures(&t, KEY("c"), 3), 3);
    throttle_destroy(&t);
}

/* The issue 17 flush: a table full of throttled keys, then new keys churned through it. */
static void test_churn_keeps_the_oldest_throttled_key(void) {
    struct throttle t;
    CHECK_EQ_INT(throttle_init(&t, 8, &policy), 0);
    fail_n(&t, "victim", 10, 0); /* the least recent, and throttled */
    char key[16];
    for (unsigned i = 0; i < 7; i++) {
        snprintf(key, sizeof key, "filler%u", i);
        fail_n(&t, key, 3, 1 + i); /* throttled too: the table holds no unthrottled key */
    }
    for (unsigned i = 0; i < 1000; i++) {
        snprintf(key, sizeof key, "churn%u", i);
        throttle_fail(&t, KEY(key), 100 + i);
        /* More only when a churned key shares its slot and failed past it. */
        CHECK(throttle_failures(&t, KEY("victim"), 100 + i) >= 10);
    }
    CHECK(throttle_check(&t, KEY("victim"), 1100) > 0);
    throttle_destroy(&t);
}

/* Flooding the table with keys pushed past their free failures evicts the floods' own. */
static void test_throttled_flood_keeps_a_longer_wait(void) {
    struct throttle t;
    CHECK_EQ_INT(throttle_init(&t, 64, &policy), 0);
    fail_n(&t, "victim", 6, 0); /* a wait of 8 s after its sixth failure */
    char key[16];
    for (unsigned i = 0; i < 2000; i++) {
        snprintf(key, sizeof key, "flood%u", i);
        fail_n(&t, key, 3, 1 + i); /* each throttled: 1 s */
        CHECK(throttle_failures(&t, KEY(key), 1 + i) >= 3);
        CHECK(throttle_failures(&t, KEY("victim"), 1 + i) >= 6);
    }
    CHECK_EQ_UINT(t.used, 64);
    throttle_destroy(&t);
}

static void test_all_throttled_evicts_the_wait_that_ends_first(void) {
    struct throttle t;
    CHECK_EQ_INT(throttle_init(&t, 2, &policy), 0);
    fail_n(&t, "long", 6, 0);   /* least recent; its wait ends at 8 s */
    fail_n(&t, "short", 3, 10); /* its wait ends at 1.01 s */
    throttle_fail(&t, KEY("new"), 20);
    CHECK_EQ_UINT(only_slot(&t)->count, 3); /* short went */
    CHECK_EQ_UINT(throttle_failures(&t, KEY("short"), 20), 3);
    CHECK_EQ_UINT(throttle_failures(&t, KEY("long"), 20), 6);
    throttle_destroy(&t);
}

static void test_all_throttled_tie_evicts_the_fewer_failures(void) {
    struct throttle t;
    CHECK_EQ_INT(throttle_init(&t, 2, &policy), 0);
    fail_n(&t, "four", 4, 0);     /* 2 s: ends at 2 s */
    fail_n(&t, "three", 3, 1000); /* 1 s: ends at 2 s too */
    throttle_fail(&t, KEY("new"), 1500);
    CHECK_EQ_UINT(only_slot(&t)->count, 3); /* three went */
    CHECK_EQ_UINT(throttle_failures(&t, KEY("four"), 1500), 4);
    throttle_destroy(&t);
}

static void test_capped_keys_share_a_level(void) {
    struct throttle t;
    CHECK_EQ_INT(throttle_init(&t, 2, &policy), 0);
    /* Both at the 60 s cap (levels past it are one list): the wait that ends first goes. */
    fail_n(&t, "a", 20, 0);
    fail_n(&t, "b", 12, 5 * S);
    throttle_fail(&t, KEY("c"), 6 * S);
    CHECK_EQ_UINT(only_slot(&t)->count, 20); /* a went */
    CHECK_EQ_UINT(throttle_failures(&t, KEY("b"), 6 * S), 12);
    CHECK_EQ_UINT(t.nlists, 2 + 6); /* unthrottled, 1..32 s, the cap */
    throttle_destroy(&t);
}

static void test_rate_burst_then_refill(void) {
    struct throttle_rate r;
    throttle_rate_init(&r, 60, 3); /* one a second, three at once */
    for (unsigned i = 0; i < 3; i++) {
        CHECK_EQ_UINT(throttle_rate_check(&r, 10 * S), 0);
        throttle_rate_take(&r, 10 * S);
    }
    CHECK_EQ_UINT(throttle_rate_check(&r, 10 * S), 1);
    CHECK_EQ_UINT(throttle_rate_check(&r, 11 * S - 1), 1);
    CHECK_EQ_UINT(throttle_rate_check(&r, 11 * S), 0);
    throttle_rate_take(&r, 11 * S);
    CHECK_EQ_UINT(throttle_rate_check(&r, 11 * S), 1);
    /* Idle long: full again, never more than the burst. */
    for (unsigned i = 0; i < 3; i++) {
        CHECK_EQ_UINT(throttle_rate_check(&r, 100 * S), 0);
        throttle_rate_take(&r, 100 * S);
    }
    CHECK_EQ_UINT(throttle_rate_check(&r, 100 * S), 1);
}

static void test_rate_slow(void) {
    struct throttle_rate r;
    throttle_rate_init(&r, 1, 1); /* one a minute */
    CHECK_EQ_UINT(throttle_rate_check(&r, 0), 0);
    throttle_rate_take(&r, 0);
    CHECK_EQ_UINT(throttle_rate_check(&r, 0), 60);
    CHECK_EQ_UINT(throttle_rate_check(&r, 59 * S + 1), 1);
    CHECK_EQ_UINT(throttle_rate_check(&r, 60 * S), 0);
}

/* A key evicted while throttled comes back with its count, and decays as an entry would. */
static void test_slot_keeps_an_evicted_count(void) {
    struct throttle t;
    CHECK_EQ_INT(throttle_init(&t, 2, &policy), 0);
    fixed_key(&t);
    fail_n(&t, "alpha", 4, 0);   /* 2 s */
    fail_n(&t, "bravo", 5, 0);   /* 4 s */
    fail_n(&t, "charlie", 6, 0); /* 8 s: alpha goes */
    CHECK_EQ_UINT(only_slot(&t)->count, 4);
    CHECK_EQ_UINT(throttle_check(&t, KEY("alpha"), 1 * S), 1);
    throttle_fail(&t, KEY("alpha"), 2 * S); /* back in the table (bravo goes), the fifth failure */
    CHECK_EQ_UINT(throttle_failures(&t, KEY("alpha"), 2 * S), 5);
    CHECK_EQ_UINT(throttle_check(&t, KEY("alpha"), 2 * S), 4);
    CHECK_EQ_UINT(throttle_failures(&t, KEY("bravo"), 2 * S), 5);
    /* A window after their latest failures, every count is forgotten, slots too. */
    CHECK_EQ_UINT(throttle_failures(&t, KEY("bravo"), 602 * S), 0);
    CHECK_EQ_UINT(throttle_failures(&t, KEY("alpha"), 602 * S), 0);
    throttle_destroy(&t);
}

static void test_eviction_prefers_forgotten(void) {
    struct throttle t;
    CHECK_EQ_INT(throttle_init(&t, 2, &policy), 0);
    fail_n(&t, "old", 3, 0);                /* throttled, but forgotten by 600 s */
    throttle_fail(&t, KEY("new"), 700 * S); /* under its free failures */
    throttle_fail(&t, KEY("x"), 700 * S);   /* full: the forgotten one goes, not "new" */
    CHECK_EQ_UINT(throttle_failures(&t, KEY("new"), 700 * S), 1);
    CHECK_EQ_UINT(throttle_failures(&t, KEY("x"), 700 * S), 1);
    CHECK_EQ_UINT(t.used, 2);
    throttle_destroy(&t);
}

static void test_capacity_one(void) {
    struct throttle t;
    CHECK_EQ_INT(throttle_init(&t, 1, &policy), 0);
    fail_n(&t, "a", 5, 0);
    throttle_fail(&t, KEY("b"), 0);
    CHECK_EQ_UINT(t.used, 1);
    CHECK_EQ_UINT(throttle_failures(&t, KEY("a"), 0), 5); /* from its slot */
    CHECK(throttle_failures(&t, KEY("b"), 0) >= 1);       /* 6 if it shares a's slot */
    throttle_success(&t, KEY("b"));
    CHECK_EQ_UINT(t.used, 0);
    throttle_fail(&t, KEY("c"), 0);
    CHECK_EQ_UINT(t.used, 1);
    throttle_destroy(&t);
}

static void test_many_keys(void) {
    enum { CAP = 4096, N = 20000 };
    struct throttle t;
    CHECK_EQ_INT(throttle_init(&t, CAP, &throttle_default_policy), 0);
    char key[16];
    for (unsigned i = 0; i < N; i++) {
        snprintf(key, sizeof key, "user%u", i);
        throttle_fail(&t, KEY(key), i);
        if (i % 3 == 0) throttle_success(&t, KEY(key));
    }
    CHECK(t.used <= CAP);
    /* The most recent keys are all there, the oldest are gone. */
    unsigned present = 0;
    for (unsigned i = 0; i < N; i++) {
        snprintf(key, sizeof key, "user%u", i);
        uint32_t n = throttle_failures(&t, KEY(key), N);
        CHECK(n <= 1);
        if (i % 3 == 0) CHECK_EQ_UINT(n, 0);
        if (i >= N - CAP && i % 3 != 0) CHECK_EQ_UINT(n, 1);
        if (i < N - 2 * CAP) CHECK_EQ_UINT(n, 0);
        present += n;
    }
    CHECK_EQ_UINT(present, t.used);
    CHECK_EQ_UINT(t.used, CAP);
    throttle_destroy(&t);
}

static void test_default_policy(void) {
    struct throttle t;
    CHECK_EQ_INT(throttle_init(&t, 8, &throttle_default_policy), 0);
    fail_n(&t, "k", 5, 0);
    CHECK_EQ_UINT(throttle_check(&t, KEY("k"), 0), 1);
    fail_n(&t, "k", 100, 0);
    CHECK_EQ_UINT(throttle_check(&t, KEY("k"), 0), 15 * 60);
    throttle_destroy(&t);
}

static void test_init_refuses(void) {
    struct throttle t;
    CHECK_EQ_INT(throttle_init(&t, 0, &policy), -EINVAL);
    CHECK_EQ_INT(throttle_init(&t, (1u << 24) + 1, &policy), -EINVAL);
    struct throttle_policy p = policy;
    p.base_delay_ms = 0;
    CHECK_EQ_INT(throttle_init(&t, 8, &p), -EINVAL);
    p = policy;
    p.max_delay_ms = p.base_delay_ms - 1;
    CHECK_EQ_INT(throttle_init(&t, 8, &p), -EINVAL);
    p = policy;
    p.window_ms = p.max_delay_ms; /* a key at the cap would decay as its wait ends */
    CHECK_EQ_INT(throttle_init(&t, 8, &p), -EINVAL);
}

static const struct check_case cases[] = {
    CHECK_CASE(test_free_failures),
    CHECK_CASE(test_doubling_and_cap),
    CHECK_CASE(test_retry_after_rounds_up),
    CHECK_CASE(test_decay),
    CHECK_CASE(test_success_forgets),
    CHECK_CASE(test_binary_keys),
    CHECK_CASE(test_evicts_least_recent),
    CHECK_CASE(test_eviction_spares_throttled_keys),
    CHECK_CASE(test_eviction_when_all_throttled),
    CHECK_CASE(test_churn_keeps_the_oldest_throttled_key),
    CHECK_CASE(test_throttled_flood_keeps_a_longer_wait),
    CHECK_CASE(test_all_throttled_evicts_the_wait_that_ends_first),
    CHECK_CASE(test_all_throttled_tie_evicts_the_fewer_failures),
    CHECK_CASE(test_capped_keys_share_a_level),
    CHECK_CASE(test_rate_burst_then_refill),
    CHECK_CASE(test_rate_slow),
    CHECK_CASE(test_slot_keeps_an_evicted_count),
    CHECK_CASE(test_eviction_prefers_forgotten),
    CHECK_CASE(test_capacity_one),
    CHECK_CASE(test_many_keys),
    CHECK_CASE(test_default_policy),
    CHECK_CASE(test_init_refuses),
};

int main(int argc, char **argv) {
    return check_run(argc, argv, cases, CHECK_COUNT(cases));
}
