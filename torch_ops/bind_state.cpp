// Binding of the StateTracker (core state.h): the two-slot, crash-safe
// checkpoint file.  load() -> (coord dict, sequence) or None when nothing was
// ever committed; a file with no valid slot that is not fresh raises
// StateCorruptError (an OSError); another format version FormatVersionError.
#include <cerrno>

#include "bind_common.h"

extern "C" {
#include "luminamoon/state.h"
}

namespace luminamoon {

namespace {

struct State {
  lm_state *obj = nullptr;
  std::string path;
  std::mutex mu;
  explicit State(py::handle p) {
    py::object fs = py::module_::import("os").attr("fspath")(p);
    if (!py::isinstance<py::str>(fs)) throw py::type_error("StateTracker: path must be a str or PathLike");
    path = fs.cast<std::string>();
    if (path.empty()) throw py::value_error("StateTracker: path is empty");
    if (path.find('\0') != std::string::npos) throw py::value_error("StateTracker: path holds a NUL");
    lm_status s;
    int err;
    {
      py::gil_scoped_release nogil;
      errno = 0;
      s = lm_state_open(path.c_str(), &obj);
      err = errno;
    }
    if (s) raise_status(s, "StateTracker", path, err, true);
  }
  ~State() { lm_state_close(obj); }
  void check_open(const char *what) const {
    if (!obj) throw py::value_error(std::string(what) + ": the StateTracker is closed");
  }
  // fn(obj) with the GIL released and the mutex held; raises the error of a
  // failed call (ValueError when closed) naming `what`.  LM_ENOTFOUND is
  // returned, not raised (load: nothing committed).
  template <typename Fn>
  lm_status call(const char *what, Fn fn) {
    lm_status s = LM_ESTATE;
    int err = 0;
    {
      py::gil_scoped_release nogil;
      StageCall gate;
      std::lock_guard<std::mutex> lk(mu);
      if (obj) {
        errno = 0;
        s = fn(obj);
        err = errno;
      }
    }
    if (s == LM_ESTATE) check_open(what);
    if (s && s != LM_ENOTFOUND) raise_status(s, what, path, err, true);
    return s;
  }
};

py::dict coord_dict(const lm_state_coord &c) {
  py::dict d;
  d["epoch"] = c.epoch;
  d["batch_index"] = c.batch_index;
  d["sample_index"] = c.sample_index;
  d["source_pos"] = c.source_pos;
  d["source_pos2"] = c.source_pos2;
  d["shard"] = c.shard;
  d["wal_lsn"] = c.wal_lsn;
  return d;
}

uint64_t u64_arg(py::handle v, const char *name, uint64_t max) {
  if (!PyLong_Check(v.ptr()) || PyBool_Check(v.ptr()))
    throw py::type_error(std::string("StateTracker.commit: ") + name + " must be an int, got " +
                         Py_TYPE(v.ptr())->tp_name);
  py::dict t;
  t[name] = v;
  uint64_t x = 0;
  param_u64(t, name, &x, "StateTracker.commit");
  if (x > max) throw py::value_error(std::string("StateTracker.commit: ") + name + " is too large");
  return x;
}

const char *slot_name(lm_status s) {
  switch (s) {
    case LM_OK: return "valid";
    case LM_ENOTFOUND: return "empty";
    case LM_ECORRUPT: return "corrupt";
    case LM_EVERSION: return "version";
    case LM_EIO: return "io_error";
    default: return lm_status_name(s);
  }
}

}  // namespace

void bind_state(py::module_ &m) {
  py::class_<State, std::shared_ptr<State>>(m, "StateTracker")
      .def(py::init<py::handle>(), py::arg("path"))
      .def("load",
           [](State &st) -> py::object {
             lm_state_coord c;
             uint64_t seq = 0;
             lm_status s = st.call("StateTracker.load", [&](lm_state *o) { return lm_state_load(o, &c, &seq); });
             if (s == LM_ENOTFOUND) return py::none();
             return py::make_tuple(coord_dict(c), seq);
           })
      .def(
          "commit",
          [](State &st, py::handle epoch, py::handle batch_index, py::handle sample_index, py::handle source_pos,
             py::handle source_pos2, py::handle shard, py::handle wal_lsn) {
            lm_state_coord c;
            c.epoch = uint32_t(u64_arg(epoch, "epoch", UINT32_MAX));
            c.batch_index = u64_arg(batch_index, "batch_index", UINT64_MAX);
            c.sample_index = u64_arg(sample_index, "sample_index", UINT64_MAX);
            c.source_pos = u64_arg(source_pos, "source_pos", UINT64_MAX);
            c.source_pos2 = u64_arg(source_pos2, "source_pos2", UINT64_MAX);
            c.shard = uint32_t(u64_arg(shard, "shard", UINT32_MAX));
            c.wal_lsn = u64_arg(wal_lsn, "wal_lsn", UINT64_MAX);
            uint64_t seq = 0;
            st.call("StateTracker.commit", [&](lm_state *o) {
              lm_status s = lm_state_commit(o, &c);
              if (s == LM_OK) {
                lm_status ss[2];
                uint64_t sq[2];
                lm_state_inspect(o, ss, sq);
                seq = sq[0] > sq[1] ? sq[0] : sq[1];
              }
              return s;
            });
            return seq;
          },
          py::kw_only(), py::arg("epoch") = 0, py::arg("batch_index") = 0, py::arg("sample_index") = 0,
          py::arg("source_pos") = 0, py::arg("source_pos2") = 0, py::arg("shard") = 0, py::arg("wal_lsn") = 0)
      .def("reset",
           [](State &st) { st.call("StateTracker.reset", [](lm_state *o) { return lm_state_reset(o); }); })
      .def("inspect",
           [](State &st) {
             lm_status ss[2];
             uint64_t sq[2];
             {
               std::lock_guard<std::mutex> lk(st.mu);
               st.check_open("StateTracker.inspect");
               lm_state_inspect(st.obj, ss, sq);
             }
             py::dict d;
             const char *names[2] = {"a", "b"};
             for (int i = 0; i < 2; i++) {
               py::dict one;
               one["status"] = slot_name(ss[i]);
               one["sequence"] = sq[i];
               d[names[i]] = one;
             }
             return d;
           })
      .def("close",
           [](State &st) {
             std::lock_guard<std::mutex> lk(st.mu);
             lm_state_close(st.obj);
             st.obj = nullptr;
           })
      .def_property_readonly("closed", [](State &st) { return st.obj == nullptr; })
      .def_property_readonly("path", [](State &st) { return st.path; });
}

}  // namespace luminamoon
