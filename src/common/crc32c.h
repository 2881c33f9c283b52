/*
 * crc32c: CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) as used by
 * the log frames. The x86 SSE4.2 crc32 instruction is used when the CPU has
 * it, a slicing-by-8 table otherwise; both give the same results.
 *
 * crc starts at 0 and chains: crc32c(crc32c(0, a), b) == crc32c(0, a || b).
 */
#ifndef EVENTD_CRC32C_H
#define EVENTD_CRC32C_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The fastest implementation this CPU supports. */
uint32_t crc32c(uint32_t crc, const void *ptr, size_t len);

/* The table-driven implementation, on every CPU. */
uint32_t crc32c_sw(uint32_t crc, const void *ptr, size_t len);

/* True when crc32c_hw may be called (x86-64 with SSE4.2). */
bool crc32c_hw_supported(void);
/* The SSE4.2 implementation; only call it when crc32c_hw_supported(). */
uint32_t crc32c_hw(uint32_t crc, const void *ptr, size_t len);

#endif
