#include "luminamoon/hash.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

uint64_t lm_hash64(const void *data, size_t len, uint64_t seed) {
  static const uint8_t empty = 0;
  return (uint64_t)XXH3_64bits_withSeed(len ? data : &empty, len, (XXH64_hash_t)seed);
}

lm_hash128_t lm_hash128(const void *data, size_t len, uint64_t seed) {
  static const uint8_t empty = 0;
  XXH128_hash_t h = XXH3_128bits_withSeed(len ? data : &empty, len, (XXH64_hash_t)seed);
  lm_hash128_t r = {h.low64, h.high64};
  return r;
}
