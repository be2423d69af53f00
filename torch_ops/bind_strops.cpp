// The eager CPU fast path of StringTensor.starts_with / filter_by_prefix / fast_eq / hash64 (issue 13,
// acceptance 7): the same core kernels as the operators torch.ops.luminamoon.prefix_match, equal_scalar,
// equal, hash64 and views_* (torch_ops/ops_cpu.cpp), called from the pybind11 module luminamoon._C.
//
// Why: a torch.ops call costs ~3.5-5 us of dispatch (boxing, schema matching, the output allocated by
// ATen), serial, on top of the kernel; on 68k documents the kernels take 25-38 us, so the dispatch capped
// the 2-thread speed-up at ~1.6x.  These functions borrow the tensors through DLPack (bind_array.h) and
// hand the output back the same way (an ArrayOut: malloc'd, or from 256 KiB a mapping of bind_array.h's
// pool): ~1-2 us a call.
//
// Contract (python/luminamoon/string_tensor.py is the only caller): the arguments are a StringTensor's own
// layouts, already well-typed.  Every check here is a cheap shape/dtype/device test; when one fails, or
// the kernel returns any status other than LM_OK (bad offsets, a view outside its buffer, non-zero inline
// padding, no memory), the function returns None and the caller repeats the call through torch.ops, which
// raises its usual error (same type, same message).  An argument that is no array at all, or a
// non-contiguous one, raises get_array's TypeError / ValueError here instead (string_tensor.py never
// passes one: its layouts are contiguous CPU tensors).  The kernels are the *_checked / views kernels, which
// never read outside the payload even when another thread writes the offsets/views while the call runs.
// The GIL is released around each kernel call.  Threads: torch.get_num_threads() (exec_for(0)), as the
// operators.
#include <pybind11/pybind11.h>

#include <memory>
#include <string>
#include <vector>

#include "common.h"

namespace py = pybind11;

namespace luminamoon {
namespace {

bool is_strings(const ArrayIn &o, const ArrayIn &d) {
  return o.cpu && d.cpu && o.contiguous && d.contiguous && o.ndim == 1 && d.ndim == 1 && o.numel >= 1 &&
         (o.dt == Dt::i32 || o.dt == Dt::i64) && d.dt == Dt::u8;
}

// A str argument as UTF-8 bytes (the caller checked it encodes).
std::string utf8_of(py::handle s) {
  Py_ssize_t n = 0;
  const char *p = PyUnicode_AsUTF8AndSize(s.ptr(), &n);
  if (!p) throw py::error_already_set();
  return std::string(p, size_t(n));
}

using match32_fn = lm_status (*)(const int32_t *, size_t, const uint8_t *, size_t, const uint8_t *, size_t, uint8_t *,
                                 const lm_exec *);
using match64_fn = lm_status (*)(const int64_t *, size_t, const uint8_t *, size_t, const uint8_t *, size_t, uint8_t *,
                                 const lm_exec *);

// mode 0: prefix_match, 1: equal_scalar.  bool [N] or None.
py::object offsets_match(py::handle offsets, py::handle data, py::handle pat, int mode) {
  ArrayIn o, d;
  get_array(o, offsets, "offsets", kRequireContiguous);
  get_array(d, data, "data", kRequireContiguous);
  if (!is_strings(o, d) || !PyUnicode_Check(pat.ptr())) return py::none();
  const std::string p = utf8_of(pat);
  const int64_t n = o.numel - 1;
  ArrayOut out(Dt::b8, n, -1, false, true);
  lm_exec e = exec_for(0);
  const match32_fn f32 = mode ? &lm_o32_equal_scalar_checked : &lm_o32_prefix_match_checked;
  const match64_fn f64 = mode ? &lm_o64_equal_scalar_checked : &lm_o64_prefix_match_checked;
  const auto *pp = reinterpret_cast<const uint8_t *>(p.data());
  const uint8_t *dp = d.numel ? d.data<uint8_t>() : nullptr;
  uint8_t *op = out.data<uint8_t>();
  lm_status s;
  {
    py::gil_scoped_release nogil;
    s = o.dt == Dt::i32 ? f32(o.data<int32_t>(), size_t(n), dp, size_t(d.numel), pp, p.size(), op, &e)
                        : f64(o.data<int64_t>(), size_t(n), dp, size_t(d.numel), pp, p.size(), op, &e);
  }
  if (s != LM_OK) return py::none();
  return out.tensor();
}

py::object offsets_equal(py::handle oa_, py::handle da_, py::handle ob_, py::handle db_) {
  ArrayIn oa, da, ob, db;
  get_array(oa, oa_, "offsets_a", kRequireContiguous);
  get_array(da, da_, "data_a", kRequireContiguous);
  get_array(ob, ob_, "offsets_b", kRequireContiguous);
  get_array(db, db_, "data_b", kRequireContiguous);
  if (!is_strings(oa, da) || !is_strings(ob, db) || oa.numel != ob.numel || oa.dt != ob.dt) return py::none();
  const int64_t n = oa.numel - 1;
  ArrayOut out(Dt::b8, n, -1, false, true);
  lm_exec e = exec_for(0);
  const uint8_t *pa = da.numel ? da.data<uint8_t>() : nullptr, *pb = db.numel ? db.data<uint8_t>() : nullptr;
  const size_t la = size_t(da.numel), lb = size_t(db.numel);
  uint8_t *op = out.data<uint8_t>();
  lm_status s;
  {
    py::gil_scoped_release nogil;
    s = oa.dt == Dt::i32
            ? lm_o32_equal_checked(oa.data<int32_t>(), pa, la, ob.data<int32_t>(), pb, lb, size_t(n), op, &e)
            : lm_o64_equal_checked(oa.data<int64_t>(), pa, la, ob.data<int64_t>(), pb, lb, size_t(n), op, &e);
  }
  if (s != LM_OK) return py::none();
  return out.tensor();
}

py::object offsets_hash64(py::handle offsets, py::handle data, int64_t seed) {
  ArrayIn o, d;
  get_array(o, offsets, "offsets", kRequireContiguous);
  get_array(d, data, "data", kRequireContiguous);
  if (!is_strings(o, d)) return py::none();
  const int64_t n = o.numel - 1;
  ArrayOut out(Dt::i64, n, -1, false, true);
  lm_exec e = exec_for(0);
  const uint8_t *dp = d.numel ? d.data<uint8_t>() : nullptr;
  uint64_t *op = out.data<uint64_t>();
  lm_status s;
  {
    py::gil_scoped_release nogil;
    s = o.dt == Dt::i32 ? lm_o32_hash64_checked(o.data<int32_t>(), size_t(n), dp, size_t(d.numel), uint64_t(seed), op, &e)
                        : lm_o64_hash64_checked(o.data<int64_t>(), size_t(n), dp, size_t(d.numel), uint64_t(seed), op, &e);
  }
  if (s != LM_OK) return py::none();
  return out.tensor();
}

// A views layout borrowed for one call: views uint8 [N, 16] contiguous CPU, buffers 1-D uint8 contiguous
// CPU arrays.  ok == false when anything else (the caller then takes the torch.ops path).
struct Views {
  ArrayIn views;
  std::vector<std::unique_ptr<ArrayIn>> bufs;
  std::vector<const uint8_t *> ptrs;
  std::vector<size_t> sizes;
  lm_payloads p{};
  size_t n = 0;
  bool ok = false;
  Views(py::handle v, py::handle buffers) {
    get_array(views, v, "views", kRequireContiguous);
    if (!views.cpu || !views.contiguous || views.dt != Dt::u8 || views.ndim != 2 || views.shape[1] != 16) return;
    if (!PyTuple_Check(buffers.ptr()) && !PyList_Check(buffers.ptr())) return;
    const Py_ssize_t nb = PySequence_Fast_GET_SIZE(buffers.ptr());
    if (nb > Py_ssize_t(UINT32_MAX)) return;
    PyObject **items = PySequence_Fast_ITEMS(buffers.ptr());
    bufs.reserve(size_t(nb));
    ptrs.reserve(size_t(nb));
    sizes.reserve(size_t(nb));
    for (Py_ssize_t i = 0; i < nb; i++) {
      bufs.emplace_back(new ArrayIn());
      ArrayIn &b = *bufs.back();
      get_array(b, py::handle(items[i]), "buffers", kRequireContiguous);
      if (!b.cpu || !b.contiguous || b.dt != Dt::u8 || b.ndim != 1) return;
      ptrs.push_back(b.numel ? b.data<uint8_t>() : nullptr);
      sizes.push_back(size_t(b.numel));
    }
    p = {ptrs.data(), sizes.data(), uint32_t(nb)};
    n = size_t(views.shape[0]);
    ok = true;
  }
  const lm_string_view *v() const { return n ? views.data<lm_string_view>() : nullptr; }
};

py::object views_match(py::handle views, py::handle buffers, py::handle pat, int mode) {
  Views a(views, buffers);
  if (!a.ok || !PyUnicode_Check(pat.ptr())) return py::none();
  const std::string p = utf8_of(pat);
  ArrayOut out(Dt::b8, int64_t(a.n), -1, false, true);
  lm_exec e = exec_for(0);
  const auto *pp = reinterpret_cast<const uint8_t *>(p.data());
  uint8_t *op = out.data<uint8_t>();
  lm_status s;
  {
    py::gil_scoped_release nogil;
    s = mode ? lm_views_equal_scalar(a.v(), a.n, &a.p, pp, p.size(), op, &e)
             : lm_views_prefix_match(a.v(), a.n, &a.p, pp, p.size(), op, &e);
  }
  if (s != LM_OK) return py::none();
  return out.tensor();
}

// StringTensor.filter_by_prefix: the kept views (uint8 [K, 16]) in one pass, or None.  The output is
// allocated for every view and shrunk to the kept ones (ArrayOut::shrink, realloc in place), so no mask is
// written, counted and read again.  malloc'd, not pooled: a pooled mapping of every view's size, shrunk by
// mremap, never went back to the pool whole, so each call mapped a fresh one (3.3-8.4 against 1.2 ns a
// string on 1 M words).
py::object views_filter_prefix(py::handle views, py::handle buffers, py::handle pat) {
  Views a(views, buffers);
  if (!a.ok || !PyUnicode_Check(pat.ptr())) return py::none();
  const std::string p = utf8_of(pat);
  ArrayOut out(Dt::u8, int64_t(a.n), int64_t(sizeof(lm_string_view)), false, false);
  lm_exec e = exec_for(0);
  const auto *pp = reinterpret_cast<const uint8_t *>(p.data());
  auto *op = a.n ? reinterpret_cast<lm_string_view *>(out.data<uint8_t>()) : nullptr;
  size_t kept = 0;
  lm_status s;
  {
    py::gil_scoped_release nogil;
    s = lm_views_filter_prefix(a.v(), a.n, &a.p, pp, p.size(), op, &kept, &e);
  }
  if (s != LM_OK) return py::none();
  out.shrink(int64_t(kept));
  return out.tensor();
}

py::object views_equal(py::handle va, py::handle ba, py::handle vb, py::handle bb) {
  Views a(va, ba), b(vb, bb);
  if (!a.ok || !b.ok || a.n != b.n) return py::none();
  ArrayOut out(Dt::b8, int64_t(a.n), -1, false, true);
  lm_exec e = exec_for(0);
  uint8_t *op = out.data<uint8_t>();
  lm_status s;
  {
    py::gil_scoped_release nogil;
    s = lm_views_equal(a.v(), &a.p, b.v(), &b.p, a.n, op, &e);
  }
  if (s != LM_OK) return py::none();
  return out.tensor();
}

py::object views_hash64(py::handle views, py::handle buffers, int64_t seed) {
  Views a(views, buffers);
  if (!a.ok) return py::none();
  ArrayOut out(Dt::i64, int64_t(a.n), -1, false, true);
  lm_exec e = exec_for(0);
  uint64_t *op = out.data<uint64_t>();
  lm_status s;
  {
    py::gil_scoped_release nogil;
    s = lm_views_hash64(a.v(), a.n, &a.p, uint64_t(seed), op, &e);
  }
  if (s != LM_OK) return py::none();
  return out.tensor();
}

// The views of an offsets layout (StringTensor._materialize_views on the CPU), or None: the array on a
// pooled mapping (bind_array.h: huge pages from 2 MiB, no page faults when a released one is reused),
// where torch.ops.luminamoon.views_from_offsets gets ATen's allocation.
py::object views_from_offsets(py::handle offsets, py::handle data) {
  ArrayIn o, d;
  get_array(o, offsets, "offsets", kRequireContiguous);
  get_array(d, data, "data", kRequireContiguous);
  if (!is_strings(o, d)) return py::none();
  const int64_t n = o.numel - 1;
  ArrayOut out(Dt::u8, n, int64_t(sizeof(lm_string_view)), false, true);
  lm_exec e = exec_for(0);
  const uint8_t *dp = d.numel ? d.data<uint8_t>() : nullptr;
  auto *v = n ? reinterpret_cast<lm_string_view *>(out.data<uint8_t>()) : nullptr;
  lm_status s;
  {
    py::gil_scoped_release nogil;
    s = o.dt == Dt::i32 ? lm_views_from_offsets32(o.data<int32_t>(), size_t(n), dp, size_t(d.numel), 0, v, &e)
                        : lm_views_from_offsets64(o.data<int64_t>(), size_t(n), dp, size_t(d.numel), 0, v, &e);
  }
  if (s != LM_OK) return py::none();
  return out.tensor();
}

}  // namespace

// Registered by module.cpp.  Names start with "fast_": not public API (string_tensor.py only).
void bind_strops(py::module_ &m) {
  m.def("fast_offsets_match", &offsets_match, py::arg("offsets"), py::arg("data"), py::arg("pattern"),
        py::arg("mode"));
  m.def("fast_offsets_equal", &offsets_equal, py::arg("offsets_a"), py::arg("data_a"), py::arg("offsets_b"),
        py::arg("data_b"));
  m.def("fast_offsets_hash64", &offsets_hash64, py::arg("offsets"), py::arg("data"), py::arg("seed"));
  m.def("fast_views_match", &views_match, py::arg("views"), py::arg("buffers"), py::arg("pattern"), py::arg("mode"));
  m.def("fast_views_filter_prefix", &views_filter_prefix, py::arg("views"), py::arg("buffers"), py::arg("pattern"));
  m.def("fast_views_equal", &views_equal, py::arg("views_a"), py::arg("buffers_a"), py::arg("views_b"),
        py::arg("buffers_b"));
  m.def("fast_views_hash64", &views_hash64, py::arg("views"), py::arg("buffers"), py::arg("seed"));
  m.def("fast_views_from_offsets", &views_from_offsets, py::arg("offsets"), py::arg("data"));
}

}  // namespace luminamoon
