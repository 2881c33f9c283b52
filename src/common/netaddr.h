/*
 * netaddr: client addresses as the limits see them.
 *
 *   - address blocks (CIDR), for --trusted-proxies;
 *   - the key a client is counted and throttled under: its IPv4 address, or
 *     the /64 of its IPv6 address (one subscriber's allocation: a client
 *     with a /64 has 2^64 addresses, so counting them one by one limits
 *     nothing); an IPv4-mapped IPv6 address (::ffff:a.b.c.d, what a
 *     dual-stack listener sees of an IPv4 client) is its IPv4 address;
 *   - a table of counts by key (open connections per client), sized to what
 *     is in it: it grows as keys come and never holds more entries than
 *     keys with a count above zero.
 *
 * Addresses are in network order: family 4 with 4 bytes, family 6 with 16.
 */
#ifndef EVENTD_NETADDR_H
#define EVENTD_NETADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* An address block, e.g. 10.0.0.0/8 or ::1/128. */
struct net_block {
    uint8_t family; /* 4 or 6 */
    uint8_t bits;   /* prefix length */
    uint8_t addr[16];
};

/* "10.0.0.0/8", "::1", "192.168.1.7/32" (s need not be NUL-terminated) -> b; 0 or -1. */
int net_block_parse(const char *s, size_t len, struct net_block *b);
/*
 * Parses a comma-separated list of blocks (spaces around entries allowed)
 * into out[0..max). Returns the number parsed, or -1 after writing the bad
 * entry (or "too many") to msg.
 */
int net_block_parse_list(const char *list, struct net_block *out, uint32_t max, char *msg,
                         size_t msg_len);
/* Whether the address (family 4 or 6) is inside b. */
bool net_block_contains(const struct net_block *b, uint8_t family, const uint8_t *addr);

#define NET_KEY_BYTES 9 /* family, then 4 bytes of IPv4 or 8 bytes of an IPv6 /64 */

/* The key a client at (family, addr) is counted under; family 4 or 6. */
void net_client_key(uint8_t family, const uint8_t *addr, uint8_t key[NET_KEY_BYTES]);

/* Counts by client key (open addressing, linear probing, backward-shift deletion). */
struct net_counts {
    struct net_count_slot *slots; /* mask + 1 of them, or NULL while empty */
    uint32_t mask;
    uint32_t used; /* keys with a count above zero */
};

void net_counts_init(struct net_counts *t);
void net_counts_destroy(struct net_counts *t);
/* Adds one to key's count; returns the new count. */
uint32_t net_counts_add(struct net_counts *t, const uint8_t key[NET_KEY_BYTES]);
/* Takes one from key's count (which must be above zero); at zero the key is forgotten. */
void net_counts_remove(struct net_counts *t, const uint8_t key[NET_KEY_BYTES]);
/* key's count (0 if absent). */
uint32_t net_counts_get(const struct net_counts *t, const uint8_t key[NET_KEY_BYTES]);

#endif
