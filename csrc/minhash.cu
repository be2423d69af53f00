// csrc/minhash.cu — MinHash signatures from shingle hashes (torch.ops.luminamoon.minhash on CUDA).
//
// out[d, j] = min over the shingles h of document d of  ((h * a[j] + b[j]) mod 2^64) mod (2^61 - 1)
// (masked to 32 bits for precision 32), UINT64_MAX for a document without shingles: bit-identical
// with the CPU kernel (core/src/minhash.c, lm_minhash_from_hashes).
//
// Work split (balanced whatever the document lengths): the shingle array is cut into tiles of
// LM_CUDA_MINHASH_TILE shingles, one tile per block iteration (grid-stride).  A block loads its tile
// into shared memory, finds the document of the tile's first shingle by a binary search in the
// (sorted) offsets, and each thread owns hash functions j = threadIdx.x, + blockDim.x, ...: it walks
// the tile in order, keeping the running minimum of the current document, and publishes it with
// atomicMin when the document ends inside the tile or at the tile's end.  A document spread over
// several tiles (or blocks) is combined by the atomics; the output starts as UINT64_MAX
// (lm_cuda_minhash fills it first).  Offsets are clamped into [0, m] (memory safety for bad
// offsets; lm_cuda_minhash_validate reports them).
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "luminamoon_cuda.h"

namespace {

constexpr int kMinhashThreads = 128;
constexpr uint64_t kP61 = (uint64_t(1) << 61) - 1;

__device__ __forceinline__ uint64_t perm61(uint64_t h, uint64_t a, uint64_t b, uint64_t mask) {
  uint64_t v = h * a + b;                  // numpy's uint64 wrap-around
  uint64_t r = (v & kP61) + (v >> 61);     // in [0, P + 7), congruent to v
  uint64_t r2 = r - kP61;                  // wraps to a huge value when r < P
  return (r2 < r ? r2 : r) & mask;
}

__global__ void minhash_fill_kernel(uint64_t *out, size_t count) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x)
    out[i] = UINT64_MAX;
}

__device__ __forceinline__ int64_t clamp_off(const int64_t *off, size_t i, int64_t m) {
  int64_t v = off[i];
  return v < 0 ? 0 : (v > m ? m : v);
}

__global__ void minhash_validate_kernel(const int64_t *off, size_t n, int64_t m, int32_t *flags) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i <= n; i += (size_t)gridDim.x * blockDim.x) {
    int32_t f = 0;
    if (i == 0 && off[0] < 0) f |= LM_CUDA_BAD_NEGATIVE;
    if (i < n && off[i + 1] < off[i]) f |= LM_CUDA_BAD_DECREASING;
    if (i == n && off[n] > m) f |= LM_CUDA_BAD_PAST_END;
    if (f) atomicOr(flags, f);
  }
}

__global__ void minhash_kernel(const uint64_t *hashes, size_t m, const int64_t *off, size_t n, const uint64_t *a,
                               const uint64_t *b, size_t num_hashes, uint64_t mask, uint64_t *out) {
  __shared__ uint64_t tile[LM_CUDA_MINHASH_TILE];
  __shared__ long long first_doc;
  const int64_t M = static_cast<int64_t>(m);
  const size_t tiles = (m + LM_CUDA_MINHASH_TILE - 1) / LM_CUDA_MINHASH_TILE;
  for (size_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t c0 = static_cast<int64_t>(t) * LM_CUDA_MINHASH_TILE;
    const int64_t cnt = (M - c0) < LM_CUDA_MINHASH_TILE ? (M - c0) : LM_CUDA_MINHASH_TILE;
    __syncthreads();  // the previous tile is no longer read
    for (int64_t i = threadIdx.x; i < cnt; i += blockDim.x) tile[i] = hashes[c0 + i];
    if (threadIdx.x == 0) {
      // the last document d with clamped off[d] <= c0 (documents before it end at or before c0)
      size_t lo = 0, hi = n;  // invariant: clamp(off[lo]) <= c0 (clamp(off[0]) == 0 when off[0] <= 0)
      while (lo < hi) {
        size_t mid = lo + (hi - lo + 1) / 2;
        if (clamp_off(off, mid, M) <= c0) lo = mid;
        else hi = mid - 1;
      }
      first_doc = static_cast<long long>(lo);
    }
    __syncthreads();
    for (size_t j0 = 0; j0 < num_hashes; j0 += blockDim.x) {
      const size_t j = j0 + threadIdx.x;
      if (j >= num_hashes) continue;
      const uint64_t aj = a[j], bj = b[j];
      size_t d = static_cast<size_t>(first_doc);
      int64_t beg = clamp_off(off, d, M);
      int64_t end = d < n ? clamp_off(off, d + 1, M) : M;
      uint64_t mn = UINT64_MAX;
      for (int64_t i = 0; i < cnt; i++) {
        const int64_t pos = c0 + i;
        if (pos >= end) {  // document d ended: publish, move to the document holding pos
          if (mn != UINT64_MAX && d < n) atomicMin(reinterpret_cast<unsigned long long *>(&out[d * num_hashes + j]),
                                                   static_cast<unsigned long long>(mn));
          mn = UINT64_MAX;
          while (d < n && clamp_off(off, d + 1, M) <= pos) d++;
          beg = clamp_off(off, d, M);
          end = d < n ? clamp_off(off, d + 1, M) : M;
        }
        if (d >= n || pos < beg) continue;  // before doc_offsets[0] or after doc_offsets[n]: no document
        const uint64_t v = perm61(tile[i], aj, bj, mask);
        mn = v < mn ? v : mn;
      }
      if (mn != UINT64_MAX && d < n)
        atomicMin(reinterpret_cast<unsigned long long *>(&out[d * num_hashes + j]),
                  static_cast<unsigned long long>(mn));
    }
  }
}

unsigned grid_for(size_t work, unsigned threads, size_t cap) {
  size_t g = (work + threads - 1) / threads;
  if (g < 1) g = 1;
  if (g > cap) g = cap;
  return static_cast<unsigned>(g);
}

}  // namespace

extern "C" cudaError_t lm_cuda_minhash_validate(const int64_t *d_offsets, size_t n, size_t m, int32_t *d_flags,
                                                cudaStream_t stream) {
  if (!d_offsets || !d_flags) return cudaErrorInvalidValue;
  cudaError_t e = cudaMemsetAsync(d_flags, 0, sizeof(int32_t), stream);
  if (e != cudaSuccess) return e;
  minhash_validate_kernel<<<grid_for(n + 1, 256, 4096), 256, 0, stream>>>(d_offsets, n, static_cast<int64_t>(m),
                                                                         d_flags);
  return cudaGetLastError();
}

extern "C" cudaError_t lm_cuda_minhash(const uint64_t *d_hashes, size_t m, const int64_t *d_offsets, size_t n,
                                       const uint64_t *d_a, const uint64_t *d_b, size_t num_hashes, int precision,
                                       uint64_t *d_out, cudaStream_t stream) {
  if (precision != 32 && precision != 64) return cudaErrorInvalidValue;
  if (n == 0 || num_hashes == 0) return cudaSuccess;
  if (!d_offsets || !d_a || !d_b || !d_out || (m && !d_hashes)) return cudaErrorInvalidValue;
  const uint64_t mask = precision == 32 ? uint64_t(0xFFFFFFFFu) : UINT64_MAX;
  const size_t count = n * num_hashes;
  minhash_fill_kernel<<<grid_for(count, 256, (size_t)1 << 16), 256, 0, stream>>>(d_out, count);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess || m == 0) return e;
  const size_t tiles = (m + LM_CUDA_MINHASH_TILE - 1) / LM_CUDA_MINHASH_TILE;
  const unsigned blocks = static_cast<unsigned>(tiles < ((size_t)1 << 20) ? tiles : ((size_t)1 << 20));
  minhash_kernel<<<blocks, kMinhashThreads, 0, stream>>>(d_hashes, m, d_offsets, n, d_a, d_b, num_hashes, mask,
                                                          d_out);
  return cudaGetLastError();
}
