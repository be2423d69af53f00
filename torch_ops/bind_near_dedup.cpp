// Binding of the NearDeduplicator (core near_dedup.h): the streaming stage,
// band keys for the distributed exchange, the band index's WAL (sync,
// truncate, snapshot), stats, close.  Using it after close() raises
// ValueError("... closed").
#include "bind_near_dedup.h"
#include "bind_stages.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

namespace luminamoon {

namespace {

const char *const kWhat = "NearDeduplicator";

py::dict stats_dict(const lm_dedup_stats &s, size_t bands) {
  py::dict d = dedup_stats_dict(s);
  d["keys_per_document"] = bands;
  return d;
}

// The parameters that define a near-deduplicator's index (its config property, and what
// near_dedup_wal_config reads back from a WAL).
py::dict config_dict(const lm_near_dedup_params &p) {
  py::dict d;
  d["seed"] = p.seed;
  d["n_grams"] = p.n_grams;
  d["num_buckets"] = p.num_buckets;
  d["hashes_per_bucket"] = p.hashes_per_bucket;
  d["precision"] = p.precision;
  return d;
}

template <typename Fn>
void call(NearDedup &o, const char *what, Fn fn) {
  auto [s, err] = call_open(o, what, "NearDeduplicator", [&] { return fn(o); });
  if (s != LM_OK) o.raise(s, what, err);
}

// keys: int64 [M, 2] (lo, hi) on the CPU; a strided one is copied contiguous.
void keys_arg(ArrayIn &a, py::handle h, const char *what) {
  get_array(a, h, std::string(what) + ": keys", kCopyIfStrided);
  if (a.dt != Dt::i64 || a.ndim != 2 || a.shape[1] != 2)
    throw py::type_error(std::string(what) + ": keys must be an int64 tensor of shape [M, 2] (lo, hi)");
  if (!a.cpu) throw py::value_error(std::string(what) + ": keys must be on the CPU");
}

// The setting names of a configuration, for "written with ..." messages.
std::string describe(const lm_near_dedup_params &p) {
  return "seed=" + std::to_string(p.seed) + ", n_grams=" + std::to_string(p.n_grams) +
         ", num_buckets=" + std::to_string(p.num_buckets) + ", hashes_per_bucket=" +
         std::to_string(p.hashes_per_bucket) + ", precision=" + std::to_string(p.precision);
}

// The configuration recorded in the WAL at path: 1 decoded, 0 no near-dedup
// tag (a StreamDeduplicator's log, or a file that is no WAL), -1 unreadable.
int wal_config(const std::string &path, lm_near_dedup_params *out) {
  unsigned char h[64];
  FILE *f = std::fopen(path.c_str(), "rb");
  if (!f) return -1;
  size_t got = std::fread(h, 1, sizeof h, f);
  std::fclose(f);
  if (got != sizeof h || std::memcmp(h, "LMDDWAL", 8) != 0) return -1;
  // dedup.h: the 32-byte tag at offset 24 of the header.
  return lm_near_dedup_tag_decode(h + 24, out) == LM_OK ? 1 : 0;
}

}  // namespace

void NearDedup::check_open(const char *what) const {
  if (closed) throw py::value_error(std::string(what) + ": the NearDeduplicator is closed");
}

void NearDedup::raise(lm_status s, const std::string &what, int err) const {
  if (s == LM_ETOOBIG && params.max_entries) {
    uint64_t n = 0;
    lm_dedup_lsn(index(), &n);
    raise_dedup_full(what + ": the near-duplicate band index is full: it holds " + std::to_string(n) +
                     " of max_entries=" + std::to_string(params.max_entries) + " band keys (" +
                     std::to_string(params.num_buckets) +
                     " per new document) and nothing of this call was admitted; raise max_entries or start a new index");
  }
  if (s == LM_ESTATE && !path.empty())
    throw py::value_error(what + ": an earlier write or sync of the WAL " + path +
                          " failed, so the index may hold keys that are not durable; close this "
                          "NearDeduplicator and reopen the WAL (that recovers its durable state)");
  if (s == LM_ESTATE) throw py::value_error(what + ": needs a write-ahead log (this NearDeduplicator is in memory)");
  raise_status(s, what, path, err);
}

NearDedup::NearDedup(const py::dict &p) {
  static const char *const known[] = {"wal_path",  "seed",        "n_grams",          "num_buckets",
                                      "hashes_per_bucket", "precision", "max_entries", "initial_capacity",
                                      "wal_buffer_hashes", nullptr};
  check_keys(p, known, kWhat);
  lm_near_dedup_params_default(&params);
  if (p.contains("wal_path") && !p["wal_path"].is_none()) {
    py::object fs = py::module_::import("os").attr("fspath")(p["wal_path"]);
    if (!py::isinstance<py::str>(fs)) throw py::type_error("NearDeduplicator: wal_path must be a str or PathLike");
    path = fs.cast<std::string>();
    if (path.empty()) throw py::value_error("NearDeduplicator: wal_path is empty");
    if (path.find('\0') != std::string::npos) throw py::value_error("NearDeduplicator: wal_path holds a NUL");
  }
  param_u64(p, "seed", &params.seed, kWhat);
  if (params.seed > 0xffffffffull)
    throw py::value_error("NearDeduplicator: seed must be in [0, 2**32) (numpy.random.RandomState's range), got " +
                          std::to_string(params.seed));
  struct U32 {
    const char *name;
    uint32_t *dst;
    uint64_t lo, hi;
  } u32s[] = {{"n_grams", &params.n_grams, 1, 4096},
              {"num_buckets", &params.num_buckets, 1, LM_NEAR_DEDUP_MAX_BANDS},
              {"hashes_per_bucket", &params.hashes_per_bucket, 1, LM_NEAR_DEDUP_MAX_ROWS},
              {"precision", &params.precision, 32, 64}};
  for (auto &u : u32s) {
    uint64_t v = *u.dst;
    param_u64(p, u.name, &v, kWhat);
    if (v < u.lo || v > u.hi)
      throw py::value_error(std::string("NearDeduplicator: ") + u.name + " must be in [" + std::to_string(u.lo) +
                            ", " + std::to_string(u.hi) + "], got " + std::to_string(v));
    *u.dst = uint32_t(v);
  }
  if (params.precision != 32 && params.precision != 64)
    throw py::value_error("NearDeduplicator: precision must be 32 or 64, got " + std::to_string(params.precision));
  if (uint64_t(params.num_buckets) * params.hashes_per_bucket > 65536)
    throw py::value_error("NearDeduplicator: num_buckets * hashes_per_bucket must be <= 65536");
  param_u64(p, "max_entries", &params.max_entries, kWhat);
  param_size(p, "initial_capacity", &params.initial_capacity, kWhat);
  if (params.initial_capacity > (size_t(1) << 40))
    throw py::value_error("NearDeduplicator: initial_capacity=" + std::to_string(params.initial_capacity) +
                          " exceeds the largest table (2^40 slots of 16 bytes)");
  param_size(p, "wal_buffer_hashes", &params.wal_buffer_hashes, kWhat);
  params.wal_path = path.empty() ? nullptr : path.c_str();
  lm_status s;
  int err = 0;
  {
    py::gil_scoped_release nogil;
    errno = 0;
    s = lm_near_dedup_create(&params, &obj);
    err = errno;
  }
  params.wal_path = nullptr;
  if (s == LM_ENOMEM && params.initial_capacity > 1024) {
    PyErr_SetString(PyExc_MemoryError, ("NearDeduplicator: cannot allocate the band index for initial_capacity=" +
                                        std::to_string(params.initial_capacity) + " (16 bytes per slot)")
                                           .c_str());
    throw py::error_already_set();
  }
  if (s == LM_EINVAL && !path.empty()) {
    lm_near_dedup_params w = params;
    int r = wal_config(path, &w);
    if (r == 1) {
      std::string diff;
      auto cmp = [&](const char *name, uint64_t a, uint64_t b) {
        if (a == b) return;
        diff += std::string(diff.empty() ? "" : ", ") + name + "=" + std::to_string(a) + " (this NearDeduplicator: " +
                std::to_string(b) + ")";
      };
      cmp("seed", w.seed, params.seed);
      cmp("n_grams", w.n_grams, params.n_grams);
      cmp("num_buckets (bands)", w.num_buckets, params.num_buckets);
      cmp("hashes_per_bucket (rows)", w.hashes_per_bucket, params.hashes_per_bucket);
      cmp("precision", w.precision, params.precision);
      if (!diff.empty())
        throw py::value_error("NearDeduplicator: the WAL " + path + " was written with another MinHash configuration: " +
                              diff + "; its keys mean nothing under these settings. Open it with " + describe(w) +
                              ", or use another wal_path");
    } else if (r == 0) {
      throw py::value_error("NearDeduplicator: " + path +
                            " is not a near-dedup band index (a StreamDeduplicator's WAL, or one written before "
                            "configurations were recorded); use another wal_path");
    }
  }
  if (s == LM_ESTATE && !path.empty())
    throw py::value_error("NearDeduplicator: the WAL " + path +
                          " is in use (locked by another open NearDeduplicator, in this or another process); "
                          "close that one first or use another wal_path");
  if (s) raise_status(s, kWhat, path, err);
  if (!path.empty()) wal_index_opened(index());
}

void bind_near_dedup(py::module_ &m) {
  py::class_<NearDedup, std::shared_ptr<NearDedup>>(m, "NearDeduplicator")
      .def(py::init<const py::dict &>(), py::arg("params"))
      .def(
          "run",
          [](NearDedup &o, py::handle off, py::handle data, int nt) {
            DocsArg in(off, data, kWhat);
            lm_exec ex = exec_for(nt);
            ResultGuard res;
            call(o, kWhat, [&](NearDedup &x) { return lm_near_dedup_run(x.obj, &in.docs, &res.r, &ex); });
            return result_tensors(res.r);
          },
          py::arg("offsets"), py::arg("data"), py::arg("num_threads") = 0)
      .def(
          "keys",
          [](NearDedup &o, py::handle off, py::handle data, int nt) {
            // (keys int64 [N * B, 2], has_keys bool [N]); rows of documents without keys are zero.
            DocsArg in(off, data, "NearDeduplicator.keys");
            lm_exec ex = exec_for(nt);
            const int64_t n = int64_t(in.docs.n), B = int64_t(o.params.num_buckets);
            ArrayOut keys(Dt::i64, n * B, 2, /*zero=*/true);
            ArrayOut has(Dt::b8, n, -1, /*zero=*/true);
            auto *kp = reinterpret_cast<lm_hash128_t *>(keys.data<int64_t>());
            uint8_t *hp = has.data<uint8_t>();
            call(o, "NearDeduplicator.keys", [&](NearDedup &x) {
              return lm_near_dedup_batch_keys(x.obj, &in.docs, kp, hp, &ex);
            });
            return py::make_tuple(keys.tensor(), has.tensor());
          },
          py::arg("offsets"), py::arg("data"), py::arg("num_threads") = 0)
      .def(
          "signature_keys",
          [](NearDedup &o, py::handle sig) {
            // signatures int64 [N, H] (MinHash.signatures) -> (keys [N * B, 2], has_keys [N]).
            const int64_t H = int64_t(o.params.num_buckets) * o.params.hashes_per_bucket;
            ArrayIn sg;
            get_array(sg, sig, "NearDeduplicator.signature_keys: signatures", kCopyIfStrided);
            if (sg.dt != Dt::i64 || sg.ndim != 2 || sg.shape[1] != H)
              throw py::type_error("NearDeduplicator.signature_keys: signatures must be int64 [N, " +
                                   std::to_string(H) + "] (num_buckets * hashes_per_bucket)");
            if (!sg.cpu) throw py::value_error("NearDeduplicator.signature_keys: signatures must be on the CPU");
            const int64_t n = sg.shape[0], B = int64_t(o.params.num_buckets);
            ArrayOut keys(Dt::i64, n * B, 2, /*zero=*/true);
            ArrayOut has(Dt::b8, n, -1, /*zero=*/true);
            const uint64_t *sp = reinterpret_cast<const uint64_t *>(sg.data<int64_t>());
            lm_hash128_t *kp = reinterpret_cast<lm_hash128_t *>(keys.data<int64_t>());
            uint8_t *hp = has.data<uint8_t>();
            call(o, "NearDeduplicator.signature_keys", [&](NearDedup &x) {
              for (int64_t i = 0; i < n; i++) {
                const uint64_t *row = sp + i * H;
                bool empty = true;
                for (int64_t j = 0; j < H && empty; j++) empty = row[j] == LM_MINHASH_EMPTY;
                hp[i] = !empty;
                if (!empty) lm_near_dedup_signature_keys(x.obj, row, kp + i * B);
              }
              return LM_OK;
            });
            return py::make_tuple(keys.tensor(), has.tensor());
          },
          py::arg("signatures"))
      .def(
          "check_keys",
          [](NearDedup &o, py::handle k, py::handle has) {
            // is_dup bool [N] for the keys of N documents (as keys() returns them), admitted in order.
            ArrayIn kk, hh;
            keys_arg(kk, k, "NearDeduplicator.check_keys");
            get_array(hh, has, "NearDeduplicator.check_keys: has_keys", kCopyIfStrided);
            if (hh.dt != Dt::b8 || hh.ndim != 1)
              throw py::type_error("NearDeduplicator.check_keys: has_keys must be a bool tensor [N]");
            if (!hh.cpu) throw py::value_error("NearDeduplicator.check_keys: has_keys must be on the CPU");
            const int64_t n = hh.shape[0], B = int64_t(o.params.num_buckets);
            if (kk.shape[0] != n * B)
              throw py::value_error("NearDeduplicator.check_keys: keys has " + std::to_string(kk.shape[0]) +
                                    " rows, expected N * num_buckets = " + std::to_string(n * B));
            ArrayOut dup(Dt::b8, n, -1, /*zero=*/true);
            const auto *kp = reinterpret_cast<const lm_hash128_t *>(kk.data<int64_t>());
            const uint8_t *hp = hh.data<uint8_t>();
            uint8_t *dp = dup.data<uint8_t>();
            call(o, "NearDeduplicator.check_keys", [&](NearDedup &x) {
              return lm_near_dedup_check_keys(x.obj, kp, hp, size_t(n), dp);
            });
            return dup.tensor();
          },
          py::arg("keys"), py::arg("has_keys"))
      .def(
          "check_insert_hashes",
          [](NearDedup &o, py::handle k) {
            // Raw per-key check-and-insert (the owner side of the distributed exchange): is_new bool [M].
            ArrayIn kk;
            keys_arg(kk, k, "NearDeduplicator.check_insert_hashes");
            const int64_t n = kk.shape[0];
            ArrayOut is_new(Dt::b8, n);
            const auto *kp = reinterpret_cast<const lm_hash128_t *>(kk.data<int64_t>());
            uint8_t *np = is_new.data<uint8_t>();
            call(o, "NearDeduplicator.check_insert_hashes", [&](NearDedup &x) {
              return lm_dedup_check_insert_hashes(x.index(), kp, size_t(n), np, nullptr);
            });
            return is_new.tensor();
          },
          py::arg("keys"))
      .def("lsn",
           [](NearDedup &o) {
             uint64_t lsn = 0;
             std::lock_guard<std::mutex> lk(o.mu);
             lm_dedup_lsn(o.index(), &lsn);
             return lsn;
           })
      .def("sync",
           [](NearDedup &o) {
             uint64_t lsn = 0;
             call(o, "NearDeduplicator.sync", [&](NearDedup &x) { return lm_dedup_sync(x.index(), &lsn); });
             return lsn;
           })
      .def(
          "truncate",
          [](NearDedup &o, py::handle lsn_obj) {
            const uint64_t lsn = truncate_lsn_arg(o, o.index(), lsn_obj, "NearDeduplicator.truncate");
            call(o, "NearDeduplicator.truncate", [&](NearDedup &x) { return lm_dedup_truncate(x.index(), lsn); });
          },
          py::arg("lsn"))
      .def("snapshot",
           [](NearDedup &o) {
             call(o, "NearDeduplicator.snapshot", [&](NearDedup &x) { return lm_dedup_snapshot(x.index()); });
           })
      .def("stats",
           [](NearDedup &o) {
             lm_dedup_stats s;
             {
               std::lock_guard<std::mutex> lk(o.mu);
               lm_dedup_stats_get(o.index(), &s);
             }
             return stats_dict(s, o.params.num_buckets);  // no Python object made with the lock held
           })
      .def("close", [](NearDedup &o) { close_dedup(o, o.index(), "NearDeduplicator.close"); })
      .def_property_readonly("closed", [](NearDedup &o) { return o.closed; })
      .def_property_readonly("forked", [](NearDedup &o) { return foreign_wal(o); },
                             "True in a child forked from the process that opened its log (unusable there)")
      .def_property_readonly("path",
                             [](NearDedup &o) { return o.path.empty() ? py::object(py::none()) : py::str(o.path); })
      .def_property_readonly("index_seed", [](NearDedup &o) { return lm_near_dedup_index_seed(&o.params); })
      .def_property_readonly("config", [](NearDedup &o) {
        return config_dict(o.params);
      });
  m.def(
      "near_dedup_wal_config",
      [](const std::string &path) -> py::object {
        lm_near_dedup_params p;
        lm_near_dedup_params_default(&p);
        int r = wal_config(path, &p);
        if (r != 1) return py::none();
        return config_dict(p);
      },
      py::arg("path"));
}

}  // namespace luminamoon
