// Binding of the offline near-dup union-find (core near_cluster.h):
// _C.near_union_pairs(parent, size, pairs) updates parent/size in place (numpy
// int64 arrays or CPU int64 tensors, contiguous, writable), GIL released;
// _C.near_union_roots(parent) -> int64 tensor of roots.
#include "bind_common.h"

extern "C" {
#include "luminamoon/near_cluster.h"
}

#include <pybind11/numpy.h>

namespace luminamoon {

namespace {

using I64Array = py::array_t<int64_t, py::array::c_style>;

I64Array writable_i64(const py::object &o, const char *what) {
  if (!py::isinstance<py::array>(o))
    throw py::type_error(std::string("near_union_pairs: ") + what + " must be a numpy int64 array");
  py::array a = o.cast<py::array>();
  if (!a.dtype().is(py::dtype::of<int64_t>()) || !(a.flags() & py::array::c_style) || !a.writeable())
    throw py::type_error(std::string("near_union_pairs: ") + what +
                         " must be a writable, C-contiguous numpy int64 array");
  return a.cast<I64Array>();
}

void near_union_pairs(const py::object &parent_o, const py::object &size_o, const py::object &pairs_o) {
  I64Array parent = writable_i64(parent_o, "parent");
  I64Array size = writable_i64(size_o, "size");
  if (parent.ndim() != 1 || size.ndim() != 1 || parent.shape(0) != size.shape(0))
    throw py::value_error("near_union_pairs: parent and size must be 1-D of the same length");
  if (!py::isinstance<py::array>(pairs_o)) throw py::type_error("near_union_pairs: pairs must be a numpy int64 array");
  py::array pa = pairs_o.cast<py::array>();
  if (!pa.dtype().is(py::dtype::of<int64_t>()) || !(pa.flags() & py::array::c_style))
    throw py::type_error("near_union_pairs: pairs must be a C-contiguous numpy int64 array");
  if (pa.ndim() != 2 || pa.shape(1) != 2)
    throw py::value_error("near_union_pairs: pairs must have shape [P, 2]");
  I64Array pairs = pa.cast<I64Array>();
  int64_t n = parent.shape(0), np_ = pairs.shape(0);
  int64_t *pp = parent.mutable_data(), *sp = size.mutable_data();
  const int64_t *qp = pairs.data();
  lm_status s;
  {
    py::gil_scoped_release nogil;
    s = lm_near_union_pairs(n, pp, sp, qp, np_);
  }
  if (s == LM_ERANGE) throw py::value_error("near_union_pairs: a pair names a document outside [0, n)");
  if (s != LM_OK) raise_status(s, "near_union_pairs");
}

I64Array near_union_roots(const py::object &parent_o) {
  I64Array parent = writable_i64(parent_o, "parent");
  if (parent.ndim() != 1) throw py::value_error("near_union_roots: parent must be 1-D");
  int64_t n = parent.shape(0);
  I64Array root(n);
  int64_t *pp = parent.mutable_data(), *rp = root.mutable_data();
  lm_status s;
  {
    py::gil_scoped_release nogil;
    s = lm_near_union_roots(n, pp, rp);
  }
  if (s != LM_OK) raise_status(s, "near_union_roots");
  return root;
}

}  // namespace

void bind_near_cluster(py::module_ &m) {
  m.def("near_union_pairs", &near_union_pairs, py::arg("parent"), py::arg("size"), py::arg("pairs"),
        "datatrove's MinhashDedupCluster union(a, b) over pairs [P, 2] in order (in place)");
  m.def("near_union_roots", &near_union_roots, py::arg("parent"), "the root of every element");
}

}  // namespace luminamoon
