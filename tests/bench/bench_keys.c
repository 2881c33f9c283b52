/*
 * bench_keys: the longest single insert while an index grows to N users
 * (by name), N idempotency keys, then N keys of N users of their own (the
 * owners' table), the pause a table's resizing puts on the event loop:
 * every request waits for it. Prints, for each kind, the
 * inserts' total time, the longest one and the number over 1 ms.
 *
 *   bench_keys [N]        (default 2000000)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../unit/records.h"
#include "storage/index.h"
#include "storage/record.h"

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static struct record *idem(uint64_t id, uint64_t user, const char *key) {
    return test_idem(id, user, key, 1764000000, "{}", 2);
}

static struct record *user(uint64_t id, const char *name) {
    return test_user(id, name, "");
}

/* Files n records made by make(i) into ix, timing each insert; prints the figures. */
static void timed_puts(struct index *ix, const char *what, size_t n,
                       struct record *(*make)(size_t i, size_t n)) {
    double total = 0, worst = 0;
    size_t over = 0;
    for (size_t i = 0; i < n; i++) {
        struct record *r = make(i, n);
        double t0 = now_us();
        index_put(ix, r);
        double t = now_us() - t0;
        total += t;
        worst = t > worst ? t : worst;
        over += t > 1000;
    }
    printf("%-6s %9zu inserts: %8.0f ms in all, %6.2f us each; longest %8.3f ms; %zu over 1 ms\n",
           what, n, total / 1e3, total / (double)n, worst / 1e3, over);
}

static struct record *nth_user(size_t i, size_t n) {
    (void)n;
    char name[48];
    snprintf(name, sizeof name, "user%zu", i);
    return user(1 + i, name);
}

static struct record *nth_key(size_t i, size_t n) {
    char key[48];
    snprintf(key, sizeof key, "%08zx-0000-4000-8000-000000000000", i);
    return idem(n + 1 + i, 1 + i % 1000, key);
}

/* A key of a user of its own: every insert files a new owner (user id) too. */
static struct record *nth_owner(size_t i, size_t n) {
    char key[48];
    snprintf(key, sizeof key, "o%zx", i);
    return idem(2 * n + 1 + i, 1000000000 + i, key);
}

int main(int argc, char **argv) {
    size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : 2000000;
    struct index ix;
    index_init(&ix);
    timed_puts(&ix, "users", n, nth_user);
    timed_puts(&ix, "keys", n, nth_key);
    timed_puts(&ix, "owners", n, nth_owner);
    index_destroy(&ix);
    return 0;
}
