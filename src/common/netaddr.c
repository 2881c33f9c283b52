/*
 * netaddr: see netaddr.h.
 */
#include "common/netaddr.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"

int net_block_parse(const char *s, size_t len, struct net_block *b) {
    char tmp[64];
    if (len == 0 || len >= sizeof tmp) return -1;
    memcpy(tmp, s, len);
    tmp[len] = 0;
    char *slash = strchr(tmp, '/');
    long bits = -1;
    if (slash) {
        *slash = 0;
        char *end;
        bits = strtol(slash + 1, &end, 10);
        if (*end || end == slash + 1) return -1;
    }
    memset(b, 0, sizeof *b);
    if (inet_pton(AF_INET, tmp, b->addr) == 1) {
        b->family = 4;
        if (bits < 0) bits = 32;
        if (bits > 32) return -1;
    } else if (inet_pton(AF_INET6, tmp, b->addr) == 1) {
        b->family = 6;
        if (bits < 0) bits = 128;
        if (bits > 128) return -1;
    } else {
        return -1;
    }
    b->bits = (uint8_t)bits;
    return 0;
}

int net_block_parse_list(const char *list, struct net_block *out, uint32_t max, char *msg,
                         size_t msg_len) {
    uint32_t n = 0;
    const char *p = list ? list : "";
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        const char *next = p + len + (comma ? 1 : 0);
        while (len && *p == ' ')
            p++, len--;
        while (len && p[len - 1] == ' ')
            len--;
        if (len) {
            if (n == max || net_block_parse(p, len, &out[n]) < 0) {
                snprintf(msg, msg_len, "'%.*s' is not an address or CIDR block (at most %u)",
                         (int)len, p, max);
                return -1;
            }
            n++;
        }
        p = next;
    }
    return (int)n;
}

bool net_block_contains(const struct net_block *b, uint8_t family, const uint8_t *addr) {
    if (b->family != family) return false;
    unsigned full = b->bits / 8, rest = b->bits % 8;
    if (memcmp(b->addr, addr, full) != 0) return false;
    if (!rest) return true;
    uint8_t mask = (uint8_t)(0xff << (8 - rest));
    return (b->addr[full] & mask) == (addr[full] & mask);
}

void net_client_key(uint8_t family, const uint8_t *addr, uint8_t key[NET_KEY_BYTES]) {
    static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    memset(key, 0, NET_KEY_BYTES);
    if (family == 6 && memcmp(addr, v4mapped, sizeof v4mapped) == 0) {
        family = 4;
        addr += 12;
    }
    key[0] = family;
    memcpy(key + 1, addr, family == 4 ? 4 : 8);
}

/* ---- counts ---- */

struct net_count_slot {
    uint32_t count; /* 0: empty */
    uint8_t key[NET_KEY_BYTES];
};

#define COUNTS_MIN 64 /* slots of a table's first allocation */

void net_counts_init(struct net_counts *t) {
    memset(t, 0, sizeof *t);
}

void net_counts_destroy(struct net_counts *t) {
    free(t->slots);
    t->slots = NULL;
}

/* FNV-1a over the key. */
static uint32_t hash(const uint8_t *key) {
    uint32_t h = 2166136261u;
    for (int i = 0; i < NET_KEY_BYTES; i++)
        h = (h ^ key[i]) * 16777619u;
    return h;
}

/* The slot holding key, or the empty slot where it would go. */
static struct net_count_slot *find(const struct net_counts *t, const uint8_t *key) {
    for (uint32_t i = hash(key) & t->mask;; i = (i + 1) & t->mask) {
        struct net_count_slot *s = &t->slots[i];
        if (!s->count || memcmp(s->key, key, NET_KEY_BYTES) == 0) return s;
    }
}

static void resize(struct net_counts *t, uint32_t nslots) {
    struct net_count_slot *old = t->slots;
    uint32_t oldn = old ? t->mask + 1 : 0;
    t->slots = xcalloc(nslots, sizeof *t->slots);
    t->mask = nslots - 1;
    for (uint32_t i = 0; i < oldn; i++)
        if (old[i].count) *find(t, old[i].key) = old[i];
    free(old);
}

uint32_t net_counts_add(struct net_counts *t, const uint8_t key[NET_KEY_BYTES]) {
    /* At most half full, so probes stay short and an empty slot always exists. */
    if (!t->slots || 2 * (t->used + 1) > t->mask + 1)
        resize(t, t->slots ? 2 * (t->mask + 1) : COUNTS_MIN);
    struct net_count_slot *s = find(t, key);
    if (!s->count) {
        memcpy(s->key, key, NET_KEY_BYTES);
        t->used++;
    }
    return ++s->count;
}

void net_counts_remove(struct net_counts *t, const uint8_t key[NET_KEY_BYTES]) {
    if (!t->slots) return;
    struct net_count_slot *s = find(t, key);
    if (!s->count || --s->count) return;
    t->used--;
    /* Backward-shift deletion: move later entries of the probe run into the hole. */
    uint32_t hole = (uint32_t)(s - t->slots);
    for (uint32_t i = (hole + 1) & t->mask; t->slots[i].count; i = (i + 1) & t->mask) {
        uint32_t home = hash(t->slots[i].key) & t->mask;
        /* Entry i may move to the hole if its home is not in (hole, i]. */
        if (((i - home) & t->mask) >= ((i - hole) & t->mask)) {
            t->slots[hole] = t->slots[i];
            t->slots[i].count = 0;
            hole = i;
        }
    }
    if (t->used == 0) net_counts_destroy(t);
}

uint32_t net_counts_get(const struct net_counts *t, const uint8_t key[NET_KEY_BYTES]) {
    return t->slots ? find(t, key)->count : 0;
}
