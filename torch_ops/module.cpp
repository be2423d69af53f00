// The pybind11 module luminamoon._C: building StringTensors from Python objects
// and back, UTF-8 validation, and (in stages.cpp) the stateful core objects.
// Hot loops run with the GIL released; Python objects are touched only to read
// or create the strings themselves.  No libtorch (bind_array.h): one binary for every torch.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <sys/mman.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <cstring>
#include <vector>

#include "common.h"

extern "C" {
#include "luminamoon/hash.h"
}

namespace py = pybind11;

namespace luminamoon {
namespace {

// A uint8 buffer of `n` bytes: (pointer, mapped length; 0 = malloc'd).  Large payloads are mapped
// directly and advised onto transparent huge pages: a fresh 50 MB buffer then costs ~25 page faults
// instead of ~12,000, which dominates building a big batch otherwise.  own_tensor frees it.
std::pair<void *, size_t> alloc_payload(int64_t n) {
  constexpr int64_t kHuge = int64_t(2) << 20;
  if (n >= 4 * kHuge) {
    const size_t len = size_t((n + kHuge - 1) / kHuge * kHuge);
    void *p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) {
#ifdef MADV_HUGEPAGE
      madvise(p, len, MADV_HUGEPAGE);
#endif
      return {p, len};
    }
  }
  void *p = std::malloc(size_t(n ? n : 1));
  if (!p) throw std::bad_alloc();
  return {p, 0};
}

struct Piece {
  const char *p;
  Py_ssize_t n;
};

// list/tuple/sequence of str (or bytes when allow_bytes) -> (offsets, data).
py::tuple from_list(py::handle seq, bool allow_bytes, bool validate) {
  // A tuple holds a reference to every item, so the GIL can be released while copying.
  py::object items = py::reinterpret_steal<py::object>(PySequence_Tuple(seq.ptr()));
  if (!items) throw py::error_already_set();
  const Py_ssize_t n = PyTuple_GET_SIZE(items.ptr());
  std::vector<Piece> pieces(size_t(n) + (n == 0));
  uint64_t total = 0;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *o = PyTuple_GET_ITEM(items.ptr(), i);
    Piece pc;
    if (PyUnicode_Check(o)) {
      pc.p = PyUnicode_AsUTF8AndSize(o, &pc.n);
      if (!pc.p) {
        PyErr_Clear();
        throw py::value_error("strings[" + std::to_string(i) +
                              "] cannot be encoded as UTF-8 (it holds a lone surrogate)");
      }
    } else if (allow_bytes && PyBytes_Check(o)) {
      char *p;
      if (PyBytes_AsStringAndSize(o, &p, &pc.n) < 0) throw py::error_already_set();
      pc.p = p;
    } else {
      std::string tn = Py_TYPE(o)->tp_name;
      throw py::type_error("strings[" + std::to_string(i) + "] must be str" +
                           std::string(allow_bytes ? " or bytes" : "") + ", got " + tn);
    }
    if (uint64_t(pc.n) > LM_MAX_STRING_LEN)
      throw py::value_error("strings[" + std::to_string(i) + "] is longer than 2^31-1 bytes");
    pieces[size_t(i)] = pc;
    total += uint64_t(pc.n);
  }
  const bool large = total > uint64_t(INT32_MAX);
  ArrayOut offsets(large ? Dt::i64 : Dt::i32, n + 1);
  auto payload = alloc_payload(int64_t(total));
  py::object data = own_tensor(payload.first, Dt::u8, int64_t(total), -1, payload.second);
  uint8_t *d = static_cast<uint8_t *>(payload.first);
  int64_t bad = -1;
  size_t bad_pos = 0;
  {
    py::gil_scoped_release nogil;
    uint64_t pos = 0;
    if (large) {
      int64_t *o = offsets.data<int64_t>();
      for (Py_ssize_t i = 0; i < n; i++) {
        o[i] = int64_t(pos);
        if (pieces[i].n) std::memcpy(d + pos, pieces[i].p, size_t(pieces[i].n));
        pos += uint64_t(pieces[i].n);
      }
      o[n] = int64_t(pos);
    } else {
      int32_t *o = offsets.data<int32_t>();
      for (Py_ssize_t i = 0; i < n; i++) {
        o[i] = int32_t(pos);
        if (pieces[i].n) std::memcpy(d + pos, pieces[i].p, size_t(pieces[i].n));
        pos += uint64_t(pieces[i].n);
      }
      o[n] = int32_t(pos);
    }
    // str items are valid UTF-8 by construction; bytes items are checked here.
    if (allow_bytes && validate) {
      for (Py_ssize_t i = 0; i < n && bad < 0; i++) {
        if (PyUnicode_Check(PyTuple_GET_ITEM(items.ptr(), i))) continue;
        if (lm_utf8_validate(reinterpret_cast<const uint8_t *>(pieces[i].p), size_t(pieces[i].n), &bad_pos) != LM_OK)
          bad = i;
      }
    }
  }
  if (bad >= 0)
    throw py::value_error("strings[" + std::to_string(bad) + "] is not valid UTF-8 (first bad byte at offset " +
                          std::to_string(bad_pos) + "); pass validate=False for bytes semantics");
  return py::make_tuple(offsets.tensor(), data);
}

template <typename OffT>
py::list to_list_impl(const OffT *off, const uint8_t *d, int64_t n, bool as_bytes) {
  py::list out(n);
  for (int64_t i = 0; i < n; i++) {
    const char *p = reinterpret_cast<const char *>(d + off[i]);
    Py_ssize_t len = Py_ssize_t(off[i + 1] - off[i]);
    PyObject *s = as_bytes ? PyBytes_FromStringAndSize(p, len) : PyUnicode_DecodeUTF8(p, len, "strict");
    if (!s) {
      PyErr_Clear();
      throw py::value_error("element " + std::to_string(i) + " is not valid UTF-8; use tolist(as_bytes=True)");
    }
    PyList_SET_ITEM(out.ptr(), i, s);
  }
  return out;
}

py::list to_list(py::handle offsets, py::handle data, bool as_bytes) {
  StringsArg s;
  check_strings(s, "to_list", offsets, data);
  return to_list_impl(s.offsets(), s.bytes(), int64_t(s.n), as_bytes);
}

py::list views_to_list(py::handle views, py::handle buffers, bool as_bytes) {
  ViewsArg a;
  check_views(a, "views_to_list", views, buffers, /*bounds=*/true);
  const lm_string_view *v = a.v;
  const int64_t n = int64_t(a.n);
  py::list out(n);
  for (int64_t i = 0; i < n; i++) {
    const char *p = reinterpret_cast<const char *>(lm_sv_data(&v[i], a.ptrs.data()));
    PyObject *s = as_bytes ? PyBytes_FromStringAndSize(p, v[i].len) : PyUnicode_DecodeUTF8(p, v[i].len, "strict");
    if (!s) {
      PyErr_Clear();
      throw py::value_error("element " + std::to_string(i) + " is not valid UTF-8; use tolist(as_bytes=True)");
    }
    PyList_SET_ITEM(out.ptr(), i, s);
  }
  return out;
}

// Raise ValueError naming the first string whose bytes are not UTF-8 on their own.  The bytes from
// the first offset to the last are validated as one stream, and then every string boundary inside it
// must fall between two characters: a stream that is valid UTF-8 cut at a continuation byte (10xxxxxx)
// gives a string ending inside a character and one starting inside it, although the stream is valid
// (offsets [0, 1, 2] over "\xc3\xa9" were accepted, exported to Arrow as `string` and crashed Polars:
// review s38).
void validate_utf8(py::handle offsets, py::handle data) {
  StringsArg a;
  check_strings(a, "validate_utf8", offsets, data);
  const int64_t n = int64_t(a.n);
  const int64_t *o = a.offsets();
  const int64_t start = n ? o[0] : 0, end = n ? o[n] : 0;
  const uint8_t *d = a.bytes();
  size_t pos = 0;
  lm_status s;
  int64_t cut = -1;  // the first i in [1, n) whose offset lies inside a character
  {
    py::gil_scoped_release nogil;
    s = lm_utf8_validate(end > start ? d + start : nullptr, size_t(end - start), &pos);
    if (s == LM_OK) {
      for (int64_t i = 1; i < n; i++) {
        if (o[i] < end && (d[o[i]] & 0xC0) == 0x80) {
          cut = i;
          break;
        }
      }
    }
  }
  if (s == LM_OK && cut < 0) return;
  if (s == LM_OK) {
    // string j, the last non-empty one ending at o[cut], ends inside a character (j >= 0: the stream
    // starts at a character, so some non-empty string lies before the cut)
    // and string k, the first non-empty one starting there, continues it (o[cut] < end: one exists)
    int64_t j = cut - 1, k = cut;
    while (j > 0 && o[j] == o[cut]) j--;
    while (k + 1 < n && o[k + 1] == o[cut]) k++;
    throw py::value_error("string " + std::to_string(j) + " is not valid UTF-8 (it ends inside a multi-byte "
                          "character that string " + std::to_string(k) + " continues); pass validate=False "
                          "for bytes semantics");
  }
  // Find the string holding the bad byte.
  const int64_t at_byte = start + int64_t(pos);
  int64_t lo = 0, hi = n - 1;
  while (lo < hi) {
    int64_t mid = (lo + hi + 1) / 2;
    if (o[mid] <= at_byte) lo = mid;
    else hi = mid - 1;
  }
  throw py::value_error("string " + std::to_string(lo) + " is not valid UTF-8 (bad byte at offset " +
                        std::to_string(at_byte - o[lo]) + "); pass validate=False for bytes semantics");
}

// Views from an Arrow string_view array: full validation (bounds, padding, prefixes).
void validate_views(py::handle views, py::handle buffers) {
  ViewsArg a;
  check_views(a, "validate_views", views, buffers, /*bounds=*/true);
  lm_status s;
  {
    py::gil_scoped_release nogil;
    s = lm_views_validate(a.v, a.n, a.ptrs.data(), a.sizes.data(), uint32_t(a.sizes.size()));
  }
  if (s != LM_OK) throw py::value_error("views: not a valid string-view array (" + std::string(lm_status_str(s)) + ")");
}

// XXH3-128 of each string: int64 [N, 2] (low, high words' bits).
py::object hash128(py::handle offsets, py::handle data, uint64_t seed) {
  StringsArg a;
  check_strings(a, "hash128", offsets, data);
  const int64_t n = int64_t(a.n);
  ArrayOut out(Dt::i64, n, 2);
  const int64_t *o = a.offsets();
  const uint8_t *d = a.bytes();
  int64_t *h = out.data<int64_t>();
  {
    py::gil_scoped_release nogil;
    for (int64_t i = 0; i < n; i++) {
      lm_hash128_t x = lm_hash128(d + o[i], size_t(o[i + 1] - o[i]), seed);
      h[2 * i] = int64_t(x.lo);
      h[2 * i + 1] = int64_t(x.hi);
    }
  }
  return out.tensor();
}

}  // namespace

void register_stages(py::module_ &m);  // stages.cpp
py::tuple from_list_views(py::handle seq, bool allow_bytes, bool validate);  // bind_common.cpp

}  // namespace luminamoon
extern "C" int lm_hash_uses_avx512(void);  // core/src/hash.c (hash_internal.h)
namespace luminamoon {
void bind_minhash(py::module_ &m);  // minhash.cpp
void bind_near_dedup(py::module_ &m);  // bind_near_dedup.cpp
void bind_near_cluster(py::module_ &m);  // bind_near_cluster.cpp
void bind_jsonl(py::module_ &m);  // bind_jsonl.cpp
void bind_strops(py::module_ &m);  // bind_strops.cpp

// glibc malloc, tuned for a `luminamoon run` process (issue 14): called by the command line's run and
// demo commands (the application owns its process), never on import (a library must not change the
// malloc policy of torch and the user's code).  A `luminamoon run` with 2 threads
// faulted ~20k fresh pages a run (~80 MB zero-filled by the kernel: 6% of its CPU in the kernel):
// buffers above glibc's mmap threshold (the Gopher n-gram sets of MB-sized documents, the reader's
// joined chunks, numpy temporaries, the per-batch arenas of the stage threads) were mmap'd, faulted
// page by page and munmap'd again, and the stage threads' arenas were trimmed back to the kernel.
// With allocations below 32 MB served from the heaps and up to 64 MB of free memory kept at a heap's
// top, freed pages are reused instead: measured (2 threads, per run of the shared corpus, the
// environment equivalent GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:
// glibc.malloc.trim_threshold=67108864): minor faults ~20k -> ~8k, sys ~0.06 -> ~0.03 s;
// FusedPipeline alone ~17k -> ~5k.  The cost: up to 64 MB of freed memory a heap stays mapped.
// Skipped when the user tuned malloc through the environment (GLIBC_TUNABLES glibc.malloc.*,
// MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_) or set LM_NO_MALLOC_TUNE=1.
// Returns whether the tuning was applied.
static bool tune_malloc_once() {
#if defined(__GLIBC__)
  const char *no = std::getenv("LM_NO_MALLOC_TUNE");
  if (no && *no && std::strcmp(no, "0") != 0) return false;
  const char *tun = std::getenv("GLIBC_TUNABLES");
  if (tun && std::strstr(tun, "glibc.malloc.")) return false;
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") || std::getenv("MALLOC_TRIM_THRESHOLD_") ||
      std::getenv("MALLOC_TOP_PAD_"))
    return false;
  int ok = mallopt(M_MMAP_THRESHOLD, 32 << 20);  // the largest glibc accepts on 64-bit
  ok &= mallopt(M_TRIM_THRESHOLD, 64 << 20);
  return ok != 0;
#else
  return false;
#endif
}

}  // namespace luminamoon

PYBIND11_MODULE(_C, m) {
  using namespace luminamoon;
  m.doc() = "luminamoon native core: StringTensor construction/export and the text stages";
  m.def("from_list", &from_list, py::arg("strings"), py::arg("allow_bytes") = false, py::arg("validate") = true);
  m.def("to_list", &to_list, py::arg("offsets"), py::arg("data"), py::arg("as_bytes") = false);
  m.def("views_to_list", &views_to_list, py::arg("views"), py::arg("buffers"), py::arg("as_bytes") = false);
  m.def("validate_utf8", &validate_utf8, py::arg("offsets"), py::arg("data"));
  m.def("validate_views", &validate_views, py::arg("views"), py::arg("buffers"));
  m.def("cpu_count", &lm_cpu_count);
  // tune_malloc(): tune this process' glibc malloc once (tune_malloc_once above; the command line's run
  // and demo call it; LM_NO_MALLOC_TUNE=1 or the user's own malloc settings leave it alone); returns
  // whether it is tuned.  malloc_tuned(): whether tune_malloc() tuned it (False until it is called).
  static std::atomic<int> malloc_state{0};  // 0 not asked, 1 tuned, 2 left alone
  m.def("tune_malloc", [] {
    static std::once_flag once;
    std::call_once(once, [] { malloc_state.store(tune_malloc_once() ? 1 : 2); });
    return malloc_state.load() == 1;
  });
  m.def("malloc_tuned", [] { return malloc_state.load() == 1; });
  // True when views_hash64 hashes the inline views 8 at a time (AVX-512; StringTensor.hash64 then
  // prefers the views layout on the CPU)
  m.def("hash_views_vector", [] { return lm_hash_uses_avx512() != 0; });
  m.def("hash128", &hash128, py::arg("offsets"), py::arg("data"), py::arg("seed") = 0);
  m.def("from_list_views", &from_list_views, py::arg("strings"), py::arg("allow_bytes") = false,
        py::arg("validate") = true);
  register_stages(m);
  bind_minhash(m);
  bind_near_dedup(m);
  bind_near_cluster(m);
  bind_jsonl(m);
  bind_strops(m);
}
