// Binding of the StreamDeduplicator (core dedup.h): batch dedup, the WAL
// (sync, truncate, snapshot), stats, close.  Using it after close() raises
// ValueError("... closed").
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "bind_stages.h"

extern "C" {
#include "luminamoon/hash.h"
}

namespace luminamoon {

namespace {

py::dict stats_dict(const lm_dedup_stats &s) {
  py::dict d;
  d["entries"] = s.entries;
  d["capacity"] = s.capacity;
  d["table_bytes"] = s.table_bytes;
  d["bytes_per_entry"] = s.bytes_per_entry;
  d["max_entries"] = s.max_entries;
  d["lsn"] = s.lsn;
  d["written_lsn"] = s.written_lsn;
  d["durable_lsn"] = s.durable_lsn;
  d["wal_bytes"] = s.wal_bytes;
  d["snapshot_lsn"] = s.snapshot_lsn;
  d["probes"] = s.probes;
  d["inserts"] = s.inserts;
  d["duplicates"] = s.duplicates;
  d["replayed_hashes"] = s.replayed_hashes;
  d["tail_bytes_cut"] = s.tail_bytes_cut;
  d["snapshot_loaded"] = bool(s.snapshot_loaded);
  return d;
}

// Run fn(obj) with the GIL released and the object locked (open), then map errors.
template <typename Fn>
void call(Dedup &o, const char *what, Fn fn) {
  lm_status s = LM_OK;
  int err = 0;
  bool closed;
  {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> lk(o.mu);
    closed = o.closed;
    if (!closed) {
      errno = 0;
      s = fn(o.obj);
      err = errno;
    }
  }
  if (closed) throw py::value_error(std::string(what) + ": the StreamDeduplicator is closed");
  if (s == LM_ETOOBIG) o.raise_full(what);
  if (s == LM_ESTATE && !o.path.empty()) o.raise_failed(what);
  if (s == LM_ESTATE) throw py::value_error(std::string(what) + ": needs a write-ahead log (this deduplicator is in memory)");
  if (s != LM_OK) raise_status(s, what, o.path, err);
}

lm_hash128_t hash_of(const Dedup &o, py::handle text) {
  if (PyUnicode_Check(text.ptr())) {
    Py_ssize_t n;
    const char *p = PyUnicode_AsUTF8AndSize(text.ptr(), &n);
    if (!p) {
      PyErr_Clear();
      throw py::value_error("text is not encodable as UTF-8 (a lone surrogate?)");
    }
    return lm_hash128(p, size_t(n), o.params.seed);
  }
  if (PyBytes_Check(text.ptr()))
    return lm_hash128(PyBytes_AS_STRING(text.ptr()), size_t(PyBytes_GET_SIZE(text.ptr())), o.params.seed);
  throw py::type_error(std::string("text must be str or bytes, got ") + Py_TYPE(text.ptr())->tp_name);
}

at::Tensor hashes_arg(const at::Tensor &h) {
  if (h.scalar_type() != at::kLong || h.dim() != 2 || h.size(1) != 2)
    throw py::type_error("hashes must be an int64 tensor of shape [N, 2] (lo, hi)");
  if (!h.is_cpu()) throw py::value_error("hashes must be on the CPU");
  return h.contiguous();
}

}  // namespace

void Dedup::raise_full(const std::string &what) const {
  raise_dedup_full(what + ": the deduplicator is full: it holds max_entries=" +
                        std::to_string(params.max_entries) +
                        " distinct documents and nothing of this call was admitted; raise max_entries or start a new table");
}

void Dedup::raise_failed(const std::string &what) const {
  throw py::value_error(what + ": an earlier write or sync of the WAL " + path +
                        " failed, so the table may hold hashes that are not durable; close this "
                        "deduplicator and reopen the WAL (that recovers its durable state)");
}

void Dedup::check_open(const char *what) const {
  if (closed) throw py::value_error(std::string(what) + ": the StreamDeduplicator is closed");
}

Dedup::Dedup(const py::dict &p) {
  static const char *const known[] = {"wal_path", "seed", "initial_capacity", "max_entries", "wal_buffer_hashes",
                                      nullptr};
  const char *w = "StreamDeduplicator";
  check_keys(p, known, w);
  lm_dedup_params_default(&params);
  if (p.contains("wal_path") && !p["wal_path"].is_none()) {
    py::handle v = p["wal_path"];
    py::object fs = py::module_::import("os").attr("fspath")(v);
    if (!py::isinstance<py::str>(fs)) throw py::type_error("StreamDeduplicator: wal_path must be a str or PathLike");
    path = fs.cast<std::string>();
    if (path.empty()) throw py::value_error("StreamDeduplicator: wal_path is empty");
    if (path.find('\0') != std::string::npos) throw py::value_error("StreamDeduplicator: wal_path holds a NUL");
  }
  param_u64(p, "seed", &params.seed, w);
  param_size(p, "initial_capacity", &params.initial_capacity, w);
  if (params.initial_capacity > (size_t(1) << 40))
    throw py::value_error("StreamDeduplicator: initial_capacity=" + std::to_string(params.initial_capacity) +
                          " exceeds the largest table (2^40 slots of 16 bytes)");
  param_u64(p, "max_entries", &params.max_entries, w);
  param_size(p, "wal_buffer_hashes", &params.wal_buffer_hashes, w);
  params.wal_path = path.empty() ? nullptr : path.c_str();
  lm_status s;
  int err = 0;
  {
    py::gil_scoped_release nogil;
    errno = 0;
    s = lm_dedup_create(&params, &obj);
    err = errno;
  }
  params.wal_path = nullptr;  // copied by the core; path keeps it for messages
  if (s == LM_ENOMEM && params.initial_capacity) {
    std::string m = "StreamDeduplicator: cannot allocate the table for initial_capacity=" +
                    std::to_string(params.initial_capacity) + " (16 bytes per slot)";
    PyErr_SetString(PyExc_MemoryError, m.c_str());
    throw py::error_already_set();
  }
  if (s == LM_EINVAL && !path.empty()) {
    // Most likely a WAL written with another seed (dedup.h): say which.
    unsigned char h[24];
    FILE *f = std::fopen(path.c_str(), "rb");
    if (f) {
      size_t got = std::fread(h, 1, sizeof h, f);
      std::fclose(f);
      if (got == sizeof h && std::memcmp(h, "LMDDWAL", 8) == 0) {
        uint64_t seed = 0;
        std::memcpy(&seed, h + 16, 8);  // as dedup_wal.c writes it (host order)
        if (seed != params.seed)
          throw py::value_error("StreamDeduplicator: the WAL " + path + " was written with seed=" +
                                std::to_string(seed) + "; open it with that seed (got seed=" +
                                std::to_string(params.seed) + ")");
      }
    }
  }
  if (s) raise_status(s, "StreamDeduplicator", path, err);
}

void bind_dedup(py::module_ &m) {
  m.def(
      "hash128",
      [](const at::Tensor &off, const at::Tensor &data, uint64_t seed) {
        DocsIn in(off, data, "hash128");
        auto out = at::empty({int64_t(in.docs.n), 2}, at::TensorOptions().dtype(at::kLong));
        int64_t *o = out.data_ptr<int64_t>();
        {
          py::gil_scoped_release nogil;
          for (size_t i = 0; i < in.docs.n; i++) {
            lm_hash128_t h = lm_hash128(in.docs.data + in.docs.offsets[i],
                                        size_t(in.docs.offsets[i + 1] - in.docs.offsets[i]), seed);
            o[2 * i] = int64_t(h.lo);
            o[2 * i + 1] = int64_t(h.hi);
          }
        }
        return out;
      },
      py::arg("offsets"), py::arg("data"), py::arg("seed") = 0);

  py::class_<Dedup, std::shared_ptr<Dedup>>(m, "StreamDeduplicator")
      .def(py::init<const py::dict &>(), py::arg("params"))
      .def(
          "run",
          [](Dedup &o, const at::Tensor &off, const at::Tensor &data, int nt) {
            DocsIn in(off, data, "StreamDeduplicator");
            lm_exec ex = make_exec(nt);
            ResultGuard res;
            call(o, "StreamDeduplicator", [&](lm_dedup *d) { return lm_dedup_run(d, &in.docs, &res.r, &ex); });
            return take_result(res.r);
          },
          py::arg("offsets"), py::arg("data"), py::arg("num_threads") = 0)
      .def(
          "check_insert_hashes",
          [](Dedup &o, const at::Tensor &h) {
            at::Tensor hh = hashes_arg(h);
            const int64_t n = hh.size(0);
            auto is_new = at::empty({n}, at::TensorOptions().dtype(at::kBool));
            static_assert(sizeof(lm_hash128_t) == 16, "hash layout");
            call(o, "StreamDeduplicator.check_insert_hashes", [&](lm_dedup *d) {
              return lm_dedup_check_insert_hashes(d, reinterpret_cast<const lm_hash128_t *>(hh.data_ptr<int64_t>()),
                                                  size_t(n), reinterpret_cast<uint8_t *>(is_new.data_ptr<bool>()),
                                                  nullptr);
            });
            return is_new;
          },
          py::arg("hashes"))
      .def("contains",
           [](Dedup &o, py::handle text) {
             lm_hash128_t h = hash_of(o, text);
             int found = 0;
             call(o, "StreamDeduplicator.contains", [&](lm_dedup *d) { return lm_dedup_contains(d, h, &found); });
             return bool(found);
           })
      .def("lsn",
           [](Dedup &o) {
             uint64_t lsn = 0;
             std::lock_guard<std::mutex> lk(o.mu);
             lm_dedup_lsn(o.obj, &lsn);  // answers after close too
             return lsn;
           })
      .def("sync",
           [](Dedup &o) {
             uint64_t lsn = 0;
             call(o, "StreamDeduplicator.sync", [&](lm_dedup *d) { return lm_dedup_sync(d, &lsn); });
             return lsn;
           })
      .def(
          "truncate",
          [](Dedup &o, py::handle lsn_obj) {
            if (!PyLong_Check(lsn_obj.ptr()) || PyBool_Check(lsn_obj.ptr()))
              throw py::type_error("truncate: lsn must be an int");
            py::dict tmp;
            tmp["lsn"] = lsn_obj;
            uint64_t lsn = 0;
            param_u64(tmp, "lsn", &lsn, "StreamDeduplicator.truncate");
            uint64_t cur = 0;
            {
              std::lock_guard<std::mutex> lk(o.mu);
              o.check_open("StreamDeduplicator.truncate");
              lm_dedup_lsn(o.obj, &cur);
            }
            if (lsn > cur)
              throw py::value_error("StreamDeduplicator.truncate: lsn " + std::to_string(lsn) +
                                    " is past the current lsn " + std::to_string(cur));
            call(o, "StreamDeduplicator.truncate", [&](lm_dedup *d) { return lm_dedup_truncate(d, lsn); });
          },
          py::arg("lsn"))
      .def("snapshot",
           [](Dedup &o) { call(o, "StreamDeduplicator.snapshot", [&](lm_dedup *d) { return lm_dedup_snapshot(d); }); })
      .def("stats",
           [](Dedup &o) {
             lm_dedup_stats s;
             std::lock_guard<std::mutex> lk(o.mu);
             lm_dedup_stats_get(o.obj, &s);
             return stats_dict(s);
           })
      .def("close",
           [](Dedup &o) {
             lm_status s = LM_OK;
             int err = 0;
             {
               py::gil_scoped_release nogil;
               std::lock_guard<std::mutex> lk(o.mu);
               if (o.closed) return;
               errno = 0;
               s = lm_dedup_close(o.obj);
               err = errno;
               o.closed = true;
             }
             if (s != LM_OK) raise_status(s, "StreamDeduplicator.close", o.path, err);
           })
      .def_property_readonly("closed", [](Dedup &o) { return o.closed; })
      .def_property_readonly("path", [](Dedup &o) { return o.path.empty() ? py::object(py::none()) : py::str(o.path); })
      .def_property_readonly("seed", [](Dedup &o) { return o.params.seed; });
}

}  // namespace luminamoon
