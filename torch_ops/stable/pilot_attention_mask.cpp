// Stable-ABI pilot (issue 15 part 2): torch.ops.luminamoon_stable.attention_mask, the same operator as
// luminamoon::attention_mask (torch_ops/ops_cpu.cpp) written against the LibTorch stable ABI only:
// torch/csrc/stable/ headers and torch/headeronly, no ATen/c10 C++ symbols, TORCH_TARGET_VERSION 2.10,
// so that one binary loads in every torch >= 2.10. Not part of luminamoon._C: built on its own by
// scripts/stable_abi_pilot.sh (a separate .so, compiled with -DTORCH_TARGET_VERSION=...) and checked
// there under each torch. docs/stable_abi.md says what the other operators need.
//
//   attention_mask(Tensor lengths, int max_len) -> Tensor
//     lengths: int64 [N]; -> int64 [N, max_len], out[i, j] = j < clamp(lengths[i], 0, max_len)
//   Errors: std::runtime_error (the stable ABI has no TypeError/ValueError: see docs/stable_abi.md).
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>
#include <torch/headeronly/util/Exception.h>

#include <algorithm>
#include <cstdint>

namespace luminamoon_stable {

using torch::stable::Tensor;

Tensor attention_mask_cpu(Tensor lengths, int64_t max_len) {
  STD_TORCH_CHECK(lengths.scalar_type() == torch::headeronly::ScalarType::Long,
                  "luminamoon.attention_mask: lengths must be int64");
  STD_TORCH_CHECK(lengths.dim() == 1, "luminamoon.attention_mask: lengths must be 1-D, got ", lengths.dim(),
                  " dimensions");
  STD_TORCH_CHECK(max_len >= 0, "luminamoon.attention_mask: max_len must be >= 0, got ", max_len);
  Tensor len = torch::stable::contiguous(lengths);
  const int64_t n = len.numel();
  STD_TORCH_CHECK(max_len == 0 || n <= INT64_MAX / max_len, "luminamoon.attention_mask: N * max_len overflows");
  Tensor out = torch::stable::new_empty(len, {n, max_len});
  const int64_t *l = len.const_data_ptr<int64_t>();
  int64_t *o = out.mutable_data_ptr<int64_t>();
  torch::stable::parallel_for(0, n, 256, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++) {
      int64_t k = std::min(std::max(l[i], int64_t(0)), max_len);
      std::fill(o + i * max_len, o + i * max_len + k, int64_t(1));
      std::fill(o + i * max_len + k, o + (i + 1) * max_len, int64_t(0));
    }
  });
  return out;
}

}  // namespace luminamoon_stable

STABLE_TORCH_LIBRARY(luminamoon_stable, m) { m.def("attention_mask(Tensor lengths, int max_len) -> Tensor"); }

STABLE_TORCH_LIBRARY_IMPL(luminamoon_stable, CPU, m) {
  m.impl("attention_mask", TORCH_BOX(&luminamoon_stable::attention_mask_cpu));
}
