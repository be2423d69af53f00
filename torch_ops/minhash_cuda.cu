// TORCH_LIBRARY_IMPL(luminamoon, CUDA): torch.ops.luminamoon.minhash on the GPU (schema and CPU
// kernel in minhash.cpp).  Thin: check arguments, validate the offsets (one small kernel and a
// 4-byte copy back: a synchronisation, skipped while a CUDA graph is being captured — the kernel
// then still never reads out of bounds), call csrc/minhash.cu on torch's current stream.
// Bit-identical with the CPU kernel.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "luminamoon_cuda.h"

namespace luminamoon {
namespace {

at::Tensor minhash_cuda(const at::Tensor &shingle_hashes, const at::Tensor &doc_offsets, const at::Tensor &a_in,
                        const at::Tensor &b_in, int64_t precision) {
  auto dt = [](const at::Tensor &t, const char *name) {
    TORCH_CHECK_TYPE(t.scalar_type() == at::kLong, "luminamoon.minhash: ", name, " must be int64, got ",
                     t.scalar_type());
    TORCH_CHECK_VALUE(t.dim() == 1, "luminamoon.minhash: ", name, " must be 1-D, got shape ", t.sizes());
    TORCH_CHECK_VALUE(t.is_cuda(), "luminamoon.minhash: ", name, " must be on a CUDA device, got ", t.device());
  };
  dt(shingle_hashes, "shingle_hashes");
  dt(doc_offsets, "doc_offsets");
  dt(a_in, "a");
  dt(b_in, "b");
  TORCH_CHECK_VALUE(doc_offsets.numel() >= 1, "luminamoon.minhash: doc_offsets must have N+1 >= 1 entries");
  TORCH_CHECK_VALUE(a_in.numel() == b_in.numel(), "luminamoon.minhash: a and b must have the same length, got ",
                    a_in.numel(), " and ", b_in.numel());
  TORCH_CHECK_VALUE(precision == 64 || precision == 32, "luminamoon.minhash: precision must be 32 or 64, got ",
                    precision);
  const auto dev = shingle_hashes.device();
  TORCH_CHECK_VALUE(doc_offsets.device() == dev && a_in.device() == dev && b_in.device() == dev,
                    "luminamoon.minhash: all tensors must be on one device, got ", dev, ", ", doc_offsets.device(),
                    ", ", a_in.device(), ", ", b_in.device());
  const int64_t n = doc_offsets.numel() - 1, H = a_in.numel(), M = shingle_hashes.numel();
  TORCH_CHECK_VALUE(H == 0 || n <= (INT64_MAX / 8) / H, "luminamoon.minhash: an output of ", n, " x ", H,
                    " int64 values does not fit in memory addressing");
  c10::cuda::CUDAGuard guard(dev);
  const at::Tensor h = shingle_hashes.contiguous(), off = doc_offsets.contiguous();
  const at::Tensor a = a_in.contiguous(), b = b_in.contiguous();
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  const bool capturing = cudaStreamIsCapturing(stream, &cap) == cudaSuccess && cap != cudaStreamCaptureStatusNone;
  if (!capturing) {
    at::Tensor flag = at::empty({1}, off.options().dtype(at::kInt));
    cudaError_t e = lm_cuda_minhash_validate(off.data_ptr<int64_t>(), static_cast<size_t>(n), static_cast<size_t>(M),
                                             flag.data_ptr<int32_t>(), stream);
    TORCH_CHECK(e == cudaSuccess, "luminamoon.minhash: CUDA error: ", cudaGetErrorString(e));
    const int32_t f = flag.item<int32_t>();
    TORCH_CHECK_VALUE(!(f & LM_CUDA_BAD_NEGATIVE), "luminamoon.minhash: doc_offsets must be non-negative");
    TORCH_CHECK_VALUE(!(f & LM_CUDA_BAD_DECREASING), "luminamoon.minhash: doc_offsets must be non-decreasing");
    TORCH_CHECK_VALUE(!(f & LM_CUDA_BAD_PAST_END), "luminamoon.minhash: doc_offsets point past the end of "
                      "shingle_hashes (", M, " values)");
  }
  at::Tensor out = at::empty({n, H}, h.options());
  if (n == 0 || H == 0) return out;
  cudaError_t e = lm_cuda_minhash(M ? reinterpret_cast<const uint64_t *>(h.data_ptr<int64_t>()) : nullptr,
                                  static_cast<size_t>(M), off.data_ptr<int64_t>(), static_cast<size_t>(n),
                                  reinterpret_cast<const uint64_t *>(a.data_ptr<int64_t>()),
                                  reinterpret_cast<const uint64_t *>(b.data_ptr<int64_t>()), static_cast<size_t>(H),
                                  static_cast<int>(precision), reinterpret_cast<uint64_t *>(out.data_ptr<int64_t>()),
                                  stream);
  TORCH_CHECK(e == cudaSuccess, "luminamoon.minhash: CUDA error: ", cudaGetErrorString(e));
  return out;
}

}  // namespace
}  // namespace luminamoon

TORCH_LIBRARY_IMPL(luminamoon, CUDA, m) { m.impl("minhash", &luminamoon::minhash_cuda); }
