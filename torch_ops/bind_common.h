// Shared pieces of the stage bindings (stages.cpp, bind_*.cpp): status ->
// Python exception, parameter dicts -> C structs, StringTensor.from_list.  Arrays in
// and out (DocsArg, result_tensors, exec_for): bind_array.h.  No libtorch.
#pragma once

#include <pybind11/pybind11.h>

#include "bind_array.h"

#include <cerrno>
#include <cstdint>
#include <mutex>
#include <string>

extern "C" {
#include "luminamoon/batch.h"
#include "luminamoon/parallel.h"
#include "luminamoon/status.h"
}

namespace luminamoon {
namespace py = pybind11;

// Exception classes (created by register_errors): CorruptError(OSError),
// StateCorruptError(CorruptError), FormatVersionError(ValueError).
void register_errors(py::module_ &m);
// Raise luminamoon.DedupFullError (a ValueError) with msg.
[[noreturn]] void raise_dedup_full(const std::string &msg);

// Raise the Python exception for a core status.  `what` names the call
// ("TextCleaner", "StreamDeduplicator.sync", ...); `path` (may be empty) and
// `err` (errno right after the failing call) go into OSError for LM_EIO.
// state_file: LM_ECORRUPT raises StateCorruptError instead of CorruptError.
[[noreturn]] void raise_status(lm_status s, const std::string &what, const std::string &path = "", int err = 0,
                               bool state_file = false);

// RAII owner of an lm_batch_result used by one call.
struct ResultGuard {
  lm_batch_result r;
  ResultGuard() { lm_batch_result_init(&r); }
  ~ResultGuard() { lm_batch_result_free(&r); }
};

// StringTensor.from_list: a list/tuple (any other sequence is copied to a list) of str
// (or bytes when allow_bytes; checked as UTF-8 when validate) -> (offsets, data, views)
// in one pass over the items: offsets int32 (int64 past 2 GiB), data uint8, views uint8
// [N, 16] pointing into data (buffer w = data[w * 2**31:]).  No copy of the list and no
// per-string side array: the peak is the final size (plus the payload's growth slack,
// which is address space, not memory, past 8 MB).
py::tuple from_list_views(py::handle seq, bool allow_bytes, bool validate);

// Parameter dicts: each reads dict[name] into *out when present and checks its
// type (TypeError naming `what`.`name`) and range (ValueError).
void param_bool(const py::dict &d, const char *name, int *out, const char *what);
void param_int(const py::dict &d, const char *name, int *out, const char *what, int lo, int hi);
void param_size(const py::dict &d, const char *name, size_t *out, const char *what);
void param_u64(const py::dict &d, const char *name, uint64_t *out, const char *what);
void param_double(const py::dict &d, const char *name, double *out, const char *what);
// Every key of d must be in `known` (nullptr-terminated): TypeError otherwise.
void check_keys(const py::dict &d, const char *const *known, const char *what);

}  // namespace luminamoon
