/*
 * throttle: the table behind the site's throttling, and the server-wide
 * token bucket (see throttle.h).
 *
 * Entries live in one array: chained from a power-of-two bucket array by
 * index (the hash is keyed, so chains stay short whatever keys arrive), and
 * linked into the recency list of their level, most recent failure at the
 * head. All entries of a level wait equally long after their latest failure
 * (the capped level: the cap), so a list's tail is also the entry of that
 * level whose wait ends first. Every operation is O(1) expected; eviction
 * looks at one tail per level (at most THROTTLE_LISTS), never scans the table.
 */
#include "common/throttle.h"

#include <errno.h>
#include <sodium.h>

#include "common/buf.h"

#define NONE UINT32_MAX
#define MAX_CAPACITY (1u << 24)

enum { LIGHT = 0 }; /* the level of the keys under their free failures */

struct throttle_entry {
    uint64_t hash;
    uint64_t last_ms;    /* latest failure, ms */
    uint32_t count;      /* failures that count; 0 marks a free entry */
    uint32_t chain;      /* next in the bucket chain, or in the free list */
    uint32_t prev, next; /* recency list neighbours (prev is more recent) */
    uint8_t list;        /* level: LIGHT, or 1 + doublings of the delay (capped) */
};

#define SLOTS_PER_BUCKET 4

_Static_assert(sizeof(((struct throttle *)0)->hash_key) == crypto_shorthash_KEYBYTES,
               "hash_key holds a crypto_shorthash key");

const struct throttle_policy throttle_default_policy = {
    .free_failures = 5,
    .base_delay_ms = 1000,
    .max_delay_ms = 15 * 60 * 1000,
    .window_ms = 60 * 60 * 1000,
};

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
    t->nslots = t->nbuckets * SLOTS_PER_BUCKET;
    t->slots = xcalloc(t->nslots, sizeof *t->slots);
    for (uint32_t i = 0; i < t->nbuckets; i++)
        t->buckets[i] = NONE;
    for (uint32_t i = 0; i < t->capacity; i++)
        t->entries[i].chain = i + 1 < t->capacity ? i + 1 : NONE;
    t->free_head = 0;
    t->used = 0;
    /* Level 1 + d waits base << d; the first d whose delay is the cap is the last level. */
    uint32_t d = 0;
    while (d < 63 && delay_ms(t, policy->free_failures + d) < policy->max_delay_ms)
        d++;
    t->nlists = 2 + d;
    for (uint32_t i = 0; i < THROTTLE_LISTS; i++)
        t->head[i] = t->tail[i] = NONE;
    crypto_shorthash_keygen(t->hash_key);
    return 0;
}

void throttle_destroy(struct throttle *t) {
    free(t->entries);
    free(t->buckets);
    free(t->slots);
    t->slots = NULL;
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

static bool decayed_at(const struct throttle *t, uint64_t last_ms, uint64_t now) {
    return now > last_ms && now - last_ms >= t->policy.window_ms;
}

static bool decayed(const struct throttle *t, const struct throttle_entry *e, uint64_t now) {
    return decayed_at(t, e->last_ms, now);
}

/* The slot of a key's hash: bits other than the bucket's. */
static struct throttle_slot *slot_of(const struct throttle *t, uint64_t h) {
    return &t->slots[(uint32_t)(h >> 32) & (t->nslots - 1)];
}

/* The failures that count for hash h at now and the latest one's time: its entry's, or for a
 * key without one, its slot's. Returns the count (0: none). */
static uint32_t state(const struct throttle *t, uint64_t h, uint64_t now, uint64_t *last_ms) {
    uint32_t i = lookup(t, h);
    uint32_t count = 0;
    uint64_t last = 0;
    if (i != NONE) {
        count = t->entries[i].count;
        last = t->entries[i].last_ms;
    } else {
        count = slot_of(t, h)->count;
        last = slot_of(t, h)->last_ms;
    }
    if (count && decayed_at(t, last, now)) count = 0;
    *last_ms = last;
    return count;
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

/* The recency list of an entry with count failures. */
static uint8_t level_of(const struct throttle *t, uint32_t count) {
    if (count < t->policy.free_failures) return LIGHT;
    uint32_t d = count - t->policy.free_failures;
    return (uint8_t)(d < t->nlists - 2 ? d + 1 : t->nlists - 1);
}

/* Frees one entry of a full table, by the order documented in throttle.h. */
static void evict(struct throttle *t, uint64_t now) {
    for (uint32_t l = 0; l < t->nlists; l++) {
        uint32_t i = t->tail[l];
        if (i != NONE && decayed(t, &t->entries[i], now)) {
            remove_entry(t, i);
            return;
        }
    }
    if (t->tail[LIGHT] != NONE) {
        remove_entry(t, t->tail[LIGHT]);
        return;
    }
    /* Every entry is throttled: the wait that ends first (on a tie the lower level) goes, its
     * count kept in its slot, so that the key is still throttled without an entry. */
    uint32_t best = NONE;
    uint64_t best_end = 0;
    for (uint32_t l = 1; l < t->nlists; l++) {
        uint32_t i = t->tail[l];
        if (i == NONE) continue;
        const struct throttle_entry *e = &t->entries[i];
        uint64_t end = e->last_ms + delay_ms(t, e->count);
        if (best == NONE || end < best_end) {
            best = i;
            best_end = end;
        }
    }
    const struct throttle_entry *e = &t->entries[best];
    struct throttle_slot *s = slot_of(t, e->hash);
    if (!s->count || decayed_at(t, s->last_ms, now)) *s = (struct throttle_slot){0, 0};
    if (e->count > s->count) s->count = e->count;
    if (e->last_ms > s->last_ms) s->last_ms = e->last_ms;
    remove_entry(t, best);
}

uint32_t throttle_failures(const struct throttle *t, const void *key, size_t len, uint64_t now_ms) {
    uint64_t last;
    return state(t, hash_of(t, key, len), now_ms, &last);
}

uint32_t throttle_check(const struct throttle *t, const void *key, size_t len, uint64_t now_ms) {
    uint64_t last;
    uint32_t count = state(t, hash_of(t, key, len), now_ms, &last);
    if (!count) return 0;
    uint64_t until = last + delay_ms(t, count);
    uint64_t now = now_ms > last ? now_ms : last; /* a clock that stepped back */
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
        /* A key evicted while throttled starts again from its slot's count. */
        const struct throttle_slot *s = slot_of(t, h);
        e->count = s->count && !decayed_at(t, s->last_ms, now_ms) ? s->count : 0;
        uint32_t *bucket = &t->buckets[h & (t->nbuckets - 1)];
        e->chain = *bucket;
        *bucket = i;
    }
    if (e->count < UINT32_MAX) e->count++;
    e->last_ms = now_ms;
    list_push(t, i, level_of(t, e->count));
}

void throttle_success(struct throttle *t, const void *key, size_t len) {
    uint32_t i = lookup(t, hash_of(t, key, len));
    if (i != NONE) remove_entry(t, i);
}

void throttle_rate_init(struct throttle_rate *r, uint32_t per_minute, uint32_t burst) {
    if (per_minute == 0) per_minute = 1;
    if (burst == 0) burst = 1;
    r->interval_us = 60ull * 1000 * 1000 / per_minute;
    if (r->interval_us == 0) r->interval_us = 1;
    r->tolerance_us = (uint64_t)(burst - 1) * r->interval_us;
    r->tat_us = 0;
}

uint32_t throttle_rate_check(const struct throttle_rate *r, uint64_t now_ms) {
    uint64_t now = now_ms * 1000;
    /* A token is there when the bucket is no more than burst - 1 tokens short. */
    if (r->tat_us <= now + r->tolerance_us) return 0;
    uint64_t wait = r->tat_us - now - r->tolerance_us;
    return (uint32_t)((wait + 999999) / 1000000);
}

void throttle_rate_take(struct throttle_rate *r, uint64_t now_ms) {
    uint64_t now = now_ms * 1000;
    r->tat_us = (r->tat_us > now ? r->tat_us : now) + r->interval_us;
}
