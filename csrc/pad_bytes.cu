// csrc/pad_bytes.cu — byte-level tokenization + padding (the collate of byte-level models).
//
// One warp per row (grid-stride over rows): the row's tokens are written as coalesced 8-byte
// stores, 32 per warp instruction, and the string's bytes are read as coalesced byte loads.
// The output (8 bytes per token) dominates the memory traffic.  Rows shorter than 32 tokens
// leave lanes idle; the threshold for packing several rows per warp is left to measurement.
#include <cuda_runtime.h>

#include "common.cuh"
#include "luminamoon_cuda.h"

namespace lmcuda {
namespace {

constexpr int kThreads = 256;

template <typename OffT>
__global__ void pad_kernel(Strs<OffT> s, int64_t max_len, int64_t pad_id, int64_t bos_id, int64_t eos_id,
                           int64_t *tokens, int64_t *lengths) {
  const int lane = threadIdx.x & 31;
  const int64_t nb = bos_id >= 0 ? 1 : 0, ne = eos_id >= 0 ? 1 : 0;
  const int64_t room = max_len > nb + ne ? max_len - nb - ne : 0;
  const size_t warps = ((size_t)gridDim.x * blockDim.x) / 32;
  for (size_t row = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; row < s.n; row += warps) {
    int64_t st, len;
    string_at(s, row, st, len);
    const int64_t content = len < room ? len : room;
    const int64_t end_content = nb + content;
    const int64_t end_eos = end_content + ne;
    int64_t *out = tokens + (size_t)row * (size_t)max_len;
    const uint8_t *src = s.data + st - nb;  // src[j] is the byte of column j (only read for content columns)
#pragma unroll 4
    for (int64_t j = lane; j < max_len; j += 32) {
      int64_t t;
      if (j < nb)
        t = bos_id;
      else if (j < end_content)
        t = src[j];
      else if (j < end_eos)
        t = eos_id;
      else
        t = pad_id;
      out[j] = t;
    }
    if (lane == 0) lengths[row] = end_eos < max_len ? end_eos : max_len;
  }
}

}  // namespace
}  // namespace lmcuda

using namespace lmcuda;

extern "C" cudaError_t lm_cuda_pad_bytes(lm_cuda_strings s, size_t max_len, int64_t pad_id, int64_t bos_id,
                                         int64_t eos_id, int64_t *tokens, int64_t *lengths, cudaStream_t stream) {
  if (s.n == 0) return cudaSuccess;
  if (!s.offsets || !lengths || (max_len && !tokens)) return cudaErrorInvalidValue;
  LM_CUDA_DISPATCH_OFFSETS(s.offset_bytes, {
    pad_kernel<OffT><<<blocks_for(s.n * 32, kThreads), kThreads, 0, stream>>>(typed<OffT>(s), (int64_t)max_len, pad_id,
                                                                              bos_id, eos_id, tokens, lengths);
  });
  return cudaGetLastError();
}
