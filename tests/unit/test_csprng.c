/* test_csprng: output that looks random, never repeats, spans blocks, reseeds from the kernel
 * on schedule, differs between threads, and starts anew after csprng_forget. */
#include <pthread.h>
#include <sodium.h>
#include <string.h>

#include "check.h"
#include "common/csprng.h"

/* Sizes that start and end inside blocks and cross them: no two outputs share 16 bytes. */
static void test_no_repeats(void) {
    static unsigned char out[64][1000];
    size_t sizes[] = {1, 7, 32, 479, 480, 481, 1000};
    for (size_t i = 0; i < 64; i++)
        csprng_bytes(out[i], sizes[i % 7]);
    for (size_t i = 0; i < 64; i++)
        for (size_t j = i + 1; j < 64; j++)
            if (sizes[i % 7] >= 16 && sizes[j % 7] >= 16) CHECK(memcmp(out[i], out[j], 16) != 0);
}

/* 1 MiB: every byte value appears 4096 +- 600 times (over 9 standard deviations of 64: a
 * biased or stuck generator does not), and no 8-byte word repeats in
 * a row. */
static void test_byte_counts(void) {
    static unsigned char buf[1u << 20];
    unsigned counts[256] = {0};
    csprng_bytes(buf, sizeof buf);
    for (size_t i = 0; i < sizeof buf; i++)
        counts[buf[i]]++;
    for (int v = 0; v < 256; v++) {
        if (counts[v] < 4096 - 600 || counts[v] > 4096 + 600) {
            fprintf(stderr, "   byte %d: %u times\n", v, counts[v]);
            CHECK(0);
        }
    }
    for (size_t i = 8; i + 8 <= sizeof buf; i += 8)
        CHECK(memcmp(buf + i - 8, buf + i, 8) != 0);
}

/* The kernel is asked once per CSPRNG_RESEED_BYTES of stream, not per call. */
static void test_reseeds_on_schedule(void) {
    csprng_forget();
    uint64_t s0 = csprng_seeds();
    unsigned char tok[32];
    for (int i = 0; i < 100; i++)
        csprng_bytes(tok, sizeof tok);
    CHECK_EQ_UINT(csprng_seeds() - s0, 1);
    static unsigned char big[4 * CSPRNG_RESEED_BYTES];
    csprng_bytes(big, sizeof big);
    uint64_t n = csprng_seeds() - s0;
    CHECK(n >= 4 && n <= 6);
}

/* After csprng_forget the output starts from a new key: it differs from what the old
 * state would have given, which a forked child must not repeat. */
static void test_forget(void) {
    unsigned char a[64], b[64];
    csprng_forget();
    csprng_bytes(a, sizeof a);
    csprng_forget();
    csprng_bytes(b, sizeof b);
    CHECK(memcmp(a, b, sizeof a) != 0);
}

static void *other_thread(void *arg) {
    csprng_bytes(arg, 64);
    return NULL;
}

/* Each thread seeds its own state: two threads' first outputs differ. */
static void test_threads_differ(void) {
    unsigned char a[64], b[64];
    pthread_t t1, t2;
    CHECK_EQ_INT(pthread_create(&t1, NULL, other_thread, a), 0);
    CHECK_EQ_INT(pthread_create(&t2, NULL, other_thread, b), 0);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    CHECK(memcmp(a, b, sizeof a) != 0);
}

static const struct check_case cases[] = {
    CHECK_CASE(test_no_repeats),          CHECK_CASE(test_byte_counts),
    CHECK_CASE(test_reseeds_on_schedule), CHECK_CASE(test_forget),
    CHECK_CASE(test_threads_differ),
};

int main(int argc, char **argv) {
    if (sodium_init() < 0) return 1;
    return check_run(argc, argv, cases, CHECK_COUNT(cases));
}
