/* Internal to ops_offsets.c / ops_avx2.c: the AVX2 copies of the first pass of
 * the offsets-layout equality ops (declared where hash_internal.h says an AVX2
 * copy is built).  Each checks the pairs of [b0, b1) (0 <= a <= z <= lim) and
 * writes out[i] = valid and equal length (to plen, or to the other side's);
 * returns non-zero when some pair is invalid.  Thread-safe (pure). */
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
int lm_o32_pairs_eq_avx2(const int32_t *restrict oa, const int32_t *restrict ob, uint8_t *restrict out, size_t b0,
                         size_t b1, uint32_t lima, uint32_t limb);
int lm_o64_pairs_eq_avx2(const int64_t *restrict oa, const int64_t *restrict ob, uint8_t *restrict out, size_t b0,
                         size_t b1, uint64_t lima, uint64_t limb);
#endif

#endif
