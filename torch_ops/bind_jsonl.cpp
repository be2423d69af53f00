// Binding of the JSON Lines scanner (core jsonl.h):
// _C.jsonl_scan(buf, key, max_line_bytes, key2=None) -> (line_ends int64[L], status int8[L],
//     text_offsets int64[K+1], text_data uint8[...]) as CPU tensors; with key2 (str or bytes) also
//     (key2_offsets int64[K+1], key2_data uint8[...], key2_ok int8[K]): lm_jsonl_scan2 (bind_array.h: zero
// copy, freed by the tensors); the GIL is released while scanning.  buf: any C-contiguous bytes-like object (bytes,
// bytearray, memoryview, numpy uint8); key: str (UTF-8) or bytes.
#include "bind_array.h"
#include "bind_common.h"

extern "C" {
#include "luminamoon/jsonl.h"
}

namespace luminamoon {

namespace {

std::string key_arg(const py::object &o, const char *name) {
  std::string key;
  if (py::isinstance<py::str>(o)) {
    key = o.cast<std::string>();
  } else if (py::isinstance<py::bytes>(o)) {
    key = std::string(o.cast<py::bytes>());
  } else {
    throw py::type_error(std::string("jsonl_scan: ") + name + " must be str or bytes");
  }
  if (key.empty()) throw py::value_error(std::string("jsonl_scan: ") + name + " must not be empty");
  return key;
}

py::tuple jsonl_scan(const py::buffer &buf_o, const py::object &key_o, int64_t max_line_bytes,
                     const py::object &key2_o) {
  const std::string key = key_arg(key_o, "key");
  const bool two = !key2_o.is_none();
  const std::string key2 = two ? key_arg(key2_o, "key2") : std::string();
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
  // the second key's outputs (allocated, never touched, without key2: 0-sized)
  ArrayOut offs2(Dt::i64, two ? static_cast<int64_t>(n_lines) + 1 : 0);
  ArrayOut data2(Dt::u8, two ? static_cast<int64_t>(len) : 0);
  ArrayOut ok2(Dt::i8, two ? static_cast<int64_t>(n_lines) : 0);
  size_t n_ok = 0;
  lm_status st;
  {
    py::gil_scoped_release nogil;
    st = lm_jsonl_scan2(buf, len, reinterpret_cast<const uint8_t *>(key.data()), key.size(),
                        two ? reinterpret_cast<const uint8_t *>(key2.data()) : nullptr, key2.size(), max_line_bytes,
                        dp, op, two ? data2.data<uint8_t>() : nullptr, two ? offs2.data<int64_t>() : nullptr,
                        two ? ok2.data<int8_t>() : nullptr, ep, sp, n_lines, &n_ok);
  }
  if (st != LM_OK) throw py::value_error(std::string("jsonl_scan: ") + lm_status_str(st));
  const int64_t used = op[n_ok];
  offs.shrink(static_cast<int64_t>(n_ok) + 1);
  data.shrink(used);
  if (!two) return py::make_tuple(ends.tensor(), status.tensor(), offs.tensor(), data.tensor());
  const int64_t used2 = offs2.data<int64_t>()[n_ok];
  offs2.shrink(static_cast<int64_t>(n_ok) + 1);
  data2.shrink(used2);
  ok2.shrink(static_cast<int64_t>(n_ok));
  return py::make_tuple(ends.tensor(), status.tensor(), offs.tensor(), data.tensor(), offs2.tensor(), data2.tensor(),
                        ok2.tensor());
}

}  // namespace

void bind_jsonl(py::module_ &m) {
  m.def("jsonl_scan", &jsonl_scan, py::arg("buf"), py::arg("key"), py::arg("max_line_bytes") = -1,
        py::arg("key2") = py::none(),
        "JSON Lines fast path: per line its end and status (0 ok, 1 blank, 2 slow, 3 too long), and the "
        "decoded `key` strings of the ok lines as (offsets, data); with key2 also the ok lines' key2 strings "
        "(offsets, data, ok per ok line: 0 where the line must be parsed for key2)");
}

}  // namespace luminamoon
