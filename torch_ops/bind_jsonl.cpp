// Binding of the JSON Lines scanner (core jsonl.h):
// _C.jsonl_scan(buf, key, max_line_bytes) -> (line_ends int64[L], status int8[L],
//     text_offsets int64[K+1], text_data uint8[...]) as CPU tensors (bind_array.h: zero
// copy, freed by the tensors); the GIL is released while scanning.  buf: any C-contiguous bytes-like object (bytes,
// bytearray, memoryview, numpy uint8); key: str (UTF-8) or bytes.
#include "bind_array.h"
#include "bind_common.h"

extern "C" {
#include "luminamoon/jsonl.h"
}

namespace luminamoon {

namespace {

py::tuple jsonl_scan(const py::buffer &buf_o, const py::object &key_o, int64_t max_line_bytes) {
  std::string key;
  if (py::isinstance<py::str>(key_o)) {
    key = key_o.cast<std::string>();
  } else if (py::isinstance<py::bytes>(key_o)) {
    key = std::string(key_o.cast<py::bytes>());
  } else {
    throw py::type_error("jsonl_scan: key must be str or bytes");
  }
  if (key.empty()) throw py::value_error("jsonl_scan: key must not be empty");
  py::buffer_info info = buf_o.request();
  if (info.ndim > 1 || (info.ndim == 1 && info.strides[0] != info.itemsize))
    throw py::value_error("jsonl_scan: buf must be a contiguous 1-D bytes-like object");
  const size_t len = static_cast<size_t>(info.size) * static_cast<size_t>(info.itemsize);
  const uint8_t *buf = static_cast<const uint8_t *>(info.ptr);
  size_t n_lines = 0;
  if (lm_jsonl_count_lines(buf, len, &n_lines) != LM_OK) throw py::value_error("jsonl_scan: bad buffer");
  ArrayOut ends(Dt::i64, static_cast<int64_t>(n_lines));
  ArrayOut status(Dt::i8, static_cast<int64_t>(n_lines));
  ArrayOut offs(Dt::i64, static_cast<int64_t>(n_lines) + 1);
  ArrayOut data(Dt::u8, static_cast<int64_t>(len));
  uint8_t *dp = data.data<uint8_t>();
  int64_t *op = offs.data<int64_t>(), *ep = ends.data<int64_t>();
  int8_t *sp = status.data<int8_t>();
  size_t n_ok = 0;
  lm_status st;
  {
    py::gil_scoped_release nogil;
    st = lm_jsonl_scan(buf, len, reinterpret_cast<const uint8_t *>(key.data()), key.size(), max_line_bytes, dp, op,
                       ep, sp, n_lines, &n_ok);
  }
  if (st != LM_OK) throw py::value_error(std::string("jsonl_scan: ") + lm_status_str(st));
  const int64_t used = op[n_ok];
  offs.shrink(static_cast<int64_t>(n_ok) + 1);
  data.shrink(used);
  return py::make_tuple(ends.tensor(), status.tensor(), offs.tensor(), data.tensor());
}

}  // namespace

void bind_jsonl(py::module_ &m) {
  m.def("jsonl_scan", &jsonl_scan, py::arg("buf"), py::arg("key"), py::arg("max_line_bytes") = -1,
        "JSON Lines fast path: per line its end and status (0 ok, 1 blank, 2 slow, 3 too long), and the "
        "decoded `key` strings of the ok lines as (offsets, data)");
}

}  // namespace luminamoon
