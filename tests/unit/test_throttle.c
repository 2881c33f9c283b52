/*
 * test_throttle: the sign-in throttle: free failures, the doubling delay
 * and its cap, Retry-After rounding, decay after the window, success
 * forgetting a key, binary keys, eviction order (forgotten, then keys under
 * their free failures, then the least recent), a flood of keys, and the
 * refused capacities and policies.
 */
#include "throttle.h"

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
    fail_n(&t, "a", 3, 1);
    fail_n(&t, "b", 3, 2);
    fail_n(&t, "c", 3, 3); /* only throttled keys: the least recent (a) goes */
    CHECK_EQ_UINT(throttle_failures(&t, KEY("a"), 3), 0);
    CHECK_EQ_UINT(throttle_failures(&t, KEY("b"), 3), 3);
    CHECK_EQ_UINT(throttle_failures(&t, KEY("c"), 3), 3);
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
    CHECK_EQ_UINT(throttle_failures(&t, KEY("a"), 0), 0);
    CHECK_EQ_UINT(throttle_failures(&t, KEY("b"), 0), 1);
    throttle_success(&t, KEY("b"));
    CHECK_EQ_UINT(t.used, 0);
    throttle_fail(&t, KEY("c"), 0);
    CHECK_EQ_UINT(throttle_failures(&t, KEY("c"), 0), 1);
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
    CHECK_CASE(test_eviction_prefers_forgotten),
    CHECK_CASE(test_capacity_one),
    CHECK_CASE(test_many_keys),
    CHECK_CASE(test_default_policy),
    CHECK_CASE(test_init_refuses),
};

int main(int argc, char **argv) {
    return check_run(argc, argv, cases, CHECK_COUNT(cases));
}
