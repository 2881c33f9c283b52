/*
 * crc32c: see crc32c.h.
 *
 * The tables and the choice of implementation are made once by a
 * constructor before main, so calls from any thread need no locking.
 */
#include "common/crc32c.h"

#include <string.h>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

#define POLY 0x82F63B78u

static uint32_t table[8][256];
static bool hw;

__attribute__((constructor)) static void init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ POLY : c >> 1;
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        for (int k = 1; k < 8; k++)
            table[k][i] = (table[k - 1][i] >> 8) ^ table[0][table[k - 1][i] & 0xff];
    }
#if defined(__x86_64__)
    __builtin_cpu_init();
    hw = __builtin_cpu_supports("sse4.2");
#endif
}

static inline uint32_t load_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint32_t crc32c_sw(uint32_t crc, const void *ptr, size_t len) {
    const uint8_t *p = ptr;
    uint32_t c = ~crc;
    while (len >= 8) {
        /* Slicing-by-8: eight table lookups per 8 bytes instead of one per byte. */
        uint32_t lo = load_le32(p) ^ c, hi = load_le32(p + 4);
        c = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^ table[5][(lo >> 16) & 0xff] ^
            table[4][lo >> 24] ^ table[3][hi & 0xff] ^ table[2][(hi >> 8) & 0xff] ^
            table[1][(hi >> 16) & 0xff] ^ table[0][hi >> 24];
        p += 8;
        len -= 8;
    }
    while (len--)
        c = table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return ~c;
}

bool crc32c_hw_supported(void) {
    return hw;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc32c_hw(uint32_t crc, const void *ptr, size_t len) {
    const uint8_t *p = ptr;
    uint64_t c = ~crc;
    while (len >= 8) {
        uint64_t v;
        memcpy(&v, p, 8); /* unaligned load; x86 is little-endian like the format */
        c = _mm_crc32_u64(c, v);
        p += 8;
        len -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (len--)
        c32 = _mm_crc32_u8(c32, *p++);
    return ~c32;
}
#else
uint32_t crc32c_hw(uint32_t crc, const void *ptr, size_t len) {
    return crc32c_sw(crc, ptr, len);
}
#endif

uint32_t crc32c(uint32_t crc, const void *ptr, size_t len) {
    return hw ? crc32c_hw(crc, ptr, len) : crc32c_sw(crc, ptr, len);
}
