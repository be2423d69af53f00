// Arrays in and out of luminamoon._C without libtorch: see bind_array.h.
#include "bind_array.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

namespace luminamoon {

namespace {

// ---- DLPack (https://dmlc.github.io/dlpack/latest/c_api.html): the stable C ABI, declared here
// (the layout of dlpack.h v0.8 / v1.0; torch exports "dltensor" capsules of DLManagedTensor, newer
// producers may hand "dltensor_versioned" capsules of DLManagedTensorVersioned).
struct DLDevice {
  int32_t device_type;  // kDLCPU = 1
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;  // kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLBool 6
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  int64_t *strides;  // in elements; nullptr: compact row-major
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(DLManagedTensor *self);
};
struct DLPackVersion {
  uint32_t major, minor;
};
struct DLManagedTensorVersioned {
  DLPackVersion version;
  void *manager_ctx;
  void (*deleter)(DLManagedTensorVersioned *self);
  uint64_t flags;
  DLTensor dl_tensor;
};
constexpr int32_t kDLCPU = 1;

// Python callables of torch, looked up once (with the GIL held) and kept for the process's life.
PyObject *g_tensor_type = nullptr;  // torch.Tensor
PyObject *g_to_dlpack = nullptr;    // torch.utils.dlpack.to_dlpack (== torch._C._to_dlpack)
PyObject *g_from_dlpack = nullptr;  // torch._C._from_dlpack (what torch.utils.dlpack.from_dlpack calls for a capsule)
PyObject *g_num_threads = nullptr;  // torch.get_num_threads

void load_torch() {
  if (g_from_dlpack) return;
  py::module_ torch = py::module_::import("torch");
  py::module_ dl = py::module_::import("torch.utils.dlpack");
  py::object tensor = torch.attr("Tensor");
  py::object to = dl.attr("to_dlpack");
  py::object nt = torch.attr("get_num_threads");
  py::object c = torch.attr("_C");
  py::object from = py::hasattr(c, "_from_dlpack") ? c.attr("_from_dlpack") : dl.attr("from_dlpack");
  g_tensor_type = tensor.release().ptr();
  g_to_dlpack = to.release().ptr();
  g_num_threads = nt.release().ptr();
  g_from_dlpack = from.release().ptr();
}

Dt dt_of_dl(DLDataType t) {
  if (t.lanes != 1) return Dt::other;
  if (t.code == 1 && t.bits == 8) return Dt::u8;
  if (t.code == 6 && t.bits == 8) return Dt::b8;
  if (t.code == 0 && t.bits == 8) return Dt::i8;
  if (t.code == 0 && t.bits == 32) return Dt::i32;
  if (t.code == 0 && t.bits == 64) return Dt::i64;
  return Dt::other;
}

DLDataType dl_of_dt(Dt t) {
  switch (t) {
    case Dt::u8: return {1, 8, 1};
    case Dt::b8: return {6, 8, 1};
    case Dt::i8: return {0, 8, 1};
    case Dt::i32: return {0, 32, 1};
    case Dt::i64: return {0, 64, 1};
    default: break;
  }
  throw std::logic_error("luminamoon._C: no DLPack type for this dtype");
}

// A buffer-protocol format code (struct module syntax, one item) -> Dt.
Dt dt_of_format(const char *f, Py_ssize_t itemsize) {
  if (!f) return itemsize == 1 ? Dt::u8 : Dt::other;  // no format: unsigned bytes
  if (*f == '@' || *f == '=' || *f == '<' || (*f == '|')) f++;
  else if ((*f == '>' || *f == '!') && itemsize != 1) return Dt::other;  // big-endian
  else if (*f == '>' || *f == '!') f++;
  if (f[0] == 0 || f[1] != 0) return Dt::other;
  switch (f[0]) {
    case '?': return itemsize == 1 ? Dt::b8 : Dt::other;
    case 'B': case 'c': return itemsize == 1 ? Dt::u8 : Dt::other;
    case 'b': case 'h': case 'i': case 'l': case 'q': case 'n':
      return itemsize == 1 ? Dt::i8 : itemsize == 4 ? Dt::i32 : itemsize == 8 ? Dt::i64 : Dt::other;
    default: return Dt::other;
  }
}

bool compact(int ndim, const int64_t *shape, const int64_t *strides, int64_t elem) {
  if (!strides) return true;
  int64_t want = elem;
  for (int d = ndim - 1; d >= 0; d--) {
    if (shape[d] == 0) return true;
    if (shape[d] != 1 && strides[d] != want) return false;
    want *= shape[d];
  }
  return true;
}

[[noreturn]] void raise_not_array(py::handle obj, const std::string &name) {
  throw py::type_error(name + " must be a torch.Tensor or a numpy array (any buffer-protocol object), got " +
                       std::string(Py_TYPE(obj.ptr())->tp_name));
}

// ---- outputs: our own DLManagedTensor around a malloc'd / mmap'd buffer
struct Owned {
  DLManagedTensor m;
  int64_t shape[2];
  int64_t strides[2];
  void *p;
  size_t len;
  ReleaseFn release;  // release(p, len), once
};

void owned_delete(DLManagedTensor *m) {
  Owned *o = static_cast<Owned *>(m->manager_ctx);
  if (o->p) o->release(o->p, o->len);
  delete o;
}

void release_free(void *p, size_t) { std::free(p); }
void release_munmap(void *p, size_t len) { munmap(p, len); }
void release_pool(void *p, size_t len) { map_put(p, len); }

// ---- the mapping pool (bind_array.h: map_take)
struct MapPool {
  static constexpr int kSlots = 8;
  static constexpr size_t kMax = size_t(512) << 20;
  static constexpr size_t kKeepHot = size_t(32) << 20;  // a mapping up to this size may stay hot ...
  static constexpr size_t kHotMax = size_t(64) << 20;   // ... while the hot ones hold this much at most
  std::mutex mu;
  void *p[kSlots] = {};
  size_t cap[kSlots] = {};
  bool hot[kSlots] = {};      // not MADV_FREE'd
  uint64_t seq[kSlots] = {};  // when it was put (the least recently put hot one is cooled first)
  uint64_t puts = 0;
};
MapPool &map_pool() {
  static MapPool *c = new MapPool;  // never destroyed: deleters may run at exit
  return *c;
}
// The pooled mapping in slot i, taken out of the pool (the caller holds the lock).
void *pool_pop(MapPool &c, int i, size_t *cap) {
  void *q = c.p[i];
  *cap = c.cap[i];
  c.p[i] = nullptr;
  c.cap[i] = 0;
  c.hot[i] = false;
  c.seq[i] = 0;
  return q;
}

// The capsule's destructor: frees the buffer only when no consumer took the capsule (a consumer
// renames it "used_dltensor" and calls the deleter itself when its tensor dies).
void capsule_dtor(PyObject *cap) {
  if (!PyCapsule_IsValid(cap, "dltensor")) return;
  auto *m = static_cast<DLManagedTensor *>(PyCapsule_GetPointer(cap, "dltensor"));
  if (m && m->deleter) m->deleter(m);
}

}  // namespace

size_t dt_size(Dt t) {
  switch (t) {
    case Dt::i32: return 4;
    case Dt::i64: return 8;
    case Dt::other: return 1;
    default: return 1;
  }
}

// ---------------------------------------------------------------- ArrayIn

ArrayIn::~ArrayIn() { release(); }

void ArrayIn::release() {
  if (has_view_) PyBuffer_Release(&view_);
  has_view_ = false;
  capsule_ = py::object();
  holder_ = py::object();
  ptr_ = nullptr;
}

const void *ArrayIn::host_ptr() const {
  if (!cpu) throw py::value_error(name_ + " must be on the CPU");
  return numel ? ptr_ : nullptr;
}

std::string ArrayIn::dtype_name() const {
  if (src_ && py::hasattr(src_, "dtype")) return py::str(src_.attr("dtype"));
  if (has_view_ && view_.format) return std::string("format '") + view_.format + "'";
  return "unknown dtype";
}

std::string ArrayIn::shape_str() const {
  std::string s = "[";
  for (int d = 0; d < ndim && d < 4; d++) s += (d ? ", " : "") + std::to_string(shape[d]);
  if (ndim > 4) s += ", ...";
  return s + "]";
}

void get_array(ArrayIn &a, py::handle obj, const std::string &name, int layout) {
  a.release();
  a.src_ = py::reinterpret_borrow<py::object>(obj);
  a.name_ = name;
  a.cpu = true;
  PyObject *o = obj.ptr();
  if (PyObject_CheckBuffer(o)) {
    if (PyObject_GetBuffer(o, &a.view_, PyBUF_RECORDS_RO) != 0) {
      PyErr_Clear();
      raise_not_array(obj, name);
    }
    a.has_view_ = true;
    if (!PyBuffer_IsContiguous(&a.view_, 'C')) {
      if (layout != kCopyIfStrided) throw py::value_error(name + " must be contiguous");
      PyBuffer_Release(&a.view_);
      a.has_view_ = false;
      a.holder_ = py::module_::import("numpy").attr("ascontiguousarray")(obj);
      if (PyObject_GetBuffer(a.holder_.ptr(), &a.view_, PyBUF_RECORDS_RO) != 0) throw py::error_already_set();
      a.has_view_ = true;
    }
    a.dt = dt_of_format(a.view_.format, a.view_.itemsize);
    a.ndim = a.view_.ndim;
    a.numel = 1;
    for (int d = 0; d < a.ndim; d++) {
      if (d < 4) a.shape[d] = a.view_.shape[d];
      a.numel *= a.view_.shape[d];
    }
    if (a.ndim == 0) a.numel = a.view_.len / (a.view_.itemsize ? a.view_.itemsize : 1);
    a.contiguous = true;
    a.ptr_ = a.view_.buf;
    return;
  }
  load_torch();
  int is_tensor = PyObject_IsInstance(o, g_tensor_type);
  if (is_tensor < 0) throw py::error_already_set();
  if (!is_tensor) raise_not_array(obj, name);
  PyObject *cap = PyObject_CallOneArg(g_to_dlpack, o);
  if (!cap) {
    // sparse, meta, quantized, ... tensors: no DLPack export
    PyErr_Clear();
    std::string dev = py::str(a.src_.attr("device"));
    std::string layout_s = py::str(a.src_.attr("layout"));
    if (dev.rfind("cpu", 0) != 0) throw py::value_error(name + " must be on the CPU, got a tensor on " + dev);
    throw py::type_error(name + " must be a dense (strided) tensor, got " + layout_s + " " + a.dtype_name());
  }
  a.capsule_ = py::reinterpret_steal<py::object>(cap);
  const DLTensor *t = nullptr;
  if (PyCapsule_IsValid(cap, "dltensor")) {
    t = &static_cast<DLManagedTensor *>(PyCapsule_GetPointer(cap, "dltensor"))->dl_tensor;
  } else if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
    t = &static_cast<DLManagedTensorVersioned *>(PyCapsule_GetPointer(cap, "dltensor_versioned"))->dl_tensor;
  } else {
    throw py::type_error(name + ": torch.utils.dlpack.to_dlpack returned an unknown capsule");
  }
  a.dt = dt_of_dl(t->dtype);
  a.ndim = t->ndim;
  a.numel = 1;
  for (int d = 0; d < t->ndim; d++) {
    if (d < 4) a.shape[d] = t->shape[d];
    a.numel *= t->shape[d];
  }
  a.cpu = t->device.device_type == kDLCPU;
  a.contiguous = compact(t->ndim, t->shape, t->strides, 1);
  a.ptr_ = static_cast<const char *>(t->data) + t->byte_offset;
  if (!a.contiguous) {
    if (layout != kCopyIfStrided) throw py::value_error(name + " must be contiguous");
    py::object c = a.src_.attr("contiguous")();
    get_array(a, c, name, kRequireContiguous);
    a.holder_ = c;  // (a.src_ is now the copy; keep it for messages too)
  }
}

// ---------------------------------------------------------------- outputs

py::object own_tensor(void *p, Dt dt, int64_t n0, int64_t n1, size_t map_len) {
  return own_tensor_with(p, dt, n0, n1, map_len ? release_munmap : release_free, map_len);
}

py::object own_tensor_with(void *p, Dt dt, int64_t n0, int64_t n1, ReleaseFn release, size_t len) {
  if (!p) {  // an empty array: a 1-byte allocation keeps every data pointer non-null
    release = release_free;
    len = 0;
    p = std::malloc(1);
    if (!p) throw std::bad_alloc();
  }
  Owned *o = new (std::nothrow) Owned{};
  if (!o) {
    release(p, len);
    throw std::bad_alloc();
  }
  o->p = p;
  o->len = len;
  o->release = release;
  o->shape[0] = n0;
  o->shape[1] = n1 < 0 ? 1 : n1;
  o->strides[0] = n1 < 0 ? 1 : n1;
  o->strides[1] = 1;
  o->m.manager_ctx = o;
  o->m.deleter = owned_delete;
  DLTensor &t = o->m.dl_tensor;
  t.data = p;
  t.device = {kDLCPU, 0};
  t.ndim = n1 < 0 ? 1 : 2;
  try {
    t.dtype = dl_of_dt(dt);
    load_torch();
  } catch (...) {
    owned_delete(&o->m);
    throw;
  }
  t.shape = o->shape;
  t.strides = o->strides;
  t.byte_offset = 0;
  PyObject *cap = PyCapsule_New(&o->m, "dltensor", capsule_dtor);
  if (!cap) {
    owned_delete(&o->m);
    throw py::error_already_set();
  }
  py::object keep = py::reinterpret_steal<py::object>(cap);  // frees through capsule_dtor if not consumed
  PyObject *tensor = PyObject_CallOneArg(g_from_dlpack, cap);
  if (!tensor) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(tensor);
}

size_t map_size(size_t bytes) {
  const size_t unit = bytes >= kMapHuge ? kMapHuge : size_t(4096);
  if (bytes > SIZE_MAX - unit) return 0;
  return (bytes + unit - 1) / unit * unit;
}

void *map_fresh(size_t bytes, size_t *cap) {
  const size_t len = map_size(bytes ? bytes : 1);
  if (!len) return nullptr;
  if (len < kMapHuge) {
    void *q = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (q == MAP_FAILED) return nullptr;
    *cap = len;
    return q;
  }
  // kMapHuge more, the unaligned ends given back (Linux >= 6.7 aligns such mappings itself)
  if (len > SIZE_MAX - kMapHuge) return nullptr;
  void *raw = mmap(nullptr, len + kMapHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t r = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t a = (r + kMapHuge - 1) & ~uintptr_t(kMapHuge - 1);
  if (a > r) munmap(raw, a - r);
  munmap(reinterpret_cast<void *>(a + len), r + kMapHuge - a);
  void *q = reinterpret_cast<void *>(a);
#ifdef MADV_HUGEPAGE
  madvise(q, len, MADV_HUGEPAGE);
#endif
  *cap = len;
  return q;
}

void *map_take(size_t want, size_t *cap, bool *fresh) {
  const size_t len = map_size(want ? want : 1);
  if (!len) return nullptr;
  {
    MapPool &c = map_pool();
    std::unique_lock<std::mutex> l(c.mu, std::try_to_lock);
    if (l.owns_lock()) {
      // the smallest pooled mapping that holds `len` without wasting more than about its size
      const size_t most = len > SIZE_MAX / 2 - kMapHuge ? SIZE_MAX : 2 * len + kMapHuge;
      int best = -1;
      for (int i = 0; i < MapPool::kSlots; i++)
        if (c.p[i] && c.cap[i] >= len && c.cap[i] <= most && (best < 0 || c.cap[i] < c.cap[best])) best = i;
      if (best >= 0) {
        *fresh = false;
        return pool_pop(c, best, cap);
      }
    }
  }
  *fresh = true;
  return map_fresh(len, cap);
}

void *map_take_any(size_t want, size_t *cap) {
  MapPool &c = map_pool();
  std::unique_lock<std::mutex> l(c.mu, std::try_to_lock);
  if (!l.owns_lock()) return nullptr;
  int best = -1;
  for (int i = 0; i < MapPool::kSlots; i++) {
    // only a mapping on a 2 MiB boundary: grown in place (mremap) it stays aligned for its huge pages,
    // where a small unaligned one grown in place would not (and saves next to no faults anyway)
    if (!c.p[i] || reinterpret_cast<uintptr_t>(c.p[i]) % kMapHuge) continue;
    if (best < 0) {
      best = i;
      continue;
    }
    const bool fits = c.cap[i] >= want, best_fits = c.cap[best] >= want;
    if (fits ? (!best_fits || c.cap[i] < c.cap[best]) : (!best_fits && c.cap[i] > c.cap[best])) best = i;
  }
  return best < 0 ? nullptr : pool_pop(c, best, cap);
}

void map_put(void *q, size_t cap) {
  MapPool &c = map_pool();
  {
    std::unique_lock<std::mutex> l(c.mu, std::try_to_lock);
    if (l.owns_lock() && cap <= MapPool::kMax) {
      int slot = -1;
      for (int i = 0; i < MapPool::kSlots; i++)
        if (!c.p[i] && slot < 0) slot = i;
      size_t total = cap;
      for (int i = 0; i < MapPool::kSlots; i++) total += c.cap[i];
      if (slot < 0) {  // full: the smallest pooled mapping makes room when this one is bigger
        for (int i = 0; i < MapPool::kSlots; i++)
          if (slot < 0 || c.cap[i] < c.cap[slot]) slot = i;
        if (c.cap[slot] >= cap || total - c.cap[slot] > MapPool::kMax) slot = -1;  // (kept, this one unmapped)
      }
      if (slot >= 0 && c.p[slot]) {  // the smallest goes: only now that this one is sure to take its place
        size_t gone = 0;
        total -= c.cap[slot];
        munmap(pool_pop(c, slot, &gone), gone);
      }
      size_t hot = 0;
      for (int i = 0; i < MapPool::kSlots; i++)
        if (c.hot[i]) hot += c.cap[i];
      if (slot >= 0 && total <= MapPool::kMax) {
        // Pooled mappings are not held, past a few hot ones: the kernel may take their pages back under
        // memory pressure (MADV_FREE: they then read as zeros and fault again when written); until it
        // does, writing them costs no fault.  The mappings of up to kKeepHot bytes released last stay as
        // they are while the hot ones hold at most kHotMax (as glibc keeps freed chunks under its mmap
        // threshold, 32 MiB at most, and trims its heap past twice that); the least recently released
        // cool first.  MADV_FREE costs a page-table walk and a TLB flush, and each page's first write
        // after it a dirty-bit update: a loop of starts_with on 1 M words (1 MB outputs) ran ~5% slower
        // with every release MADV_FREE'd.  Cooling the oldest keeps the arrays of the loop running now
        // hot when earlier ones (from_list's, say) filled the budget.
        bool keep_hot = cap <= MapPool::kKeepHot;
        while (keep_hot && hot + cap > MapPool::kHotMax) {
          int old = -1;
          for (int i = 0; i < MapPool::kSlots; i++)
            if (c.hot[i] && (old < 0 || c.seq[i] < c.seq[old])) old = i;
          if (old < 0) {
            keep_hot = false;
            break;
          }
#ifdef MADV_FREE
          madvise(c.p[old], c.cap[old], MADV_FREE);
#endif
          c.hot[old] = false;
          hot -= c.cap[old];
        }
#ifdef MADV_FREE
        if (!keep_hot) madvise(q, cap, MADV_FREE);
#endif
        c.seq[slot] = ++c.puts;
        c.p[slot] = q;
        c.cap[slot] = cap;
        c.hot[slot] = keep_hot;
        return;
      }
    }
  }
  munmap(q, cap);
}

ArrayOut::ArrayOut(Dt dt, int64_t n0, int64_t n1, bool zero, bool pooled) : dt_(dt), n0_(n0), n1_(n1) {
  if (n0 < 0 || (n1 >= 0 && n0 && uint64_t(n1) > uint64_t(INT64_MAX) / uint64_t(n0)))
    throw py::value_error("luminamoon._C: bad output shape");
  const uint64_t count = uint64_t(n0) * uint64_t(n1 < 0 ? 1 : n1);
  if (count > uint64_t(SIZE_MAX) / dt_size(dt)) throw std::bad_alloc();
  const size_t bytes = size_t(count) * dt_size(dt);
  if (pooled && bytes >= kMapPoolMin) {
    bool fresh = true;
    p_ = map_take(bytes, &map_, &fresh);
    if (!p_) throw std::bad_alloc();
    if (zero && !fresh) std::memset(p_, 0, bytes);
    return;
  }
  p_ = zero ? std::calloc(bytes ? bytes : 1, 1) : std::malloc(bytes ? bytes : 1);
  if (!p_) throw std::bad_alloc();
}

ArrayOut::~ArrayOut() {
  if (!p_) return;
  if (map_) map_put(p_, map_);
  else std::free(p_);
}

void ArrayOut::shrink(int64_t n0) {
  if (n0 < 0 || n0 > n0_) throw std::logic_error("ArrayOut::shrink: rows out of range");
  n0_ = n0;
  const size_t bytes = size_t(n0) * size_t(n1_ < 0 ? 1 : n1_) * dt_size(dt_);
  if (map_) {  // in place: the pages past the new end go back to the system
    const size_t keep = map_size(bytes ? bytes : 1);
    if (keep && keep < map_ && mremap(p_, map_, keep, 0) != MAP_FAILED) map_ = keep;
    return;
  }
  void *q = std::realloc(p_, bytes ? bytes : 1);
  if (q) p_ = q;  // a failed shrink keeps the larger block
}

py::object ArrayOut::tensor() {
  void *p = p_;
  p_ = nullptr;  // own_tensor owns it now, also if it throws
  if (!p) throw std::logic_error("ArrayOut::tensor called twice");
  if (map_) return own_tensor_with(p, dt_, n0_, n1_, release_pool, map_);
  return own_tensor(p, dt_, n0_, n1_, 0);
}

// ---------------------------------------------------------------- stage helpers

lm_exec exec_for(int num_threads) {
  lm_exec e;
  e.min_items_per_thread = 0;
  if (num_threads > 0) {
    e.num_threads = num_threads;
    return e;
  }
  load_torch();
  PyObject *r = PyObject_CallNoArgs(g_num_threads);
  if (!r) throw py::error_already_set();
  long v = PyLong_AsLong(r);
  Py_DECREF(r);
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  e.num_threads = v > 0 ? int(v) : 1;
  return e;
}

DocsArg::DocsArg(py::handle offsets, py::handle data_, const char *what) {
  const std::string w(what);
  auto bad = [&](const std::string &m) { throw py::value_error(w + ": " + m); };
  get_array(off, offsets, w + ": offsets", kCopyIfStrided);
  get_array(data, data_, w + ": data", kCopyIfStrided);
  if (off.ndim != 1 || off.numel < 1) bad("offsets must be 1-D with N+1 >= 1 entries");
  if (off.dt != Dt::i32 && off.dt != Dt::i64) throw py::type_error(w + ": offsets must be int32 or int64");
  if (data.dt != Dt::u8) throw py::type_error(w + ": data must be uint8");
  if (data.ndim != 1) bad("data must be 1-D");
  if (!off.cpu || !data.cpu) bad("the text stages run on the CPU: move the StringTensor with .cpu()");
  const size_t n1 = size_t(off.numel);
  off64.reset(new int64_t[n1]);
  if (off.dt == Dt::i64) {
    std::memcpy(off64.get(), off.data<int64_t>(), n1 * sizeof(int64_t));
  } else {
    const int32_t *s = off.data<int32_t>();
    for (size_t i = 0; i < n1; i++) off64[i] = s[i];
  }
  docs.offsets = off64.get();
  docs.data = data.numel ? data.data<uint8_t>() : nullptr;
  docs.n = n1 - 1;
  docs.data_len = size_t(data.numel);
  if (docs.offsets[0] < 0 || docs.offsets[docs.n] > int64_t(docs.data_len)) bad("offsets point outside data");
}

py::tuple result_tensors(lm_batch_result &r) {
  // Each array leaves r right before its hand-over: own_tensor owns it from then on (also when it
  // throws), and what is still in r is freed by the caller's lm_batch_result_free.
  auto take = [](auto *&field, size_t n, Dt dt) {
    void *p = field;
    field = nullptr;
    if (!p && n) throw std::bad_alloc();
    return own_tensor(p, dt, int64_t(n));
  };
  const size_t n_out = r.n_out, n_in = r.n_in, len = r.data_len;
  py::object off = take(r.offsets, n_out + 1, Dt::i64);
  py::object data = take(r.data, len, Dt::u8);
  py::object src = take(r.source_index, n_out, Dt::i64);
  py::object rea = take(r.reasons, n_in, Dt::i32);
  lm_batch_result_free(&r);  // every array is out already: zeroes the struct
  return py::make_tuple(off, data, src, rea);
}

}  // namespace luminamoon
