/* luminamoon/crc32c.h — CRC32C (Castagnoli, reflected polynomial 0x82F63B78).
 *
 * The checksum of iSCSI, ext4, LevelDB/RocksDB and SSE4.2's crc32 instruction:
 * initial value 0xFFFFFFFF, reflected input and output, final XOR 0xFFFFFFFF.
 * Check value: lm_crc32c("123456789", 9) == 0xE3069283.
 *
 * On x86-64 CPUs with SSE4.2 the hardware instruction is used (detected at run
 * time); elsewhere a portable slicing-by-8 table implementation.  Both give the
 * same values bit for bit.
 *
 * Thread-safety: all functions are pure and thread-safe (no mutable state).
 */
#ifndef LUMINAMOON_CRC32C_H
#define LUMINAMOON_CRC32C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CRC32C of len bytes at data (data may be NULL when len == 0).  Cannot fail. */
uint32_t lm_crc32c(const void *data, size_t len);

/* Incremental form: given crc = lm_crc32c(A, la), returns lm_crc32c(A || B, la + lb)
 * for B = (data, len).  Start a running checksum with crc = 0 (the CRC of the empty
 * string).  data may be NULL when len == 0.  Cannot fail. */
uint32_t lm_crc32c_extend(uint32_t crc, const void *data, size_t len);

/* Same values through the portable table path only (never the hardware path);
 * exposed so tests can compare both implementations.  Cannot fail. */
uint32_t lm_crc32c_extend_portable(uint32_t crc, const void *data, size_t len);

#ifdef __cplusplus
}
#endif
#endif
