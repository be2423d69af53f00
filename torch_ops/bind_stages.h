// The C++ objects behind the Python stage classes (one core object each, a
// mutex that serialises calls on it, and its creation parameters).  Declared
// here so that the FusedPipeline binding can borrow them.
#pragma once

#include "bind_array.h"
#include "bind_common.h"

extern "C" {
#include "luminamoon/clean.h"
#include "luminamoon/dedup.h"
#include "luminamoon/pii.h"
#include "luminamoon/quality.h"
}

#include <cerrno>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace luminamoon {

// The indexes of the live deduplicators that have a log (defined in bind_dedup.cpp).  A forked
// child inherits their log descriptors, and with them the parent's flock on each log (the lock
// belongs to the open file both share): a child that lived on (a DataLoader worker) kept the log
// locked after the parent closed it, so the parent could not open its own log again.  In the child
// (os.register_at_fork after_in_child, bind_pipeline.cpp) every one is abandoned
// (lm_dedup_abandon_log: its descriptor closed, nothing written).
void wal_index_opened(lm_dedup *index);
void wal_index_closed(lm_dedup *index);
void wal_indexes_abandon_in_child();

struct Cleaner {
  lm_cleaner *obj = nullptr;
  lm_cleaner_params params;
  std::mutex mu;
  explicit Cleaner(const py::dict &p);
  ~Cleaner() { lm_cleaner_destroy(obj); }
};

struct Quality {
  lm_quality *obj = nullptr;
  lm_quality_params params;
  std::mutex mu;
  explicit Quality(const py::dict &p);
  ~Quality() { lm_quality_destroy(obj); }
};

struct Pii {
  lm_pii_masker *obj = nullptr;
  lm_pii_params params;
  std::vector<std::string> repl_store[LM_PII_TYPE_COUNT];
  std::vector<const char *> repl_ptrs[LM_PII_TYPE_COUNT];
  std::mutex mu;
  explicit Pii(const py::dict &p);
  ~Pii() { lm_pii_destroy(obj); }
};

struct Dedup {
  lm_dedup *obj = nullptr;
  lm_dedup_params params;
  std::string path;  // empty: in memory
  bool closed = false;
  pid_t pid = getpid();  // the process that created it (and opened its log): see foreign_wal
  std::mutex mu;
  explicit Dedup(const py::dict &p);
  // In a forked child a WAL-backed one is left as it is (destroying it would flush the parent's
  // buffered keys into the parent's log): the child's copy of its memory is not freed.
  ~Dedup() {
    if (!path.empty()) wal_index_closed(obj);
    if (!foreign_wal(*this)) lm_dedup_destroy(obj);
  }
  // Raise ValueError when closed (call with mu held).
  void check_open(const char *what) const;
  // Raise the error of LM_ETOOBIG: the table holds max_entries documents.
  [[noreturn]] void raise_full(const std::string &what) const;
  // Raise the error of LM_ESTATE on an open deduplicator: an earlier I/O failure.
  [[noreturn]] void raise_failed(const std::string &what) const;
};

// ---- shared by the two deduplicators (bind_dedup.cpp, bind_near_dedup.cpp)


// The stats() dict of a deduplicator's index (core lm_dedup_stats).  Defined in bind_dedup.cpp.
py::dict dedup_stats_dict(const lm_dedup_stats &s);

// Run fn() with the GIL released and o.mu held, unless o is closed: ValueError
// "<what>: the <cls> is closed" then (and raise_foreign_wal's ValueError in a forked child when
// o has a log).  Returns fn's status and the errno it left.
template <typename Obj, typename Fn>
std::pair<lm_status, int> call_open(Obj &o, const char *what, const char *cls, Fn fn) {
  lm_status s = LM_OK;
  int err = 0;
  bool closed;
  if (foreign_wal(o)) raise_foreign_wal(what, cls, o.path, o.pid);
  {
    py::gil_scoped_release nogil;
    StageCall gate;
    std::lock_guard<std::mutex> lk(o.mu);
    closed = o.closed;
    if (!closed) {
      errno = 0;
      s = fn();
      err = errno;
    }
  }
  if (closed) throw py::value_error(std::string(what) + ": the " + cls + " is closed");
  return {s, err};
}

// close(): lm_dedup_close(index) once, with the GIL released and o.mu held; o is marked
// closed even when the close fails (the error is raised: OSError naming o.path for I/O).  In a
// child forked from the log's process it only marks o closed: nothing is written to the log.
template <typename Obj>
void close_dedup(Obj &o, lm_dedup *index, const char *what) {
  lm_status s = LM_OK;
  int err = 0;
  if (foreign_wal(o)) {
    o.closed = true;
    return;
  }
  {
    py::gil_scoped_release nogil;
    StageCall gate;
    std::lock_guard<std::mutex> lk(o.mu);
    if (o.closed) return;
    errno = 0;
    s = lm_dedup_close(index);
    err = errno;
    o.closed = true;
  }
  if (s != LM_OK) raise_status(s, what, o.path, err);
}

// truncate(lsn)'s argument: a Python int (TypeError otherwise) in [0, 2^64) and not past the
// index's current lsn (ValueError otherwise; ValueError when o is closed).  Returns it.
template <typename Obj>
uint64_t truncate_lsn_arg(Obj &o, lm_dedup *index, py::handle lsn_obj, const char *what) {
  if (!PyLong_Check(lsn_obj.ptr()) || PyBool_Check(lsn_obj.ptr()))
    throw py::type_error(std::string(what) + ": lsn must be an int");
  py::dict tmp;
  tmp["lsn"] = lsn_obj;
  uint64_t lsn = 0;
  param_u64(tmp, "lsn", &lsn, what);
  uint64_t cur = 0;
  {
    std::lock_guard<std::mutex> lk(o.mu);
    o.check_open(what);
    lm_dedup_lsn(index, &cur);
  }
  if (lsn > cur)
    throw py::value_error(std::string(what) + ": lsn " + std::to_string(lsn) + " is past the current lsn " +
                          std::to_string(cur));
  return lsn;
}

void bind_text_stages(py::module_ &m);  // stages.cpp
void bind_dedup(py::module_ &m);        // bind_dedup.cpp
void bind_pipeline(py::module_ &m);     // bind_pipeline.cpp
void bind_state(py::module_ &m);        // bind_state.cpp

}  // namespace luminamoon
