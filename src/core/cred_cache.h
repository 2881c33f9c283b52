/*
 * cred_cache: the server-wide cache of credentials that verified, so a
 * request whose Authorization header verified before, on any connection,
 * skips the full check (base64, BLAKE2b of the key, the user's lookup).
 *
 * Behind the balancer one pooled backend connection carries many clients'
 * requests in turn, so the API's per-connection cache (struct api_conn) misses
 * on nearly every request and each paid the full check: 7,000 of a GET's
 * 13,200 user-space instructions (docs/BENCHMARKS.md, issue 18). This cache
 * is the second level: the API looks here when its connection's own header
 * differs, and fills both after a full check.
 *
 * Entries are keyed on the Basic token (the base64 after "Basic "), not on
 * the whole header: the scheme's letter case and the spaces around the token
 * vary, the token cannot (one encoding per value, common/b64.h), so one
 * credential has one slot however it is written.
 *
 * What an attacker can do with it (docs/SECURITY.md):
 *   - Only credentials that passed the full check are ever stored: a wrong
 *     or made-up header can neither enter nor evict an entry.
 *   - A token is known by its tag, SipHash-2-4 with 128-bit output under a
 *     key drawn at start; the tag also picks the slot, so nobody can aim
 *     tokens at another's slot, and an account has one slot per key.
 *   - No key is kept: the entry holds the tag, not the token, so a rotated
 *     or revoked key does not linger in memory, readable, until its slot is
 *     reused. The tags are compared in constant time (crypto_verify_16).
 *   - An entry holds the user's key hash and the db's users generation at
 *     its check; the caller trusts it again only while no user record
 *     changed, or while the user still has that key hash (so a rotated or
 *     revoked key, or a removed user, stops working at once).
 * Direct-mapped: a new entry replaces its slot's. The memory is one array,
 * 64 bytes a slot, allocated at init and touched as slots fill.
 * Loop thread only.
 */
#ifndef EVENTD_CRED_CACHE_H
#define EVENTD_CRED_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sodium.h>

#define CRED_KEY_HASH_BYTES 32
/* The longest token kept: auth_check decodes at most 340 base64 characters (255 bytes of
 * "name:key"); a longer token never verifies, so it is neither hashed nor kept. */
#define CRED_TOKEN_MAX 340
#define CRED_TAG_BYTES crypto_shorthash_siphashx24_BYTES

struct cred_entry {
    uint64_t user_id;                  /* 0: empty */
    uint64_t gen;                      /* db_users_gen when hash was last the user's */
    uint8_t hash[CRED_KEY_HASH_BYTES]; /* the user's key hash when the token verified */
    uint8_t tag[CRED_TAG_BYTES];       /* the token's keyed SipHash-2-4-128 */
};

/* How the API settled a request's credentials (eventd_auth_checks_total). */
enum cred_how {
    CRED_BY_CONNECTION, /* the connection's own cache */
    CRED_BY_CACHE,      /* this cache */
    CRED_FULL,          /* the full check, whatever its verdict */
    CRED_HOWS
};

struct cred_cache {
    uint64_t stats[CRED_HOWS]; /* requests, by enum cred_how */
    struct cred_entry *slots;  /* NULL: the cache is off */
    uint32_t mask;             /* slots - 1 */
    unsigned char key[crypto_shorthash_siphashx24_KEYBYTES];
};

/* A cache of at least entries slots (a power of two, at most 1 << 20), or off for 0. */
void cred_cache_init(struct cred_cache *cc, uint32_t entries);
void cred_cache_destroy(struct cred_cache *cc);

/* The entry of this Basic token (auth_credentials' slice: the base64 alone), or NULL.
 * Valid until the next cred_cache_put or cred_cache_destroy. */
struct cred_entry *cred_cache_find(struct cred_cache *cc, const char *token, size_t len);

/* Remembers that token verified as user_id, whose key hash was hash at users generation
 * gen. Tokens longer than CRED_TOKEN_MAX are not kept. */
void cred_cache_put(struct cred_cache *cc, const char *token, size_t len, uint64_t user_id,
                    const uint8_t hash[CRED_KEY_HASH_BYTES], uint64_t gen);

/* Forgets e (its user's key changed, or the user is gone). */
void cred_cache_drop(struct cred_entry *e);

/*
 * a and b, n bytes each, are equal; the time taken depends on n only (an
 * Authorization header holds a key: the compare must not stop at the first
 * differing byte; the API's per-connection cache compares headers with it).
 * libsodium's crypto_verify_64, then crypto_verify_16 over 16-byte windows,
 * the last one overlapping: a tenth of sodium_memcmp's byte-at-a-time cost,
 * and a typical header (70 to 80 bytes) in two calls.
 */
bool cred_same(const char *a, const char *b, size_t n);

#endif
