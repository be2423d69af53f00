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

#include <unistd.h>

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

// ---- os.fork() and the stage objects' locks
// A stage object (TextCleaner, ..., FusedPipeline, StateTracker) serialises its calls with a
// mutex held while the call runs with the GIL released.  A fork taken by another thread at that
// moment copied the mutex locked, and nothing in the child ever unlocked it: the child's first call
// on that object waited forever.  So every such section is a StageCall (the "fork gate"), and the
// fork hooks (bind_pipeline.cpp) close the gate before os.fork(): it waits until no StageCall is
// inside and lets none in until the fork is done; then no stage mutex is held at the fork.  Sections
// that take a stage mutex with the GIL held need no StageCall: the forking thread holds the GIL.
//
// StageCall: construct it with the GIL released, before taking the object's mutex, and let it die
// before the GIL is taken back (declare it after the py::gil_scoped_release of the same block);
// never two in one thread at once (the inner one would wait for a fork the outer one holds back).
class StageCall {
 public:
  StageCall();
  ~StageCall();
  StageCall(const StageCall &) = delete;
  StageCall &operator=(const StageCall &) = delete;

 private:
  struct Gate *g_;
};
// The fork hooks: close (GIL held; released while it waits for the calls inside to end), open
// again in the parent, and in the child a new gate (the old one's mutex or condition variable may
// be held or waited on by threads that are not in the child; it is left as it is).
void fork_gate_close();
void fork_gate_open();
void fork_gate_reset_in_child();

// A deduplicator with a write-ahead log belongs to the process that opened the log: in a child
// forked from it, using it would append at the parent's offset and flush the parent's buffered
// keys into the parent's log.  True when o (a Dedup / NearDedup: `path`, `pid`) is such a copy.
template <typename Obj>
bool foreign_wal(const Obj &o) {
  return !o.path.empty() && o.pid != getpid();
}
// ValueError "<what>: this <cls> and its WAL '<path>' belong to the process that created it; ...".
[[noreturn]] void raise_foreign_wal(const std::string &what, const char *cls, const std::string &path, pid_t owner);

}  // namespace luminamoon
