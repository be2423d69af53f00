// csrc/gather.cu — gather (take by index) and compact (keep where mask), offsets + payload.
//
// Pass 1 computes the output offsets (lengths, then a CUB scan); the caller reads the output
// size back (the only synchronisation: the output size depends on the data).  Pass 2 copies the
// payload: the output is cut into LM_CUDA_COPY_CHUNK_BYTES chunks, one per block, each finding
// its first and last string by binary search in the output offsets; the block's threads load the
// strings' descriptors in parallel and copy the short ones, the warps copy the longer ones
// writing aligned 8-byte words (unaligned sources read as aligned words and shifted).
// Balanced whatever the length distribution: a 4 MB string is copied by 256
// blocks, and 10^6 tiny strings by blocks of many strings each.
#include <cuda_runtime.h>
#include <thrust/iterator/counting_iterator.h>

#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>

#include "common.cuh"
#include "luminamoon_cuda.h"
#include "xxh3.h"

namespace lmcuda {
namespace {

constexpr int kThreads = 256;

template <typename OffT>
__global__ void gather_len_kernel(Strs<OffT> s, const int64_t *index, size_t m, int64_t *lens, int32_t *bad) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k < m; k += stride) {
    const int64_t i = index[k];
    int64_t st = 0, len = 0;
    if (i < 0 || (uint64_t)i >= s.n)
      *bad = 1;  // benign race: every writer stores 1
    else
      string_at(s, (size_t)i, st, len);
    lens[k] = len;
  }
}

template <typename OffT>
__global__ void masked_len_kernel(Strs<OffT> s, const uint8_t *mask, int64_t *lens) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < s.n; i += stride) {
    int64_t st = 0, len = 0;
    if (mask[i]) string_at(s, i, st, len);
    lens[i] = len;
  }
}

__global__ void compact_offsets_kernel(const int64_t *incl, const int64_t *index, size_t m, int64_t *out) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x; k <= m; k += stride)
    out[k] = k == 0 ? 0 : incl[index[k - 1]];
}

// Copy out[a, b) (absolute output positions) from src + (a - dst0) by one warp.
__device__ __forceinline__ void warp_copy(uint8_t *out, int64_t a, int64_t b, const uint8_t *src_at_a, int lane) {
  if (b - a < 64) {
    for (int64_t p = a + lane; p < b; p += 32) out[p] = src_at_a[p - a];
    return;
  }
  const uintptr_t base = reinterpret_cast<uintptr_t>(out);
  const int64_t a8 = a + (int64_t)((8 - ((base + (uintptr_t)a) & 7)) & 7);  // first 8-byte aligned address
  const int64_t b8 = b - (int64_t)((base + (uintptr_t)b) & 7);               // end of the last aligned word
  for (int64_t p = a + lane; p < a8; p += 32) out[p] = src_at_a[p - a];
  for (int64_t p = a8 + 8 * lane; p < b8; p += 256)  // out + p is 8-byte aligned
    *reinterpret_cast<uint64_t *>(out + p) = lm_xxh3_rd64(src_at_a + (p - a));
  for (int64_t p = b8 + lane; p < b; p += 32) out[p] = src_at_a[p - a];
}

constexpr int64_t kThreadCopyMax = 32;  // strings up to this many bytes: copied by one thread

// One block per LM_CUDA_COPY_CHUNK_BYTES of the output.  The strings overlapping the chunk are
// taken blockDim at a time: each thread loads one string's descriptor (output offsets, index,
// source offsets: independent loads, all threads at once), copies it itself when it is short,
// else leaves it in shared memory for the warps, which copy those one per warp.
template <typename OffT>
__global__ void copy_kernel(Strs<OffT> s, const int64_t *index, size_t m, const int64_t *out_off, int64_t total,
                            uint8_t *out) {
  __shared__ int64_t s_a[kThreads], s_b[kThreads], s_src[kThreads];  // output [a, b) from s.data + src
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int nwarps = blockDim.x >> 5;
  const int64_t lo = (int64_t)blockIdx.x * LM_CUDA_COPY_CHUNK_BYTES;
  if (lo >= total) return;  // block-uniform
  const int64_t hi = min(total, lo + (int64_t)LM_CUDA_COPY_CHUNK_BYTES);
  const size_t first = upper_bound_i64(out_off + 1, m, lo);  // first k with out_off[k+1] > lo
  const size_t past = upper_bound_i64(out_off + 1, m, hi - 1);  // first k with out_off[k+1] >= hi
  const size_t last = past < m ? past + 1 : m;
  for (size_t base = first; base < last; base += blockDim.x) {  // block-uniform
    const size_t k = base + threadIdx.x;
    int64_t a = 0, b = 0, src = 0;
    if (k < last) {
      const int64_t d0 = out_off[k];
      const int64_t d1 = min(out_off[k + 1], hi);
      const int64_t i = index ? index[k] : (int64_t)k;
      if (i >= 0 && (uint64_t)i < s.n) {
        int64_t st, len;
        string_at(s, (size_t)i, st, len);
        a = max(d0, lo);
        b = min(d1, d0 + len);  // never read past the source string
        src = st + (a - d0);
      }
      if (a >= b) a = b = 0;
      if (b - a <= kThreadCopyMax) {
        for (int64_t p = a; p < b; ++p) out[p] = s.data[src + (p - a)];
        a = b = 0;
      }
    }
    s_a[threadIdx.x] = a;
    s_b[threadIdx.x] = b;
    s_src[threadIdx.x] = src;
    __syncthreads();
    const int cnt = (int)min((size_t)blockDim.x, last - base);
    for (int j = warp; j < cnt; j += nwarps) {
      const int64_t ja = s_a[j], jb = s_b[j];
      if (ja < jb) warp_copy(out, ja, jb, s.data + s_src[j], lane);
    }
    __syncthreads();
  }
}

}  // namespace
}  // namespace lmcuda

using namespace lmcuda;

extern "C" size_t lm_cuda_gather_offsets_workspace_size(size_t m) {
  return align_up(m * sizeof(int64_t)) + align_up(scan_temp_bytes(m));
}

extern "C" cudaError_t lm_cuda_gather_offsets(lm_cuda_strings s, const int64_t *index, size_t m, int64_t *out_offsets,
                                              int32_t *d_bad_index, void *workspace, size_t workspace_bytes,
                                              cudaStream_t stream) {
  if (!out_offsets || !d_bad_index || (m && (!index || !s.offsets))) return cudaErrorInvalidValue;
  cudaError_t e = cudaMemsetAsync(d_bad_index, 0, sizeof(int32_t), stream);
  if (e == cudaSuccess) e = cudaMemsetAsync(out_offsets, 0, sizeof(int64_t), stream);
  if (e != cudaSuccess || m == 0) return e;
  Carver c{static_cast<uint8_t *>(workspace), 0, workspace_bytes};
  int64_t *lens = c.take<int64_t>(m);
  const size_t tmp_bytes = scan_temp_bytes(m);
  void *tmp = c.take<uint8_t>(tmp_bytes);
  if (!workspace || !lens || !tmp) return cudaErrorInvalidValue;
  LM_CUDA_DISPATCH_OFFSETS(s.offset_bytes, {
    gather_len_kernel<OffT><<<blocks_for(m, kThreads), kThreads, 0, stream>>>(typed<OffT>(s), index, m, lens,
                                                                             d_bad_index);
  });
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  return scan_i64(tmp, tmp_bytes, lens, out_offsets + 1, m, stream);
}

namespace {
size_t select_temp_bytes(size_t n) {
  size_t bytes = 0;
  cub::DeviceSelect::Flagged(nullptr, bytes, thrust::counting_iterator<int64_t>(0),
                             static_cast<const uint8_t *>(nullptr), static_cast<int64_t *>(nullptr),
                             static_cast<int64_t *>(nullptr), static_cast<int64_t>(n));
  return bytes;
}
}  // namespace

extern "C" size_t lm_cuda_compact_select_workspace_size(size_t n) {
  return align_up(n * sizeof(int64_t)) + align_up(scan_temp_bytes(n)) + align_up(select_temp_bytes(n));
}

extern "C" cudaError_t lm_cuda_compact_select(lm_cuda_strings s, const uint8_t *mask, int64_t *out_index,
                                              int64_t *d_count, int64_t *incl_bytes, void *workspace,
                                              size_t workspace_bytes, cudaStream_t stream) {
  if (!d_count) return cudaErrorInvalidValue;
  if (s.n == 0) return cudaMemsetAsync(d_count, 0, sizeof(int64_t), stream);
  if (!mask || !out_index || !incl_bytes || !s.offsets || !workspace) return cudaErrorInvalidValue;
  Carver c{static_cast<uint8_t *>(workspace), 0, workspace_bytes};
  int64_t *lens = c.take<int64_t>(s.n);
  const size_t scan_bytes = scan_temp_bytes(s.n);
  void *scan_tmp = c.take<uint8_t>(scan_bytes);
  size_t sel_bytes = select_temp_bytes(s.n);
  void *sel_tmp = c.take<uint8_t>(sel_bytes);
  if (!lens || !scan_tmp || !sel_tmp) return cudaErrorInvalidValue;
  cudaError_t e = cub::DeviceSelect::Flagged(sel_tmp, sel_bytes, thrust::counting_iterator<int64_t>(0), mask, out_index,
                                             d_count, static_cast<int64_t>(s.n), stream);
  if (e != cudaSuccess) return e;
  LM_CUDA_DISPATCH_OFFSETS(s.offset_bytes, {
    masked_len_kernel<OffT><<<blocks_for(s.n, kThreads), kThreads, 0, stream>>>(typed<OffT>(s), mask, lens);
  });
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  return scan_i64(scan_tmp, scan_bytes, lens, incl_bytes, s.n, stream);
}

extern "C" cudaError_t lm_cuda_compact_offsets(const int64_t *incl_bytes, const int64_t *out_index, size_t m,
                                               int64_t *out_offsets, cudaStream_t stream) {
  if (!out_offsets || (m && (!incl_bytes || !out_index))) return cudaErrorInvalidValue;
  compact_offsets_kernel<<<blocks_for(m + 1, kThreads), kThreads, 0, stream>>>(incl_bytes, out_index, m, out_offsets);
  return cudaGetLastError();
}

extern "C" cudaError_t lm_cuda_copy_strings(lm_cuda_strings s, const int64_t *index, size_t m,
                                            const int64_t *out_offsets, uint64_t total_bytes, uint8_t *out_data,
                                            cudaStream_t stream) {
  if (m == 0 || total_bytes == 0) return cudaSuccess;
  if (!s.offsets || !out_offsets || !out_data) return cudaErrorInvalidValue;
  const uint64_t chunks = (total_bytes + LM_CUDA_COPY_CHUNK_BYTES - 1) / LM_CUDA_COPY_CHUNK_BYTES;
  if (chunks > 0x7fffffffull) return cudaErrorInvalidValue;
  LM_CUDA_DISPATCH_OFFSETS(s.offset_bytes, {
    copy_kernel<OffT><<<(unsigned)chunks, kThreads, 0, stream>>>(typed<OffT>(s), index, m, out_offsets,
                                                                 (int64_t)total_bytes, out_data);
  });
  return cudaGetLastError();
}

extern "C" cudaError_t lm_cuda_gather_data(lm_cuda_strings s, const int64_t *index, size_t m,
                                           const int64_t *out_offsets, uint64_t total_bytes, uint8_t *out_data,
                                           cudaStream_t stream) {
  return lm_cuda_copy_strings(s, index, m, out_offsets, total_bytes, out_data, stream);
}

extern "C" cudaError_t lm_cuda_compact_data(lm_cuda_strings s, const int64_t *out_index, size_t m,
                                            const int64_t *out_offsets, uint64_t total_bytes, uint8_t *out_data,
                                            cudaStream_t stream) {
  return lm_cuda_copy_strings(s, out_index, m, out_offsets, total_bytes, out_data, stream);
}
