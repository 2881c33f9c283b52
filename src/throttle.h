/*
 * throttle: failed sign-in throttling, keyed by bytes (a username, or a
 * client address as its 4 or 16 bytes). Use one table per kind of key, so
 * a username can never share an entry with an address of the same bytes.
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
 * nor lengthen chains, and the table holds no usernames. When the table is
 * full a failure still gets its entry (never failing open for the key being
 * added): it evicts a forgotten entry if the least recent one is, else the
 * least recently failed of the keys still under their free failures, else
 * the least recently failed of all. So a flood of new keys evicts itself
 * before it evicts a key that is being throttled.
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

struct throttle {
    struct throttle_policy policy;
    struct throttle_entry *entries; /* capacity of them */
    uint32_t *buckets;              /* nbuckets chain heads */
    uint32_t capacity;
    uint32_t nbuckets; /* a power of two >= capacity */
    uint32_t used;     /* entries in the table */
    uint32_t free_head;
    uint32_t head[2], tail[2];  /* recency lists: [0] under the free failures, [1] over */
    unsigned char hash_key[16]; /* crypto_shorthash_KEYBYTES */
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

#endif
