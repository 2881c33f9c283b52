/* test_crc32c: known CRC-32C vectors, chaining, and the SSE4.2 and table paths agreeing. */
#include <stdint.h>

#include "check.h"
#include "common/crc32c.h"

static void test_vectors(void) {
    uint8_t buf[32];
    CHECK_EQ_UINT(crc32c(0, "123456789", 9), 0xE3069283u);
    CHECK_EQ_UINT(crc32c_sw(0, "123456789", 9), 0xE3069283u);
    CHECK_EQ_UINT(crc32c(0, "", 0), 0);
    /* RFC 3720 (iSCSI) appendix B.4 */
    memset(buf, 0, sizeof buf);
    CHECK_EQ_UINT(crc32c_sw(0, buf, 32), 0x8A9136AAu);
    memset(buf, 0xff, sizeof buf);
    CHECK_EQ_UINT(crc32c_sw(0, buf, 32), 0x62A8AB43u);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)i;
    CHECK_EQ_UINT(crc32c_sw(0, buf, 32), 0x46DD794Eu);
    for (int i = 0; i < 32; i++)
        buf[i] = (uint8_t)(31 - i);
    CHECK_EQ_UINT(crc32c_sw(0, buf, 32), 0x113FDB5Cu);
    CHECK_EQ_UINT(crc32c(0, buf, 32), 0x113FDB5Cu);
}

static uint64_t rng = 0x9E3779B97F4A7C15u;
static uint8_t rand8(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint8_t)rng;
}

static void test_paths_agree(void) {
    static uint8_t data[4096 + 8];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = rand8();
    if (!crc32c_hw_supported()) {
        fprintf(stderr, "   (no SSE4.2 here: only the table path is checked)\n");
        return;
    }
    /* Every length up to 1 KiB at every alignment, then a few long ones. */
    for (size_t off = 0; off < 8; off++) {
        for (size_t len = 0; len <= 1024; len++) {
            uint32_t seed = (uint32_t)(len * 2654435761u);
            CHECK_EQ_UINT(crc32c_hw(seed, data + off, len), crc32c_sw(seed, data + off, len));
        }
        CHECK_EQ_UINT(crc32c_hw(0, data + off, 4096), crc32c_sw(0, data + off, 4096));
    }
    CHECK_EQ_UINT(crc32c_hw(0, "123456789", 9), 0xE3069283u);
}

static void test_chaining(void) {
    uint8_t data[1000];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = rand8();
    uint32_t whole = crc32c(0, data, sizeof data);
    for (size_t cut = 0; cut <= sizeof data; cut += 37) {
        CHECK_EQ_UINT(crc32c(crc32c(0, data, cut), data + cut, sizeof data - cut), whole);
        CHECK_EQ_UINT(crc32c_sw(crc32c_sw(0, data, cut), data + cut, sizeof data - cut), whole);
    }
    /* A flipped bit changes the checksum. */
    data[500] ^= 4;
    CHECK(crc32c(0, data, sizeof data) != whole);
}

static const struct check_case cases[] = {
    CHECK_CASE(test_vectors),
    CHECK_CASE(test_paths_agree),
    CHECK_CASE(test_chaining),
};

int main(int argc, char **argv) {
    return check_run(argc, argv, cases, CHECK_COUNT(cases));
}
