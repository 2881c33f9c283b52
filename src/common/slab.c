/*
 * slab: see slab.h.
 *
 * Slots of every class are carved from one bump region, so a class that is
 * rarely used costs no chunk of its own; freed slots go to a LIFO list per
 * class. Chunks are only unmapped by slab_destroy: like malloc's heap, the
 * memory of freed slots stays with the process for the next objects.
 */
#include "common/slab.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/buf.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif
/* Bytes faulted in at once ahead of the bump pointer: enough to make the
 * system call rare, little enough that the zeroed lines are still in the
 * cache when the objects are written (a whole chunk at once would not be). */
#define POPULATE_STEP (64u << 10)

#if defined(__SANITIZE_ADDRESS__)
#define SLAB_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SLAB_ASAN 1
#endif
#endif

#ifdef SLAB_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

struct slab_chunk {
    struct slab_chunk *next;
    size_t size; /* bytes mapped, this header included */
};

/* The header is rounded to the grain so that slots stay aligned. */
#define CHUNK_HEAD ((sizeof(struct slab_chunk) + SLAB_GRAIN - 1) / SLAB_GRAIN * SLAB_GRAIN)

bool slab_asan(void) {
#ifdef SLAB_ASAN
    return true;
#else
    return false;
#endif
}

bool slab_hugepages(void) {
    static int wanted = -1;
    if (wanted < 0) {
        const char *t = getenv("GLIBC_TUNABLES");
        wanted = t && strstr(t, "glibc.malloc.hugetlb=1") != NULL;
    }
    return wanted;
}

void slab_init(struct slab *s, bool use_malloc, bool populate) {
    memset(s, 0, sizeof *s);
    s->use_malloc = use_malloc;
    s->populate = populate;
}

void slab_destroy(struct slab *s) {
    struct slab_chunk *c = s->chunks;
    while (c) {
        struct slab_chunk *next = c->next;
        UNPOISON(c, c->size);
        munmap(c, c->size);
        c = next;
    }
    bool use_malloc = s->use_malloc, populate = s->populate;
    slab_init(s, use_malloc, populate);
}

/* Maps a new chunk to carve from; what was left of the old one is given to
 * the free lists, so no byte is lost. */
static void new_chunk(struct slab *s) {
    size_t left = (size_t)(s->end - s->next);
    if (left >= SLAB_GRAIN) {
        /* The rest becomes one free slot of the largest class it fills. */
        size_t cls = left / SLAB_GRAIN < SLAB_CLASSES ? left / SLAB_GRAIN : SLAB_CLASSES - 1;
        UNPOISON(s->next, sizeof(void *));
        *(void **)s->next = s->free[cls];
        POISON(s->next, cls * SLAB_GRAIN);
        s->free[cls] = s->next;
    }
    void *p = mmap(NULL, SLAB_CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "out of memory (mapping %u bytes)\n", SLAB_CHUNK);
        abort();
    }
    /* A chunk is one huge page (Linux aligns anonymous mappings of that size). */
    if (slab_hugepages()) (void)madvise(p, SLAB_CHUNK, MADV_HUGEPAGE);
    struct slab_chunk *c = p;
    c->next = s->chunks;
    c->size = SLAB_CHUNK;
    s->chunks = c;
    s->mapped += SLAB_CHUNK;
    s->next = (char *)p + CHUNK_HEAD;
    s->end = (char *)p + SLAB_CHUNK;
    s->populated = (char *)p;
    POISON(s->next, (size_t)(s->end - s->next));
}

/* Faults in the next step of the chunk in one system call (a fault per page
 * costs more, most of all in a virtual machine). Where the kernel cannot, the
 * pages fault in one by one as before. */
static void populate(struct slab *s) {
    size_t n = (size_t)(s->end - s->populated);
    if (n > POPULATE_STEP) n = POPULATE_STEP;
    if (madvise(s->populated, n, MADV_POPULATE_WRITE) < 0) s->populate = false;
    s->populated += n;
}

void *slab_alloc(struct slab *s, size_t n, uint8_t *cls) {
    s->live++;
    size_t c = (n + SLAB_GRAIN - 1) / SLAB_GRAIN;
    if (s->use_malloc || n == 0 || c >= SLAB_CLASSES) {
        *cls = 0;
        return xmalloc(n ? n : 1);
    }
    *cls = (uint8_t)c;
    void *p = s->free[c];
    if (p) {
        UNPOISON(p, sizeof(void *));
        s->free[c] = *(void **)p;
    } else {
        if ((size_t)(s->end - s->next) < c * SLAB_GRAIN) new_chunk(s);
        p = s->next;
        s->next += c * SLAB_GRAIN;
        if (s->populate && s->next > s->populated) populate(s);
    }
    UNPOISON(p, n); /* exactly what was asked for: the rounding stays poisoned */
    return p;
}

void slab_free(struct slab *s, void *p, uint8_t cls) {
    if (!p) return;
    s->live--;
    if (cls == 0) {
        free(p);
        return;
    }
    UNPOISON(p, sizeof(void *));
    *(void **)p = s->free[cls];
    s->free[cls] = p;
    POISON(p, cls * SLAB_GRAIN);
}
