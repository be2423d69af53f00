// Shared argument checks and status mapping of the torch.ops.luminamoon operators, written against
// the LibTorch stable ABI only (torch/csrc/stable, torch/headeronly; TORCH_TARGET_VERSION 2.10):
// the operators (schema.cpp, ops_cpu.cpp, minhash.cpp, ops_cuda.cu, minhash_cuda.cu) form their own
// extension, luminamoon._ops, which needs no C++ symbol from torch, so that one binary loads in every
// torch >= 2.10.  Not used by luminamoon._C (the pybind11 module).
//
// Errors.  The stable ABI has no typed errors (STD_TORCH_CHECK throws std::runtime_error -> Python
// RuntimeError).  Our contract is TypeError / ValueError / IndexError for bad input, so the kernels
// throw pybind11's builtin exceptions (pybind11::type_error / value_error / index_error, header-only:
// pybind11/detail/common.h).  torch's Python binding of the operators rethrows any
// pybind11::builtin_exception untouched (END_HANDLE_TH_ERRORS_PYBIND: `catch (py::builtin_exception&)
// { throw; }`) and pybind11's translator raises it with the Python type set_error() names — a virtual
// function of our own object, so only the class's name (typeinfo, compared by name across shared
// objects) and its one virtual are shared with torch's pybind11, not torch's C++ ABI.  Checked under
// torch 2.10.0, 2.13.0, 2.14.1 (scripts/check_wheel.sh, docs/stable_abi.md).  Called from C++ (no
// Python), such an error is a std::runtime_error like any other.
#pragma once

#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <pybind11/detail/common.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

extern "C" {
#include "luminamoon/parallel.h"
#include "luminamoon/status.h"
#include "luminamoon/string_tensor.h"
}
#include "status_kind.h"

namespace luminamoon {

using Tensor = torch::stable::Tensor;
using torch::headeronly::ScalarType;

// The message of an error: the arguments streamed one after another.
template <class... A> std::string cat(const A &...a) {
  std::ostringstream os;
  (os << ... << a);
  return os.str();
}

// A dtype as torch's C++ prints it ("Float", "Long"): c10's ostream operator is not in the stable ABI.
inline const char *dtype_name(ScalarType t) {
  switch (t) {
    case ScalarType::Byte: return "Byte";
    case ScalarType::Char: return "Char";
    case ScalarType::Short: return "Short";
    case ScalarType::Int: return "Int";
    case ScalarType::Long: return "Long";
    case ScalarType::Half: return "Half";
    case ScalarType::Float: return "Float";
    case ScalarType::Double: return "Double";
    case ScalarType::Bool: return "Bool";
    case ScalarType::BFloat16: return "BFloat16";
    case ScalarType::UInt16: return "UInt16";
    case ScalarType::UInt32: return "UInt32";
    case ScalarType::UInt64: return "UInt64";
    default: return "(another dtype)";
  }
}

// A device as torch prints it ("cpu", "cuda:0", "meta").
inline std::string device_name(const Tensor &t) {
  torch::stable::Device d = t.device();
  const char *type = "device";
  switch (d.type()) {
    case torch::headeronly::DeviceType::CPU: type = "cpu"; break;
    case torch::headeronly::DeviceType::CUDA: type = "cuda"; break;
    case torch::headeronly::DeviceType::Meta: type = "meta"; break;
    default: break;
  }
  return d.index() >= 0 ? cat(type, ":", int(d.index())) : std::string(type);
}

inline bool same_device(const Tensor &a, const Tensor &b) {
  torch::stable::Device x = a.device(), y = b.device();
  return x.type() == y.type() && x.index() == y.index();
}

// A shape as torch prints it: "[3, 16]".
inline std::string shape_of(const Tensor &t) {
  std::ostringstream os;
  os << "[";
  for (int64_t i = 0; i < t.dim(); i++) os << (i ? ", " : "") << t.size(i);
  os << "]";
  return os.str();
}

template <class... A> [[noreturn]] void type_error(const A &...a) { throw pybind11::type_error(cat(a...)); }
template <class... A> [[noreturn]] void value_error(const A &...a) { throw pybind11::value_error(cat(a...)); }
template <class... A> [[noreturn]] void index_error(const A &...a) { throw pybind11::index_error(cat(a...)); }
template <class... A> [[noreturn]] void runtime_error(const A &...a) { throw std::runtime_error(cat(a...)); }

#define LM_CHECK_TYPE(cond, ...) do { if (!(cond)) ::luminamoon::type_error(__VA_ARGS__); } while (0)
#define LM_CHECK_VALUE(cond, ...) do { if (!(cond)) ::luminamoon::value_error(__VA_ARGS__); } while (0)
#define LM_CHECK_INDEX(cond, ...) do { if (!(cond)) ::luminamoon::index_error(__VA_ARGS__); } while (0)
#define LM_CHECK(cond, ...) do { if (!(cond)) ::luminamoon::runtime_error(__VA_ARGS__); } while (0)

// Raise the Python exception that fits a core status, naming the operation.
[[noreturn]] inline void throw_status(lm_status s, const char *what) {
  std::string msg = std::string(what) + ": " + lm_status_str(s);
  switch (status_kind(s)) {
    case StatusKind::Value:
      value_error(msg);
    case StatusKind::Index:
      index_error(msg);
    case StatusKind::Memory:  // RuntimeError here, as before (no MemoryError through the dispatcher)
    case StatusKind::Runtime:
      break;
  }
  runtime_error(msg);
}

inline void check(lm_status s, const char *what) {
  if (s != LM_OK) throw_status(s, what);
}

// An int64 [n, max_len] output must fit in memory addressing: ValueError naming max_len otherwise.
inline void check_matrix_size(const char *op, int64_t n, int64_t max_len) {
  LM_CHECK_VALUE(max_len >= 0, "luminamoon.", op, ": max_len must be >= 0, got ", max_len);
  LM_CHECK_VALUE(max_len == 0 || n <= (INT64_MAX / 8) / max_len, "luminamoon.", op, ": max_len=", max_len,
                 " for ", n, " rows needs an int64 output of more than 2^63 bytes");
}

// Shapes, dtypes, devices and contiguity of (offsets, data) (CPU and CUDA kernels), no snapshot and no
// validation pass: the CPU element-wise kernels (the lm_*_checked forms) check each pair of offsets as they read it,
// once, and refuse bad offsets (LM_EINVAL); raise_bad_offsets then names the problem.
inline void check_strings_light(const char *op, const Tensor &offsets, const Tensor &data, const char *on = "offsets",
                         const char *dn = "data") {
  LM_CHECK_TYPE(offsets.scalar_type() == ScalarType::Int || offsets.scalar_type() == ScalarType::Long,
                "luminamoon.", op, ": ", on, " must be an int32 or int64 tensor, got ",
                dtype_name(offsets.scalar_type()));
  LM_CHECK_TYPE(data.scalar_type() == ScalarType::Byte, "luminamoon.", op, ": ", dn, " must be a uint8 tensor, got ",
                dtype_name(data.scalar_type()));
  LM_CHECK_VALUE(offsets.dim() == 1 && offsets.numel() >= 1, "luminamoon.", op, ": ", on,
                 " must be 1-D with N+1 >= 1 entries, got shape ", shape_of(offsets));
  LM_CHECK_VALUE(data.dim() == 1, "luminamoon.", op, ": ", dn, " must be 1-D, got shape ", shape_of(data));
  LM_CHECK_VALUE(offsets.is_contiguous(), "luminamoon.", op, ": ", on, " must be contiguous");
  LM_CHECK_VALUE(data.is_contiguous(), "luminamoon.", op, ": ", dn, " must be contiguous");
  LM_CHECK_VALUE(same_device(offsets, data), "luminamoon.", op, ": ", on, " and ", dn,
                 " must be on the same device, got ", device_name(offsets), " and ", device_name(data));
}

// A fresh tensor of `size` with dtype `dtype` on the device of `like`.
inline Tensor empty_on(const Tensor &like, std::vector<int64_t> size, ScalarType dtype) {
  return torch::stable::new_empty(like, torch::headeronly::IntHeaderOnlyArrayRef(size.data(), size.size()), dtype);
}

// Typed pointers (the dtypes were checked by the caller): untyped accessors + a cast, so that bool
// and unsigned views of the same bytes need no per-type accessor of the stable ABI.
template <class T> const T *cptr(const Tensor &t) { return static_cast<const T *>(t.const_data_ptr()); }
template <class T> T *mptr(const Tensor &t) { return static_cast<T *>(t.mutable_data_ptr()); }

inline bool is_int(const Tensor &t) { return t.scalar_type() == ScalarType::Int; }

}  // namespace luminamoon
