// Shared argument checks and status mapping for the luminamoon torch ops.
// Thin layer: check arguments, take pointers from tensors, call core/ or csrc/.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <string>

extern "C" {
#include "luminamoon/parallel.h"
#include "luminamoon/status.h"
#include "luminamoon/string_tensor.h"
}

namespace luminamoon {

// Raise the Python exception that fits a core status, naming the operation.
[[noreturn]] inline void throw_status(lm_status s, const char *what) {
  std::string msg = std::string(what) + ": " + lm_status_str(s);
  switch (s) {
    case LM_EINVAL:
    case LM_EUTF8:
    case LM_ECORRUPT:
    case LM_EOVERFLOW:
    case LM_ETOOBIG:
      TORCH_CHECK_VALUE(false, msg);
    case LM_ERANGE:
      TORCH_CHECK_INDEX(false, msg);
    default:
      TORCH_CHECK(false, msg);
  }
}

inline void check(lm_status s, const char *what) {
  if (s != LM_OK) throw_status(s, what);
}

// An int64 [n, max_len] output must fit in memory addressing: ValueError naming
// max_len otherwise (not the allocator's "storage size calculation overflowed").
inline void check_matrix_size(const char *op, int64_t n, int64_t max_len) {
  TORCH_CHECK_VALUE(max_len >= 0, "luminamoon.", op, ": max_len must be >= 0, got ", max_len);
  TORCH_CHECK_VALUE(max_len == 0 || n <= (INT64_MAX / 8) / max_len, "luminamoon.", op, ": max_len=", max_len,
                    " for ", n, " rows needs an int64 output of more than 2^63 bytes");
}

// The exec config for CPU kernels: torch's intra-op thread count.
lm_exec cpu_exec();

// offsets: 1-D int32/int64 contiguous, >= 1 entry; data: 1-D uint8 contiguous;
// same device.  On the CPU also monotone, non-negative and within data.
// `op` and the argument names go into the messages.
// Returns the offsets to use: on the CPU a private snapshot (a copy), checked
// here, so that another thread writing into the caller's offsets while the op
// runs (the GIL is released) can never make the kernel read outside `data`;
// on other devices the offsets themselves (the CUDA kernels clamp every string).
at::Tensor check_strings(const char *op, const at::Tensor &offsets, const at::Tensor &data,
                   const char *offsets_name = "offsets", const char *data_name = "data");

// views: [N,16] uint8 contiguous on the CPU; buffers: 1-D uint8 contiguous CPU
// tensors.  check_views_bounds also checks every long view lies inside its
// buffer (for ops that read every payload); the comparison ops check each view
// right before they read its payload instead (raise_view_bounds maps the status).
// check_views returns the views themselves: the equality / hash kernels check the
// inline padding in their first pass (LM_ECORRUPT, mapped by raise_view_bounds; the
// prefix match never reads padding), and every views kernel reads each view it
// dereferences once and re-checks it.  check_views_bounds returns a private snapshot (a copy) of the views,
// checked here (inline padding zero: ValueError; bounds), for the kernel to read: a
// racing writer cannot move a view after its check.
at::Tensor check_views(const char *op, const at::Tensor &views, const at::TensorList buffers,
                       const char *views_name = "views");
at::Tensor check_views_bounds(const char *op, const at::Tensor &views, const at::TensorList buffers,
                              const char *views_name = "views");
// Map a views-kernel status: LM_ECORRUPT -> ValueError naming the first inline view of
// `views` with non-zero padding; LM_ERANGE -> ValueError (a view outside its buffer).
void raise_view_bounds(lm_status s, const char *op, const char *views_name, const at::Tensor &views);
[[noreturn]] void raise_padding(const char *op, const char *views_name, const at::Tensor &views);

// attention_mask: lengths int64 1-D, max_len >= 0 and an [N, max_len] int64 output that fits
// (TypeError / ValueError otherwise).  attention_mask_aten checks them and computes the mask with
// ATen ops on any device (the CUDA kernel and the fallback for other devices).
void check_attention_mask_args(const at::Tensor &lengths, int64_t max_len);
at::Tensor attention_mask_aten(const at::Tensor &lengths, int64_t max_len);

inline const lm_string_view *views_ptr(const at::Tensor &views) {
  return reinterpret_cast<const lm_string_view *>(views.data_ptr<uint8_t>());
}

std::vector<const uint8_t *> buffer_ptrs(const at::TensorList buffers);
std::vector<size_t> buffer_sizes(const at::TensorList buffers);

// The lm_payloads of a list of buffer tensors (owns the pointer/size arrays).
struct Payloads {
  std::vector<const uint8_t *> ptrs;
  std::vector<size_t> sizes;
  lm_payloads p;
  explicit Payloads(const at::TensorList buffers) : ptrs(buffer_ptrs(buffers)), sizes(buffer_sizes(buffers)) {
    p = {ptrs.data(), sizes.data(), uint32_t(ptrs.size())};
  }
  const lm_payloads *get() const { return &p; }
};

}  // namespace luminamoon
