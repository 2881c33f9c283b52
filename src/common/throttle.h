/*
 * throttle: attempts counted per key, and a wait once a key has had its free
 * ones: failed sign-ins per username and per client address, registrations
 * per client address. Keys are bytes (a username, or a client address as
 * its family and 16 bytes). Use one table per kind of key, so a username can
 * never share an entry with an address of the same bytes.
 *
 * Policy: the first free_failures failures of a key cost nothing; after
 * them each attempt must wait base_delay_ms after the latest failure,
 * doubling with each further failure up to max_delay_ms. A key whose latest
 * failure is window_ms old is forgotten (its next failure is free again),
 * and a success forgets it at once (meant for the username key; an address
 * is left to decay, so one good account does not launder a scan).
 *
 * Storage: a fixed table of capacity entries allocated once by
 * throttle_init; nothing is allocated afterwards. Entries hold a 64-bit
 * SipHash (libsodium crypto_shorthash) of the key under a random key drawn
 * at init, never the key itself, so an attacker can neither aim collisions
 * nor lengthen chains, and the table holds no usernames.
 *
 * Eviction: when the table is full a failure still gets its entry (never
 * failing open for the key being added). It evicts, in this order:
 *   1. a forgotten entry (its latest failure window_ms old), if any;
 *   2. else the least recently failed of the keys still under their free
 *      failures (unthrottled), so a flood of new keys evicts itself and
 *      never resets a throttled key while an unthrottled one exists;
 *   3. else, every entry being throttled, the one whose wait ends soonest
 *      (ties: the fewer failures, then the least recent), and its count is
 *      not lost: it is folded into a slot of a second array, 4 slots per
 *      bucket, indexed by other bits of the same keyed hash, which keeps
 *      the most failures and the latest failure of the keys folded in. A
 *      key without an entry is counted by its slot, and an entry made for
 *      it starts from there. So no flood can reset a throttled key: the
 *      price is that a key sharing a slot with an evicted throttled key is
 *      throttled with it (over-throttling, never under), for at most a
 *      window. Attackers cannot aim at a slot (the hash is keyed), so to
 *      throttle a share f of the keys not in the table they must evict
 *      about slots * ln(1/(1-f)) throttled entries, each of free_failures
 *      failures, within a window.
 * The alternatives were rejected: evicting outright lets capacity *
 * free_failures failures flush any key (issue 17); refusing new keys (or
 * treating them as throttled) lets the same failures lock everyone out.
 * Entries sit on one recency list per level (unthrottled, then one per
 * doubling of the wait until the cap), so 3 looks at one tail per level.
 *
 * Time is passed in (milliseconds of a monotonic clock), so the module has
 * no clock and the tests are deterministic. Not thread-safe: one loop.
 */
#ifndef EVENTD_THROTTLE_H
#define EVENTD_THROTTLE_H

#include <stddef.h>
#include <stdint.h>

struct throttle_policy {
    uint32_t free_failures; /* failures before any delay */
    uint64_t base_delay_ms; /* delay after the last free failure, ms (>= 1) */
    uint64_t max_delay_ms;  /* cap of the doubling delay, ms (>= base_delay_ms) */
    uint64_t window_ms;     /* a key is forgotten this long after its latest failure, ms
                               (> max_delay_ms, so a throttled key cannot decay in its wait) */
};

/* 5 free failures, then 1 s doubling to 15 min; forgotten after 1 h. */
extern const struct throttle_policy throttle_default_policy;

struct throttle_entry;

/* The count kept for keys evicted while throttled (see "Eviction" above); public for tests. */
struct throttle_slot {
    uint64_t last_ms; /* latest failure of the keys folded in, ms */
    uint32_t count;   /* the most failures among them; 0: empty */
};

/* Recency lists: the unthrottled level, 63 doublings of the delay, the capped delay. */
#define THROTTLE_LISTS 65

struct throttle {
    struct throttle_policy policy;
    struct throttle_entry *entries; /* capacity of them */
    uint32_t *buckets;              /* nbuckets chain heads */
    struct throttle_slot *slots;    /* nslots counts of evicted throttled keys */
    uint32_t nslots;                /* 4 * nbuckets */
    uint32_t capacity;
    uint32_t nbuckets; /* a power of two >= capacity */
    uint32_t used;     /* entries in the table */
    uint32_t free_head;
    uint32_t nlists; /* levels in use: 0 under the free failures, then one per delay */
    uint32_t head[THROTTLE_LISTS], tail[THROTTLE_LISTS]; /* recency lists by level */
    unsigned char hash_key[16];                          /* crypto_shorthash_KEYBYTES */
};

/*
 * Allocates the table of capacity (1..2^24) entries and draws the hash key.
 * Keeps a copy of *policy. Returns 0, or -EINVAL for a bad capacity or
 * policy, or -EIO when libsodium cannot initialize.
 */
int throttle_init(struct throttle *t, size_t capacity, const struct throttle_policy *policy);
void throttle_destroy(struct throttle *t);

/* 0 when the key may try now, else the seconds to wait (rounded up, >= 1:
 * the Retry-After value). Changes nothing. */
uint32_t throttle_check(const struct throttle *t, const void *key, size_t len, uint64_t now_ms);

/* Records a failed attempt of the key at now_ms. */
void throttle_fail(struct throttle *t, const void *key, size_t len, uint64_t now_ms);

/* Forgets the key (a successful sign-in). */
void throttle_success(struct throttle *t, const void *key, size_t len);

/* The key's failures that still count at now_ms (0 when unknown or
 * forgotten): for tests and logs. */
uint32_t throttle_failures(const struct throttle *t, const void *key, size_t len, uint64_t now_ms);

/*
 * throttle_rate: a server-wide rate as a token bucket of burst tokens that
 * refills at per_minute tokens a minute (kept as GCRA: one "theoretical
 * arrival time", no timer). Time is passed in as for the table.
 */
struct throttle_rate {
    uint64_t interval_us;  /* refill time of one token, us */
    uint64_t tolerance_us; /* (burst - 1) tokens' refill time, us */
    uint64_t tat_us;       /* when the bucket would be full again were it never drained, us */
};

/* per_minute and burst >= 1; the bucket starts full. */
void throttle_rate_init(struct throttle_rate *r, uint32_t per_minute, uint32_t burst);
/* 0 when a token is there at now_ms, else the seconds until one is (>= 1). Changes nothing. */
uint32_t throttle_rate_check(const struct throttle_rate *r, uint64_t now_ms);
/* Takes a token at now_ms (call after a check that gave 0). */
void throttle_rate_take(struct throttle_rate *r, uint64_t now_ms);

#endif
