/*
 * bench_auth: does a failed sign-in take the same time whether the user
 * exists or not? Times auth_check on (existing user, wrong key) and
 * (unknown user, some key) interleaved, over many rounds, against an index
 * of N users, and prints the median and the difference in nanoseconds.
 * A benchmark, not a test: it prints figures and never fails on them.
 *
 *   bench_auth [USERS] [ROUNDS]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "storage/auth.h"
#include "storage/index.h"
#include <sodium.h>

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void header_for(const char *name, const char *key, char *out, size_t cap) {
    char raw[256];
    snprintf(raw, sizeof raw, "%s:%s", name, key);
    memcpy(out, "Basic ", 6);
    sodium_bin2base64(out + 6, cap - 6, (const unsigned char *)raw, strlen(raw),
                      sodium_base64_VARIANT_ORIGINAL);
}

int main(int argc, char **argv) {
    int users = argc > 1 ? atoi(argv[1]) : 10000;
    int rounds = argc > 2 ? atoi(argv[2]) : 200000;
    if (auth_init() < 0) return 1;
    struct index ix;
    index_init(&ix);
    for (int i = 0; i < users; i++) {
        char name[32], key[AUTH_KEY_CHARS + 1];
        snprintf(name, sizeof name, "user%06d", i);
        auth_new_key(key);
        uint8_t hash[AUTH_HASH_BYTES];
        auth_hash_key(key, strlen(key), hash);
        union value v[RECORD_MAX_FIELDS];
        record_defaults(&record_user, v);
        v[USER_NAME].s.ptr = name;
        v[USER_NAME].s.len = (uint32_t)strlen(name);
        v[USER_KEY_HASH].s.ptr = (const char *)hash;
        v[USER_KEY_HASH].s.len = AUTH_HASH_BYTES;
        index_put(&ix, record_build(&record_user, (uint64_t)i + 1, 0, v));
    }
    uint64_t *known = malloc(sizeof(uint64_t) * (size_t)rounds);
    uint64_t *unknown = malloc(sizeof(uint64_t) * (size_t)rounds);
    char wrong[AUTH_KEY_CHARS + 1];
    auth_new_key(wrong);
    for (int r = 0; r < rounds; r++) {
        char name[32], h1[128], h2[128];
        /* Different names each round, so neither case stays in cache. */
        snprintf(name, sizeof name, "user%06d", (int)((unsigned)r * 7919u % (unsigned)users));
        header_for(name, wrong, h1, sizeof h1);
        snprintf(name, sizeof name, "nobody%06d", (int)((unsigned)r * 7919u % (unsigned)users));
        header_for(name, wrong, h2, sizeof h2);
        uint64_t t0 = now_ns();
        const struct record *a = auth_check(&ix, (struct slice){h1, strlen(h1)});
        uint64_t t1 = now_ns();
        const struct record *b = auth_check(&ix, (struct slice){h2, strlen(h2)});
        uint64_t t2 = now_ns();
        if (a || b) return 1;
        known[r] = t1 - t0;
        unknown[r] = t2 - t1;
    }
    qsort(known, (size_t)rounds, sizeof *known, cmp_u64);
    qsort(unknown, (size_t)rounds, sizeof *unknown, cmp_u64);
    printf("auth_check over %d users, %d rounds (ns): existing user + wrong key median %llu "
           "p90 %llu; unknown user median %llu p90 %llu; median difference %+lld\n",
           users, rounds, (unsigned long long)known[rounds / 2],
           (unsigned long long)known[rounds * 9 / 10], (unsigned long long)unknown[rounds / 2],
           (unsigned long long)unknown[rounds * 9 / 10],
           (long long)known[rounds / 2] - (long long)unknown[rounds / 2]);
    free(known);
    free(unknown);
    index_destroy(&ix);
    return 0;
}
