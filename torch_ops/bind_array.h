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

// A fresh malloc'd output buffer, owned here until tensor() hands it over (freed otherwise).
class ArrayOut {
 public:
  ArrayOut(Dt dt, int64_t n0, int64_t n1 = -1, bool zero = false);
  ArrayOut(const ArrayOut &) = delete;
  ArrayOut &operator=(const ArrayOut &) = delete;
  ~ArrayOut();
  template <typename T>
  T *data() {
    return static_cast<T *>(p_);
  }
  // Keep the first n0 rows only (n0 <= the current rows); the memory is shrunk with realloc.
  void shrink(int64_t n0);
  // The tensor that owns the buffer from now on (once).
  py::object tensor();

 private:
  void *p_ = nullptr;
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
