// Shared pieces of the stage bindings; see bind_common.h.
#include "bind_common.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

namespace luminamoon {

namespace {
PyObject *g_corrupt = nullptr;        // CorruptError(OSError)
PyObject *g_state_corrupt = nullptr;  // StateCorruptError(CorruptError)
PyObject *g_version = nullptr;        // FormatVersionError(ValueError)
PyObject *g_dedup_full = nullptr;     // DedupFullError(ValueError)

at::Tensor own(void *p, int64_t n, at::ScalarType t) {
  if (!p) {
    if (n) throw std::bad_alloc();
    return at::empty({0}, at::TensorOptions().dtype(t));
  }
  return at::from_blob(p, {n}, [](void *q) { std::free(q); }, at::TensorOptions().dtype(t));
}
}  // namespace

void register_errors(py::module_ &m) {
  g_corrupt = PyErr_NewExceptionWithDoc(
      "luminamoon._C.CorruptError",
      "Persisted data (a dedup WAL, a snapshot, a state file) failed its checksum or structure check.",
      PyExc_OSError, nullptr);
  g_state_corrupt = PyErr_NewExceptionWithDoc(
      "luminamoon._C.StateCorruptError",
      "The state file holds no valid slot but is not fresh: a commit was made and no valid copy survives.",
      g_corrupt, nullptr);
  g_version = PyErr_NewExceptionWithDoc("luminamoon._C.FormatVersionError",
                                        "A persisted file was written by another format version.",
                                        PyExc_ValueError, nullptr);
  g_dedup_full = PyErr_NewExceptionWithDoc(
      "luminamoon._C.DedupFullError",
      "A StreamDeduplicator holds max_entries distinct documents and the call's new ones do not fit: "
      "nothing of that call was admitted.",
      PyExc_ValueError, nullptr);
  if (!g_corrupt || !g_state_corrupt || !g_version || !g_dedup_full) throw py::error_already_set();
  m.attr("CorruptError") = py::handle(g_corrupt);
  m.attr("StateCorruptError") = py::handle(g_state_corrupt);
  m.attr("FormatVersionError") = py::handle(g_version);
  m.attr("DedupFullError") = py::handle(g_dedup_full);
}

[[noreturn]] void raise_dedup_full(const std::string &msg) {
  PyErr_SetString(g_dedup_full, msg.c_str());
  throw py::error_already_set();
}

void raise_status(lm_status s, const std::string &what, const std::string &path, int err, bool state_file) {
  std::string msg = what + ": " + lm_status_str(s);
  if (!path.empty() && s != LM_EIO) msg += " (" + path + ")";
  switch (s) {
    case LM_ENOMEM:
      throw std::bad_alloc();
    case LM_EIO: {
      if (!err) err = EIO;
      std::string m2 = what + ": " + std::strerror(err);
      PyObject *args = path.empty() ? Py_BuildValue("(is)", err, m2.c_str())
                                    : Py_BuildValue("(iss)", err, m2.c_str(), path.c_str());
      if (!args) throw py::error_already_set();
      PyErr_SetObject(PyExc_OSError, args);
      Py_DECREF(args);
      throw py::error_already_set();
    }
    case LM_ECORRUPT:
      PyErr_SetString(state_file ? g_state_corrupt : g_corrupt, msg.c_str());
      throw py::error_already_set();
    case LM_EVERSION:
      PyErr_SetString(g_version, msg.c_str());
      throw py::error_already_set();
    case LM_ESTATE:
      throw py::value_error(msg);
    default:
      throw py::value_error(msg);
  }
}

DocsIn::DocsIn(const at::Tensor &offsets, const at::Tensor &data_, const char *what) {
  auto bad = [&](const std::string &m) { throw py::value_error(std::string(what) + ": " + m); };
  if (offsets.dim() != 1 || offsets.numel() < 1) bad("offsets must be 1-D with N+1 >= 1 entries");
  if (offsets.scalar_type() != at::kInt && offsets.scalar_type() != at::kLong)
    throw py::type_error(std::string(what) + ": offsets must be int32 or int64");
  if (data_.scalar_type() != at::kByte) throw py::type_error(std::string(what) + ": data must be uint8");
  if (data_.dim() != 1) bad("data must be 1-D");
  if (!offsets.is_cpu() || !data_.is_cpu()) bad("the text stages run on the CPU: move the StringTensor with .cpu()");
  // Always a private copy (to() alone would share int64 offsets): the core validates
  // and reads this snapshot with the GIL released, while the caller's tensor may be
  // written by another thread.
  off64 = offsets.to(at::kLong, /*non_blocking=*/false, /*copy=*/true).contiguous();
  data = data_.contiguous();
  docs.offsets = off64.data_ptr<int64_t>();
  docs.data = data.numel() ? data.data_ptr<uint8_t>() : nullptr;
  docs.n = size_t(offsets.numel() - 1);
  docs.data_len = size_t(data.numel());
  if (docs.offsets[0] < 0 || docs.offsets[docs.n] > int64_t(docs.data_len))
    bad("offsets point outside data");
}

py::tuple take_result(lm_batch_result &r) {
  at::Tensor off = own(r.offsets, int64_t(r.n_out + 1), at::kLong);
  r.offsets = nullptr;
  at::Tensor data = own(r.data, int64_t(r.data_len), at::kByte);
  r.data = nullptr;
  at::Tensor src = own(r.source_index, int64_t(r.n_out), at::kLong);
  r.source_index = nullptr;
  at::Tensor rea = own(r.reasons, int64_t(r.n_in), at::kInt);
  r.reasons = nullptr;
  lm_batch_result_init(&r);
  return py::make_tuple(off, data, src, rea);
}

lm_exec make_exec(int num_threads) {
  lm_exec e;
  e.num_threads = num_threads > 0 ? num_threads : at::get_num_threads();
  e.min_items_per_thread = 0;
  return e;
}

static std::string pname(const char *what, const char *name) { return std::string(what) + ": parameter " + name; }

void check_keys(const py::dict &d, const char *const *known, const char *what) {
  for (auto kv : d) {
    if (!py::isinstance<py::str>(kv.first)) throw py::type_error(std::string(what) + ": parameter names must be str");
    std::string k = kv.first.cast<std::string>();
    bool ok = false;
    for (const char *const *p = known; *p; p++) ok |= k == *p;
    if (!ok) {
      std::string all;
      for (const char *const *p = known; *p; p++) all += std::string(all.empty() ? "" : ", ") + *p;
      throw py::type_error(std::string(what) + ": unknown parameter '" + k + "' (valid: " + all + ")");
    }
  }
}

void param_bool(const py::dict &d, const char *name, int *out, const char *what) {
  if (!d.contains(name)) return;
  py::handle v = d[name];
  if (!PyBool_Check(v.ptr()) && !PyLong_Check(v.ptr()))
    throw py::type_error(pname(what, name) + " must be a bool, got " + std::string(Py_TYPE(v.ptr())->tp_name));
  *out = PyObject_IsTrue(v.ptr()) ? 1 : 0;
}

void param_int(const py::dict &d, const char *name, int *out, const char *what, int lo, int hi) {
  if (!d.contains(name)) return;
  py::handle v = d[name];
  if (!PyLong_Check(v.ptr()))
    throw py::type_error(pname(what, name) + " must be an int, got " + std::string(Py_TYPE(v.ptr())->tp_name));
  long long x = v.cast<long long>();
  if (x < lo || x > hi)
    throw py::value_error(pname(what, name) + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  *out = int(x);
}

static uint64_t to_u64(py::handle v, const char *name, const char *what) {
  if (!PyLong_Check(v.ptr()) || PyBool_Check(v.ptr()))
    throw py::type_error(pname(what, name) + " must be an int, got " + std::string(Py_TYPE(v.ptr())->tp_name));
  int overflow = 0;
  long long x = PyLong_AsLongLongAndOverflow(v.ptr(), &overflow);
  if (overflow < 0 || (!overflow && x < 0)) throw py::value_error(pname(what, name) + " must be >= 0");
  if (overflow > 0) {
    unsigned long long u = PyLong_AsUnsignedLongLong(v.ptr());
    if (PyErr_Occurred()) {
      PyErr_Clear();
      throw py::value_error(pname(what, name) + " must be < 2**64");
    }
    return uint64_t(u);
  }
  return uint64_t(x);
}

void param_size(const py::dict &d, const char *name, size_t *out, const char *what) {
  if (!d.contains(name)) return;
  *out = size_t(to_u64(d[name], name, what));
}

void param_u64(const py::dict &d, const char *name, uint64_t *out, const char *what) {
  if (!d.contains(name)) return;
  *out = to_u64(d[name], name, what);
}

void param_double(const py::dict &d, const char *name, double *out, const char *what) {
  if (!d.contains(name)) return;
  py::handle v = d[name];
  if ((!PyFloat_Check(v.ptr()) && !PyLong_Check(v.ptr())) || PyBool_Check(v.ptr()))
    throw py::type_error(pname(what, name) + " must be a number, got " + std::string(Py_TYPE(v.ptr())->tp_name));
  double x = v.cast<double>();
  if (std::isnan(x)) throw py::value_error(pname(what, name) + " must not be NaN");
  *out = x;
}

}  // namespace luminamoon
