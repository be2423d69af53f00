/* The first pass of the offsets-layout equality ops compiled for AVX2 (eight
 * 32-bit offsets a vector instead of four): ops_offsets_impl.h calls these when
 * the CPU has AVX2 (lm_hash_uses_avx2), with the same contract as its
 * SUF_len_eq / SUF_pairs_eq.  GCC on x86-64 only (hash_internal.h). */
#include "hash_internal.h"
#include "ops_internal.h"

#if LM_HASH_HAVE_AVX2
#pragma GCC target("avx2")

#define LM_LEN_EQ(NAME, OFF_T, UOFF_T)                                                                        \
  int NAME(const OFF_T *restrict off, uint8_t *restrict out, size_t b0, size_t b1, UOFF_T lim, UOFF_T plen) { \
    UOFF_T bad = 0;                                                                                           \
    for (size_t i = b0; i < b1; i++) {                                                                        \
      const UOFF_T a = (UOFF_T)off[i], z = (UOFF_T)off[i + 1];                                                \
      const UOFF_T ok = (UOFF_T)(a <= z) & (UOFF_T)(z <= lim);                                                \
      bad |= ok ^ 1u;                                                                                         \
      out[i] = (uint8_t)(ok & (UOFF_T)(z - a == plen));                                                       \
    }                                                                                                         \
    return bad != 0;                                                                                          \
  }
LM_LEN_EQ(lm_o32_len_eq_avx2, int32_t, uint32_t)
LM_LEN_EQ(lm_o64_len_eq_avx2, int64_t, uint64_t)

#define LM_PAIRS_EQ(NAME, OFF_T, UOFF_T)                                                                      \
  int NAME(const OFF_T *restrict oa, const OFF_T *restrict ob, uint8_t *restrict out, size_t b0, size_t b1,  \
           UOFF_T lima, UOFF_T limb) {                                                                        \
    UOFF_T bad = 0;                                                                                           \
    for (size_t i = b0; i < b1; i++) {                                                                        \
      const UOFF_T a0 = (UOFF_T)oa[i], a1 = (UOFF_T)oa[i + 1], x0 = (UOFF_T)ob[i], x1 = (UOFF_T)ob[i + 1];   \
      const UOFF_T ok =                                                                                       \
          (UOFF_T)(a0 <= a1) & (UOFF_T)(a1 <= lima) & (UOFF_T)(x0 <= x1) & (UOFF_T)(x1 <= limb);              \
      bad |= ok ^ 1u;                                                                                         \
      out[i] = (uint8_t)(ok & (UOFF_T)(a1 - a0 == x1 - x0));                                                  \
    }                                                                                                         \
    return bad != 0;                                                                                          \
  }
LM_PAIRS_EQ(lm_o32_pairs_eq_avx2, int32_t, uint32_t)
LM_PAIRS_EQ(lm_o64_pairs_eq_avx2, int64_t, uint64_t)
#else
typedef int lm_ops_avx2_unused; /* ISO C forbids an empty translation unit */
#endif
