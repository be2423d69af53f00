// Binding of the JSON Lines scanner (core jsonl.h):
// _C.jsonl_scan(buf, key, max_line_bytes, key2=None) -> (line_ends int64[L], status int8[L],
//     text_offsets int64[K+1], text_data uint8[...]) as CPU tensors; with key2 (str or bytes) also
//     (key2_offsets int64[K+1], key2_data uint8[...], key2_ok int8[K]): lm_jsonl_scan2 (bind_array.h: zero
// copy, freed by the tensors); the GIL is released while scanning.  buf: any C-contiguous bytes-like object (bytes,
// bytearray, memoryview, numpy uint8), or a list / tuple of them read as their concatenation (line ends
// are offsets in it; a line across pieces is copied into a scratch buffer, the rest scanned in place,
// the outputs are those of scanning the joined bytes); key: str (UTF-8) or bytes.
#include "bind_array.h"
#include "bind_common.h"

#include <cstring>
#include <vector>

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

// A contiguous 1-D view of a bytes-like object (kept alive by the caller's object).
struct Piece {
  const uint8_t *p;
  size_t n;
};

Piece piece_of(const py::handle &o, std::vector<py::buffer_info> &keep) {
  if (!PyObject_CheckBuffer(o.ptr())) throw py::type_error("jsonl_scan: buf must be a bytes-like object or a list of them");
  keep.emplace_back(py::reinterpret_borrow<py::buffer>(o).request());
  const py::buffer_info &info = keep.back();
  if (info.ndim > 1 || (info.ndim == 1 && info.strides[0] != info.itemsize))
    throw py::value_error("jsonl_scan: buf must be a contiguous 1-D bytes-like object");
  return Piece{static_cast<const uint8_t *>(info.ptr), static_cast<size_t>(info.size) * static_cast<size_t>(info.itemsize)};
}

// Just past the last '\n' in [p, end), or p when there is none.
const uint8_t *last_nl(const uint8_t *p, const uint8_t *end) {
#if defined(__GLIBC__)
  const void *nl = memrchr(p, '\n', static_cast<size_t>(end - p));
  return nl ? static_cast<const uint8_t *>(nl) + 1 : p;
#else
  const uint8_t *q = end;
  while (q > p && q[-1] != '\n') q--;
  return q;
#endif
}

// The outputs of one scan call: where the next call writes (text / key2 bytes, OK lines, lines).
struct ScanOut {
  uint8_t *dp, *dp2;
  int64_t *op, *op2, *ep;
  int8_t *sp, *ok2;
  size_t ok = 0, lines = 0;
  int64_t tpos = 0, kpos = 0, base = 0;  // text / key2 bytes used, virtual offset of the next span
};

// Scans span [p, p + n) (whole lines but maybe the last) appending to `out` as if it sat at virtual
// offset out.base of one buffer: offsets shifted by what the earlier spans gave.
// nl: its lines (lm_jsonl_count_lines of the span; the caller may know it).
lm_status scan_span(const uint8_t *p, size_t n, size_t nl, const std::string &key, const std::string &key2, bool two,
                    int64_t max_line_bytes, ScanOut &out) {
  size_t ok = 0;
  const int64_t t0 = out.op[out.ok], k0 = two ? out.op2[out.ok] : 0;
  lm_status st = lm_jsonl_scan2(p, n, reinterpret_cast<const uint8_t *>(key.data()), key.size(),
                                two ? reinterpret_cast<const uint8_t *>(key2.data()) : nullptr, key2.size(),
                                max_line_bytes, out.dp + t0, out.op + out.ok, two ? out.dp2 + k0 : nullptr,
                                two ? out.op2 + out.ok : nullptr, two ? out.ok2 + out.ok : nullptr,
                                out.ep + out.lines, out.sp + out.lines, nl, &ok);
  if (st != LM_OK) return st;
  for (size_t j = 0; j <= ok; j++) out.op[out.ok + j] += t0;  // entry 0 was set to 0: back to t0
  if (two)
    for (size_t j = 0; j <= ok; j++) out.op2[out.ok + j] += k0;
  for (size_t j = 0; j < nl; j++) out.ep[out.lines + j] += out.base;
  out.ok += ok;
  out.lines += nl;
  out.base += static_cast<int64_t>(n);
  return LM_OK;
}

py::tuple jsonl_scan(const py::object &buf_o, const py::object &key_o, int64_t max_line_bytes,
                     const py::object &key2_o) {
  const std::string key = key_arg(key_o, "key");
  const bool two = !key2_o.is_none();
  const std::string key2 = two ? key_arg(key2_o, "key2") : std::string();
  // buf: one bytes-like object, or a list / tuple of them read as their concatenation (a line
  // across pieces is copied whole into a scratch buffer, the rest is scanned in place)
  std::vector<py::buffer_info> keep;
  std::vector<Piece> pieces;
  if (py::isinstance<py::list>(buf_o) || py::isinstance<py::tuple>(buf_o)) {
    for (const py::handle h : buf_o) pieces.push_back(piece_of(h, keep));
  } else {
    pieces.push_back(piece_of(buf_o, keep));
  }
  size_t len = 0, n_lines = 0;
  std::vector<size_t> newlines(pieces.size(), 0);  // each piece's '\n' count
  for (size_t i = 0; i < pieces.size(); i++) {
    const Piece &pc = pieces[i];
    size_t nl = 0;
    if (pc.n == 0) continue;
    if (lm_jsonl_count_lines(pc.p, pc.n, &nl) != LM_OK) throw py::value_error("jsonl_scan: bad buffer");
    // a piece's last line continues in the next piece unless it ends with '\n'
    newlines[i] = nl - (pc.p[pc.n - 1] != '\n' ? 1 : 0);
    n_lines += newlines[i];
    len += pc.n;
  }
  if (len > 0) {  // the last line of the whole, if it does not end with '\n'
    const Piece *last = nullptr;
    for (const Piece &pc : pieces)
      if (pc.n) last = &pc;
    if (last->p[last->n - 1] != '\n') n_lines++;
  }
  ArrayOut ends(Dt::i64, static_cast<int64_t>(n_lines));
  ArrayOut status(Dt::i8, static_cast<int64_t>(n_lines));
  ArrayOut offs(Dt::i64, static_cast<int64_t>(n_lines) + 1);
  ArrayOut data(Dt::u8, static_cast<int64_t>(len));
  // the second key's outputs (allocated, never touched, without key2: 0-sized)
  ArrayOut offs2(Dt::i64, two ? static_cast<int64_t>(n_lines) + 1 : 0);
  ArrayOut data2(Dt::u8, two ? static_cast<int64_t>(len) : 0);
  ArrayOut ok2(Dt::i8, two ? static_cast<int64_t>(n_lines) : 0);
  ScanOut out{data.data<uint8_t>(), two ? data2.data<uint8_t>() : nullptr, offs.data<int64_t>(),
              two ? offs2.data<int64_t>() : nullptr, ends.data<int64_t>(), status.data<int8_t>(),
              two ? ok2.data<int8_t>() : nullptr};
  out.op[0] = 0;
  if (two) out.op2[0] = 0;
  lm_status st = LM_OK;
  {
    py::gil_scoped_release nogil;
    std::vector<uint8_t> scratch;  // a line across pieces
    for (size_t i = 0; i < pieces.size() && st == LM_OK; i++) {
      const uint8_t *p = pieces[i].p, *end = p + pieces[i].n;
      size_t nl_here = newlines[i];  // the '\n' in [p, end)
      if (p == end) continue;
      if (!scratch.empty()) {  // the line begun in the pieces before: up to its '\n' here
        const uint8_t *nl = static_cast<const uint8_t *>(memchr(p, '\n', static_cast<size_t>(end - p)));
        const uint8_t *stop = nl ? nl + 1 : end;
        scratch.insert(scratch.end(), p, stop);
        p = stop;
        if (!nl) continue;
        st = scan_span(scratch.data(), scratch.size(), 1, key, key2, two, max_line_bytes, out);
        scratch.clear();
        nl_here--;
        if (p == end || st != LM_OK) continue;
      }
      // whole lines in place (all the piece's other '\n'), the last partial line to the scratch
      const uint8_t *q = last_nl(p, end);
      if (q > p) st = scan_span(p, static_cast<size_t>(q - p), nl_here, key, key2, two, max_line_bytes, out);
      scratch.assign(q, end);
    }
    if (st == LM_OK && !scratch.empty())  // the last line, without '\n'
      st = scan_span(scratch.data(), scratch.size(), 1, key, key2, two, max_line_bytes, out);
  }
  if (st != LM_OK) throw py::value_error(std::string("jsonl_scan: ") + lm_status_str(st));
  if (out.lines != n_lines) throw std::logic_error("jsonl_scan: line count mismatch");
  const size_t n_ok = out.ok;
  const int64_t used = out.op[n_ok];
  offs.shrink(static_cast<int64_t>(n_ok) + 1);
  data.shrink(used);
  if (!two) return py::make_tuple(ends.tensor(), status.tensor(), offs.tensor(), data.tensor());
  const int64_t used2 = out.op2[n_ok];
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
