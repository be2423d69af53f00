// The at::Tensor argument checks of the pybind11 module luminamoon._C (module.cpp: to_list,
// views_to_list, validate_utf8, validate_views, hash128), declared in common.h.  Moved here unchanged
// from ops_cpu.cpp when the operators moved to the stable-ABI extension luminamoon._ops (issue 15:
// torch_ops/stable/stable_common.h holds the operators' own checks); _C drops these with libtorch.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>

#include "common.h"

namespace luminamoon {

lm_exec cpu_exec() {
  lm_exec e;
  e.num_threads = at::get_num_threads();
  e.min_items_per_thread = 0;
  return e;
}

at::Tensor check_strings(const char *op, const at::Tensor &offsets, const at::Tensor &data, const char *on,
                         const char *dn) {
  TORCH_CHECK_TYPE(offsets.scalar_type() == at::kInt || offsets.scalar_type() == at::kLong,
                   "luminamoon.", op, ": ", on, " must be an int32 or int64 tensor, got ", offsets.scalar_type());
  TORCH_CHECK_TYPE(data.scalar_type() == at::kByte, "luminamoon.", op, ": ", dn,
                   " must be a uint8 tensor, got ", data.scalar_type());
  TORCH_CHECK_VALUE(offsets.dim() == 1 && offsets.numel() >= 1, "luminamoon.", op, ": ", on,
                    " must be 1-D with N+1 >= 1 entries, got shape ", offsets.sizes());
  TORCH_CHECK_VALUE(data.dim() == 1, "luminamoon.", op, ": ", dn, " must be 1-D, got shape ", data.sizes());
  TORCH_CHECK_VALUE(offsets.is_contiguous(), "luminamoon.", op, ": ", on, " must be contiguous");
  TORCH_CHECK_VALUE(data.is_contiguous(), "luminamoon.", op, ": ", dn, " must be contiguous");
  TORCH_CHECK_VALUE(offsets.device() == data.device(), "luminamoon.", op, ": ", on, " and ", dn,
                    " must be on the same device, got ", offsets.device(), " and ", data.device());
  if (!offsets.is_cpu()) return offsets;
  // One snapshot, checked and then used by the kernel: the caller's tensor may be
  // written by another thread while the op runs with the GIL released.
  at::Tensor snap = offsets.clone();
  const size_t n = size_t(snap.numel() - 1), len = size_t(data.numel());
  lm_status s = snap.scalar_type() == at::kInt ? lm_offsets32_validate(snap.data_ptr<int32_t>(), n, len)
                                               : lm_offsets64_validate(snap.data_ptr<int64_t>(), n, len);
  TORCH_CHECK_VALUE(s != LM_EINVAL, "luminamoon.", op, ": ", on, " must be non-negative and non-decreasing");
  TORCH_CHECK_VALUE(s != LM_ERANGE, "luminamoon.", op, ": ", on, " point past the end of ", dn, " (",
                    dn, " has ", len, " bytes)");
  return snap;
}

std::vector<size_t> buffer_sizes(const at::TensorList buffers) {
  std::vector<size_t> s;
  s.reserve(buffers.size());
  for (const auto &b : buffers) s.push_back(size_t(b.numel()));
  return s;
}

std::vector<const uint8_t *> buffer_ptrs(const at::TensorList buffers) {
  std::vector<const uint8_t *> p;
  p.reserve(buffers.size());
  for (const auto &b : buffers) p.push_back(b.numel() ? b.data_ptr<uint8_t>() : nullptr);
  return p;
}

at::Tensor check_views(const char *op, const at::Tensor &views, const at::TensorList buffers, const char *vn) {
  TORCH_CHECK_TYPE(views.scalar_type() == at::kByte, "luminamoon.", op, ": ", vn, " must be uint8, got ",
                   views.scalar_type());
  TORCH_CHECK_VALUE(views.dim() == 2 && views.size(1) == 16, "luminamoon.", op, ": ", vn,
                    " must have shape [N, 16], got ", views.sizes());
  TORCH_CHECK_VALUE(views.is_cpu(), "luminamoon.", op, ": ", vn, " must be on the CPU (the views layout is CPU-only)");
  TORCH_CHECK_VALUE(views.is_contiguous(), "luminamoon.", op, ": ", vn, " must be contiguous");
  for (size_t i = 0; i < buffers.size(); i++) {
    const auto &b = buffers[i];
    TORCH_CHECK_TYPE(b.scalar_type() == at::kByte, "luminamoon.", op, ": buffers[", i, "] must be uint8");
    TORCH_CHECK_VALUE(b.dim() == 1 && b.is_cpu() && b.is_contiguous(), "luminamoon.", op, ": buffers[", i,
                      "] must be a contiguous 1-D CPU tensor");
  }
  TORCH_CHECK_VALUE(buffers.size() <= UINT32_MAX, "luminamoon.", op, ": too many buffers");
  // The equality / hash kernels check the inline padding in their first pass over the
  // views (LM_ECORRUPT: raise_view_bounds names the view; the prefix match never reads
  // padding, so its answer cannot depend on it), and read each view they dereference
  // once and re-check it, so a racing writer cannot make them read out of bounds: no copy
  // of the whole views tensor is needed.
  return views;
}

[[noreturn]] void raise_padding(const char *op, const char *vn, const at::Tensor &views) {
  size_t bad = 0;
  lm_views_check_padding(views_ptr(views), size_t(views.size(0)), &bad);
  TORCH_CHECK_VALUE(false, "luminamoon.", op, ": ", vn, "[", bad, "] is an inline view (length <= 12) with "
                    "non-zero padding bytes after the string; Arrow string views must be zero-padded");
}

at::Tensor check_views_bounds(const char *op, const at::Tensor &views_in, const at::TensorList buffers,
                              const char *vn) {
  check_views(op, views_in, buffers, vn);  // shapes and types
  // One snapshot, checked and then used by the kernel (see check_strings): these ops read
  // every payload anyway, so the copy of the views costs little next to them.
  at::Tensor snap = views_in.clone();
  if (lm_views_check_padding(views_ptr(snap), size_t(snap.size(0)), nullptr) != LM_OK) raise_padding(op, vn, snap);
  auto sizes = buffer_sizes(buffers);
  lm_status s = lm_views_check_bounds(views_ptr(snap), size_t(snap.size(0)), sizes.data(), uint32_t(sizes.size()));
  TORCH_CHECK_VALUE(s == LM_OK, "luminamoon.", op, ": ", vn, " holds a view outside its payload buffer "
                    "(bad buffer index, offset or length)");
  return snap;
}

void raise_view_bounds(lm_status s, const char *op, const char *vn, const at::Tensor &views) {
  if (s == LM_ECORRUPT) raise_padding(op, vn, views);
  TORCH_CHECK_VALUE(s != LM_ERANGE, "luminamoon.", op, ": ", vn, " holds a view outside its payload buffer "
                    "(bad buffer index, offset or length)");
  check(s, op);
}

}  // namespace luminamoon
