/*
 * throttle: the table behind failed sign-in throttling (see throttle.h).
 *
 * Entries live in one array: chained from a power-of-two bucket array by
 * index (the hash is keyed, so chains stay short whatever keys arrive), and
 * linked into one of two recency lists, most recent failure at the head.
 * Every operation is O(1) expected; eviction never scans the table.
 */
#include "throttle.h"

#include <errno.h>
#include <sodium.h>

#include "buf.h"

#define NONE UINT32_MAX
#define MAX_CAPACITY (1u << 24)

enum { LIGHT = 0, HEAVY = 1 }; /* under / over the free failures */

struct throttle_entry {
    uint64_t hash;
    uint64_t last_ms;    /* latest failure, ms */
    uint32_t count;      /* failures that count; 0 marks a free entry */
    uint32_t chain;      /* next in the bucket chain, or in the free list */
    uint32_t prev, next; /* recency list neighbours (prev is more recent) */
    uint8_t list;        /* LIGHT or HEAVY */
};

_Static_assert(sizeof(((struct throttle *)0)->hash_key) == crypto_shorthash_KEYBYTES,
               "hash_key holds a crypto_shorthash key");

const struct throttle_policy throttle_default_policy = {
    .free_failures = 5,
    .base_delay_ms = 1000,
    .max_delay_ms = 15 * 60 * 1000,
    .window_ms = 60 * 60 * 1000,
};

int throttle_init(struct throttle *t, size_t capacity, const struct throttle_policy *policy) {
    if (capacity == 0 || capacity > MAX_CAPACITY) return -EINVAL;
    if (policy->base_delay_ms == 0 || policy->max_delay_ms < policy->base_delay_ms ||
        policy->window_ms <= policy->max_delay_ms)
        return -EINVAL;
    if (sodium_init() < 0) return -EIO;
    t->policy = *policy;
    t->capacity = (uint32_t)capacity;
    t->nbuckets = 1;
    while (t->nbuckets < t->capacity)
        t->nbuckets <<= 1;
    t->entries = xcalloc(t->capacity, sizeof *t->entries);
    t->buckets = xmalloc(t->nbuckets * sizeof *t->buckets);
    for (uint32_t i = 0; i < t->nbuckets; i++)
        t->buckets[i] = NONE;
    for (uint32_t i = 0; i < t->capacity; i++)
        t->entries[i].chain = i + 1 < t->capacity ? i + 1 : NONE;
    t->free_head = 0;
    t->used = 0;
    t->head[LIGHT] = t->head[HEAVY] = t->tail[LIGHT] = t->tail[HEAVY] = NONE;
    crypto_shorthash_keygen(t->hash_key);
    return 0;
}

void throttle_destroy(struct throttle *t) {
    free(t->entries);
    free(t->buckets);
    sodium_memzero(t->hash_key, sizeof t->hash_key);
    t->entries = NULL;
    t->buckets = NULL;
    t->capacity = t->used = 0;
}

static uint64_t hash_of(const struct throttle *t, const void *key, size_t len) {
    unsigned char out[crypto_shorthash_BYTES];
    crypto_shorthash(out, key, len, t->hash_key);
    uint64_t h = 0;
    for (size_t i = 0; i < sizeof out; i++)
        h = h << 8 | out[i];
    return h;
}

static uint32_t lookup(const struct throttle *t, uint64_t h) {
    uint32_t i = t->buckets[h & (t->nbuckets - 1)];
    while (i != NONE && t->entries[i].hash != h)
        i = t->entries[i].chain;
    return i;
}

static bool decayed(const struct throttle *t, const struct throttle_entry *e, uint64_t now) {
    return now > e->last_ms && now - e->last_ms >= t->policy.window_ms;
}

/* The wait the entry imposes after its latest failure, ms. */
static uint64_t delay_ms(const struct throttle *t, uint32_t count) {
    const struct throttle_policy *p = &t->policy;
    if (count < p->free_failures) return 0;
    uint32_t doublings = count - p->free_failures;
    if (doublings >= 63) return p->max_delay_ms;
    uint64_t d = p->base_delay_ms;
    if (d > p->max_delay_ms >> doublings) return p->max_delay_ms;
    return d << doublings;
}

static void list_unlink(struct throttle *t, uint32_t i) {
    struct throttle_entry *e = &t->entries[i];
    if (e->prev != NONE)
        t->entries[e->prev].next = e->next;
    else
        t->head[e->list] = e->next;
    if (e->next != NONE)
        t->entries[e->next].prev = e->prev;
    else
        t->tail[e->list] = e->prev;
}

static void list_push(struct throttle *t, uint32_t i, uint8_t list) {
    struct throttle_entry *e = &t->entries[i];
    e->list = list;
    e->prev = NONE;
    e->next = t->head[list];
    if (e->next != NONE)
        t->entries[e->next].prev = i;
    else
        t->tail[list] = i;
    t->head[list] = i;
}

static void remove_entry(struct throttle *t, uint32_t i) {
    struct throttle_entry *e = &t->entries[i];
    uint32_t *link = &t->buckets[e->hash & (t->nbuckets - 1)];
    while (*link != i)
        link = &t->entries[*link].chain;
    *link = e->chain;
    list_unlink(t, i);
    e->count = 0;
    e->chain = t->free_head;
    t->free_head = i;
    t->used--;
}

/* Frees one entry of a full table, by the order documented in throttle.h. */
static void evict(struct throttle *t, uint64_t now) {
    uint32_t heavy = t->tail[HEAVY], light = t->tail[LIGHT];
    if (heavy != NONE && decayed(t, &t->entries[heavy], now))
        remove_entry(t, heavy);
    else
        remove_entry(t, light != NONE ? light : heavy);
}

uint32_t throttle_failures(const struct throttle *t, const void *key, size_t len, uint64_t now_ms) {
    uint32_t i = lookup(t, hash_of(t, key, len));
    if (i == NONE || decayed(t, &t->entries[i], now_ms)) return 0;
    return t->entries[i].count;
}

uint32_t throttle_check(const struct throttle *t, const void *key, size_t len, uint64_t now_ms) {
    uint32_t i = lookup(t, hash_of(t, key, len));
    if (i == NONE) return 0;
    const struct throttle_entry *e = &t->entries[i];
    if (decayed(t, e, now_ms)) return 0;
    uint64_t until = e->last_ms + delay_ms(t, e->count);
    uint64_t now = now_ms > e->last_ms ? now_ms : e->last_ms; /* a clock that stepped back */
    if (now >= until) return 0;
    return (uint32_t)((until - now + 999) / 1000);
}

void throttle_fail(struct throttle *t, const void *key, size_t len, uint64_t now_ms) {
    uint64_t h = hash_of(t, key, len);
    uint32_t i = lookup(t, h);
    struct throttle_entry *e;
    if (i != NONE) {
        e = &t->entries[i];
        list_unlink(t, i);
        if (decayed(t, e, now_ms)) e->count = 0;
    } else {
        if (t->used == t->capacity) evict(t, now_ms);
        i = t->free_head;
        e = &t->entries[i];
        t->free_head = e->chain;
        t->used++;
        e->hash = h;
        e->count = 0;
        uint32_t *bucket = &t->buckets[h & (t->nbuckets - 1)];
        e->chain = *bucket;
        *bucket = i;
    }
    if (e->count < UINT32_MAX) e->count++;
    e->last_ms = now_ms;
    list_push(t, i, e->count >= t->policy.free_failures ? HEAVY : LIGHT);
}

void throttle_success(struct throttle *t, const void *key, size_t len) {
    uint32_t i = lookup(t, hash_of(t, key, len));
    if (i != NONE) remove_entry(t, i);
}
