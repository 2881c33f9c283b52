/* buf: see buf.h. */
#include "common/buf.h"

#include <stdio.h>
#include <stdlib.h>

static void oom(void) {
    static const char msg[] = "eventd: out of memory\n";
    fwrite(msg, 1, sizeof msg - 1, stderr);
    abort();
}

void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) oom();
    return p;
}

void *xcalloc(size_t count, size_t n) {
    void *p = calloc(count ? count : 1, n ? n : 1);
    if (!p) oom();
    return p;
}

void *xrealloc(void *p, size_t n) {
    p = realloc(p, n ? n : 1);
    if (!p) oom();
    return p;
}

char *xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    return memcpy(xmalloc(n), s, n);
}

void buf_init(struct buf *b, size_t cap) {
    b->len = 0;
    b->cap = cap;
    b->ptr = cap ? xmalloc(cap + 1) : NULL;
    if (cap) b->ptr[0] = '\0';
}

void buf_destroy(struct buf *b) {
    free(b->ptr);
    b->ptr = NULL;
    b->len = b->cap = 0;
}

void buf_grow(struct buf *b, size_t n) {
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + n)
        cap *= 2;
    b->ptr = xrealloc(b->ptr, cap + 1);
    b->cap = cap;
}

void buf_append_u64(struct buf *b, uint64_t v) {
    char *p = buf_reserve(b, 20);
    buf_commit(b, u64_digits(v, p));
}

const char u64_pairs[201] = "00010203040506070809101112131415161718192021222324"
                            "25262728293031323334353637383940414243444546474849"
                            "50515253545556575859606162636465666768697071727374"
                            "75767778798081828384858687888990919293949596979899";

size_t u64_digits_long(uint64_t v, char out[20]) {
    size_t n = 4;
    for (uint64_t p = 10000; n < 20 && v >= p; p *= 10)
        n++;
    char *t = out + n;
    while (v >= 100) {
        t -= 2;
        memcpy(t, u64_pairs + 2 * (v % 100), 2);
        v /= 100;
    }
    if (v >= 10)
        memcpy(t - 2, u64_pairs + 2 * v, 2);
    else
        t[-1] = (char)('0' + v);
    return n;
}

int u64_parse(const char *ptr, size_t len, uint64_t max, uint64_t *out) {
    /* 19 digits always fit in 64 bits; only a 20th can overflow. */
    if (len == 0 || len > 20 || ptr[0] == '0') return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < len; i++) {
        if (ptr[i] < '0' || ptr[i] > '9') return -1;
        uint64_t d = (uint64_t)(ptr[i] - '0');
        if (i == 19 && (v > UINT64_MAX / 10 || (v == UINT64_MAX / 10 && d > UINT64_MAX % 10)))
            return -1;
        v = v * 10 + d;
    }
    if (v > max) return -1;
    *out = v;
    return 0;
}

struct arena_block {
    struct arena_block *next;
    size_t used;
    size_t size;
    _Alignas(16) char data[];
};

void arena_init(struct arena *a, size_t block_size) {
    a->block_size = block_size;
    a->head = NULL;
}

void arena_destroy(struct arena *a) {
    struct arena_block *b = a->head;
    while (b) {
        struct arena_block *next = b->next;
        free(b);
        b = next;
    }
    a->head = NULL;
}

void arena_reset(struct arena *a) {
    if (!a->head) return;
    /* Keep the oldest block (the ordinary-sized one) and free the rest. */
    struct arena_block *b = a->head;
    while (b->next) {
        struct arena_block *next = b->next;
        free(b);
        b = next;
    }
    b->used = 0;
    a->head = b;
}

void *arena_alloc(struct arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    struct arena_block *b = a->head;
    if (!b || b->used + n > b->size) {
        size_t size = n > a->block_size ? n : a->block_size;
        struct arena_block *nb = xmalloc(sizeof *nb + size);
        nb->used = 0;
        nb->size = size;
        if (!b) {
            nb->next = NULL;
            a->head = nb;
        } else {
            /* New blocks go in front; the first (oldest) block stays last. */
            nb->next = b;
            a->head = nb;
        }
        b = nb;
    }
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

size_t arena_size(const struct arena *a) {
    size_t n = 0;
    for (const struct arena_block *b = a->head; b; b = b->next)
        n += b->size;
    return n;
}

char *arena_strndup(struct arena *a, const char *ptr, size_t len) {
    char *p = arena_alloc(a, len + 1);
    memcpy(p, ptr, len);
    p[len] = '\0';
    return p;
}
