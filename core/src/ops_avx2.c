/* The first passes of the offsets-layout equality ops compiled for AVX2 (eight
 * 32-bit offsets a vector instead of four) and, for equal, AVX-512 (sixteen):
 * ops_offsets_impl.h calls these when lm_ops_simd_level() says the CPU has them,
 * with the same contract as its SUF_len_eq / SUF_eq_prep.  GCC on x86-64 only
 * (hash_internal.h). */
#include <stdlib.h>

#include "hash_internal.h"
#include "ops_internal.h"

#if LM_HASH_HAVE_AVX2
/* (defined before the target pragma below: it runs before any check, so it is compiled for
 * the baseline CPU; the pragma applies to every function after it)
 * 2: AVX-512 F/BW/VL/DQ, 1: AVX2 (neither LM_NO_AVX512 nor LM_NO_AVX2 set for 2, LM_NO_AVX2
 * not set for 1), 0: neither; read once (a benign race: every thread computes the same value) */
int lm_ops_simd_level(void) {
  static int cached = -1;
  int c = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (c < 0) {
    __builtin_cpu_init();
    c = lm_hash_uses_avx2();
    if (c && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && !lm_env_switch_on("LM_NO_AVX512"))
      c = 2;
    __atomic_store_n(&cached, c, __ATOMIC_RELAXED);
  }
  return c;
}
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

LM_EQ_PREP(lm_o32_eq_prep_avx2, uint32_t)
LM_EQ_PREP(lm_o64_eq_prep_avx2, uint64_t)

/* the same first pass of equal, 16 pairs a step (AVX-512 F/BW/VL) */
#pragma GCC push_options
#pragma GCC target("avx2,avx512f,avx512bw,avx512vl,avx512dq")
LM_EQ_PREP(lm_o32_eq_prep_avx512, uint32_t)
LM_EQ_PREP(lm_o64_eq_prep_avx512, uint64_t)
#pragma GCC pop_options

#else
typedef int lm_ops_avx2_unused; /* ISO C forbids an empty translation unit */
#endif
