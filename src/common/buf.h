/*
 * buf: growable byte buffers, slices, a bump arena and the one allocator.
 *
 * Allocation failure aborts inside xmalloc/xrealloc, so call sites never
 * check for NULL. A buf keeps its capacity across buf_reset, which is what
 * lets a connection reuse its buffers with no heap traffic once warmed up.
 */
#ifndef EVENTD_BUF_H
#define EVENTD_BUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

void *xmalloc(size_t n);
void *xcalloc(size_t count, size_t n);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);

/* A borrowed view of bytes: never owns its memory. */
struct slice {
    const char *ptr;
    size_t len;
};

#define SLICE_LIT(s) ((struct slice){(s), sizeof(s) - 1})

static inline bool slice_eq(struct slice a, const char *ptr, size_t len) {
    return a.len == len && memcmp(a.ptr, ptr, len) == 0;
}

/* Growable, owned bytes; ptr is NUL-terminated whenever cap > 0. */
struct buf {
    char *ptr;
    size_t len;
    size_t cap;
};

#define BUF_INIT                                                                                   \
    { NULL, 0, 0 }

void buf_init(struct buf *b, size_t cap);
void buf_destroy(struct buf *b);
/* Empties the buffer but keeps its memory. */
static inline void buf_reset(struct buf *b) {
    b->len = 0;
    if (b->cap) b->ptr[0] = '\0';
}
/* Grows b to hold len + n bytes (plus the terminator): buf_reserve's slow path. */
void buf_grow(struct buf *b, size_t n);
/* Makes room for n more bytes (plus the terminator); returns the write position,
 * valid until the next call that may grow b. Inline: once a buffer has grown,
 * the hot path's appends are a comparison and a copy. */
static inline char *buf_reserve(struct buf *b, size_t n) {
    if (__builtin_expect(b->len + n > b->cap || !b->ptr, 0)) buf_grow(b, n);
    return b->ptr + b->len;
}
/* Records that n reserved bytes were written. */
static inline void buf_commit(struct buf *b, size_t n) {
    b->len += n;
    b->ptr[b->len] = '\0';
}
static inline void buf_append(struct buf *b, const void *ptr, size_t len) {
    char *p = buf_reserve(b, len);
    if (len) memcpy(p, ptr, len);
    buf_commit(b, len);
}
static inline void buf_append_str(struct buf *b, const char *s) {
    buf_append(b, s, strlen(s));
}
static inline void buf_append_char(struct buf *b, char c) {
    char *p = buf_reserve(b, 1);
    *p = c;
    buf_commit(b, 1);
}
/* Appends the decimal digits of v. */
void buf_append_u64(struct buf *b, uint64_t v);

/*
 * A bump arena: allocations are freed all at once by arena_reset, which
 * keeps the first block so steady-state use touches the heap never.
 */
struct arena_block;
struct arena {
    struct arena_block *head; /* current block; older ones follow */
    size_t block_size;        /* bytes per ordinary block */
};

void arena_init(struct arena *a, size_t block_size);
void arena_destroy(struct arena *a);
void arena_reset(struct arena *a);
/* Memory valid until arena_reset or arena_destroy. */
void *arena_alloc(struct arena *a, size_t n);
/* Bytes the arena holds from the heap now (its blocks' sizes). */
size_t arena_size(const struct arena *a);
char *arena_strndup(struct arena *a, const char *ptr, size_t len);

/* Little helpers shared by the codec modules. */
extern const char u64_pairs[201]; /* "00" "01" ... "99" */
/* u64_digits for numbers of four digits and more. */
size_t u64_digits_long(uint64_t v, char out[20]);
/* Writes the decimal digits of v at out; returns how many. Numbers below
 * 1000 (lengths, ids, statuses) are written here, two digits at a time. */
static inline size_t u64_digits(uint64_t v, char out[20]) {
    if (v < 10) {
        out[0] = (char)('0' + v);
        return 1;
    }
    if (v < 100) {
        memcpy(out, u64_pairs + 2 * v, 2);
        return 2;
    }
    if (v < 1000) {
        out[0] = (char)('0' + v / 100);
        memcpy(out + 1, u64_pairs + 2 * (v % 100), 2);
        return 3;
    }
    return u64_digits_long(v, out);
}
/*
 * Parses a whole positive decimal integer: digits only, no sign, no leading
 * zero, 1..max. Returns 0 with *out set, or -1 (and *out untouched).
 */
int u64_parse(const char *ptr, size_t len, uint64_t max, uint64_t *out);

#endif
