/*
 * test_netaddr: address blocks (parse, lists, contains), client keys (IPv4,
 * IPv6 /64, IPv4-mapped IPv6 as IPv4), and the count table (add, remove,
 * growth, deletion inside probe runs, forgetting at zero).
 */
#include "common/netaddr.h"

#include <arpa/inet.h>

#include "check.h"

static void addr4(const char *s, uint8_t out[16]) {
    memset(out, 0, 16);
    CHECK_EQ_INT(inet_pton(AF_INET, s, out), 1);
}

static void addr6(const char *s, uint8_t out[16]) {
    CHECK_EQ_INT(inet_pton(AF_INET6, s, out), 1);
}

static void test_block_parse(void) {
    struct net_block b;
    CHECK_EQ_INT(net_block_parse("10.0.0.0/8", 10, &b), 0);
    CHECK_EQ_UINT(b.family, 4);
    CHECK_EQ_UINT(b.bits, 8);
    CHECK_EQ_INT(net_block_parse("::1", 3, &b), 0);
    CHECK_EQ_UINT(b.family, 6);
    CHECK_EQ_UINT(b.bits, 128);
    CHECK_EQ_INT(net_block_parse("10.0.0.0/33", 11, &b), -1);
    CHECK_EQ_INT(net_block_parse("10.0.0.0/", 9, &b), -1);
    CHECK_EQ_INT(net_block_parse("nope", 4, &b), -1);
    CHECK_EQ_INT(net_block_parse("", 0, &b), -1);
}

static void test_block_list(void) {
    struct net_block b[2];
    char msg[128];
    CHECK_EQ_INT(net_block_parse_list(" 10.0.0.0/8 , ::1 ", b, 2, msg, sizeof msg), 2);
    CHECK_EQ_INT(net_block_parse_list("", b, 2, msg, sizeof msg), 0);
    CHECK_EQ_INT(net_block_parse_list("1.2.3.4,x", b, 2, msg, sizeof msg), -1);
    CHECK_EQ_STR(msg, "'x' is not an address or CIDR block (at most 2)");
    CHECK_EQ_INT(net_block_parse_list("1.1.1.1,2.2.2.2,3.3.3.3", b, 2, msg, sizeof msg), -1);
}

static void test_block_contains(void) {
    struct net_block b;
    uint8_t a[16];
    CHECK_EQ_INT(net_block_parse("192.168.0.0/20", 14, &b), 0);
    addr4("192.168.15.255", a);
    CHECK(net_block_contains(&b, 4, a));
    addr4("192.168.16.0", a);
    CHECK(!net_block_contains(&b, 4, a));
    addr6("::1", a);
    CHECK(!net_block_contains(&b, 6, a));
}

static void test_key_ipv4(void) {
    uint8_t a[16], k1[NET_KEY_BYTES], k2[NET_KEY_BYTES];
    addr4("10.1.2.3", a);
    net_client_key(4, a, k1);
    addr4("10.1.2.4", a);
    net_client_key(4, a, k2);
    CHECK(memcmp(k1, k2, NET_KEY_BYTES) != 0);
}

static void test_key_ipv6_is_its_64(void) {
    uint8_t a[16], k1[NET_KEY_BYTES], k2[NET_KEY_BYTES];
    addr6("2001:db8:1:2::1", a);
    net_client_key(6, a, k1);
    addr6("2001:db8:1:2:ffff:ffff:ffff:ffff", a);
    net_client_key(6, a, k2);
    CHECK(memcmp(k1, k2, NET_KEY_BYTES) == 0);
    addr6("2001:db8:1:3::1", a);
    net_client_key(6, a, k2);
    CHECK(memcmp(k1, k2, NET_KEY_BYTES) != 0);
}

static void test_key_v4_mapped_is_ipv4(void) {
    uint8_t a[16], k1[NET_KEY_BYTES], k2[NET_KEY_BYTES];
    addr6("::ffff:10.1.2.3", a);
    net_client_key(6, a, k1);
    addr4("10.1.2.3", a);
    net_client_key(4, a, k2);
    CHECK(memcmp(k1, k2, NET_KEY_BYTES) == 0);
    addr6("::ffff:10.1.2.4", a);
    net_client_key(6, a, k2);
    CHECK(memcmp(k1, k2, NET_KEY_BYTES) != 0);
}

static void key_n(uint32_t n, uint8_t k[NET_KEY_BYTES]) {
    uint8_t a[16] = {0};
    memcpy(a, &n, sizeof n);
    net_client_key(4, a, k);
}

static void test_counts_add_remove(void) {
    struct net_counts t;
    uint8_t k[NET_KEY_BYTES];
    net_counts_init(&t);
    key_n(7, k);
    CHECK_EQ_UINT(net_counts_get(&t, k), 0);
    CHECK_EQ_UINT(net_counts_add(&t, k), 1);
    CHECK_EQ_UINT(net_counts_add(&t, k), 2);
    net_counts_remove(&t, k);
    CHECK_EQ_UINT(net_counts_get(&t, k), 1);
    net_counts_remove(&t, k);
    CHECK_EQ_UINT(net_counts_get(&t, k), 0);
    CHECK(t.slots == NULL); /* empty: nothing kept */
    net_counts_destroy(&t);
}

static void test_counts_many_keys(void) {
    struct net_counts t;
    uint8_t k[NET_KEY_BYTES];
    net_counts_init(&t);
    enum { N = 5000 };
    for (uint32_t i = 0; i < N; i++) {
        key_n(i, k);
        for (uint32_t j = 0; j <= i % 3; j++)
            net_counts_add(&t, k);
    }
    CHECK_EQ_UINT(t.used, N);
    /* Remove every other key: the rest keep their counts (probe runs stay intact). */
    for (uint32_t i = 0; i < N; i += 2) {
        key_n(i, k);
        for (uint32_t j = 0; j <= i % 3; j++)
            net_counts_remove(&t, k);
    }
    CHECK_EQ_UINT(t.used, N / 2);
    for (uint32_t i = 0; i < N; i++) {
        key_n(i, k);
        CHECK_EQ_UINT(net_counts_get(&t, k), i % 2 ? i % 3 + 1 : 0);
    }
    net_counts_destroy(&t);
}

static const struct check_case cases[] = {
    CHECK_CASE(test_block_parse),        CHECK_CASE(test_block_list),
    CHECK_CASE(test_block_contains),     CHECK_CASE(test_key_ipv4),
    CHECK_CASE(test_key_ipv6_is_its_64), CHECK_CASE(test_key_v4_mapped_is_ipv4),
    CHECK_CASE(test_counts_add_remove),  CHECK_CASE(test_counts_many_keys),
};

int main(int argc, char **argv) {
    return check_run(argc, argv, cases, CHECK_COUNT(cases));
}
