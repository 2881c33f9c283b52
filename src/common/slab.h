/*
 * slab: a size-class allocator for many small, long-lived objects (records).
 *
 * malloc spends 8-16 bytes of header and rounding on every block and takes a
 * page fault for each fresh 4 KiB of heap it hands out. A slab carves slots
 * of exact 8-byte size classes from large chunks, faults their pages in
 * 64 KiB at a time (MADV_POPULATE_WRITE) just ahead of use, and reuses a freed slot for the next
 * object of its class. The caller keeps the class that slab_alloc returned
 * (a record keeps it in its header) and gives it back to slab_free.
 *
 * Not thread-safe: one slab belongs to one thread (records: the loop's).
 *
 * Under AddressSanitizer a slab made with use_malloc hands every object to
 * malloc (class 0), so ASan's quarantine and the leak checker see them; a
 * slab without it poisons every byte that is not inside a live object, so
 * an overflow past the requested size or a use after free is still reported.
 */
#ifndef EVENTD_SLAB_H
#define EVENTD_SLAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SLAB_GRAIN 8u                              /* class c holds objects of up to c * 8 bytes */
#define SLAB_CLASSES 128u                          /* classes 1..127: up to 1016 bytes */
#define SLAB_MAX ((SLAB_CLASSES - 1) * SLAB_GRAIN) /* larger objects go to malloc (class 0) */
#define SLAB_CHUNK (2u << 20)                      /* bytes mapped at once: one huge page */

struct slab_chunk; /* a mapped region, carved from its start */

struct slab {
    void *free[SLAB_CLASSES];  /* freed slots of each class, linked through their first bytes */
    struct slab_chunk *chunks; /* every region mapped, newest first (the one carved from) */
    char *next, *end;          /* the unused rest of the newest chunk */
    char *populated;           /* the newest chunk is faulted in up to here */
    size_t live;               /* objects handed out and not freed (malloc'd ones included) */
    size_t mapped;             /* bytes of chunks */
    bool use_malloc;           /* every object from malloc (class 0) */
    bool populate;             /* map chunks with MAP_POPULATE */
};

/* An empty slab; maps nothing yet. populate: fault pages in ahead of use, 64 KiB a call. */
void slab_init(struct slab *s, bool use_malloc, bool populate);
/* Unmaps every chunk: every object of s is gone (malloc'd ones must be freed first). */
void slab_destroy(struct slab *s);

/* n bytes (n > 0), 8-byte aligned, not zeroed; *cls is the class to free it with.
 * Aborts when memory runs out, as xmalloc does. */
void *slab_alloc(struct slab *s, size_t n, uint8_t *cls);
/* Frees what slab_alloc returned with this class. NULL is ignored. */
void slab_free(struct slab *s, void *p, uint8_t cls);

/* True when this build is instrumented by AddressSanitizer. */
bool slab_asan(void);

/*
 * True when the process was asked to use huge pages for its heap
 * (GLIBC_TUNABLES holds glibc.malloc.hugetlb=1, as the container image sets):
 * then record chunks are advised MADV_HUGEPAGE too, and the index keeps its
 * tables in malloc's heap, where glibc gives them huge pages.
 */
bool slab_hugepages(void);

#endif
