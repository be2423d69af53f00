// Binding of the JSON Lines scanner (core jsonl.h):
// _C.jsonl_scan(buf, key, max_line_bytes) -> (line_ends int64[L], status int8[L],
//     text_offsets int64[K+1], text_data uint8[...]) as CPU tensors; the GIL is
// released while scanning.  buf: any C-contiguous bytes-like object (bytes,
// bytearray, memoryview, numpy uint8); key: str (UTF-8) or bytes.
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
  auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  torch::Tensor ends = torch::empty({static_cast<int64_t>(n_lines)}, i64);
  torch::Tensor status = torch::empty({static_cast<int64_t>(n_lines)}, torch::TensorOptions().dtype(torch::kInt8));
  torch::Tensor offs = torch::empty({static_cast<int64_t>(n_lines) + 1}, i64);
  torch::Tensor data = torch::empty({static_cast<int64_t>(len)}, torch::TensorOptions().dtype(torch::kUInt8));
  size_t n_ok = 0;
  lm_status st;
  {
    py::gil_scoped_release nogil;
    st = lm_jsonl_scan(buf, len, reinterpret_cast<const uint8_t *>(key.data()), key.size(), max_line_bytes,
                       data.data_ptr<uint8_t>(), offs.data_ptr<int64_t>(), ends.data_ptr<int64_t>(),
                       status.data_ptr<int8_t>(), n_lines, &n_ok);
  }
  if (st != LM_OK) throw py::value_error(std::string("jsonl_scan: ") + lm_status_str(st));
  offs = offs.narrow(0, 0, static_cast<int64_t>(n_ok) + 1);
  int64_t used = offs[static_cast<int64_t>(n_ok)].item<int64_t>();
  data = data.narrow(0, 0, used);
  return py::make_tuple(ends, status, offs, data);
}

}  // namespace

void bind_jsonl(py::module_ &m) {
  m.def("jsonl_scan", &jsonl_scan, py::arg("buf"), py::arg("key"), py::arg("max_line_bytes") = -1,
        "JSON Lines fast path: per line its end and status (0 ok, 1 blank, 2 slow, 3 too long), and the "
        "decoded `key` strings of the ok lines as (offsets, data)");
}

}  // namespace luminamoon
