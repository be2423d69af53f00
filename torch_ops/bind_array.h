// How the pybind11 module luminamoon._C exchanges arrays with Python without libtorch (issue 15,
// docs/stable_abi.md "The pybind11 module"): _C includes no torch/ATen/c10 header and links no torch
// library, so one binary serves every torch.
//
// Inputs (ArrayIn, get_array): a torch.Tensor is read through DLPack (torch.utils.dlpack.to_dlpack,
// zero copy: the capsule keeps the tensor's storage alive until the ArrayIn is destroyed; torch's
// capsule destructor releases it); a numpy array or any other buffer-protocol object (bytes,
// bytearray, memoryview) through the buffer protocol (PyBuffer_Release in the destructor).
//
// Outputs (ArrayOut, own_tensor): memory _C allocated with malloc (or mapped with mmap) is handed to a
// torch tensor through a DLPack capsule made here (torch.utils.dlpack.from_dlpack's converter, zero
// copy).  Ownership: until the hand-over the ArrayOut (or own_tensor's caller) owns the buffer; after
// it, the DLManagedTensor's deleter frees it exactly once: torch calls the deleter when the tensor's
// storage dies, or, when the conversion fails before torch took the capsule, the capsule's own
// destructor calls it (it checks the capsule was not renamed "used_dltensor" by a consumer).
//
// torch is imported lazily, on the first call that needs it (all calls run with the GIL held).
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

extern "C" {
#include "luminamoon/batch.h"
#include "luminamoon/parallel.h"
}

namespace luminamoon {
namespace py = pybind11;

// The element types _C exchanges.
enum class Dt : uint8_t { other = 0, u8, i8, i32, i64, b8 };
size_t dt_size(Dt t);

// A contiguous array borrowed from a Python object for the duration of one call (see above).
// Not copyable; destroy it with the GIL held.
class __attribute__((visibility("hidden"))) ArrayIn {  // hidden: holds py::objects (pybind11 is hidden)
 public:
  ArrayIn() = default;
  ArrayIn(const ArrayIn &) = delete;
  ArrayIn &operator=(const ArrayIn &) = delete;
  ~ArrayIn();

  Dt dt = Dt::other;
  int ndim = 0;
  int64_t shape[4] = {0, 0, 0, 0};  // the first min(ndim, 4) sizes
  int64_t numel = 0;
  bool cpu = true;         // false: a tensor on another device (ptr is then not readable here)
  bool contiguous = true;  // C-contiguous (always true after get_array with Layout::copy)

  // The first element (nullptr when numel == 0).  Only for CPU arrays: ValueError otherwise.
  template <typename T>
  const T *data() const {
    return static_cast<const T *>(host_ptr());
  }
  size_t nbytes() const { return size_t(numel) * dt_size(dt); }
  // "torch.float32", "int16", ...: the dtype for messages.
  std::string dtype_name() const;
  // "[3, 16]": the shape for messages.
  std::string shape_str() const;

 private:
  friend void get_array(ArrayIn &a, py::handle obj, const std::string &name, int layout);
  const void *host_ptr() const;
  void release();
  const void *ptr_ = nullptr;
  py::object src_;       // the object as passed (messages)
  py::object capsule_;   // DLPack capsule of a tensor (keeps its storage alive)
  py::object holder_;    // the object whose buffer view_ holds (or a contiguous copy)
  Py_buffer view_{};
  bool has_view_ = false;
  std::string name_;
};

// Layouts get_array accepts.
enum Layout : int {
  kRequireContiguous = 0,  // ValueError "<name> must be contiguous" for a strided array
  kCopyIfStrided = 1,      // a strided array is copied to a contiguous one (tensor.contiguous())
};

// Borrow obj (a torch.Tensor, a numpy array or a buffer-protocol object) into a.  TypeError naming
// `name` for anything else.  A tensor on another device is accepted here with a.cpu == false (no data
// access); callers check a.cpu and raise their own ValueError.
void get_array(ArrayIn &a, py::handle obj, const std::string &name, int layout = kCopyIfStrided);

// Hand p (n0 x n1 elements of dt; n1 < 0: 1-D) to a new CPU torch tensor.  map_len == 0: p came from
// malloc and is freed with free(); otherwise it is an mmap of map_len bytes, unmapped.  p may be nullptr
// only when the array is empty.  Takes ownership of p in every case, also when it throws.
py::object own_tensor(void *p, Dt dt, int64_t n0, int64_t n1 = -1, size_t map_len = 0);
// The same with the release function given: release(p, len) runs exactly once, when the tensor's
// storage dies (or right away when this throws).  It may run on any thread, without the GIL.
using ReleaseFn = void (*)(void *p, size_t len);
py::object own_tensor_with(void *p, Dt dt, int64_t n0, int64_t n1, ReleaseFn release, size_t len);

// Big arrays on reused anonymous mappings (the fast ops' outputs, from_list's payload and views).
// A fresh mapping page-faults and zero-fills every page on first write (for a 1 M-string output
// that cost as much as the kernel); glibc's malloc maps allocations over its threshold (128 KiB at
// first) afresh each time, so a loop of calls paid the faults every call until a big free happened
// to raise the threshold.  Released mappings are kept in a small pool (8 of them, 512 MiB in all; all
// but 64 MiB of mappings of up to 32 MiB are MADV_FREE'd: the kernel's to take back under memory
// pressure) for the next array of about their size, which is what Polars' and pyarrow's allocators
// get by keeping freed memory.
// Mappings of kMapHuge bytes or more start on a 2 MiB boundary, are sized in whole 2 MiB pages and
// are advised onto transparent huge pages (MADV_HUGEPAGE): a kernel reading them takes a TLB miss
// (and a restart of the hardware prefetcher) every 2 MiB instead of every 4 KiB: starts_with on the
// views of 1-2 M words ran ~1.4-1.8x faster from huge pages.  With transparent huge pages off the
// advice is ignored.  Thread-safe; the pool is only try-locked, so a release that finds it busy (or a
// child forked while it was held) unmaps instead.
constexpr size_t kMapPoolMin = size_t(256) << 10;  // a pooled ArrayOut maps from this size on (malloc below)
constexpr size_t kMapHuge = size_t(2) << 20;
// A mapping of at least `want` bytes (want > 0): a pooled one of want..2*want (+ 2 MiB) bytes when
// there is one (*fresh = false: its bytes are garbage), else a new one (*fresh = true: zeros).  Its
// size in *cap.  nullptr when out of memory.  Owned by the caller until map_put.
void *map_take(size_t want, size_t *cap, bool *fresh);
// Like map_take, but a pooled mapping of any size on a 2 MiB boundary is taken (the largest when none is
// big enough: the caller grows it with mremap, and a mapping grown in place keeps its aligned start); for
// a buffer that grows (from_list's payload).  nullptr when the pool holds none (or is busy).
void *map_take_any(size_t want, size_t *cap);
// Give p (cap bytes, from map_take / map_take_any / mremap of one) back to the pool, or unmap it.
void map_put(void *p, size_t cap);
// Round `bytes` up to a mapping size (whole 4 KiB pages; whole 2 MiB pages from kMapHuge on) and map
// that many fresh, from a 2 MiB boundary when huge (advised onto huge pages).  nullptr when out of memory.
void *map_fresh(size_t bytes, size_t *cap);
// The mapping size map_fresh gives for `bytes` (0 when it would overflow).
size_t map_size(size_t bytes);

// An output buffer, owned here until tensor() hands it over (freed otherwise): malloc'd, or with
// `pooled` from kMapPoolMin bytes on a pooled mapping (map_take).  Pooled: the StringTensor fast
// paths' outputs (bind_strops.cpp), one array a call whose tensor usually dies before the next call;
// not the arrays of the JSONL scan or the stages, which stay on malloc (the run tunes glibc for them,
// and a pipeline holds more of them alive at once than the pool keeps).
class ArrayOut {
 public:
  ArrayOut(Dt dt, int64_t n0, int64_t n1 = -1, bool zero = false, bool pooled = false);
  ArrayOut(const ArrayOut &) = delete;
  ArrayOut &operator=(const ArrayOut &) = delete;
  ~ArrayOut();
  template <typename T>
  T *data() {
    return static_cast<T *>(p_);
  }
  // Keep the first n0 rows only (n0 <= the current rows); the memory is shrunk (realloc / mremap).
  void shrink(int64_t n0);
  // The tensor that owns the buffer from now on (once).
  py::object tensor();

 private:
  void *p_ = nullptr;
  size_t map_ = 0;  // > 0: p_ is a mapping of this many bytes (map_take), else malloc'd
  Dt dt_;
  int64_t n0_, n1_;
};

// The exec config of a core call: num_threads <= 0 means torch's intra-op thread count
// (torch.get_num_threads(), asked once per call: call with the GIL held).
lm_exec exec_for(int num_threads);

// The input documents of a stage call: offsets (int32/int64 [N+1], CPU) and a uint8 payload.  The
// offsets are always copied into a private int64 snapshot (the core validates and reads it with the
// GIL released while another thread may write the caller's tensor); the payload is used in place (a
// strided payload is copied contiguous).  ValueError / TypeError prefixed with `what`.
struct DocsArg {
  ArrayIn off, data;
  std::unique_ptr<int64_t[]> off64;
  lm_docs docs;
  DocsArg(py::handle offsets, py::handle data, const char *what);
};

// Hand the arrays of r over to tensors (each freed exactly once by its tensor's deleter) and zero r:
// (offsets int64 [n_out+1], data uint8 [data_len], source_index int64 [n_out], reasons int32 [n_in]).
py::tuple result_tensors(lm_batch_result &r);

}  // namespace luminamoon
