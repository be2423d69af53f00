/* Element-wise operations, gather, compact and byte padding on the offsets
 * layout, for int32 and int64 offsets (ops_offsets_impl.h, included twice). */
#include <stdint.h>
#include <string.h>

#include "luminamoon/hash.h"
#include "luminamoon/string_tensor.h"
#define XXH_INLINE_ALL /* XXH3-64 inlined into hash64's in-order loop (lm_hash64_inline) */
#include <xxhash.h>
#include "hash_internal.h" /* lm_hash64_listed, lm_hash64_inline */
#include "ops_internal.h" /* the AVX2 first passes */

static lm_exec grain(const lm_exec *exec, size_t items) {
  lm_exec e = exec ? *exec : (lm_exec){1, 0};
  if (!e.min_items_per_thread) e.min_items_per_thread = items;
  return e;
}

#define SUF o32
#define OFF_T int32_t
#define UOFF_T uint32_t
#define OFF_MAX INT32_MAX
#include "ops_offsets_impl.h"
#undef SUF
#undef OFF_T
#undef UOFF_T
#undef OFF_MAX

#define SUF o64
#define OFF_T int64_t
#define UOFF_T uint64_t
#define OFF_MAX INT64_MAX
#include "ops_offsets_impl.h"
#undef SUF
#undef OFF_T
#undef UOFF_T
#undef OFF_MAX
