// The C++ object behind luminamoon.NearDeduplicator (core near_dedup.h): one
// core object, a mutex that serialises calls on it, its parameters.  Declared
// here so that the FusedPipeline binding can borrow it.
#pragma once

#include "bind_array.h"
#include "bind_common.h"
#include "bind_stages.h"  // wal_index_opened / wal_index_closed

extern "C" {
#include "luminamoon/near_dedup.h"
}

#include <memory>
#include <mutex>
#include <string>

namespace luminamoon {

struct NearDedup {
  lm_near_dedup *obj = nullptr;
  lm_near_dedup_params params;
  std::string path;  // empty: in memory
  bool closed = false;
  pid_t pid = getpid();  // the process that created it (and opened its log): see foreign_wal
  std::mutex mu;
  explicit NearDedup(const py::dict &p);
  // Left as it is in a forked child when it has a log (as Dedup: no flush into the parent's log).
  ~NearDedup() {
    if (!path.empty() && obj) wal_index_closed(index());
    if (!foreign_wal(*this)) lm_near_dedup_destroy(obj);
  }
  lm_dedup *index() const { return lm_near_dedup_index(obj); }
  // Raise ValueError when closed (call with mu held).
  void check_open(const char *what) const;
  // Map a failed call's status to the Python exception (LM_ETOOBIG -> DedupFullError).
  [[noreturn]] void raise(lm_status s, const std::string &what, int err) const;
};

void bind_near_dedup(py::module_ &m);  // bind_near_dedup.cpp

}  // namespace luminamoon
