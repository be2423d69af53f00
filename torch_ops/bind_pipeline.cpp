// Binding of the FusedPipeline (core pipeline.h).  It borrows the C objects of
// the stage bindings it was built from and keeps them alive; the deduplicator
// is shared with its Python owner (locked while a batch runs).
#include "bind_near_dedup.h"
#include "bind_stages.h"

extern "C" {
#include "luminamoon/pipeline.h"
}

namespace luminamoon {

py::dict fused_pii_counters(const lm_pii_counts &c);          // stages.cpp
py::dict fused_clean_counters(const lm_clean_counters &c);    // stages.cpp
py::dict fused_quality_counters(const lm_quality_counters &c);  // stages.cpp

namespace {

struct Fused {
  std::shared_ptr<Cleaner> cleaner;
  std::shared_ptr<Quality> quality;
  std::shared_ptr<Dedup> dedup;
  std::shared_ptr<Pii> pii;
  std::shared_ptr<NearDedup> near;  // near duplicates (bind_near_dedup.h), shared like dedup
  lm_fused *obj = nullptr;
  std::mutex mu;
  Fused(std::shared_ptr<Cleaner> c, std::shared_ptr<Quality> q, std::shared_ptr<Dedup> d, std::shared_ptr<Pii> p,
        std::shared_ptr<NearDedup> nd)
      : cleaner(std::move(c)), quality(std::move(q)), dedup(std::move(d)), pii(std::move(p)), near(std::move(nd)) {
    lm_fused_stages st;
    st.cleaner = cleaner ? cleaner->obj : nullptr;
    st.quality = quality ? quality->obj : nullptr;
    st.dedup = dedup ? dedup->obj : nullptr;
    st.pii = pii ? pii->obj : nullptr;
    st.near = near ? near->obj : nullptr;
    lm_status s = lm_fused_create(&st, &obj);
    if (s) raise_status(s, "FusedPipeline");
  }
  ~Fused() { lm_fused_destroy(obj); }
};

py::dict counters_dict(const lm_fused_counters &c, bool has[5]) {
  py::dict d;
  d["batches"] = c.batches;
  d["docs_in"] = c.docs_in;
  d["docs_out"] = c.docs_out;
  d["bytes_in"] = c.bytes_in;
  d["bytes_out"] = c.bytes_out;
  d["dropped_clean"] = c.dropped_clean;
  d["dropped_quality"] = c.dropped_quality;
  d["dropped_duplicate"] = c.dropped_duplicate;
  d["dropped_pii"] = c.dropped_pii;
  if (has[0]) d["clean"] = fused_clean_counters(c.clean);
  if (has[1]) d["quality"] = fused_quality_counters(c.quality);
  if (has[2]) {
    py::dict dd;
    dd["probes"] = c.dedup_probes;
    dd["inserts"] = c.dedup_inserts;
    dd["duplicates"] = c.dropped_duplicate;
    d["dedup"] = dd;
  }
  if (has[3]) d["pii"] = fused_pii_counters(c.pii);
  if (has[4]) d["dropped_near_duplicate"] = c.dropped_near_duplicate;
  return d;
}

}  // namespace

void bind_pipeline(py::module_ &m) {
  py::class_<Fused, std::shared_ptr<Fused>>(m, "FusedPipeline")
      .def(py::init<std::shared_ptr<Cleaner>, std::shared_ptr<Quality>, std::shared_ptr<Dedup>, std::shared_ptr<Pii>,
                    std::shared_ptr<NearDedup>>(),
           py::arg("cleaner").none(true), py::arg("quality").none(true), py::arg("dedup").none(true),
           py::arg("pii").none(true), py::arg("near_dedup").none(true) = py::none())
      .def(
          "run",
          [](Fused &f, py::handle off, py::handle data, int nt) {
            DocsArg in(off, data, "FusedPipeline");
            lm_exec ex = exec_for(nt);
            ResultGuard res;
            lm_status s = LM_OK;
            int err = 0;
            bool closed = false;
            {
              py::gil_scoped_release nogil;
              std::lock_guard<std::mutex> lk(f.mu);
              std::unique_lock<std::mutex> dl, nl;
              if (f.dedup) {
                dl = std::unique_lock<std::mutex>(f.dedup->mu);
                closed = f.dedup->closed;
              }
              if (f.near) {
                nl = std::unique_lock<std::mutex>(f.near->mu);
                closed = closed || f.near->closed;
              }
              if (!closed) {
                errno = 0;
                s = lm_fused_run(f.obj, &in.docs, &res.r, &ex);
                err = errno;
              }
            }
            if (closed) throw py::value_error("FusedPipeline: its StreamDeduplicator or NearDeduplicator is closed");
            if (s != LM_OK && f.near && lm_fused_near_failed(f.obj)) f.near->raise(s, "FusedPipeline", err);
            if (s == LM_ETOOBIG && f.dedup) f.dedup->raise_full("FusedPipeline");
            if (s == LM_ESTATE && f.dedup) f.dedup->raise_failed("FusedPipeline");
            if (s != LM_OK) raise_status(s, "FusedPipeline", f.dedup ? f.dedup->path : "", err);
            return result_tensors(res.r);
          },
          py::arg("offsets"), py::arg("data"), py::arg("num_threads") = 0)
      .def("counters",
           [](Fused &f) {
             lm_fused_counters c;
             {
               std::lock_guard<std::mutex> lk(f.mu);
               lm_fused_get_counters(f.obj, &c);
             }
             bool has[5] = {bool(f.cleaner), bool(f.quality), bool(f.dedup), bool(f.pii), bool(f.near)};
             return counters_dict(c, has);
           })
      .def("retained_bytes",
           [](Fused &f) {
             size_t b = 0;
             std::lock_guard<std::mutex> lk(f.mu);
             lm_fused_retained_bytes(f.obj, &b);
             return py::int_(b);
           })
      .def("last_run",
           [](Fused &f) {
             lm_fused_run_info info;
             {
               std::lock_guard<std::mutex> lk(f.mu);
               lm_fused_last_run(f.obj, &info);
             }
             py::dict d;
             d["ranges"] = info.ranges1;
             d["workers"] = info.workers1;
             return d;
           })
      .def("reset_counters", [](Fused &f) {
        std::lock_guard<std::mutex> lk(f.mu);
        lm_fused_reset_counters(f.obj);
      })
      .def("get_pii_cycle", [](Fused &f) {
        uint64_t c[LM_PII_TYPE_COUNT];
        {
          std::lock_guard<std::mutex> lk(f.mu);
          lm_fused_get_pii_cycle(f.obj, c);
        }
        py::list out;
        for (int t = 0; t < LM_PII_TYPE_COUNT; t++) out.append(py::int_(c[t]));
        return out;
      })
      .def("set_pii_cycle", [](Fused &f, const py::sequence &seq) {
        std::vector<uint64_t> v;
        for (auto x : seq) v.push_back(x.cast<uint64_t>());
        if (v.size() != LM_PII_TYPE_COUNT)
          throw py::value_error("FusedPipeline.set_pii_cycle: expected " + std::to_string(LM_PII_TYPE_COUNT) +
                                " positions, got " + std::to_string(v.size()));
        std::lock_guard<std::mutex> lk(f.mu);
        lm_fused_set_pii_cycle(f.obj, v.data());
      });
}

}  // namespace luminamoon
