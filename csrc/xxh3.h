/* csrc/xxh3.h — XXH3-64 written once for the host (plain C++) and the GPU (nvcc).
 *
 * An independent implementation of the XXH3 64-bit hash from its public specification
 * (xxHash's doc/xxhash_spec.md), bit-identical to libxxhash's XXH3_64bits_withSeed for every
 * length class: 0, 1-3, 4-8, 9-16, 17-128, 129-240 and > 240 (the stripe/block loop, the
 * scramble after each block, the last partial block and the last stripe, the merge of the
 * accumulators).  tests/core/test_xxh3_port.cpp proves the identity against libxxhash on the
 * host; the CUDA kernels (csrc/hash64.cu) are built from the same functions, so the GPU
 * produces the same bits as the CPU without a GPU being needed to check the arithmetic.
 *
 * Every function is `static inline LM_HD`: __host__ __device__ under nvcc, plain inline C++
 * otherwise.  No global state; all functions are pure and thread-safe.
 *
 * Memory access: `lm_xxh3_rd64` / `lm_xxh3_rd32` read little-endian words at any address.  On
 * the host they use memcpy.  On the device they load the aligned word(s) holding the bytes
 * and shift (the GPU faults on unaligned wide loads); every aligned word loaded holds at least
 * one byte of the requested range, so a read never leaves the 8-byte-aligned span around the
 * string.  Secrets are read with `lm_xxh3_sec64`, which composes bytes (secrets live in shared
 * memory on the GPU and are read at unaligned offsets such as 3, 11, 119 and 121).
 */
#ifndef LUMINAMOON_CSRC_XXH3_H
#define LUMINAMOON_CSRC_XXH3_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define LM_HD __host__ __device__
#else
#define LM_HD
#endif

/* Sizes fixed by the algorithm. */
#define LM_XXH3_SECRET_SIZE 192
#define LM_XXH3_STRIPE_LEN 64
#define LM_XXH3_SECRET_CONSUME_RATE 8
#define LM_XXH3_STRIPES_PER_BLOCK ((LM_XXH3_SECRET_SIZE - LM_XXH3_STRIPE_LEN) / LM_XXH3_SECRET_CONSUME_RATE) /* 16 */
#define LM_XXH3_BLOCK_LEN (LM_XXH3_STRIPE_LEN * LM_XXH3_STRIPES_PER_BLOCK)                                 /* 1024 */
#define LM_XXH3_MIDSIZE_MAX 240
#define LM_XXH3_LASTSTRIPE_SECRET_OFFSET (LM_XXH3_SECRET_SIZE - LM_XXH3_STRIPE_LEN - 7) /* 121 */
#define LM_XXH3_MERGE_SECRET_OFFSET 11
#define LM_XXH3_SCRAMBLE_SECRET_OFFSET (LM_XXH3_SECRET_SIZE - LM_XXH3_STRIPE_LEN) /* 128 */

#define LM_XXH_P32_1 0x9E3779B1u
#define LM_XXH_P32_2 0x85EBCA77u
#define LM_XXH_P32_3 0xC2B2AE3Du
#define LM_XXH_P64_1 0x9E3779B185EBCA87ull
#define LM_XXH_P64_2 0xC2B2AE3D27D4EB4Full
#define LM_XXH_P64_3 0x165667B19E3779F9ull
#define LM_XXH_P64_4 0x85EBCA77C2B2AE63ull
#define LM_XXH_P64_5 0x27D4EB2F165667C5ull
#define LM_XXH_MX1 0x165667919E3779F9ull
#define LM_XXH_MX2 0x9FB21C651E98DF25ull

/* The default 192-byte secret of the specification (the test checks it against libxxhash). */
#define LM_XXH3_DEFAULT_SECRET_BYTES \
    0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c, \
    0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f, \
    0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21, \
    0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c, \
    0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3, \
    0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8, \
    0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d, \
    0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64, \
    0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb, \
    0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e, \
    0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce, \
    0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e

static const uint8_t lm_xxh3_default_secret[LM_XXH3_SECRET_SIZE] = {LM_XXH3_DEFAULT_SECRET_BYTES};
#ifdef __CUDACC__
/* The device copy (constant memory); kernels copy it into shared memory before use. */
static __constant__ const uint8_t lm_xxh3_default_secret_dev[LM_XXH3_SECRET_SIZE] = {LM_XXH3_DEFAULT_SECRET_BYTES};
#endif

/* The default secret in the current address space. */
static inline LM_HD const uint8_t *lm_xxh3_default_secret_ptr(void) {
#ifdef __CUDA_ARCH__
  return lm_xxh3_default_secret_dev;
#else
  return lm_xxh3_default_secret;
#endif
}

/* ------------------------------------------------------------------ primitives */

static inline LM_HD uint64_t lm_xxh3_rotl64(uint64_t x, unsigned r) { return (x << r) | (x >> (64 - r)); }

static inline LM_HD uint32_t lm_xxh3_swap32(uint32_t x) {
  return ((x << 24) & 0xff000000u) | ((x << 8) & 0x00ff0000u) | ((x >> 8) & 0x0000ff00u) | ((x >> 24) & 0xffu);
}

static inline LM_HD uint64_t lm_xxh3_swap64(uint64_t x) {
  return ((uint64_t)lm_xxh3_swap32((uint32_t)x) << 32) | (uint64_t)lm_xxh3_swap32((uint32_t)(x >> 32));
}

/* (a * b) as 128 bits, low half xor high half. */
static inline LM_HD uint64_t lm_xxh3_mul128_fold64(uint64_t a, uint64_t b) {
#ifdef __CUDA_ARCH__
  return (a * b) ^ __umul64hi(a, b);
#else
  __extension__ typedef unsigned __int128 lm_u128;
  lm_u128 p = (lm_u128)a * (lm_u128)b;
  return (uint64_t)p ^ (uint64_t)(p >> 64);
#endif
}

/* Little-endian 64-bit read of 8 bytes at any address of the input. */
static inline LM_HD uint64_t lm_xxh3_rd64(const uint8_t *p) {
#ifdef __CUDA_ARCH__
  uintptr_t a = (uintptr_t)p;
  const uint64_t *w = (const uint64_t *)(a & ~(uintptr_t)7);
  unsigned sh = (unsigned)(a & 7u) * 8u;
  uint64_t lo = __ldg(w);
  if (sh == 0) return lo;
  uint64_t hi = __ldg(w + 1);
  return (lo >> sh) | (hi << (64u - sh));
#else
  uint64_t v;
  memcpy(&v, p, 8);
  return v; /* little-endian hosts only (x86-64, aarch64) */
#endif
}

/* Little-endian 32-bit read of 4 bytes at any address of the input. */
static inline LM_HD uint32_t lm_xxh3_rd32(const uint8_t *p) {
#ifdef __CUDA_ARCH__
  uintptr_t a = (uintptr_t)p;
  const uint32_t *w = (const uint32_t *)(a & ~(uintptr_t)3);
  unsigned sh = (unsigned)(a & 3u) * 8u;
  uint32_t lo = __ldg(w);
  if (sh == 0) return lo;
  uint32_t hi = __ldg(w + 1);
  return (lo >> sh) | (hi << (32u - sh));
#else
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
#endif
}

/* Little-endian 64-bit read from a secret (any offset; secrets may live in shared memory). */
static inline LM_HD uint64_t lm_xxh3_sec64(const uint8_t *s) {
#ifdef __CUDA_ARCH__
  if (((uintptr_t)s & 7u) == 0) return *(const uint64_t *)s;
  uint64_t v = 0;
#pragma unroll
  for (int i = 7; i >= 0; --i) v = (v << 8) | s[i];
  return v;
#else
  uint64_t v;
  memcpy(&v, s, 8);
  return v;
#endif
}

static inline LM_HD uint32_t lm_xxh3_sec32(const uint8_t *s) {
  return (uint32_t)s[0] | ((uint32_t)s[1] << 8) | ((uint32_t)s[2] << 16) | ((uint32_t)s[3] << 24);
}

/* XXH64's final mix, used by the 0..3-byte paths. */
static inline LM_HD uint64_t lm_xxh64_avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= LM_XXH_P64_2;
  h ^= h >> 29;
  h *= LM_XXH_P64_3;
  h ^= h >> 32;
  return h;
}

static inline LM_HD uint64_t lm_xxh3_avalanche(uint64_t h) {
  h ^= h >> 37;
  h *= LM_XXH_MX1;
  h ^= h >> 32;
  return h;
}

static inline LM_HD uint64_t lm_xxh3_rrmxmx(uint64_t h, uint64_t len) {
  h ^= lm_xxh3_rotl64(h, 49) ^ lm_xxh3_rotl64(h, 24);
  h *= LM_XXH_MX2;
  h ^= (h >> 35) + len;
  h *= LM_XXH_MX2;
  h ^= h >> 28;
  return h;
}

/* 16 input bytes against 16 secret bytes. */
static inline LM_HD uint64_t lm_xxh3_mix16(const uint8_t *in, const uint8_t *sec, uint64_t seed) {
  uint64_t lo = lm_xxh3_rd64(in);
  uint64_t hi = lm_xxh3_rd64(in + 8);
  return lm_xxh3_mul128_fold64(lo ^ (lm_xxh3_sec64(sec) + seed), hi ^ (lm_xxh3_sec64(sec + 8) - seed));
}

/* ---------------------------------------------------------------- short inputs */
/* `sec` is the default secret (len <= 240 always uses it, the seed enters arithmetically). */

static inline LM_HD uint64_t lm_xxh3_len_0(const uint8_t *sec, uint64_t seed) {
  return lm_xxh64_avalanche(seed ^ (lm_xxh3_sec64(sec + 56) ^ lm_xxh3_sec64(sec + 64)));
}

static inline LM_HD uint64_t lm_xxh3_len_1to3(const uint8_t *in, size_t len, const uint8_t *sec, uint64_t seed) {
  uint32_t c1 = in[0], c2 = in[len >> 1], c3 = in[len - 1];
  uint32_t combined = (c1 << 16) | (c2 << 24) | c3 | ((uint32_t)len << 8);
  uint64_t bitflip = (uint64_t)(lm_xxh3_sec32(sec) ^ lm_xxh3_sec32(sec + 4)) + seed;
  return lm_xxh64_avalanche((uint64_t)combined ^ bitflip);
}

static inline LM_HD uint64_t lm_xxh3_len_4to8(const uint8_t *in, size_t len, const uint8_t *sec, uint64_t seed) {
  seed ^= (uint64_t)lm_xxh3_swap32((uint32_t)seed) << 32;
  uint32_t first = lm_xxh3_rd32(in);
  uint32_t last = lm_xxh3_rd32(in + len - 4);
  uint64_t bitflip = (lm_xxh3_sec64(sec + 8) ^ lm_xxh3_sec64(sec + 16)) - seed;
  uint64_t v = (uint64_t)last + ((uint64_t)first << 32);
  return lm_xxh3_rrmxmx(v ^ bitflip, (uint64_t)len);
}

static inline LM_HD uint64_t lm_xxh3_len_9to16(const uint8_t *in, size_t len, const uint8_t *sec, uint64_t seed) {
  uint64_t flip1 = (lm_xxh3_sec64(sec + 24) ^ lm_xxh3_sec64(sec + 32)) + seed;
  uint64_t flip2 = (lm_xxh3_sec64(sec + 40) ^ lm_xxh3_sec64(sec + 48)) - seed;
  uint64_t lo = lm_xxh3_rd64(in) ^ flip1;
  uint64_t hi = lm_xxh3_rd64(in + len - 8) ^ flip2;
  uint64_t acc = (uint64_t)len + lm_xxh3_swap64(lo) + hi + lm_xxh3_mul128_fold64(lo, hi);
  return lm_xxh3_avalanche(acc);
}

static inline LM_HD uint64_t lm_xxh3_len_0to16(const uint8_t *in, size_t len, const uint8_t *sec, uint64_t seed) {
  if (len > 8) return lm_xxh3_len_9to16(in, len, sec, seed);
  if (len >= 4) return lm_xxh3_len_4to8(in, len, sec, seed);
  if (len > 0) return lm_xxh3_len_1to3(in, len, sec, seed);
  return lm_xxh3_len_0(sec, seed);
}

static inline LM_HD uint64_t lm_xxh3_len_17to128(const uint8_t *in, size_t len, const uint8_t *sec, uint64_t seed) {
  uint64_t acc = (uint64_t)len * LM_XXH_P64_1;
  if (len > 32) {
    if (len > 64) {
      if (len > 96) {
        acc += lm_xxh3_mix16(in + 48, sec + 96, seed);
        acc += lm_xxh3_mix16(in + len - 64, sec + 112, seed);
      }
      acc += lm_xxh3_mix16(in + 32, sec + 64, seed);
      acc += lm_xxh3_mix16(in + len - 48, sec + 80, seed);
    }
    acc += lm_xxh3_mix16(in + 16, sec + 32, seed);
    acc += lm_xxh3_mix16(in + len - 32, sec + 48, seed);
  }
  acc += lm_xxh3_mix16(in, sec, seed);
  acc += lm_xxh3_mix16(in + len - 16, sec + 16, seed);
  return lm_xxh3_avalanche(acc);
}

static inline LM_HD uint64_t lm_xxh3_len_129to240(const uint8_t *in, size_t len, const uint8_t *sec, uint64_t seed) {
  uint64_t acc = (uint64_t)len * LM_XXH_P64_1;
  for (int i = 0; i < 8; ++i) acc += lm_xxh3_mix16(in + 16 * i, sec + 16 * i, seed);
  acc = lm_xxh3_avalanche(acc);
  int rounds = (int)(len / 16);
  for (int i = 8; i < rounds; ++i) acc += lm_xxh3_mix16(in + 16 * i, sec + 16 * (i - 8) + 3, seed);
  /* the last 16 bytes, against the secret ending 17 bytes before its minimum size (136) */
  acc += lm_xxh3_mix16(in + len - 16, sec + 136 - 17, seed);
  return lm_xxh3_avalanche(acc);
}

/* ------------------------------------------------------------- long inputs (> 240) */

/* The secret used for long inputs: the default one when seed == 0, otherwise the default
 * secret with the seed added to each even 64-bit word and subtracted from each odd one. */
static inline LM_HD void lm_xxh3_derive_secret(uint64_t seed, uint8_t out[LM_XXH3_SECRET_SIZE]) {
  for (int i = 0; i < LM_XXH3_SECRET_SIZE / 16; ++i) {
    uint64_t lo = lm_xxh3_sec64(lm_xxh3_default_secret_ptr() + 16 * i) + seed;
    uint64_t hi = lm_xxh3_sec64(lm_xxh3_default_secret_ptr() + 16 * i + 8) - seed;
    for (int b = 0; b < 8; ++b) {
      out[16 * i + b] = (uint8_t)(lo >> (8 * b));
      out[16 * i + 8 + b] = (uint8_t)(hi >> (8 * b));
    }
  }
}

/* Initial accumulator of lane i (0..7). */
static inline LM_HD uint64_t lm_xxh3_init_acc(int i) {
  switch (i) {
    case 0: return LM_XXH_P32_3;
    case 1: return LM_XXH_P64_1;
    case 2: return LM_XXH_P64_2;
    case 3: return LM_XXH_P64_3;
    case 4: return LM_XXH_P64_4;
    case 5: return LM_XXH_P32_2;
    case 6: return LM_XXH_P64_5;
    default: return LM_XXH_P32_1;
  }
}

/* The contribution of one input word to its own lane: (lo32 * hi32) of data ^ key.
 * The word itself goes, unkeyed, to the neighbour lane i ^ 1. */
static inline LM_HD uint64_t lm_xxh3_lane_product(uint64_t data, uint64_t key) {
  uint64_t k = data ^ key;
  return (uint64_t)(uint32_t)k * (k >> 32);
}

/* The scramble of one lane after each full block. */
static inline LM_HD uint64_t lm_xxh3_scramble_lane(uint64_t acc, uint64_t key) {
  acc ^= acc >> 47;
  acc ^= key;
  acc *= LM_XXH_P32_1;
  return acc;
}

/* One 64-byte stripe into the 8 accumulators. */
static inline LM_HD void lm_xxh3_accumulate_512(uint64_t acc[8], const uint8_t *in, const uint8_t *sec) {
  for (int i = 0; i < 8; ++i) {
    uint64_t d = lm_xxh3_rd64(in + 8 * i);
    acc[i ^ 1] += d;
    acc[i] += lm_xxh3_lane_product(d, lm_xxh3_sec64(sec + 8 * i));
  }
}

/* Final merge of the 8 accumulators. */
static inline LM_HD uint64_t lm_xxh3_merge_accs(const uint64_t acc[8], const uint8_t *sec, uint64_t len) {
  uint64_t r = len * LM_XXH_P64_1;
  for (int i = 0; i < 4; ++i) {
    r += lm_xxh3_mul128_fold64(acc[2 * i] ^ lm_xxh3_sec64(sec + LM_XXH3_MERGE_SECRET_OFFSET + 16 * i),
                               acc[2 * i + 1] ^ lm_xxh3_sec64(sec + LM_XXH3_MERGE_SECRET_OFFSET + 16 * i + 8));
  }
  return lm_xxh3_avalanche(r);
}

/* Long input (len > 240) with an already derived secret (see lm_xxh3_derive_secret). */
static inline LM_HD uint64_t lm_xxh3_hash_long(const uint8_t *in, size_t len, const uint8_t *sec) {
  uint64_t acc[8];
  for (int i = 0; i < 8; ++i) acc[i] = lm_xxh3_init_acc(i);
  size_t nblocks = (len - 1) / LM_XXH3_BLOCK_LEN;
  for (size_t b = 0; b < nblocks; ++b) {
    const uint8_t *blk = in + b * LM_XXH3_BLOCK_LEN;
    for (int s = 0; s < LM_XXH3_STRIPES_PER_BLOCK; ++s)
      lm_xxh3_accumulate_512(acc, blk + s * LM_XXH3_STRIPE_LEN, sec + s * LM_XXH3_SECRET_CONSUME_RATE);
    for (int i = 0; i < 8; ++i)
      acc[i] = lm_xxh3_scramble_lane(acc[i], lm_xxh3_sec64(sec + LM_XXH3_SCRAMBLE_SECRET_OFFSET + 8 * i));
  }
  /* the last, partial block: whole stripes only, then the last 64 bytes of the input */
  size_t nstripes = ((len - 1) - nblocks * LM_XXH3_BLOCK_LEN) / LM_XXH3_STRIPE_LEN;
  const uint8_t *tail = in + nblocks * LM_XXH3_BLOCK_LEN;
  for (size_t s = 0; s < nstripes; ++s)
    lm_xxh3_accumulate_512(acc, tail + s * LM_XXH3_STRIPE_LEN, sec + s * LM_XXH3_SECRET_CONSUME_RATE);
  lm_xxh3_accumulate_512(acc, in + len - LM_XXH3_STRIPE_LEN, sec + LM_XXH3_LASTSTRIPE_SECRET_OFFSET);
  return lm_xxh3_merge_accs(acc, sec, (uint64_t)len);
}

/* XXH3-64 of a short or mid-size input (len <= 240); `sec` = the default secret. */
static inline LM_HD uint64_t lm_xxh3_64_short(const uint8_t *in, size_t len, const uint8_t *sec, uint64_t seed) {
  if (len <= 16) return lm_xxh3_len_0to16(in, len, sec, seed);
  if (len <= 128) return lm_xxh3_len_17to128(in, len, sec, seed);
  return lm_xxh3_len_129to240(in, len, sec, seed);
}

/* XXH3-64 of any input: XXH3_64bits_withSeed(in, len, seed).  `in` may be NULL when len == 0.
 * Host use, and serial device use; the kernels split long inputs across threads instead. */
static inline LM_HD uint64_t lm_xxh3_64(const uint8_t *in, size_t len, uint64_t seed) {
  if (len <= LM_XXH3_MIDSIZE_MAX) return lm_xxh3_64_short(in, len, lm_xxh3_default_secret_ptr(), seed);
  if (seed == 0) return lm_xxh3_hash_long(in, len, lm_xxh3_default_secret_ptr());
  uint8_t sec[LM_XXH3_SECRET_SIZE];
  lm_xxh3_derive_secret(seed, sec);
  return lm_xxh3_hash_long(in, len, sec);
}

#endif
