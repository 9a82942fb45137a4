/*
 * io/crc32c.h - CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum over the
 * shard header, the frame table and every frame's bytes (docs/shard-format.md).
 *
 * sl_crc32c(0, "123456789", 9) == 0xE3069283. Chaining: sl_crc32c(sl_crc32c(0, a), b) equals
 * the CRC of a followed by b. On x86-64 CPUs with SSE4.2 the crc32 instruction is used; the
 * portable slicing-by-8 table path gives identical results elsewhere.
 */
#ifndef SL_IO_CRC32C_H
#define SL_IO_CRC32C_H

#include <stddef.h>
#include <stdint.h>

uint32_t sl_crc32c(uint32_t crc, const void *data, size_t n);
/* The table-driven path only (tests compare it with the hardware path). */
uint32_t sl_crc32c_sw(uint32_t crc, const void *data, size_t n);

#endif
