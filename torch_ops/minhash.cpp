// MinHash (issue 12): the CPU kernel of torch.ops.luminamoon.minhash (minhash_cpu; schema in
// schema.cpp, CUDA kernel minhash_cuda in minhash_cuda.cu, fake kernel in python/luminamoon/ops.py),
// part of the stable-ABI extension luminamoon._ops (torch_ops/stable/stable_common.h).  The pybind11
// class _C.MinHash is in bind_minhash.cpp.
//
//   minhash(Tensor shingle_hashes, Tensor doc_offsets, Tensor a, Tensor b, int precision=64) -> Tensor
//     shingle_hashes: int64 [M] (the uint64 bit patterns of the shingle hashes)
//     doc_offsets:    int64 [N+1], non-negative, non-decreasing, doc_offsets[N] <= M; document i
//                     owns shingle_hashes[doc_offsets[i] : doc_offsets[i+1]]
//     a, b:           int64 [H] (uint64 bit patterns of the permutation parameters)
//     precision:      64, or 32 (each permuted value masked to 32 bits before the minimum)
//   -> int64 [N, H]: out[i, j] = min over the document's shingles h of
//      ((h * a[j] + b[j]) mod 2^64) mod (2^61 - 1)  (masked for 32), or -1 (all bits set:
//      LM_MINHASH_EMPTY) for a document without shingles.  CPU and CUDA give identical bits.
//   Errors: TypeError (dtype), ValueError (shape, devices, offsets, precision).
#include <algorithm>

#include "stable_common.h"

extern "C" {
#include "luminamoon/minhash.h"
}

namespace luminamoon {
namespace {

// The checks shared by the CPU and CUDA kernels (no device synchronisation).
void check_minhash_args(const Tensor &h, const Tensor &off, const Tensor &a, const Tensor &b, int64_t precision) {
  auto dt = [](const Tensor &t, const char *name) {
    LM_CHECK_TYPE(t.scalar_type() == ScalarType::Long, "luminamoon.minhash: ", name, " must be int64, got ",
                  dtype_name(t.scalar_type()));
    LM_CHECK_VALUE(t.dim() == 1, "luminamoon.minhash: ", name, " must be 1-D, got shape ", shape_of(t));
  };
  dt(h, "shingle_hashes");
  dt(off, "doc_offsets");
  dt(a, "a");
  dt(b, "b");
  LM_CHECK_VALUE(off.numel() >= 1, "luminamoon.minhash: doc_offsets must have N+1 >= 1 entries");
  LM_CHECK_VALUE(a.numel() == b.numel(), "luminamoon.minhash: a and b must have the same length, got ", a.numel(),
                 " and ", b.numel());
  LM_CHECK_VALUE(precision == 64 || precision == 32, "luminamoon.minhash: precision must be 32 or 64, got ",
                 precision);
  LM_CHECK_VALUE(same_device(h, off) && same_device(h, a) && same_device(h, b),
                 "luminamoon.minhash: all tensors must be on one device, got ", device_name(h), ", ",
                 device_name(off), ", ", device_name(a), ", ", device_name(b));
  const int64_t n = off.numel() - 1, H = a.numel();
  LM_CHECK_VALUE(H == 0 || n <= (INT64_MAX / 8) / H, "luminamoon.minhash: an output of ", n, " x ", H,
                 " int64 values does not fit in memory addressing");
}

Tensor minhash_cpu(Tensor shingle_hashes, Tensor doc_offsets, Tensor a_in, Tensor b_in, int64_t precision) {
  check_minhash_args(shingle_hashes, doc_offsets, a_in, b_in, precision);
  // private snapshots of everything small enough to copy (the GIL may be released by callers)
  const Tensor off = torch::stable::contiguous(torch::stable::clone(doc_offsets));
  const Tensor h = torch::stable::contiguous(shingle_hashes);
  const Tensor a = torch::stable::contiguous(a_in), b = torch::stable::contiguous(b_in);
  const int64_t n = off.numel() - 1, H = a.numel(), M = h.numel();
  const int64_t *o = cptr<int64_t>(off);
  LM_CHECK_VALUE(o[0] >= 0, "luminamoon.minhash: doc_offsets must be non-negative, got ", o[0]);
  for (int64_t i = 0; i < n; i++)
    LM_CHECK_VALUE(o[i + 1] >= o[i], "luminamoon.minhash: doc_offsets must be non-decreasing (entry ", i + 1,
                   " is ", o[i + 1], " < ", o[i], ")");
  LM_CHECK_VALUE(o[n] <= M, "luminamoon.minhash: doc_offsets point past the end of shingle_hashes (", o[n], " > ",
                 M, ")");
  Tensor out = empty_on(h, {n, H}, ScalarType::Long);
  if (n == 0 || H == 0) return out;
  const uint64_t *hp = M ? cptr<uint64_t>(h) : nullptr;
  const uint64_t *ap = cptr<uint64_t>(a);
  const uint64_t *bp = cptr<uint64_t>(b);
  uint64_t *op = mptr<uint64_t>(out);
  const uint32_t prec = static_cast<uint32_t>(precision);
  // grain: documents of ~4096 shingles of work per task on average
  const int64_t avg = std::max<int64_t>(1, M / std::max<int64_t>(1, n));
  const int64_t grain = std::max<int64_t>(1, 4096 / avg);
  torch::stable::parallel_for(0, n, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; i++) {
      const size_t cnt = static_cast<size_t>(o[i + 1] - o[i]);
      lm_minhash_from_hashes(ap, bp, static_cast<size_t>(H), prec, cnt ? hp + o[i] : nullptr, cnt, op + i * H);
    }
  });
  return out;
}

}  // namespace
}  // namespace luminamoon

STABLE_TORCH_LIBRARY_IMPL(luminamoon, CPU, m) { m.impl("minhash", TORCH_BOX(&luminamoon::minhash_cpu)); }
