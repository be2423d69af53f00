// csrc/hash64.cu — XXH3-64 of every string, bit-identical to libxxhash's XXH3_64bits_withSeed.
//
// Work split by length (thresholds in luminamoon_cuda.h, to be tuned on the H200):
//   len <= 240            one thread per string (XXH3's short and mid-size paths, serial).
//   240 < len < HUGE_MIN  one group of 8 threads per string, thread l owning accumulator lane l:
//                         each stripe is 8 coalesced words, one per thread; the word's unkeyed
//                         value goes to lane l^1 through one shuffle per block.
//   len >= HUGE_MIN       first, a grid-wide kernel computes the contribution of every full
//                         1024-byte block to the 8 lanes (one warp per 16-block segment, each
//                         thread always on the same lane), into a scratch array; the
//                         contributions do not depend on the accumulators, so this is as parallel
//                         as a memcpy.  Then the string's group of 8 runs the serial chain
//                         acc = scramble(acc + contribution) over its blocks, and finishes the
//                         last partial block, the last stripe and the merge itself.
// tests/core/test_xxh3_port.cpp checks this decomposition on the host against libxxhash.
#include <cuda_runtime.h>

#include "common.cuh"
#include "luminamoon_cuda.h"
#include "xxh3.h"

namespace lmcuda {
namespace {

constexpr int kThreads = 256;
constexpr int kBlocksPerSegment = LM_CUDA_SEGMENT_BYTES / LM_XXH3_BLOCK_LEN;  // 16

static_assert(LM_CUDA_SEGMENT_BYTES % LM_XXH3_BLOCK_LEN == 0, "segments hold whole blocks");

// The secret for long inputs (derived from the seed) into shared memory; call from all threads.
__device__ __forceinline__ void load_secret(uint8_t *ssec, uint64_t seed, bool derive) {
  const uint8_t *def = lm_xxh3_default_secret_ptr();
  for (int w = threadIdx.x; w < LM_XXH3_SECRET_SIZE / 8; w += blockDim.x) {
    uint64_t v = lm_xxh3_sec64(def + 8 * w);
    if (derive) v = (w & 1) ? v - seed : v + seed;
    reinterpret_cast<uint64_t *>(ssec)[w] = v;
  }
  __syncthreads();
}

// Strings up to 240 bytes; also the segment count of every string for the grid-wide pass.
template <typename OffT>
__global__ void hash_short_kernel(Strs<OffT> s, uint64_t seed, uint64_t *out, int64_t *seg_count) {
  __shared__ __align__(16) uint8_t ssec[LM_XXH3_SECRET_SIZE];
  load_secret(ssec, 0, false);
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < s.n; i += stride) {
    int64_t st, len;
    string_at(s, i, st, len);
    if (len <= LM_XXH3_MIDSIZE_MAX) out[i] = lm_xxh3_64_short(s.data + st, (size_t)len, ssec, seed);
    if (seg_count) {
      int64_t segs = 0;
      if (len >= LM_CUDA_HASH_HUGE_MIN) {
        const int64_t nblocks = (len - 1) / LM_XXH3_BLOCK_LEN;
        segs = (nblocks + kBlocksPerSegment - 1) / kBlocksPerSegment;
      }
      seg_count[i] = segs;
    }
  }
}

// Grid-wide: contributions of the full blocks of huge strings, one warp per segment.
template <typename OffT>
__global__ void hash_blocks_kernel(Strs<OffT> s, uint64_t seed, const int64_t *incl, const int64_t *count,
                                   uint64_t *scratch, int64_t scratch_slots) {
  __shared__ __align__(16) uint8_t ssec[LM_XXH3_SECRET_SIZE];
  load_secret(ssec, seed, seed != 0);
  const int t = threadIdx.x & 31;
  const int lane = t & 7;
  uint64_t key[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) key[k] = lm_xxh3_sec64(ssec + 8 * ((t >> 3) + 4 * k) + 8 * lane);
  const int64_t total = incl[s.n - 1];
  const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
  for (int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; w < total; w += warps) {
    const size_t i = upper_bound_i64(incl, s.n, w);
    if (i >= s.n) break;
    const int64_t excl = incl[i] - count[i];
    const int64_t seg = w - excl;
    int64_t st, len;
    string_at(s, i, st, len);
    const int64_t nblocks = len > 0 ? (len - 1) / LM_XXH3_BLOCK_LEN : 0;
    const int64_t b0 = seg * kBlocksPerSegment;
    const int64_t b1 = min(nblocks, b0 + kBlocksPerSegment);
#pragma unroll 4
    for (int64_t b = b0; b < b1; ++b) {
      const uint8_t *blk = s.data + st + b * LM_XXH3_BLOCK_LEN;
      uint64_t own = 0, dsum = 0;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const uint64_t d = lm_xxh3_rd64(blk + 8 * (t + 32 * k));
        own += lm_xxh3_lane_product(d, key[k]);
        dsum += d;
      }
      own += __shfl_xor_sync(0xffffffffu, own, 8);
      own += __shfl_xor_sync(0xffffffffu, own, 16);
      dsum += __shfl_xor_sync(0xffffffffu, dsum, 8);
      dsum += __shfl_xor_sync(0xffffffffu, dsum, 16);
      const uint64_t contrib = own + __shfl_xor_sync(0xffffffffu, dsum, 1);
      const int64_t slot = excl * kBlocksPerSegment + b;
      if (t < 8 && slot < scratch_slots) scratch[slot * 8 + t] = contrib;
    }
  }
}

// Strings above 240 bytes: 8 threads per string.
template <typename OffT>
__global__ void hash_long_kernel(Strs<OffT> s, uint64_t seed, const int64_t *incl, const int64_t *count,
                                 const uint64_t *scratch, int64_t scratch_slots, uint64_t *out) {
  __shared__ __align__(16) uint8_t ssec[LM_XXH3_SECRET_SIZE];
  load_secret(ssec, seed, seed != 0);
  const int lane = threadIdx.x & 7;
  const unsigned gmask = 0xffu << (threadIdx.x & 24);
  const uint64_t scramble_key = lm_xxh3_sec64(ssec + LM_XXH3_SCRAMBLE_SECRET_OFFSET + 8 * lane);
  const uint64_t last_key = lm_xxh3_sec64(ssec + LM_XXH3_LASTSTRIPE_SECRET_OFFSET + 8 * lane);
  const size_t groups = ((size_t)gridDim.x * blockDim.x) / 8;
  for (size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 8; i < s.n; i += groups) {
    int64_t st, len;
    string_at(s, i, st, len);
    if (len <= LM_XXH3_MIDSIZE_MAX) continue;  // group-uniform
    const uint8_t *in = s.data + st;
    uint64_t acc = lm_xxh3_init_acc(lane);
    const int64_t nblocks = (len - 1) / LM_XXH3_BLOCK_LEN;
    if (count && count[i] > 0) {  // huge: the block contributions are in scratch
      const int64_t base = (incl[i] - count[i]) * kBlocksPerSegment;
      int64_t b = 0;
      for (; b + 8 <= nblocks; b += 8) {
        uint64_t c[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) c[k] = (base + b + k < scratch_slots) ? scratch[(base + b + k) * 8 + lane] : 0;
#pragma unroll
        for (int k = 0; k < 8; ++k) acc = lm_xxh3_scramble_lane(acc + c[k], scramble_key);
      }
      for (; b < nblocks; ++b) {
        const uint64_t c = (base + b < scratch_slots) ? scratch[(base + b) * 8 + lane] : 0;
        acc = lm_xxh3_scramble_lane(acc + c, scramble_key);
      }
    } else {
      for (int64_t b = 0; b < nblocks; ++b) {
        const uint8_t *blk = in + b * LM_XXH3_BLOCK_LEN;
        uint64_t own = 0, dsum = 0;
#pragma unroll
        for (int k = 0; k < LM_XXH3_STRIPES_PER_BLOCK; ++k) {
          const uint64_t d = lm_xxh3_rd64(blk + k * LM_XXH3_STRIPE_LEN + 8 * lane);
          own += lm_xxh3_lane_product(d, lm_xxh3_sec64(ssec + 8 * k + 8 * lane));
          dsum += d;
        }
        acc += own + __shfl_xor_sync(gmask, dsum, 1, 8);
        acc = lm_xxh3_scramble_lane(acc, scramble_key);
      }
    }
    // The last, partial block (whole stripes), then the last 64 bytes.
    const uint8_t *tail = in + nblocks * LM_XXH3_BLOCK_LEN;
    const int nstripes = (int)(((len - 1) - nblocks * LM_XXH3_BLOCK_LEN) / LM_XXH3_STRIPE_LEN);
    uint64_t own = 0, dsum = 0;
    for (int k = 0; k < nstripes; ++k) {
      const uint64_t d = lm_xxh3_rd64(tail + k * LM_XXH3_STRIPE_LEN + 8 * lane);
      own += lm_xxh3_lane_product(d, lm_xxh3_sec64(ssec + 8 * k + 8 * lane));
      dsum += d;
    }
    {
      const uint64_t d = lm_xxh3_rd64(in + len - LM_XXH3_STRIPE_LEN + 8 * lane);
      own += lm_xxh3_lane_product(d, last_key);
      dsum += d;
    }
    acc += own + __shfl_xor_sync(gmask, dsum, 1, 8);
    // Merge: lane 2j folds (acc[2j], acc[2j+1]); the four folds are summed.
    const uint64_t partner = __shfl_xor_sync(gmask, acc, 1, 8);
    uint64_t v = 0;
    if ((lane & 1) == 0) {
      const uint8_t *ms = ssec + LM_XXH3_MERGE_SECRET_OFFSET + 8 * lane;  // 16 * (lane / 2)
      v = lm_xxh3_mul128_fold64(acc ^ lm_xxh3_sec64(ms), partner ^ lm_xxh3_sec64(ms + 8));
    }
    v += __shfl_xor_sync(gmask, v, 2, 8);
    v += __shfl_xor_sync(gmask, v, 4, 8);
    if (lane == 0) out[i] = lm_xxh3_avalanche((uint64_t)len * LM_XXH_P64_1 + v);
  }
}

// Scratch slots (of 8 lanes) that any valid set of offsets can need: see the workspace size.
inline int64_t scratch_slots_for(size_t data_len) {
  return (int64_t)(data_len / LM_XXH3_BLOCK_LEN) + kBlocksPerSegment * (int64_t)(data_len / LM_CUDA_HASH_HUGE_MIN + 1);
}

}  // namespace
}  // namespace lmcuda

using namespace lmcuda;

extern "C" size_t lm_cuda_hash64_workspace_size(lm_cuda_strings s) {
  if (s.n == 0 || s.data_len < LM_CUDA_HASH_HUGE_MIN) return 0;  // no string can be huge
  return segments_workspace(s.n) + align_up((size_t)scratch_slots_for(s.data_len) * 8 * sizeof(uint64_t));
}

extern "C" cudaError_t lm_cuda_hash64(lm_cuda_strings s, uint64_t seed, void *workspace, size_t workspace_bytes,
                                      uint64_t *out, cudaStream_t stream) {
  if (s.n == 0) return cudaSuccess;
  if (!s.offsets || !out) return cudaErrorInvalidValue;
  const bool huge_possible = s.data_len >= LM_CUDA_HASH_HUGE_MIN;
  Segments sg{nullptr, nullptr, nullptr, 0};
  uint64_t *scratch = nullptr;
  int64_t slots = 0;
  if (huge_possible) {
    if (!workspace || workspace_bytes < lm_cuda_hash64_workspace_size(s)) return cudaErrorInvalidValue;
    Carver c{static_cast<uint8_t *>(workspace), 0, workspace_bytes};
    if (!carve_segments(c, s.n, sg)) return cudaErrorInvalidValue;
    slots = scratch_slots_for(s.data_len);
    scratch = c.take<uint64_t>((size_t)slots * 8);
    if (!scratch) return cudaErrorInvalidValue;
  }
  cudaError_t e = cudaSuccess;
  LM_CUDA_DISPATCH_OFFSETS(s.offset_bytes, {
    const Strs<OffT> ts = typed<OffT>(s);
    hash_short_kernel<OffT><<<blocks_for(s.n, kThreads), kThreads, 0, stream>>>(ts, seed, out, sg.count);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    if (huge_possible) {
      if ((e = scan_i64(sg.tmp, sg.tmp_bytes, sg.count, sg.incl, s.n, stream)) != cudaSuccess) return e;
      hash_blocks_kernel<OffT><<<persistent_blocks(hash_blocks_kernel<OffT>, kThreads), kThreads, 0, stream>>>(ts, seed, sg.incl, sg.count,
                                                                                   scratch, slots);
      if ((e = cudaGetLastError()) != cudaSuccess) return e;
    }
    hash_long_kernel<OffT><<<blocks_for(s.n * 8, kThreads), kThreads, 0, stream>>>(ts, seed, sg.incl, sg.count, scratch,
                                                                                  slots, out);
  });
  return cudaGetLastError();
}
