/* csprng: see csprng.h. */
#include "common/csprng.h"

#include <stdbool.h>
#include <string.h>

#include <sodium.h>

#define BLOCK 512 /* bytes of stream per ChaCha20 call: 32 for the next key, 480 handed out */
#define KEY crypto_stream_chacha20_KEYBYTES

static _Thread_local struct {
    unsigned char block[BLOCK]; /* [BLOCK - left, BLOCK) not handed out yet; the rest zero */
    unsigned char key[KEY];     /* the next block's key */
    size_t left;                /* bytes of block still to hand out */
    size_t since_seed;          /* bytes of stream made with keys since the last seed */
    uint64_t seeds;
    bool seeded;
} g;

static void refill(void) {
    if (!g.seeded || g.since_seed >= CSPRNG_RESEED_BYTES) {
        randombytes_buf(g.key, sizeof g.key);
        g.since_seed = 0;
        g.seeded = true;
        g.seeds++;
    }
    /* Each key makes one block and is then replaced, so one fixed nonce is safe. */
    static const unsigned char nonce[crypto_stream_chacha20_NONCEBYTES];
    crypto_stream_chacha20(g.block, sizeof g.block, nonce, g.key);
    memcpy(g.key, g.block, KEY);
    sodium_memzero(g.block, KEY);
    g.left = BLOCK - KEY;
    g.since_seed += BLOCK;
}

void csprng_bytes(void *out, size_t len) {
    unsigned char *o = out;
    while (len) {
        if (!g.left) refill();
        size_t n = len < g.left ? len : g.left;
        unsigned char *from = g.block + BLOCK - g.left;
        memcpy(o, from, n);
        sodium_memzero(from, n);
        g.left -= n;
        o += n;
        len -= n;
    }
}

void csprng_forget(void) {
    sodium_memzero(g.block, sizeof g.block);
    sodium_memzero(g.key, sizeof g.key);
    g.left = 0;
    g.since_seed = 0;
    g.seeded = false;
}

uint64_t csprng_seeds(void) {
    return g.seeds;
}
