/* The slab allocator (slab.h): classes, reuse, chunk roll-over, malloc fallback, ASan poisoning. */
#include "check.h"
#include "common/slab.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define HAVE_ASAN 1
#endif

/* Each object is filled with its own byte, so an overlap shows as a wrong byte. */
static void fill(void *p, size_t n, int tag) {
    memset(p, tag, n);
}
static bool filled(const void *p, size_t n, int tag) {
    for (size_t i = 0; i < n; i++)
        if (((const unsigned char *)p)[i] != (unsigned char)tag) return false;
    return true;
}

static void test_classes_and_alignment(void) {
    struct slab s;
    slab_init(&s, false, false);
    uint8_t c;
    for (size_t n = 1; n <= SLAB_MAX; n += 7) {
        void *p = slab_alloc(&s, n, &c);
        CHECK(((uintptr_t)p % SLAB_GRAIN) == 0);
        CHECK_EQ_UINT(c, (n + SLAB_GRAIN - 1) / SLAB_GRAIN); /* the smallest class that fits */
        fill(p, n, (int)(n & 0xff));
        slab_free(&s, p, c);
    }
    void *big = slab_alloc(&s, SLAB_MAX + 1, &c);
    CHECK_EQ_UINT(c, 0); /* too big for a class: malloc */
    fill(big, SLAB_MAX + 1, 1);
    slab_free(&s, big, c);
    CHECK_EQ_UINT(s.live, 0);
    slab_destroy(&s);
}

static void test_freed_slot_is_reused(void) {
    struct slab s;
    slab_init(&s, false, false);
    uint8_t c1, c2, c3;
    void *a = slab_alloc(&s, 100, &c1);
    void *b = slab_alloc(&s, 100, &c2);
    CHECK(a != b);
    slab_free(&s, a, c1);
    void *d = slab_alloc(&s, 97, &c3); /* same class (13 grains) */
    CHECK(c3 == c1 && d == a);
    void *e = slab_alloc(&s, 200, &c3); /* another class: a fresh slot */
    CHECK(e != a && e != b);
    slab_free(&s, b, c2);
    slab_free(&s, d, c1);
    slab_free(&s, e, c3);
    CHECK_EQ_UINT(s.live, 0);
    slab_destroy(&s);
}

/* Many objects of mixed sizes across several chunks stay intact and distinct. */
static void test_many_objects_across_chunks(void) {
    struct slab s;
    slab_init(&s, false, true);
    enum { N = 40000 };
    static void *p[N];
    static uint8_t cls[N];
    for (int i = 0; i < N; i++) {
        size_t n = 16 + (size_t)(i * 37) % 300;
        p[i] = slab_alloc(&s, n, &cls[i]);
        fill(p[i], n, i & 0xff);
    }
    CHECK(s.mapped >= 3 * SLAB_CHUNK); /* ~6.6 MB of objects */
    CHECK(s.mapped <= 8 * SLAB_CHUNK);
    for (int i = 0; i < N; i++)
        CHECK(filled(p[i], 16 + (size_t)(i * 37) % 300, i & 0xff));
    /* Free every other one, allocate again: the new ones fill the holes, the rest survive. */
    size_t mapped = s.mapped;
    for (int i = 0; i < N; i += 2)
        slab_free(&s, p[i], cls[i]);
    for (int i = 0; i < N; i += 2) {
        size_t n = 16 + (size_t)(i * 37) % 300;
        p[i] = slab_alloc(&s, n, &cls[i]);
        fill(p[i], n, (i + 1) & 0xff);
    }
    CHECK_EQ_UINT(s.mapped, mapped);
    for (int i = 0; i < N; i++)
        CHECK(filled(p[i], 16 + (size_t)(i * 37) % 300, (i + (i % 2 == 0)) & 0xff));
    CHECK_EQ_UINT(s.live, N);
    for (int i = 0; i < N; i++)
        slab_free(&s, p[i], cls[i]);
    CHECK_EQ_UINT(s.live, 0);
    slab_destroy(&s);
    CHECK_EQ_UINT(s.mapped, 0);
}

/* The unused tail of a chunk is not lost: it becomes a free slot. */
static void test_chunk_tail_is_kept(void) {
    struct slab s;
    slab_init(&s, false, false);
    uint8_t c;
    size_t obj = SLAB_MAX; /* 1016 bytes: a chunk ends with a tail smaller than one */
    int n = 0;
    while (s.mapped < 2 * SLAB_CHUNK && n < 10000) {
        slab_alloc(&s, obj, &c);
        n++;
    }
    /* The first chunk's tail went to the free list of the class it fills, and an
     * object of that class gets it. */
    unsigned k = 1;
    while (k < SLAB_CLASSES && !s.free[k])
        k++;
    CHECK(k < SLAB_CLASSES - 1);
    void *tail = s.free[k];
    CHECK(slab_alloc(&s, k * SLAB_GRAIN, &c) == tail);
    CHECK_EQ_UINT(c, k);
    slab_destroy(&s);
}

static void test_use_malloc(void) {
    struct slab s;
    slab_init(&s, true, false);
    uint8_t c;
    void *p = slab_alloc(&s, 64, &c);
    CHECK_EQ_UINT(c, 0);
    CHECK_EQ_UINT(s.mapped, 0);
    fill(p, 64, 3);
    slab_free(&s, p, c);
    CHECK_EQ_UINT(s.live, 0);
    slab_destroy(&s);
}

/* Under ASan the bytes past an object's size and a freed slot are poisoned. */
static void test_poisoning(void) {
#ifdef HAVE_ASAN
    CHECK(slab_asan());
    struct slab s;
    slab_init(&s, false, false);
    uint8_t c;
    char *p = slab_alloc(&s, 40, &c);
    CHECK(!__asan_region_is_poisoned(p, 40));
    char *q = slab_alloc(&s, 24, &c);
    CHECK(__asan_address_is_poisoned(q + 24)); /* the next slot is not carved yet */
    slab_free(&s, p, (uint8_t)5);
    CHECK(__asan_address_is_poisoned(p));
    CHECK(__asan_address_is_poisoned(p + 39));
    p = slab_alloc(&s, 33, &c); /* class 5 again: the same slot, with 33 bytes open */
    CHECK(!__asan_region_is_poisoned(p, 33));
    CHECK(__asan_address_is_poisoned(p + 33)); /* the rounding stays closed */
    slab_free(&s, p, c);
    slab_free(&s, q, 3);
    slab_destroy(&s);
#else
    CHECK(!slab_asan());
#endif
}

static const struct check_case cases[] = {
    CHECK_CASE(test_classes_and_alignment),
    CHECK_CASE(test_freed_slot_is_reused),
    CHECK_CASE(test_many_objects_across_chunks),
    CHECK_CASE(test_chunk_tail_is_kept),
    CHECK_CASE(test_use_malloc),
    CHECK_CASE(test_poisoning),
};

int main(int argc, char **argv) {
    return check_run(argc, argv, cases, CHECK_COUNT(cases));
}
