// STABLE_TORCH_LIBRARY_IMPL(luminamoon, CUDA): torch.ops.luminamoon.minhash on the GPU (schema in
// schema.cpp, CPU kernel in minhash.cpp).  Thin: check arguments, validate the offsets (one small kernel
// and a 4-byte copy back: a synchronisation, skipped while a CUDA graph is being captured — the kernel
// then still never reads out of bounds), call csrc/minhash.cu on torch's current stream.
// Bit-identical with the CPU kernel.  LibTorch stable ABI only (luminamoon._ops; stable_common.h).
#include <torch/csrc/stable/accelerator.h>

#include <cuda_runtime.h>

#include "stable_common.h"
#include "luminamoon_cuda.h"

namespace luminamoon {
namespace {

void minhash_cuda_check(cudaError_t e) {
  LM_CHECK(e == cudaSuccess, "luminamoon.minhash: CUDA error: ", cudaGetErrorString(e));
}

Tensor minhash_cuda(Tensor shingle_hashes, Tensor doc_offsets, Tensor a_in, Tensor b_in, int64_t precision) {
  auto dt = [](const Tensor &t, const char *name) {
    LM_CHECK_TYPE(t.scalar_type() == ScalarType::Long, "luminamoon.minhash: ", name, " must be int64, got ",
                  dtype_name(t.scalar_type()));
    LM_CHECK_VALUE(t.dim() == 1, "luminamoon.minhash: ", name, " must be 1-D, got shape ", shape_of(t));
    LM_CHECK_VALUE(t.is_cuda(), "luminamoon.minhash: ", name, " must be on a CUDA device, got ", device_name(t));
  };
  dt(shingle_hashes, "shingle_hashes");
  dt(doc_offsets, "doc_offsets");
  dt(a_in, "a");
  dt(b_in, "b");
  LM_CHECK_VALUE(doc_offsets.numel() >= 1, "luminamoon.minhash: doc_offsets must have N+1 >= 1 entries");
  LM_CHECK_VALUE(a_in.numel() == b_in.numel(), "luminamoon.minhash: a and b must have the same length, got ",
                 a_in.numel(), " and ", b_in.numel());
  LM_CHECK_VALUE(precision == 64 || precision == 32, "luminamoon.minhash: precision must be 32 or 64, got ",
                 precision);
  LM_CHECK_VALUE(same_device(doc_offsets, shingle_hashes) && same_device(a_in, shingle_hashes) &&
                     same_device(b_in, shingle_hashes),
                 "luminamoon.minhash: all tensors must be on one device, got ", device_name(shingle_hashes), ", ",
                 device_name(doc_offsets), ", ", device_name(a_in), ", ", device_name(b_in));
  const int64_t n = doc_offsets.numel() - 1, H = a_in.numel(), M = shingle_hashes.numel();
  LM_CHECK_VALUE(H == 0 || n <= (INT64_MAX / 8) / H, "luminamoon.minhash: an output of ", n, " x ", H,
                 " int64 values does not fit in memory addressing");
  torch::stable::accelerator::DeviceGuard guard(shingle_hashes.get_device_index());
  const Tensor h = torch::stable::contiguous(shingle_hashes), off = torch::stable::contiguous(doc_offsets);
  const Tensor a = torch::stable::contiguous(a_in), b = torch::stable::contiguous(b_in);
  void *sp = nullptr;
  LM_CHECK(aoti_torch_get_current_cuda_stream(int32_t(h.get_device_index()), &sp) == AOTI_TORCH_SUCCESS,
           "luminamoon.minhash: cannot get the current CUDA stream");
  cudaStream_t stream = static_cast<cudaStream_t>(sp);
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  const bool capturing = cudaStreamIsCapturing(stream, &cap) == cudaSuccess && cap != cudaStreamCaptureStatusNone;
  if (!capturing) {
    Tensor flag = empty_on(off, {1}, ScalarType::Int);
    minhash_cuda_check(lm_cuda_minhash_validate(cptr<int64_t>(off), static_cast<size_t>(n), static_cast<size_t>(M),
                                                mptr<int32_t>(flag), stream));
    int32_t f = 0;
    minhash_cuda_check(cudaMemcpyAsync(&f, flag.const_data_ptr(), sizeof f, cudaMemcpyDeviceToHost, stream));
    minhash_cuda_check(cudaStreamSynchronize(stream));
    LM_CHECK_VALUE(!(f & LM_CUDA_BAD_NEGATIVE), "luminamoon.minhash: doc_offsets must be non-negative");
    LM_CHECK_VALUE(!(f & LM_CUDA_BAD_DECREASING), "luminamoon.minhash: doc_offsets must be non-decreasing");
    LM_CHECK_VALUE(!(f & LM_CUDA_BAD_PAST_END), "luminamoon.minhash: doc_offsets point past the end of "
                   "shingle_hashes (", M, " values)");
  }
  Tensor out = empty_on(h, {n, H}, ScalarType::Long);
  if (n == 0 || H == 0) return out;
  minhash_cuda_check(lm_cuda_minhash(M ? cptr<uint64_t>(h) : nullptr, static_cast<size_t>(M), cptr<int64_t>(off),
                                     static_cast<size_t>(n), cptr<uint64_t>(a), cptr<uint64_t>(b),
                                     static_cast<size_t>(H), static_cast<int>(precision), mptr<uint64_t>(out), stream));
  return out;
}

}  // namespace
}  // namespace luminamoon

STABLE_TORCH_LIBRARY_IMPL(luminamoon, CUDA, m) { m.impl("minhash", TORCH_BOX(&luminamoon::minhash_cuda)); }
