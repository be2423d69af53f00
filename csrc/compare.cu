// csrc/compare.cu — offsets validation, prefix_match (lm_cuda_prefix_match), equal_scalar
// (lm_cuda_equal_scalar; both share lm_cuda_match) and equal (lm_cuda_equal).
#include <cuda_runtime.h>

#include "common.cuh"
#include "luminamoon_cuda.h"
#include "xxh3.h"

namespace lmcuda {
namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kThreads = 256;

// ------------------------------------------------------------------ validation

template <typename OffT>
__global__ void validate_kernel(Strs<OffT> s, int32_t *flags) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  int32_t f = 0;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i <= s.n; i += stride) {
    const int64_t v = static_cast<int64_t>(s.off[i]);
    if (i == 0 && v < 0) f |= LM_CUDA_BAD_NEGATIVE;
    if (i < s.n && static_cast<int64_t>(s.off[i + 1]) < v) f |= LM_CUDA_BAD_DECREASING;
    if (i == s.n && v > s.data_len) f |= LM_CUDA_BAD_PAST_END;
  }
  for (int d = 16; d; d >>= 1) f |= __shfl_xor_sync(kFull, f, d);  // (__reduce_or_sync needs sm_80)
  if ((threadIdx.x & 31) == 0 && f) atomicOr(flags, f);
}

// ------------------------------------------------------- prefix / exact match

struct InlinePattern {
  uint8_t bytes[LM_CUDA_PATTERN_INLINE_MAX];
};

// Tiles of 32 strings per warp (grid-stride).  Each lane checks the length; patterns of up to 8
// bytes are compared by the lane itself, longer ones by the whole warp, one candidate at a time
// (32 bytes per step, stopping at the first mismatch).
template <typename OffT>
__global__ void match_kernel(Strs<OffT> s, InlinePattern ip, const uint8_t *pat_dev, int64_t plen, int exact,
                             uint8_t *out) {
  __shared__ uint8_t spat[LM_CUDA_PATTERN_INLINE_MAX];
  const bool inl = plen <= LM_CUDA_PATTERN_INLINE_MAX;
  if (inl)
    for (int k = threadIdx.x; k < plen; k += blockDim.x) spat[k] = ip.bytes[k];
  __syncthreads();
  const uint8_t *pat = inl ? spat : pat_dev;
  const int lane = threadIdx.x & 31;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t tile = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) & ~(size_t)31; tile < s.n; tile += stride) {
    const size_t i = tile + lane;
    const bool valid = i < s.n;
    int64_t st = 0, len = 0;
    if (valid) string_at(s, i, st, len);
    const bool cand = valid && (exact ? len == plen : len >= plen);
    bool res = cand;
    if (plen <= 8) {
      if (cand)
        for (int k = 0; k < plen && res; ++k) res = s.data[st + k] == pat[k];
    } else {
      unsigned todo = __ballot_sync(kFull, cand);
      while (todo) {
        const int c = __ffs(todo) - 1;
        todo &= todo - 1;
        const int64_t cst = __shfl_sync(kFull, st, c);
        bool ok = true;
        for (int64_t p = 0; p < plen; p += 32) {
          const int64_t q = p + lane;
          const bool m = q >= plen || s.data[cst + q] == pat[q];
          if (!__all_sync(kFull, m)) {
            ok = false;
            break;
          }
        }
        if (lane == c) res = ok;
      }
    }
    if (valid) out[i] = res ? 1 : 0;
  }
}

// ------------------------------------------------------------------- equal

// Tiles of 32 pairs per warp (grid-stride).  Each lane checks its pair's lengths; equal-length
// pairs up to LM_CUDA_EQ_THREAD_MAX bytes are compared by the lane itself, pairs up to
// LM_CUDA_EQ_GRID_MIN by the whole warp, one candidate at a time (256 bytes per step as 8-byte
// words, stopping at the first difference): no scan, no search.  Longer pairs (rare) get out = 1
// and a segment count for the grid-wide pass, which only ever writes 0.
template <typename OffT>
__global__ void equal_kernel(Strs<OffT> a, Strs<OffT> b, uint8_t *out, int64_t *seg_count) {
  const int lane = threadIdx.x & 31;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t tile = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) & ~(size_t)31; tile < a.n; tile += stride) {
    const size_t i = tile + lane;
    const bool valid = i < a.n;
    int64_t sa = 0, la = 0, sb = 0, lb = 0;
    if (valid) {
      string_at(a, i, sa, la);
      string_at(b, i, sb, lb);
    }
    bool res = valid && la == lb;
    int64_t segs = 0;
    const bool warp_cmp = res && la > LM_CUDA_EQ_THREAD_MAX && la < LM_CUDA_EQ_GRID_MIN;
    if (res && la <= LM_CUDA_EQ_THREAD_MAX) {
      const uint8_t *pa = a.data + sa, *pb = b.data + sb;
      int64_t k = 0;
      for (; k + 8 <= la && res; k += 8) res = lm_xxh3_rd64(pa + k) == lm_xxh3_rd64(pb + k);
      for (; k < la && res; ++k) res = pa[k] == pb[k];
    } else if (res && la >= LM_CUDA_EQ_GRID_MIN) {
      segs = (la + LM_CUDA_SEGMENT_BYTES - 1) / LM_CUDA_SEGMENT_BYTES;
    }
    unsigned todo = __ballot_sync(kFull, warp_cmp);
    while (todo) {
      const int c = __ffs(todo) - 1;
      todo &= todo - 1;
      const int64_t ca = __shfl_sync(kFull, sa, c), cb = __shfl_sync(kFull, sb, c), cl = __shfl_sync(kFull, la, c);
      bool ok = true;
      for (int64_t p = 0; p < cl; p += 256) {
        const int64_t q = p + 8 * lane;
        bool m = true;
        if (q + 8 <= cl) {
          m = lm_xxh3_rd64(a.data + ca + q) == lm_xxh3_rd64(b.data + cb + q);
        } else {
          for (int64_t r = q; r < cl && m; ++r) m = a.data[ca + r] == b.data[cb + r];
        }
        if (!__all_sync(kFull, m)) {
          ok = false;
          break;
        }
      }
      if (lane == c) res = ok;
    }
    if (valid) {
      out[i] = res ? 1 : 0;
      seg_count[i] = segs;
    }
  }
}

// One warp per segment of LM_CUDA_SEGMENT_BYTES of a pair of LM_CUDA_EQ_GRID_MIN bytes or more,
// over the whole grid: the string of a segment is found by binary search in the scanned counts
// (only such long pairs have segments, so the search is paid per 16 KB of a long pair).
template <typename OffT>
__global__ void equal_segments_kernel(Strs<OffT> a, Strs<OffT> b, const int64_t *incl, const int64_t *count,
                                      uint8_t *out) {
  const int lane = threadIdx.x & 31;
  const int64_t total = incl[a.n - 1];
  const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
  for (int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; w < total; w += warps) {
    const size_t i = upper_bound_i64(incl, a.n, w);
    if (i >= a.n) break;
    const int64_t seg = w - (incl[i] - count[i]);
    int64_t sa, la, sb, lb;
    string_at(a, i, sa, la);
    string_at(b, i, sb, lb);
    if (la != lb) continue;  // only with offsets changed under our feet; stay memory-safe
    const int64_t lo = seg * LM_CUDA_SEGMENT_BYTES;
    const int64_t hi = min(la, lo + (int64_t)LM_CUDA_SEGMENT_BYTES);
    bool same = true;
    int64_t p = lo + 8 * lane;
    for (; p + 8 <= hi; p += 256) same &= lm_xxh3_rd64(a.data + sa + p) == lm_xxh3_rd64(b.data + sb + p);
    if (p < hi)
      for (; p < hi; ++p) same &= a.data[sa + p] == b.data[sb + p];
    if (!__all_sync(kFull, same) && lane == 0) out[i] = 0;
  }
}

}  // namespace
}  // namespace lmcuda

using namespace lmcuda;

extern "C" cudaError_t lm_cuda_validate_offsets(lm_cuda_strings s, int32_t *d_flags, cudaStream_t stream) {
  if (!s.offsets || !d_flags) return cudaErrorInvalidValue;
  cudaError_t e = cudaMemsetAsync(d_flags, 0, sizeof(int32_t), stream);
  if (e != cudaSuccess) return e;
  LM_CUDA_DISPATCH_OFFSETS(s.offset_bytes, {
    validate_kernel<OffT><<<blocks_for(s.n + 1, kThreads, 4096), kThreads, 0, stream>>>(typed<OffT>(s), d_flags);
  });
  return cudaGetLastError();
}

extern "C" cudaError_t lm_cuda_match(lm_cuda_strings s, const uint8_t *pattern_host, const uint8_t *pattern_dev,
                                     size_t plen, int exact, uint8_t *out, cudaStream_t stream) {
  if (s.n == 0) return cudaSuccess;
  if (!s.offsets || !out) return cudaErrorInvalidValue;
  InlinePattern ip;
  if (plen <= LM_CUDA_PATTERN_INLINE_MAX) {
    if (plen && !pattern_host) return cudaErrorInvalidValue;
    for (size_t k = 0; k < plen; ++k) ip.bytes[k] = pattern_host[k];
  } else if (!pattern_dev) {
    return cudaErrorInvalidValue;
  }
  LM_CUDA_DISPATCH_OFFSETS(s.offset_bytes, {
    match_kernel<OffT><<<blocks_for(s.n, kThreads), kThreads, 0, stream>>>(typed<OffT>(s), ip, pattern_dev,
                                                                          (int64_t)plen, exact, out);
  });
  return cudaGetLastError();
}

extern "C" cudaError_t lm_cuda_prefix_match(lm_cuda_strings s, const uint8_t *pattern_host,
                                            const uint8_t *pattern_dev, size_t plen, uint8_t *out,
                                            cudaStream_t stream) {
  return lm_cuda_match(s, pattern_host, pattern_dev, plen, 0, out, stream);
}

extern "C" cudaError_t lm_cuda_equal_scalar(lm_cuda_strings s, const uint8_t *pattern_host,
                                            const uint8_t *pattern_dev, size_t plen, uint8_t *out,
                                            cudaStream_t stream) {
  return lm_cuda_match(s, pattern_host, pattern_dev, plen, 1, out, stream);
}

extern "C" size_t lm_cuda_equal_workspace_size(size_t n) { return n ? segments_workspace(n) : 0; }

extern "C" cudaError_t lm_cuda_equal(lm_cuda_strings a, lm_cuda_strings b, void *workspace, size_t workspace_bytes,
                                     uint8_t *out, cudaStream_t stream) {
  if (a.n != b.n || a.offset_bytes != b.offset_bytes) return cudaErrorInvalidValue;
  if (a.n == 0) return cudaSuccess;
  if (!a.offsets || !b.offsets || !out || !workspace) return cudaErrorInvalidValue;
  Carver c{static_cast<uint8_t *>(workspace), 0, workspace_bytes};
  Segments sg;
  if (!carve_segments(c, a.n, sg)) return cudaErrorInvalidValue;
  cudaError_t e = cudaSuccess;
  LM_CUDA_DISPATCH_OFFSETS(a.offset_bytes, {
    const Strs<OffT> ta = typed<OffT>(a), tb = typed<OffT>(b);
    equal_kernel<OffT><<<blocks_for(a.n, kThreads), kThreads, 0, stream>>>(ta, tb, out, sg.count);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    if (a.data_len >= LM_CUDA_EQ_GRID_MIN && b.data_len >= LM_CUDA_EQ_GRID_MIN) {  // else no pair is that long
      if ((e = scan_i64(sg.tmp, sg.tmp_bytes, sg.count, sg.incl, a.n, stream)) != cudaSuccess) return e;
      equal_segments_kernel<OffT><<<persistent_blocks(equal_segments_kernel<OffT>, kThreads), kThreads, 0, stream>>>(
          ta, tb, sg.incl, sg.count, out);
    }
  });
  return cudaGetLastError();
}
