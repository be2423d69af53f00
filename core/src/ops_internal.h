/* Internal to ops_offsets.c / ops_avx2.c (and the tests): the AVX2 / AVX-512
 * copies of the first passes of the offsets-layout equality ops (declared where
 * hash_internal.h says an AVX2 copy is built).  lm_oXX_len_eq_avx2 checks the
 * pairs of [b0, b1) (0 <= a <= z <= lim) and writes out[i] = valid and of length
 * plen; returns non-zero when some pair is invalid.  The eq_prep copies follow
 * LM_EQ_PREP below.  All thread-safe (pure). */
#ifndef LUMINAMOON_OPS_INTERNAL_H
#define LUMINAMOON_OPS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "hash_internal.h"

#if LM_HASH_HAVE_AVX2
int lm_o32_len_eq_avx2(const int32_t *restrict off, uint8_t *restrict out, size_t b0, size_t b1, uint32_t lim,
                       uint32_t plen);
int lm_o64_len_eq_avx2(const int64_t *restrict off, uint8_t *restrict out, size_t b0, size_t b1, uint64_t lim,
                       uint64_t plen);
int lm_o32_eq_prep_avx2(const uint32_t *restrict ca, const uint32_t *restrict cb, size_t m, uint32_t *restrict w,
                        uint8_t *restrict lg);
int lm_o64_eq_prep_avx2(const uint64_t *restrict ca, const uint64_t *restrict cb, size_t m, uint32_t *restrict w,
                        uint8_t *restrict lg);
int lm_o32_eq_prep_avx512(const uint32_t *restrict ca, const uint32_t *restrict cb, size_t m, uint32_t *restrict w,
                          uint8_t *restrict lg);
int lm_o64_eq_prep_avx512(const uint64_t *restrict ca, const uint64_t *restrict cb, size_t m, uint32_t *restrict w,
                          uint8_t *restrict lg);
/* 2 when the CPU has AVX-512 F/BW/VL/DQ and neither LM_NO_AVX512 nor LM_NO_AVX2 is set,
 * 1 with AVX2 (LM_NO_AVX2 not set), else 0; read once.  Thread-safe. */
int lm_ops_simd_level(void);
#endif

/* The first pass of equal over one block's private copies of both sides' offsets
 * ca[0..m], cb[0..m] (ops_offsets_impl.h): for each pair k, w[k] = the bits of a
 * 16-byte compare's "differs" mask (lm_off_ne16: bit j for byte j, bits 16..31
 * always set) that must be clear for the pair to be equal as far as 16 bytes
 * go: the low min(len, 16) bits when the lengths are equal, all 32 when not;
 * lg[k] bit 0 = equal lengths, bit 1 = equal lengths over 16 bytes (the rest to
 * compare later).  Returns non-zero when an offset decreases (ca or cb).
 * Branch-free, so the compiler vectorises it (8 pairs a step in the AVX2 copy,
 * 16 in the AVX-512 one). */
#define LM_EQ_PREP(NAME, UOFF_T)                                                                                  \
  int NAME(const UOFF_T *restrict ca, const UOFF_T *restrict cb, size_t m, uint32_t *restrict w,                  \
           uint8_t *restrict lg) {                                                                                \
    UOFF_T down = 0;                                                                                              \
    for (size_t k = 0; k < m; k++) {                                                                              \
      const UOFF_T la = ca[k + 1] - ca[k], lb = cb[k + 1] - cb[k];                                                \
      down |= (UOFF_T)(ca[k + 1] < ca[k]) | (UOFF_T)(cb[k + 1] < cb[k]);                                          \
      const uint32_t lm = la >= 16 ? 0xFFFFu : ((uint32_t)1 << (uint32_t)(la & 15)) - 1u;                         \
      w[k] = la == lb ? lm : 0xFFFFFFFFu;                                                                         \
      lg[k] = (uint8_t)((la == lb) | (((la == lb) & (la > 16)) << 1));                                            \
    }                                                                                                             \
    return down != 0;                                                                                             \
  }

#endif
