// csrc/common.cuh — helpers shared by the luminamoon CUDA kernels (internal, C++ only).
#pragma once

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include <cub/device/device_scan.cuh>

#include "luminamoon_cuda.h"

namespace lmcuda {

constexpr int kWarp = 32;

// Offsets + payload with the offsets' integer type fixed.
template <typename OffT>
struct Strs {
  const OffT *off;
  size_t n;
  const uint8_t *data;
  int64_t data_len;
};

template <typename OffT>
inline Strs<OffT> typed(const lm_cuda_strings &s) {
  return Strs<OffT>{static_cast<const OffT *>(s.offsets), s.n, s.data, static_cast<int64_t>(s.data_len)};
}

// String i, clamped into the payload whatever the offsets hold (memory safety for bad offsets).
template <typename OffT>
__host__ __device__ __forceinline__ void string_at(const Strs<OffT> &s, size_t i, int64_t &start, int64_t &len) {
  int64_t a = static_cast<int64_t>(s.off[i]);
  int64_t b = static_cast<int64_t>(s.off[i + 1]);
  a = a < 0 ? 0 : (a > s.data_len ? s.data_len : a);
  b = b < a ? a : (b > s.data_len ? s.data_len : b);
  start = a;
  len = b - a;
}

// Run `body` with OffT = int32_t or int64_t according to s.offset_bytes.
#define LM_CUDA_DISPATCH_OFFSETS(width, ...)                    \
  do {                                                          \
    if ((width) == 4) {                                         \
      using OffT = int32_t;                                     \
      __VA_ARGS__                                               \
    } else if ((width) == 8) {                                  \
      using OffT = int64_t;                                     \
      __VA_ARGS__                                               \
    } else {                                                    \
      return cudaErrorInvalidValue;                             \
    }                                                           \
  } while (0)

inline unsigned blocks_for(size_t work, unsigned threads, size_t cap = (size_t)1 << 20) {
  size_t b = (work + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > cap) b = cap;  // kernels loop (grid-stride) over the rest
  return static_cast<unsigned>(b);
}

// Blocks that fill the current device once (for persistent, grid-stride kernels): SMs times the
// blocks of `kernel` that one SM holds at once (registers and shared memory included), as the
// occupancy calculator reports it.
template <typename Kernel>
inline unsigned persistent_blocks(Kernel kernel, unsigned threads_per_block) {
  int dev = 0, sms = 0, per_sm = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
      sms <= 0) {
    (void)cudaGetLastError();  // not sticky: clear it so that the launch's own check is what counts
    sms = 132;
  }
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, (int)threads_per_block, 0) != cudaSuccess ||
      per_sm <= 0) {
    (void)cudaGetLastError();
    per_sm = 1;
  }
  return static_cast<unsigned>(sms) * static_cast<unsigned>(per_sm);
}

// Carving a caller-provided workspace into 256-byte aligned pieces.
inline size_t align_up(size_t x, size_t a = 256) { return (x + a - 1) / a * a; }

struct Carver {
  uint8_t *base;
  size_t used;
  size_t cap;
  template <typename T>
  T *take(size_t count) {
    size_t bytes = align_up(count * sizeof(T));
    if (used + bytes > cap) return nullptr;
    T *p = reinterpret_cast<T *>(base + used);
    used += bytes;
    return p;
  }
};

// First index i in [0, n) with incl[i] > w (incl non-decreasing); n when none.
__device__ __forceinline__ size_t upper_bound_i64(const int64_t *incl, size_t n, int64_t w) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (incl[mid] > w)
      hi = mid;
    else
      lo = mid + 1;
  }
  return lo;
}

// CUB inclusive sum of n int64 (in and out distinct): temp size, then the scan.
inline size_t scan_temp_bytes(size_t n) {
  size_t bytes = 0;
  cub::DeviceScan::InclusiveSum(nullptr, bytes, static_cast<const int64_t *>(nullptr), static_cast<int64_t *>(nullptr),
                                static_cast<int64_t>(n));
  return bytes;
}

inline cudaError_t scan_i64(void *tmp, size_t tmp_bytes, const int64_t *in, int64_t *out, size_t n,
                            cudaStream_t stream) {
  return cub::DeviceScan::InclusiveSum(tmp, tmp_bytes, in, out, static_cast<int64_t>(n), stream);
}

// Grid-wide segments over long strings: seg_count[i] (filled by the caller's kernel) is scanned
// into incl[i]; work item w belongs to string upper_bound(incl, w), segment w - excl.
struct Segments {
  int64_t *count;  // n
  int64_t *incl;   // n
  void *tmp;
  size_t tmp_bytes;
};

inline size_t segments_workspace(size_t n) { return 2 * align_up(n * sizeof(int64_t)) + align_up(scan_temp_bytes(n)); }

inline bool carve_segments(Carver &c, size_t n, Segments &sg) {
  sg.count = c.take<int64_t>(n);
  sg.incl = c.take<int64_t>(n);
  sg.tmp_bytes = scan_temp_bytes(n);
  sg.tmp = c.take<uint8_t>(sg.tmp_bytes);
  return sg.count && sg.incl && sg.tmp;
}

}  // namespace lmcuda
