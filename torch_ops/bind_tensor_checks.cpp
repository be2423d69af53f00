// The argument checks of the pybind11 module luminamoon._C (module.cpp: to_list, views_to_list,
// validate_utf8, validate_views, hash128), declared in common.h.  libtorch-free (bind_array.h); the
// operators' own checks are in torch_ops/stable/stable_common.h (luminamoon._ops).
#include <cstring>

#include "common.h"

namespace luminamoon {

void check_strings(StringsArg &s, const char *op, py::handle offsets, py::handle data) {
  const std::string p = std::string("luminamoon.") + op + ": ";
  get_array(s.off_in, offsets, p + "offsets", kRequireContiguous);
  get_array(s.data, data, p + "data", kRequireContiguous);
  if (s.off_in.dt != Dt::i32 && s.off_in.dt != Dt::i64)
    throw py::type_error(p + "offsets must be an int32 or int64 tensor, got " + s.off_in.dtype_name());
  if (s.data.dt != Dt::u8) throw py::type_error(p + "data must be a uint8 tensor, got " + s.data.dtype_name());
  if (s.off_in.ndim != 1 || s.off_in.numel < 1)
    throw py::value_error(p + "offsets must be 1-D with N+1 >= 1 entries, got shape " + s.off_in.shape_str());
  if (s.data.ndim != 1) throw py::value_error(p + "data must be 1-D, got shape " + s.data.shape_str());
  if (!s.off_in.cpu || !s.data.cpu) throw py::value_error(std::string(op) + ": the strings must be on the CPU");
  // One snapshot, checked and then used: the caller's offsets may be written by another thread
  // while the call runs with the GIL released.
  const size_t n1 = size_t(s.off_in.numel), len = size_t(s.data.numel);
  s.n = n1 - 1;
  s.off64.reset(new int64_t[n1]);
  lm_status st;
  if (s.off_in.dt == Dt::i32) {
    std::unique_ptr<int32_t[]> o32(new int32_t[n1]);
    std::memcpy(o32.get(), s.off_in.data<int32_t>(), n1 * sizeof(int32_t));
    st = lm_offsets32_validate(o32.get(), s.n, len);
    for (size_t i = 0; i < n1; i++) s.off64[i] = o32[i];
  } else {
    std::memcpy(s.off64.get(), s.off_in.data<int64_t>(), n1 * sizeof(int64_t));
    st = lm_offsets64_validate(s.off64.get(), s.n, len);
  }
  if (st == LM_EINVAL) throw py::value_error(p + "offsets must be non-negative and non-decreasing");
  if (st == LM_ERANGE)
    throw py::value_error(p + "offsets point past the end of data (data has " + std::to_string(len) + " bytes)");
  check(st, op);
}

namespace {
[[noreturn]] void raise_padding(const std::string &p, const lm_string_view *v, size_t n) {
  size_t bad = 0;
  lm_views_check_padding(v, n, &bad);
  throw py::value_error(p + "views[" + std::to_string(bad) +
                        "] is an inline view (length <= 12) with non-zero padding bytes after the string; Arrow "
                        "string views must be zero-padded");
}
}  // namespace

void check_views(ViewsArg &a, const char *op, py::handle views, py::handle buffers, bool bounds) {
  const std::string p = std::string("luminamoon.") + op + ": ";
  get_array(a.views_in, views, p + "views", kRequireContiguous);
  if (a.views_in.dt != Dt::u8) throw py::type_error(p + "views must be uint8, got " + a.views_in.dtype_name());
  if (a.views_in.ndim != 2 || a.views_in.shape[1] != 16)
    throw py::value_error(p + "views must have shape [N, 16], got " + a.views_in.shape_str());
  if (!a.views_in.cpu) throw py::value_error(p + "views must be on the CPU (the views layout is CPU-only)");
  py::sequence seq = py::reinterpret_borrow<py::sequence>(buffers);
  if (!PySequence_Check(buffers.ptr())) throw py::type_error(p + "buffers must be a list of uint8 tensors");
  const size_t nb = size_t(py::len(seq));
  if (nb > UINT32_MAX) throw py::value_error(p + "too many buffers");
  for (size_t i = 0; i < nb; i++) {
    a.bufs.emplace_back(new ArrayIn());
    ArrayIn &b = *a.bufs.back();
    const std::string bn = p + "buffers[" + std::to_string(i) + "]";
    get_array(b, seq[i], bn, kRequireContiguous);
    if (b.dt != Dt::u8) throw py::type_error(bn + " must be uint8");
    if (b.ndim != 1 || !b.cpu) throw py::value_error(bn + " must be a contiguous 1-D CPU tensor");
    a.ptrs.push_back(b.numel ? b.data<uint8_t>() : nullptr);
    a.sizes.push_back(size_t(b.numel));
  }
  a.n = size_t(a.views_in.shape[0]);
  a.v = reinterpret_cast<const lm_string_view *>(a.views_in.data<uint8_t>());
  if (!bounds) return;
  // One snapshot, checked and then used (see check_strings): these ops read every payload anyway.
  a.snap.reset(new lm_string_view[a.n ? a.n : 1]);
  if (a.n) std::memcpy(a.snap.get(), a.v, a.n * sizeof(lm_string_view));
  a.v = a.snap.get();
  if (lm_views_check_padding(a.v, a.n, nullptr) != LM_OK) raise_padding(p, a.v, a.n);
  lm_status s = lm_views_check_bounds(a.v, a.n, a.sizes.data(), uint32_t(a.sizes.size()));
  if (s != LM_OK)
    throw py::value_error(p + "views holds a view outside its payload buffer (bad buffer index, offset or length)");
}

}  // namespace luminamoon
