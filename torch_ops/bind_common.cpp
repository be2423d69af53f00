// Shared pieces of the stage bindings; see bind_common.h.
#include "bind_common.h"

#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <optional>

namespace luminamoon {

namespace {
PyObject *g_corrupt = nullptr;        // CorruptError(OSError)
PyObject *g_state_corrupt = nullptr;  // StateCorruptError(CorruptError)
PyObject *g_version = nullptr;        // FormatVersionError(ValueError)
PyObject *g_dedup_full = nullptr;     // DedupFullError(ValueError)

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

// ---- the fork gate (bind_common.h)

struct Gate {
  std::mutex m;
  std::condition_variable cv;
  size_t inside = 0;   // StageCalls alive
  size_t closers = 0;  // fork hooks between close and open (two threads may fork at once)
};

namespace {
std::atomic<Gate *> g_gate{new Gate};  // replaced (never freed) in a forked child
}  // namespace

StageCall::StageCall() : g_(g_gate.load(std::memory_order_acquire)) {
  std::unique_lock<std::mutex> lk(g_->m);
  g_->cv.wait(lk, [&] { return g_->closers == 0; });
  g_->inside++;
}

StageCall::~StageCall() {
  std::lock_guard<std::mutex> lk(g_->m);
  if (--g_->inside == 0 && g_->closers) g_->cv.notify_all();
}

void fork_gate_close() {
  Gate *g = g_gate.load(std::memory_order_acquire);
  py::gil_scoped_release nogil;  // the calls inside end without the GIL; other threads may need it
  std::unique_lock<std::mutex> lk(g->m);
  g->closers++;
  g->cv.wait(lk, [&] { return g->inside == 0; });
}

void fork_gate_open() {
  Gate *g = g_gate.load(std::memory_order_acquire);
  {
    std::lock_guard<std::mutex> lk(g->m);
    if (g->closers) g->closers--;
  }
  g->cv.notify_all();
}

void fork_gate_reset_in_child() { g_gate.store(new Gate, std::memory_order_release); }

void raise_foreign_wal(const std::string &what, const char *cls, const std::string &path, pid_t owner) {
  throw py::value_error(what + ": this " + cls + " and its WAL '" + path +
                        "' belong to the process that created it (pid " + std::to_string(owner) +
                        "); this process (pid " + std::to_string(getpid()) + ") is a child forked from it, where using it would write into (or wait on) the "
                        "parent's log. Create a " + cls + " of its own (another wal_path) in this process");
}

}  // namespace luminamoon

// ---------------------------------------------------------------- StringTensor.from_list
#include <sys/mman.h>

extern "C" {
#include "luminamoon/string_tensor.h"
}

namespace luminamoon {
namespace {

// from_list's payload from kMapAt bytes on: a mapping of the pool (bind_array.h: map_take), 2 MiB-aligned
// on transparent huge pages; a fresh 50 MB payload otherwise takes ~12,000 page faults.  (Its offsets and
// views, whose sizes are known up front, are pooled ArrayOuts.)
constexpr size_t kMapAt = size_t(8) << 20;

// A growable buffer: malloc/realloc while small, then an anonymous mapping (map_fresh) grown
// with mremap (no copy, and pages never written cost no memory); the mapping is a pooled one
// (map_take_any) when a previous array was released.
class GrowBuf {
 public:
  ~GrowBuf() { release(); }
  uint8_t *ensure(size_t need) {  // room for `need` bytes in all; nullptr when out of memory
    if (need <= cap_) return p_;
    size_t cap = cap_ ? cap_ : 4096;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    if (cap < kMapAt) {
      void *q = std::realloc(p_, cap);
      if (!q) return nullptr;
      p_ = static_cast<uint8_t *>(q);
    } else {
      cap = map_size(cap);
      if (!cap) return nullptr;
      void *q;
      if (mapped_) {
        q = grow(p_, cap_, cap, used_);
      } else {
        size_t ccap = 0;
        q = map_take_any(cap, &ccap);
        if (q && ccap < cap) {
          void *g = grow(q, ccap, cap, 0);
          if (g == MAP_FAILED) map_put(q, ccap);  // unchanged: back to the pool
          q = g;
        } else if (q) {
          cap = ccap;
        } else {
          q = map_fresh(cap, &cap);
          if (!q) q = MAP_FAILED;
        }
        if (q != MAP_FAILED && used_) std::memcpy(q, p_, used_);
      }
      if (q == MAP_FAILED) return nullptr;
#ifdef MADV_HUGEPAGE
      madvise(q, cap, MADV_HUGEPAGE);
#endif
      if (!mapped_) std::free(p_);
      p_ = static_cast<uint8_t *>(q);
      mapped_ = true;
    }
    cap_ = cap;
    return p_;
  }
  void set_used(size_t n) { used_ = n; }

 private:
  // Mapping q (old bytes, its first `keep` in use) grown to cap bytes (a map_size, >= kMapHuge): by mremap,
  // which keeps q's start when the room above it is free and otherwise moves it (Linux >= 6.7 moves a
  // mapping this large to a 2 MiB boundary; older kernels may not).  A result off a 2 MiB boundary is
  // moved to a fresh aligned mapping (map_fresh, its first `keep` bytes copied): the huge pages of every
  // mapping the pool holds rely on it.  MAP_FAILED when out of memory (q then unchanged, still the caller's).
  static void *grow(void *q, size_t old, size_t cap, size_t keep) {
    void *g = mremap(q, old, cap, MREMAP_MAYMOVE);
    if (g == MAP_FAILED) return MAP_FAILED;
    if (reinterpret_cast<uintptr_t>(g) % kMapHuge == 0) return g;
    size_t got = 0;
    void *f = map_fresh(cap, &got);
    if (f && got == cap) {
      if (keep) std::memcpy(f, g, keep);
      munmap(g, cap);
      return f;
    }
    if (f) munmap(f, got);
    return g;  // no aligned mapping to be had: this one still works (its huge pages partly lost)
  }

 public:
  // The bytes as a uint8 tensor of `used_` bytes that owns them (shrunk to size first; bind_array.h:
  // released once, when the tensor dies: a mapping to the pool (map_put), malloc'd memory with free).
  py::object take() {
    const int64_t n = int64_t(used_);
    if (!p_) return own_tensor(nullptr, Dt::u8, 0);
    uint8_t *p = p_;
    void *q0 = p_;
    const size_t cap0 = cap_;
    const bool mapped = mapped_;
    p_ = nullptr;  // owned by the tensor (or released by own_tensor*) from here on
    cap_ = used_ = 0;
    mapped_ = false;
    if (mapped) {
      size_t cap = cap0;
      size_t keep = map_size(size_t(n) ? size_t(n) : 1);
      if (keep == 0) keep = cap;
      if (keep < cap) {
        void *q = mremap(q0, cap, keep, 0);  // shrink in place
        if (q != MAP_FAILED) cap = keep;
      }
      return own_tensor_with(p, Dt::u8, n, -1, [](void *q, size_t c) { map_put(q, c); }, cap);
    }
    void *q = n ? std::realloc(q0, size_t(n)) : nullptr;
    if (q) p = static_cast<uint8_t *>(q);
    return own_tensor(p, Dt::u8, n);
  }

 private:
  void release() {
    if (!p_) return;
    if (mapped_) map_put(p_, cap_);
    else std::free(p_);
    p_ = nullptr;
  }
  uint8_t *p_ = nullptr;
  size_t cap_ = 0, used_ = 0;
  bool mapped_ = false;
};

// UTF-8 of a non-ASCII str written straight into `out` (room for 4 bytes a code point):
// one pass over the code points, no intermediate copy and no UTF-8 cache left on the
// caller's str objects (PyUnicode_AsUTF8AndSize keeps one per non-ASCII str for its
// lifetime).  Returns the byte count, or -1 for a lone surrogate.
template <typename CharT>
int64_t encode_utf8(const CharT *s, Py_ssize_t n, uint8_t *out) {
  uint8_t *o = out;
  Py_ssize_t i = 0;
  if (sizeof(CharT) == 1) {  // Latin-1 text is mostly ASCII: 8 characters at a time while they are
    for (; i + 8 <= n; i += 8) {
      uint64_t w;
      std::memcpy(&w, s + i, 8);
      if (w & 0x8080808080808080ull) break;
      std::memcpy(o, &w, 8);
      o += 8;
    }
  }
  for (; i < n; i++) {
    if (sizeof(CharT) == 1 && i + 8 <= n && (i & 7) == 0) {  // back to whole ASCII words
      uint64_t w;
      std::memcpy(&w, s + i, 8);
      if (!(w & 0x8080808080808080ull)) {
        std::memcpy(o, &w, 8);
        o += 8;
        i += 7;
        continue;
      }
    }
    const uint32_t c = uint32_t(s[i]);
    if (c < 0x80) {
      *o++ = uint8_t(c);
    } else if (c < 0x800) {
      *o++ = uint8_t(0xC0 | (c >> 6));
      *o++ = uint8_t(0x80 | (c & 0x3F));
    } else if (c < 0x10000) {
      if (c >= 0xD800 && c <= 0xDFFF) return -1;
      *o++ = uint8_t(0xE0 | (c >> 12));
      *o++ = uint8_t(0x80 | ((c >> 6) & 0x3F));
      *o++ = uint8_t(0x80 | (c & 0x3F));
    } else {
      *o++ = uint8_t(0xF0 | (c >> 18));
      *o++ = uint8_t(0x80 | ((c >> 12) & 0x3F));
      *o++ = uint8_t(0x80 | ((c >> 6) & 0x3F));
      *o++ = uint8_t(0x80 | (c & 0x3F));
    }
  }
  return int64_t(o - out);
}

}  // namespace

py::tuple from_list_views(py::handle seq, bool allow_bytes, bool validate) {
  PyObject *obj = seq.ptr();
  py::object holder;  // a list copy only for sequences that are neither list nor tuple
  if (!PyList_Check(obj) && !PyTuple_Check(obj)) {
    holder = py::reinterpret_steal<py::object>(PySequence_List(obj));
    if (!holder) throw py::error_already_set();
    obj = holder.ptr();
  }
  const bool is_list = PyList_Check(obj);
  const Py_ssize_t n = is_list ? PyList_GET_SIZE(obj) : PyTuple_GET_SIZE(obj);
  std::optional<ArrayOut> off32, off64;
  off32.emplace(Dt::i32, n + 1, -1, false, true);  // pooled: huge pages from 2 MiB (bind_array.h)
  // the views (16 bytes a string, read by every views kernel): pooled too, on huge pages from 2 MiB
  ArrayOut views(Dt::u8, n, int64_t(sizeof(lm_string_view)), false, true);
  auto *v = reinterpret_cast<lm_string_view *>(views.data<uint8_t>());
  int32_t *o32 = off32->data<int32_t>();
  int64_t *o64 = nullptr;
  GrowBuf buf;
  uint64_t pos = 0;
  // The GIL is held throughout and no Python code runs (PyUnicode_AsUTF8AndSize at
  // most caches the UTF-8 form of a non-ASCII str), so the list cannot change under
  // us; its length is still re-read each step.
  for (Py_ssize_t i = 0; i < n; i++) {
    const Py_ssize_t now = is_list ? PyList_GET_SIZE(obj) : n;
    if (i >= now) throw py::value_error("strings changed size while it was read");
    PyObject *o = is_list ? PyList_GET_ITEM(obj, i) : PyTuple_GET_ITEM(obj, i);
    const char *p;
    Py_ssize_t len;
    bool is_str = PyUnicode_Check(o);
    if (is_str && PyUnicode_IS_READY(o) && !PyUnicode_IS_ASCII(o) && PyUnicode_IS_COMPACT(o) &&
        reinterpret_cast<PyCompactUnicodeObject *>(o)->utf8) {
      // its UTF-8 is already cached on the str (someone called PyUnicode_AsUTF8AndSize,
      // e.g. pyarrow or Polars on this list): copy it below, like an ASCII str
    } else if (is_str && PyUnicode_IS_READY(o) && !PyUnicode_IS_ASCII(o)) {
      // encode into the payload directly (see encode_utf8); the view is made from there
      const Py_ssize_t cps = PyUnicode_GET_LENGTH(o);
      if (uint64_t(cps) > (uint64_t(SIZE_MAX) - pos) / 4) throw std::bad_alloc();
      uint8_t *d = buf.ensure(size_t(pos + 4 * uint64_t(cps)));
      if (!d) throw std::bad_alloc();
      const void *u = PyUnicode_DATA(o);
      const int kind = PyUnicode_KIND(o);
      const int64_t w = kind == PyUnicode_1BYTE_KIND   ? encode_utf8(static_cast<const Py_UCS1 *>(u), cps, d + pos)
                        : kind == PyUnicode_2BYTE_KIND ? encode_utf8(static_cast<const Py_UCS2 *>(u), cps, d + pos)
                                                       : encode_utf8(static_cast<const Py_UCS4 *>(u), cps, d + pos);
      if (w < 0)
        throw py::value_error("strings[" + std::to_string(i) +
                              "] cannot be encoded as UTF-8 (it holds a lone surrogate)");
      if (uint64_t(w) > LM_MAX_STRING_LEN)
        throw py::value_error("strings[" + std::to_string(i) + "] is longer than 2^31-1 bytes");
      const uint64_t end = pos + uint64_t(w);
      if (!o64 && end > uint64_t(INT32_MAX)) {  // past 2 GiB: int64 offsets from here on
        off64.emplace(Dt::i64, n + 1, -1, false, true);
        o64 = off64->data<int64_t>();
        for (Py_ssize_t k = 0; k <= i; k++) o64[k] = k < i ? o32[k] : int64_t(pos);
        off32.reset();
        o32 = nullptr;
      }
      if (o64) o64[i] = int64_t(pos);
      else o32[i] = int32_t(pos);
      lm_sv_make(&v[i], d + pos, uint32_t(w), uint32_t(pos >> LM_WINDOW_SHIFT),
                 uint32_t(pos & ((uint64_t(1) << LM_WINDOW_SHIFT) - 1)));
      pos = end;
      buf.set_used(size_t(pos));
      continue;
    }
    if (is_str) {
      p = PyUnicode_AsUTF8AndSize(o, &len);
      if (!p) {
        PyErr_Clear();
        throw py::value_error("strings[" + std::to_string(i) +
                              "] cannot be encoded as UTF-8 (it holds a lone surrogate)");
      }
    } else if (allow_bytes && PyBytes_Check(o)) {
      char *q;
      if (PyBytes_AsStringAndSize(o, &q, &len) < 0) throw py::error_already_set();
      p = q;
    } else {
      std::string tn = Py_TYPE(o)->tp_name;
      throw py::type_error("strings[" + std::to_string(i) + "] must be str" +
                           std::string(allow_bytes ? " or bytes" : "") + ", got " + tn);
    }
    if (uint64_t(len) > LM_MAX_STRING_LEN)
      throw py::value_error("strings[" + std::to_string(i) + "] is longer than 2^31-1 bytes");
    if (!is_str && validate) {
      size_t bad_pos = 0;
      if (lm_utf8_validate(reinterpret_cast<const uint8_t *>(p), size_t(len), &bad_pos) != LM_OK)
        throw py::value_error("strings[" + std::to_string(i) + "] is not valid UTF-8 (first bad byte at offset " +
                              std::to_string(bad_pos) + "); pass validate=False for bytes semantics");
    }
    const uint64_t end = pos + uint64_t(len);
    if (!o64 && end > uint64_t(INT32_MAX)) {  // past 2 GiB: int64 offsets from here on
      off64.emplace(Dt::i64, n + 1, -1, false, true);
      o64 = off64->data<int64_t>();
      for (Py_ssize_t k = 0; k <= i; k++) o64[k] = k < i ? o32[k] : int64_t(pos);
      off32.reset();
      o32 = nullptr;
    }
    if (o64) o64[i] = int64_t(pos);
    else o32[i] = int32_t(pos);
    if (len) {
      uint8_t *d = buf.ensure(size_t(end));
      if (!d) throw std::bad_alloc();
      std::memcpy(d + pos, p, size_t(len));
    }
    lm_sv_make(&v[i], reinterpret_cast<const uint8_t *>(p), uint32_t(len), uint32_t(pos >> LM_WINDOW_SHIFT),
               uint32_t(pos & ((uint64_t(1) << LM_WINDOW_SHIFT) - 1)));
    pos = end;
    buf.set_used(size_t(pos));
  }
  if (o64) o64[n] = int64_t(pos);
  else o32[n] = int32_t(pos);
  py::object offsets = o64 ? off64->tensor() : off32->tensor();
  py::object data = buf.take();
  return py::make_tuple(offsets, data, views.tensor());
}

}  // namespace luminamoon
