// Argument checks and status mapping of the pybind11 module luminamoon._C (module.cpp: to_list,
// views_to_list, validate_utf8, validate_views, hash128).  No libtorch: the arrays come in through
// bind_array.h (DLPack / buffer protocol) and errors are pybind11's builtin exceptions (ValueError,
// TypeError, IndexError), so they keep their Python types under every torch.  (The operators'
// checks, in luminamoon._ops, are torch_ops/stable/stable_common.h.)
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bind_array.h"

extern "C" {
#include "luminamoon/parallel.h"
#include "luminamoon/status.h"
#include "luminamoon/string_tensor.h"
}
#include "stable/status_kind.h"

namespace luminamoon {

// Raise the Python exception that fits a core status, naming the operation.
[[noreturn]] inline void throw_status(lm_status s, const char *what) {
  std::string msg = std::string(what) + ": " + lm_status_str(s);
  switch (status_kind(s)) {
    case StatusKind::Value:
      throw py::value_error(msg);
    case StatusKind::Index:
      throw py::index_error(msg);
    case StatusKind::Memory:
      throw std::bad_alloc();
    case StatusKind::Runtime:
      break;
  }
  throw std::runtime_error(msg);
}

inline void check(lm_status s, const char *what) {
  if (s != LM_OK) throw_status(s, what);
}

// A StringTensor's (offsets, data) for one call: offsets 1-D int32/int64 contiguous with >= 1
// entries, data 1-D uint8 contiguous, both on the CPU; the offsets are a private snapshot (a copy),
// checked here (monotone, non-negative, within data), so that another thread writing into the
// caller's offsets while the call runs with the GIL released can never make it read outside data.
// TypeError / ValueError "luminamoon.<op>: ..." otherwise.
struct StringsArg {
  ArrayIn off_in, data;
  std::unique_ptr<int64_t[]> off64;  // the snapshot, widened to int64
  size_t n = 0;                      // strings
  const int64_t *offsets() const { return off64.get(); }
  const uint8_t *bytes() const { return data.data<uint8_t>(); }
};
void check_strings(StringsArg &s, const char *op, py::handle offsets, py::handle data);

// Arrow-style string views: views uint8 [N, 16] contiguous on the CPU; buffers a sequence of 1-D
// uint8 contiguous CPU arrays.  With bounds = true the views are a private snapshot (a copy),
// checked here (inline padding zero, every long view inside its buffer): for ops that read every
// payload.  TypeError / ValueError "luminamoon.<op>: ..." otherwise.
struct ViewsArg {
  ArrayIn views_in;
  std::vector<std::unique_ptr<ArrayIn>> bufs;
  std::vector<const uint8_t *> ptrs;
  std::vector<size_t> sizes;
  std::unique_ptr<lm_string_view[]> snap;
  const lm_string_view *v = nullptr;
  size_t n = 0;
};
void check_views(ViewsArg &a, const char *op, py::handle views, py::handle buffers, bool bounds);

}  // namespace luminamoon
