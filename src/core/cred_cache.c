/* cred_cache: see cred_cache.h. */
#include "core/cred_cache.h"

#include <stdlib.h>
#include <string.h>

#include "common/buf.h"

#define MAX_ENTRIES (1u << 20)

void cred_cache_init(struct cred_cache *cc, uint32_t entries) {
    memset(cc, 0, sizeof *cc);
    if (!entries) return;
    uint32_t n = 1;
    while (n < entries && n < MAX_ENTRIES)
        n <<= 1;
    /* calloc: a large array comes straight from mmap, its pages touched only as slots fill. */
    cc->slots = xcalloc(n, sizeof *cc->slots);
    cc->mask = n - 1;
    randombytes_buf(cc->key, sizeof cc->key);
}

void cred_cache_destroy(struct cred_cache *cc) {
    if (cc->slots) free(cc->slots); /* tags and key hashes only: nothing secret to wipe */
    sodium_memzero(cc, sizeof *cc);
}

/* token's tag, and the slot it picks. */
static struct cred_entry *slot_of(const struct cred_cache *cc, const char *token, size_t len,
                                  uint8_t tag[CRED_TAG_BYTES]) {
    crypto_shorthash_siphashx24(tag, (const unsigned char *)token, len, cc->key);
    uint32_t i;
    memcpy(&i, tag, sizeof i);
    return &cc->slots[i & cc->mask];
}

struct cred_entry *cred_cache_find(struct cred_cache *cc, const char *token, size_t len) {
    if (!cc->slots || len == 0 || len > CRED_TOKEN_MAX) return NULL;
    uint8_t tag[CRED_TAG_BYTES];
    struct cred_entry *e = slot_of(cc, token, len, tag);
    if (!e->user_id || crypto_verify_16(e->tag, tag) != 0) return NULL;
    return e;
}

void cred_cache_put(struct cred_cache *cc, const char *token, size_t len, uint64_t user_id,
                    const uint8_t hash[CRED_KEY_HASH_BYTES], uint64_t gen) {
    if (!cc->slots || len == 0 || len > CRED_TOKEN_MAX || !user_id) return;
    uint8_t tag[CRED_TAG_BYTES];
    struct cred_entry *e = slot_of(cc, token, len, tag);
    e->user_id = user_id;
    e->gen = gen;
    memcpy(e->hash, hash, CRED_KEY_HASH_BYTES);
    memcpy(e->tag, tag, CRED_TAG_BYTES);
}

void cred_cache_drop(struct cred_entry *e) {
    sodium_memzero(e, sizeof *e);
}

bool cred_same(const char *a, const char *b, size_t n) {
    const unsigned char *x = (const unsigned char *)a, *y = (const unsigned char *)b;
    if (n < 16) {
        unsigned char px[16] = {0}, py[16] = {0};
        memcpy(px, x, n);
        memcpy(py, y, n);
        return crypto_verify_16(px, py) == 0;
    }
    int differ = 0;
    size_t i = 0;
    for (; i + 64 <= n; i += 64)
        differ |= crypto_verify_64(x + i, y + i);
    for (; i + 16 <= n; i += 16)
        differ |= crypto_verify_16(x + i, y + i);
    if (i < n) differ |= crypto_verify_16(x + n - 16, y + n - 16);
    return differ == 0;
}
