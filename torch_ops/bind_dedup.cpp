// Binding of the StreamDeduplicator (core dedup.h): batch dedup, the WAL
// (sync, truncate, snapshot), stats, close.  Using it after close() raises
// ValueError("... closed").
#include <cerrno>
#include <utility>
#include <cstring>
#include <mutex>
#include <unordered_set>

#include "bind_stages.h"

extern "C" {
#include "luminamoon/crc32c.h"
#include "luminamoon/hash.h"
}

namespace luminamoon {

py::dict dedup_stats_dict(const lm_dedup_stats &s) {
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

namespace {
std::mutex g_wal_mu;
std::unordered_set<lm_dedup *> *g_wal_indexes = new std::unordered_set<lm_dedup *>;  // never freed
}  // namespace

void wal_index_opened(lm_dedup *index) {
  std::lock_guard<std::mutex> lk(g_wal_mu);
  g_wal_indexes->insert(index);
}

void wal_index_closed(lm_dedup *index) {
  std::lock_guard<std::mutex> lk(g_wal_mu);
  g_wal_indexes->erase(index);
}

void wal_indexes_abandon_in_child() {
  // One thread here (the child); the set is changed only by constructors and destructors, with the
  // GIL held, so no thread held its mutex at the fork: try_lock all the same (never wait in a child).
  std::unique_lock<std::mutex> lk(g_wal_mu, std::try_to_lock);
  if (!lk.owns_lock()) return;
  for (lm_dedup *d : *g_wal_indexes) lm_dedup_abandon_log(d);
  g_wal_indexes->clear();
}

namespace {

// Run fn(obj) with the GIL released and the object locked (open), then map errors.
template <typename Fn>
void call(Dedup &o, const char *what, Fn fn) {
  auto [s, err] = call_open(o, what, "StreamDeduplicator", [&] { return fn(o.obj); });
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

// Run fn() (an lm_status call) with the GIL released: its status and the errno it left.
template <typename Fn>
std::pair<lm_status, int> without_gil(Fn fn) {
  py::gil_scoped_release nogil;
  errno = 0;
  lm_status s = fn();
  return {s, errno};
}

std::string tag_hex(const uint8_t *t) {
  static const char dig[] = "0123456789abcdef";
  std::string r;
  for (unsigned i = 0; i < LM_DEDUP_TAG_SIZE; i++) {
    r += dig[t[i] >> 4];
    r += dig[t[i] & 15];
  }
  return r;
}

std::string path_arg(py::handle v, const char *what) {
  py::object fs = py::module_::import("os").attr("fspath")(v);
  if (!py::isinstance<py::str>(fs)) throw py::type_error(std::string(what) + ": path must be a str or PathLike");
  std::string p = fs.cast<std::string>();
  if (p.empty() || p.find('\0') != std::string::npos)
    throw py::value_error(std::string(what) + ": path is empty or holds a NUL");
  return p;
}

py::dict wal_info_dict(const lm_dedup_wal_info &i, lm_status s) {
  py::dict d;
  d["status"] = lm_status_name(s);
  d["magic_ok"] = bool(i.magic_ok);
  d["version"] = i.version;
  d["header_size"] = i.header_size;
  d["seed"] = i.seed;
  d["tag"] = py::bytes(reinterpret_cast<const char *>(i.tag), LM_DEDUP_TAG_SIZE);
  d["lsn_end"] = i.lsn_end;
  d["records"] = i.records;
  d["valid_bytes"] = i.valid_bytes;
  d["file_bytes"] = i.file_bytes;
  d["lsn_kept"] = i.lsn_kept;
  return d;
}

// hashes: int64 [N, 2] (lo, hi) on the CPU; a strided one is copied contiguous.
void hashes_arg(ArrayIn &a, py::handle h) {
  get_array(a, h, "hashes", kCopyIfStrided);
  if (a.dt != Dt::i64 || a.ndim != 2 || a.shape[1] != 2)
    throw py::type_error("hashes must be an int64 tensor of shape [N, 2] (lo, hi)");
  if (!a.cpu) throw py::value_error("hashes must be on the CPU");
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
                                      "tag", nullptr};
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
  if (p.contains("tag") && !p["tag"].is_none()) {
    py::handle v = p["tag"];
    if (!PyBytes_Check(v.ptr()))
      throw py::type_error(std::string("StreamDeduplicator: tag must be bytes (at most 32) or None, got ") +
                           Py_TYPE(v.ptr())->tp_name);
    std::string t = v.cast<std::string>();
    if (t.size() > LM_DEDUP_TAG_SIZE)
      throw py::value_error("StreamDeduplicator: tag must be at most 32 bytes, got " + std::to_string(t.size()));
    std::memcpy(params.tag, t.data(), t.size());  // the rest stays zero
  }
  params.wal_path = path.empty() ? nullptr : path.c_str();
  auto [s, err] = without_gil([&] { return lm_dedup_create(&params, &obj); });
  params.wal_path = nullptr;  // copied by the core; path keeps it for messages
  if (s == LM_ENOMEM && params.initial_capacity) {
    std::string m = "StreamDeduplicator: cannot allocate the table for initial_capacity=" +
                    std::to_string(params.initial_capacity) + " (16 bytes per slot)";
    PyErr_SetString(PyExc_MemoryError, m.c_str());
    throw py::error_already_set();
  }
  if (s == LM_EINVAL && !path.empty()) {
    // A WAL written with another seed or tag (dedup.h): say which.
    lm_dedup_wal_info info;
    if (lm_dedup_wal_inspect(path.c_str(), &info) == LM_OK) {
      if (info.seed != params.seed)
        throw py::value_error("StreamDeduplicator: the WAL " + path + " was written with seed=" +
                              std::to_string(info.seed) + "; open it with that seed (got seed=" +
                              std::to_string(params.seed) + ")");
      if (std::memcmp(info.tag, params.tag, LM_DEDUP_TAG_SIZE) != 0) {
        static const uint8_t zero[LM_DEDUP_TAG_SIZE] = {0};
        const bool untagged = std::memcmp(params.tag, zero, LM_DEDUP_TAG_SIZE) == 0;
        throw py::value_error(
            "StreamDeduplicator: the WAL " + path + " was written with tag=" + tag_hex(info.tag) +
            ", this deduplicator has tag=" + tag_hex(params.tag) +
            (untagged ? " (no tag: the log belongs to a tagged configuration -- a ResumablePipeline tags the "
                        "log of its state folder; open it with tag=luminamoon._C.dedup_wal_inspect(path)['tag'], "
                        "or read it without opening it with luminamoon._C.dedup_wal_read_hashes)"
                      : " (another configuration's log; dedup_wal_inspect(path) reads its header)"));
      }
    }
  }
  if (s) raise_status(s, "StreamDeduplicator", path, err);
  if (!path.empty()) wal_index_opened(obj);
}

void bind_dedup(py::module_ &m) {
  m.def(
      "crc32c",
      [](py::handle data, uint32_t crc) {
        Py_buffer view;
        if (PyObject_GetBuffer(data.ptr(), &view, PyBUF_C_CONTIGUOUS) != 0) {
          PyErr_Clear();
          throw py::type_error(std::string("crc32c: data must be a contiguous bytes-like object, got ") +
                               Py_TYPE(data.ptr())->tp_name);
        }
        uint32_t r;
        {
          py::gil_scoped_release nogil;
          r = lm_crc32c_extend(crc, view.buf, size_t(view.len));
        }
        PyBuffer_Release(&view);
        return r;
      },
      py::arg("data"), py::arg("crc") = 0,
      "CRC32C (Castagnoli) of data (bytes-like), continuing the running checksum crc (0 to start).");

  // (hash128 is module.cpp's: the checks of to_list, one definition.)
  m.attr("DEDUP_WAL_VERSION") = LM_DEDUP_WAL_VERSION;
  m.attr("DEDUP_TAG_SIZE") = LM_DEDUP_TAG_SIZE;
  // Read-only access to a WAL (dedup.h): no lock, no change to the file.  A
  // damaged or foreign file is reported in "status" (lm_status_name), not raised,
  // so that callers can name what differs; an unreadable path raises OSError.
  m.def(
      "dedup_wal_inspect",
      [](py::handle path_obj) {
        std::string path = path_arg(path_obj, "dedup_wal_inspect");
        lm_dedup_wal_info info;
        auto [s, err] = without_gil([&] { return lm_dedup_wal_inspect(path.c_str(), &info); });
        if (s == LM_EIO || s == LM_ENOMEM) raise_status(s, "dedup_wal_inspect", path, err);
        return wal_info_dict(info, s);
      },
      py::arg("path"));
  // (hashes int64 [n_read, 2] (lo, hi) in LSN order, status name): LM_OK when all
  // limit_lsn were read, LM_ERANGE when the log holds fewer, LM_ECORRUPT /
  // LM_EVERSION for a damaged or foreign file (n_read: the valid ones before it).
  m.def(
      "dedup_wal_read_hashes",
      [](py::handle path_obj, int64_t limit_lsn) {
        std::string path = path_arg(path_obj, "dedup_wal_read_hashes");
        if (limit_lsn < 0) throw py::value_error("dedup_wal_read_hashes: limit_lsn must be >= 0");
        ArrayOut out(Dt::i64, limit_lsn, 2);
        static_assert(sizeof(lm_hash128_t) == 16, "hash layout");
        uint64_t n = 0;
        auto *dst = reinterpret_cast<lm_hash128_t *>(out.data<int64_t>());
        auto [s, err] = without_gil([&] { return lm_dedup_wal_read_hashes(path.c_str(), uint64_t(limit_lsn), dst, &n); });
        if (s == LM_EIO || s == LM_ENOMEM || s == LM_EINVAL) raise_status(s, "dedup_wal_read_hashes", path, err);
        out.shrink(int64_t(n));
        return py::make_tuple(out.tensor(), lm_status_name(s));
      },
      py::arg("path"), py::arg("limit_lsn"));

  py::class_<Dedup, std::shared_ptr<Dedup>>(m, "StreamDeduplicator")
      .def(py::init<const py::dict &>(), py::arg("params"))
      .def(
          "run",
          [](Dedup &o, py::handle off, py::handle data, int nt) {
            DocsArg in(off, data, "StreamDeduplicator");
            lm_exec ex = exec_for(nt);
            ResultGuard res;
            call(o, "StreamDeduplicator", [&](lm_dedup *d) { return lm_dedup_run(d, &in.docs, &res.r, &ex); });
            return result_tensors(res.r);
          },
          py::arg("offsets"), py::arg("data"), py::arg("num_threads") = 0)
      .def(
          "check_insert_hashes",
          [](Dedup &o, py::handle h) {
            ArrayIn hh;
            hashes_arg(hh, h);
            const int64_t n = hh.shape[0];
            ArrayOut is_new(Dt::b8, n);
            static_assert(sizeof(lm_hash128_t) == 16, "hash layout");
            const auto *hp = reinterpret_cast<const lm_hash128_t *>(hh.data<int64_t>());
            uint8_t *np = is_new.data<uint8_t>();
            call(o, "StreamDeduplicator.check_insert_hashes", [&](lm_dedup *d) {
              return lm_dedup_check_insert_hashes(d, hp, size_t(n), np, nullptr);
            });
            return is_new.tensor();
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
            const uint64_t lsn = truncate_lsn_arg(o, o.obj, lsn_obj, "StreamDeduplicator.truncate");
            call(o, "StreamDeduplicator.truncate", [&](lm_dedup *d) { return lm_dedup_truncate(d, lsn); });
          },
          py::arg("lsn"))
      .def("snapshot",
           [](Dedup &o) { call(o, "StreamDeduplicator.snapshot", [&](lm_dedup *d) { return lm_dedup_snapshot(d); }); })
      .def("stats",
           [](Dedup &o) {
             lm_dedup_stats s;
             {
               std::lock_guard<std::mutex> lk(o.mu);
               lm_dedup_stats_get(o.obj, &s);
             }
             return dedup_stats_dict(s);  // no Python object made with the lock held
           })
      .def("close", [](Dedup &o) { close_dedup(o, o.obj, "StreamDeduplicator.close"); })
      .def_property_readonly("closed", [](Dedup &o) { return o.closed; })
      .def_property_readonly("forked", [](Dedup &o) { return foreign_wal(o); },
                             "True in a child forked from the process that opened its log (unusable there)")
      .def_property_readonly("path", [](Dedup &o) { return o.path.empty() ? py::object(py::none()) : py::str(o.path); })
      .def_property_readonly("seed", [](Dedup &o) { return o.params.seed; })
      .def_property_readonly(
          "tag", [](Dedup &o) { return py::bytes(reinterpret_cast<const char *>(o.params.tag), LM_DEDUP_TAG_SIZE); });
}

}  // namespace luminamoon
