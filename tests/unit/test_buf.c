/*
 * test_buf: growable buffers (reserve/commit/append, NUL termination,
 * reset keeping capacity, decimal digits), the bump arena (alignment,
 * reset reusing the first block, strndup, allocations over the block size)
 * and the varints of payloads and frames.
 */
#include <stdalign.h>
#include <stddef.h>

#include "check.h"
#include "common/buf.h"
#include "common/varint.h"

/* ---- buf ---- */

static void check_terminated(const struct buf *b) {
    CHECK(b->ptr != NULL);
    CHECK(b->len <= b->cap);
    CHECK_EQ_INT(b->ptr[b->len], '\0');
}

static void test_buf_init(void) {
    struct buf b = BUF_INIT;
    CHECK(b.ptr == NULL && b.len == 0 && b.cap == 0);
    buf_reset(&b); /* fine with no memory */
    buf_destroy(&b);
    buf_init(&b, 0);
    CHECK(b.ptr == NULL && b.cap == 0);
    buf_init(&b, 10);
    CHECK_EQ_UINT(b.cap, 10);
    CHECK_EQ_UINT(b.len, 0);
    check_terminated(&b);
    buf_destroy(&b);
    CHECK(b.ptr == NULL && b.len == 0 && b.cap == 0);
}

static void test_buf_reserve_commit(void) {
    struct buf b = BUF_INIT;
    char *p = buf_reserve(&b, 5);
    CHECK(b.cap >= 5);
    memcpy(p, "hello", 5);
    buf_commit(&b, 5);
    CHECK_EQ_STR(b.ptr, "hello");
    CHECK_EQ_UINT(b.len, 5);
    /* Reserving without committing changes nothing visible. */
    p = buf_reserve(&b, 1000);
    CHECK(b.cap >= 1005);
    CHECK(p == b.ptr + 5);
    memset(p, 'x', 1000);
    CHECK_EQ_UINT(b.len, 5);
    buf_commit(&b, 3);
    CHECK_EQ_STR(b.ptr, "helloxxx");
    check_terminated(&b);
    buf_destroy(&b);
}

static void test_buf_append_growth(void) {
    enum { N = 100000 };
    struct buf b = BUF_INIT;
    size_t growths = 0, cap = 0;
    for (size_t i = 0; i < N; i++) {
        char c = (char)('a' + i % 26);
        buf_append(&b, &c, 1);
        check_terminated(&b);
        if (b.cap != cap) growths++, cap = b.cap;
    }
    CHECK_EQ_UINT(b.len, N);
    for (size_t i = 0; i < N; i++)
        if (b.ptr[i] != (char)('a' + i % 26)) CHECK_EQ_UINT(i, N);
    CHECK(growths <= 20); /* geometric, not one realloc per append */
    buf_append_str(&b, "!");
    buf_append_char(&b, '?');
    CHECK_EQ_STR(b.ptr + N, "!?");
    /* Appending nothing to an empty buf still gives a terminated string. */
    struct buf e = BUF_INIT;
    buf_append(&e, NULL, 0);
    check_terminated(&e);
    CHECK_EQ_STR(e.ptr, "");
    buf_destroy(&e);
    buf_destroy(&b);
}

static void test_buf_reset_keeps_capacity(void) {
    struct buf b = BUF_INIT;
    for (int i = 0; i < 1000; i++)
        buf_append_str(&b, "0123456789");
    char *ptr = b.ptr;
    size_t cap = b.cap;
    buf_reset(&b);
    CHECK_EQ_UINT(b.len, 0);
    CHECK_EQ_UINT(b.cap, cap);
    CHECK(b.ptr == ptr);
    CHECK_EQ_STR(b.ptr, "");
    for (int i = 0; i < 1000; i++)
        buf_append_str(&b, "abcdefghij");
    CHECK(b.ptr == ptr); /* no heap traffic once warmed up */
    CHECK_EQ_UINT(b.cap, cap);
    CHECK_EQ_UINT(b.len, 10000);
    buf_destroy(&b);
}

static void test_buf_append_u64(void) {
    struct {
        uint64_t v;
        const char *text;
    } cases[] = {{0, "0"},
                 {9, "9"},
                 {10, "10"},
                 {99, "99"},
                 {100, "100"},
                 {UINT32_MAX, "4294967295"},
                 {(UINT64_C(1) << 53) - 1, "9007199254740991"},
                 {UINT64_MAX - 1, "18446744073709551614"},
                 {UINT64_MAX, "18446744073709551615"}};
    struct buf b = BUF_INIT;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        buf_reset(&b);
        buf_append_str(&b, "id=");
        buf_append_u64(&b, cases[i].v);
        CHECK_EQ_STR(b.ptr + 3, cases[i].text);
        CHECK_EQ_UINT(b.len, 3 + strlen(cases[i].text));
        check_terminated(&b);
    }
    /* Against printf for many values of every length. */
    uint64_t x = 0x9E3779B97F4A7C15u;
    for (int i = 0; i < 20000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint64_t v = x >> (i % 64);
        char want[32];
        snprintf(want, sizeof want, "%" PRIu64, v);
        buf_reset(&b);
        buf_append_u64(&b, v);
        CHECK_EQ_STR(b.ptr, want);
    }
    /* Every number to 100,000, and each power of ten and its neighbours. */
    for (uint64_t v = 0; v <= 100000; v++) {
        char want[32];
        snprintf(want, sizeof want, "%" PRIu64, v);
        buf_reset(&b);
        buf_append_u64(&b, v);
        CHECK_EQ_STR(b.ptr, want);
    }
    for (uint64_t p = 10; p <= UINT64_C(10000000000000000000); p *= 10) {
        for (uint64_t v = p - 1; v <= p + 1; v++) {
            char want[32];
            snprintf(want, sizeof want, "%" PRIu64, v);
            buf_reset(&b);
            buf_append_u64(&b, v);
            CHECK_EQ_STR(b.ptr, want);
        }
        if (p == UINT64_C(10000000000000000000)) break;
    }
    buf_destroy(&b);
}

/* ---- arena ---- */

static void test_arena_alignment(void) {
    struct arena a;
    arena_init(&a, 4096);
    char *prev = NULL;
    for (size_t n = 1; n <= 300; n++) {
        char *p = arena_alloc(&a, n);
        CHECK_EQ_UINT((uintptr_t)p % alignof(max_align_t), 0);
        CHECK_EQ_UINT((uintptr_t)p % 16, 0);
        memset(p, (int)(n & 0xff), n); /* ASan sees any overlap or overrun */
        if (prev) CHECK(prev[0] == (char)((n - 1) & 0xff));
        prev = p;
    }
    arena_destroy(&a);
}

static void test_arena_reset_reuses_first_block(void) {
    struct arena a;
    arena_init(&a, 1024);
    arena_reset(&a); /* nothing allocated yet: fine */
    char *first = arena_alloc(&a, 100);
    /* Spill into several more blocks. */
    for (int i = 0; i < 50; i++)
        memset(arena_alloc(&a, 200), 1, 200);
    arena_reset(&a);
    CHECK(arena_alloc(&a, 100) == first);
    CHECK(arena_alloc(&a, 100) == first + 112); /* 100 rounded up to 16 */
    /* Reset after reset: the same again, every time. */
    for (int round = 0; round < 100; round++) {
        arena_reset(&a);
        CHECK(arena_alloc(&a, 8) == first);
        for (int i = 0; i < 20; i++)
            arena_alloc(&a, 500);
    }
    arena_destroy(&a);
    CHECK(a.head == NULL);
}

static void test_arena_strndup(void) {
    struct arena a;
    arena_init(&a, 64);
    const char *src = "hello, world";
    char *s = arena_strndup(&a, src, 5);
    CHECK_EQ_STR(s, "hello");
    CHECK(s != src);
    CHECK_EQ_STR(arena_strndup(&a, src, 0), "");
    CHECK_EQ_STR(arena_strndup(&a, src, strlen(src)), src);
    /* Bytes, not a C string: an embedded NUL is copied, the terminator added. */
    char *z = arena_strndup(&a, "a\0b", 3);
    CHECK(memcmp(z, "a\0b\0", 4) == 0);
    /* Longer than a block. */
    char big[200];
    memset(big, 'q', sizeof big);
    char *l = arena_strndup(&a, big, sizeof big);
    CHECK(memcmp(l, big, sizeof big) == 0 && l[sizeof big] == '\0');
    CHECK_EQ_STR(s, "hello"); /* earlier strings untouched */
    arena_destroy(&a);
}

static void test_arena_large_allocations(void) {
    struct arena a;
    arena_init(&a, 256);
    char *small = arena_alloc(&a, 16);
    memset(small, 's', 16);
    /* Over the block size: a block of its own, wholly usable. */
    size_t sizes[] = {257, 1000, 1 << 20};
    for (size_t i = 0; i < 3; i++) {
        char *p = arena_alloc(&a, sizes[i]);
        CHECK_EQ_UINT((uintptr_t)p % 16, 0);
        memset(p, 'L', sizes[i]);
        CHECK_EQ_INT(p[sizes[i] - 1], 'L');
        char *after = arena_alloc(&a, 16); /* small ones go on after it */
        memset(after, 'a', 16);
        CHECK_EQ_INT(p[sizes[i] - 1], 'L');
    }
    for (int i = 0; i < 16; i++)
        CHECK_EQ_INT(small[i], 's');
    /* Reset frees the big blocks and keeps the first. */
    arena_reset(&a);
    CHECK(arena_alloc(&a, 16) == small);
    arena_destroy(&a);
}

/* ---- varint ---- */

static size_t bits_of(uint64_t v) {
    size_t n = 0;
    while (v) {
        n++;
        v >>= 1;
    }
    return n;
}

static void check_round_trip(uint64_t v) {
    uint8_t b[VARINT_MAX + 2];
    memset(b, 0xAA, sizeof b);
    size_t n = varint_put(b, v);
    size_t want = bits_of(v) <= 7 ? 1 : (bits_of(v) + 6) / 7;
    CHECK_EQ_UINT(n, want);
    CHECK(n <= VARINT_MAX);
    CHECK_EQ_INT(b[n], 0xAA); /* nothing written past it */
    uint64_t got = ~v;
    CHECK_EQ_UINT(varint_get(b, n, &got), n);
    CHECK_EQ_UINT(got, v);
    /* Bytes after it are not read. */
    CHECK_EQ_UINT(varint_get(b, sizeof b, &got), n);
    CHECK_EQ_UINT(got, v);
    /* Every cut ends inside it. */
    for (size_t cut = 0; cut < n; cut++)
        CHECK_EQ_UINT(varint_get(b, cut, &got), 0);
}

static void test_varint_boundaries(void) {
    for (unsigned k = 0; k < 64; k++) {
        uint64_t p = UINT64_C(1) << k;
        check_round_trip(p - 1);
        check_round_trip(p);
        check_round_trip(p + 1);
    }
    check_round_trip(UINT64_MAX);
    check_round_trip(UINT64_MAX - 1);
    /* The 7-bit boundaries by their lengths. */
    uint8_t b[VARINT_MAX];
    CHECK_EQ_UINT(varint_put(b, 127), 1);
    CHECK_EQ_UINT(varint_put(b, 128), 2);
    CHECK_EQ_UINT(varint_put(b, (UINT64_C(1) << 14) - 1), 2);
    CHECK_EQ_UINT(varint_put(b, UINT64_C(1) << 14), 3);
    CHECK_EQ_UINT(varint_put(b, (UINT64_C(1) << 63) - 1), 9);
    CHECK_EQ_UINT(varint_put(b, UINT64_C(1) << 63), 10);
    CHECK_EQ_UINT(varint_put(b, UINT64_MAX), 10);
    CHECK_EQ_INT(b[9], 1);
}

static void test_varint_rejects(void) {
    uint64_t v = 77;
    uint8_t b[12];
    /* Eleven bytes: ten with the continuation bit, then an end. */
    memset(b, 0x80, 10);
    b[10] = 0x01;
    CHECK_EQ_UINT(varint_get(b, 11, &v), 0);
    CHECK_EQ_UINT(varint_get(b, 12, &v), 0);
    /* Ten bytes whose last holds more than bit 63: overflow. */
    for (unsigned last = 2; last < 0x80; last++) {
        memset(b, 0xff, 9);
        b[9] = (uint8_t)last;
        CHECK_EQ_UINT(varint_get(b, 10, &v), 0);
    }
    /* A tenth byte with the continuation bit. */
    memset(b, 0xff, 9);
    b[9] = 0x81;
    CHECK_EQ_UINT(varint_get(b, 11, &v), 0);
    CHECK_EQ_UINT(v, 77); /* untouched on failure */
    /* Empty input. */
    CHECK_EQ_UINT(varint_get(b, 0, &v), 0);
    /* The largest valid ten bytes. */
    memset(b, 0xff, 9);
    b[9] = 0x01;
    CHECK_EQ_UINT(varint_get(b, 10, &v), 10);
    CHECK_EQ_UINT(v, UINT64_MAX);
}

static const struct check_case cases[] = {
    CHECK_CASE(test_buf_init),
    CHECK_CASE(test_buf_reserve_commit),
    CHECK_CASE(test_buf_append_growth),
    CHECK_CASE(test_buf_reset_keeps_capacity),
    CHECK_CASE(test_buf_append_u64),
    CHECK_CASE(test_arena_alignment),
    CHECK_CASE(test_arena_reset_reuses_first_block),
    CHECK_CASE(test_arena_strndup),
    CHECK_CASE(test_arena_large_allocations),
    CHECK_CASE(test_varint_boundaries),
    CHECK_CASE(test_varint_rejects),
};

int main(int argc, char **argv) {
    return check_run(argc, argv, cases, CHECK_COUNT(cases));
}
