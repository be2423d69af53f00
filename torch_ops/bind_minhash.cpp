// The pybind11 class _C.MinHash behind luminamoon.MinHash (core/include/luminamoon/minhash.h).
// Moved here from minhash.cpp when the operator torch.ops.luminamoon.minhash moved to the
// stable-ABI extension luminamoon._ops (issue 15); part of luminamoon._C.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "bind_array.h"
#include "bind_common.h"

extern "C" {
#include "luminamoon/minhash.h"
}

namespace luminamoon {
namespace {

struct MinHashObj {
  lm_minhash *m = nullptr;
  MinHashObj(uint32_t n_grams, uint32_t num_buckets, uint32_t hashes_per_bucket, uint32_t precision, uint64_t seed) {
    lm_minhash_params p;
    lm_minhash_params_default(&p);
    p.n_grams = n_grams;
    p.num_buckets = num_buckets;
    p.hashes_per_bucket = hashes_per_bucket;
    p.precision = precision;
    p.seed = seed;
    lm_status st = lm_minhash_create(&p, &m);
    if (st != LM_OK) raise_status(st, "MinHash");
  }
  ~MinHashObj() { lm_minhash_destroy(m); }
  MinHashObj(const MinHashObj &) = delete;
  MinHashObj &operator=(const MinHashObj &) = delete;

  py::object params_tensor(const uint64_t *v) const {
    const int64_t H = static_cast<int64_t>(lm_minhash_num_hashes(m));
    ArrayOut t(Dt::i64, H);
    std::memcpy(t.data<int64_t>(), v, sizeof(uint64_t) * static_cast<size_t>(H));
    return t.tensor();
  }

  // (signatures int64 [N, H], has_sig bool [N])
  py::tuple signatures(py::handle offsets, py::handle data, int num_threads) const {
    DocsArg in(offsets, data, "MinHash.signatures");
    const int64_t H = static_cast<int64_t>(lm_minhash_num_hashes(m));
    const int64_t n = static_cast<int64_t>(in.docs.n);
    ArrayOut out(Dt::i64, n, H);
    ArrayOut has(Dt::b8, n);
    uint64_t *op = n ? reinterpret_cast<uint64_t *>(out.data<int64_t>()) : nullptr;
    uint8_t *hp = n ? has.data<uint8_t>() : nullptr;
    lm_exec ex = exec_for(num_threads);
    lm_status st;
    {
      py::gil_scoped_release nogil;
      st = lm_minhash_signatures(m, &in.docs, op, hp, &ex);
    }
    if (st != LM_OK) raise_status(st, "MinHash.signatures");
    return py::make_tuple(out.tensor(), has.tensor());
  }

  // (shingle_hashes int64 [M], doc_offsets int64 [N+1]) — the input of torch.ops.luminamoon.minhash
  py::tuple shingles(py::handle offsets, py::handle data, int num_threads) const {
    DocsArg in(offsets, data, "MinHash.shingles");
    const size_t n = in.docs.n;
    ArrayOut doc_off(Dt::i64, static_cast<int64_t>(n + 1));
    int64_t *dof = doc_off.data<int64_t>();
    lm_status st = lm_docs_validate(&in.docs);
    if (st != LM_OK) raise_status(st, "MinHash.shingles");
    const int nt = std::max(1, exec_for(num_threads).num_threads);
    const size_t chunks = std::min<size_t>(n ? n : 1, static_cast<size_t>(nt) * 4);
    std::vector<std::vector<uint64_t>> parts(chunks);
    std::vector<lm_status> errs(chunks, LM_OK);
    {
      py::gil_scoped_release nogil;
      struct Ctx {
        const MinHashObj *self;
        const lm_docs *docs;
        size_t chunks;
        std::vector<std::vector<uint64_t>> *parts;
        std::vector<lm_status> *errs;
        int64_t *dof;
      } ctx{this, &in.docs, chunks, &parts, &errs, dof};
      auto fn = [](void *vc, size_t begin, size_t end) -> lm_status {
        Ctx *c = static_cast<Ctx *>(vc);
        lm_minhash_scratch *s = nullptr;
        lm_status e = lm_minhash_scratch_create(&s);
        if (e != LM_OK) return e;
        const size_t n = c->docs->n;
        for (size_t k = begin; k < end && e == LM_OK; k++) {
          const size_t d0 = n * k / c->chunks, d1 = n * (k + 1) / c->chunks;
          std::vector<uint64_t> &v = (*c->parts)[k];
          for (size_t i = d0; i < d1; i++) {
            const int64_t o0 = c->docs->offsets[i], o1 = c->docs->offsets[i + 1];
            const uint64_t *h = nullptr;
            size_t cnt = 0;
            e = lm_minhash_shingles(c->self->m, s, c->docs->data + o0, static_cast<size_t>(o1 - o0), &h, &cnt);
            if (e != LM_OK) break;
            c->dof[i + 1] = static_cast<int64_t>(cnt);  // counts first, prefix sums below
            v.insert(v.end(), h, h + cnt);
          }
        }
        lm_minhash_scratch_destroy(s);
        return e;
      };
      lm_exec ex{nt, 1};
      st = lm_parallel_for(&ex, chunks, fn, &ctx);
    }
    if (st != LM_OK) raise_status(st, "MinHash.shingles");
    size_t total = 0;
    for (auto &p : parts) total += p.size();
    ArrayOut hashes(Dt::i64, static_cast<int64_t>(total));
    uint64_t *hp = reinterpret_cast<uint64_t *>(hashes.data<int64_t>());
    size_t pos = 0;
    for (auto &p : parts) {
      if (!p.empty()) std::memcpy(hp + pos, p.data(), p.size() * sizeof(uint64_t));
      pos += p.size();
    }
    dof[0] = 0;
    for (size_t i = 0; i < n; i++) dof[i + 1] += dof[i];
    return py::make_tuple(hashes.tensor(), doc_off.tensor());
  }

  std::string simplify(const std::string &text) const {
    lm_minhash_scratch *s = nullptr;
    lm_status st = lm_minhash_scratch_create(&s);
    if (st != LM_OK) raise_status(st, "MinHash.simplify");
    const uint8_t *o = nullptr;
    size_t ol = 0;
    st = lm_minhash_simplify(s, reinterpret_cast<const uint8_t *>(text.data()), text.size(), &o, &ol);
    std::string r = st == LM_OK ? std::string(reinterpret_cast<const char *>(o), ol) : std::string();
    lm_minhash_scratch_destroy(s);
    if (st != LM_OK) raise_status(st, "MinHash.simplify");
    return r;
  }
};

}  // namespace

void bind_minhash(py::module_ &m) {
  py::class_<MinHashObj>(m, "MinHash")
      .def(py::init<uint32_t, uint32_t, uint32_t, uint32_t, uint64_t>(), py::arg("n_grams"), py::arg("num_buckets"),
           py::arg("hashes_per_bucket"), py::arg("precision"), py::arg("seed"))
      .def("signatures", &MinHashObj::signatures, py::arg("offsets"), py::arg("data"), py::arg("num_threads") = 0)
      .def("shingles", &MinHashObj::shingles, py::arg("offsets"), py::arg("data"), py::arg("num_threads") = 0)
      .def("simplify", &MinHashObj::simplify, py::arg("text"))
      .def_property_readonly("a", [](const MinHashObj &o) { return o.params_tensor(lm_minhash_a(o.m)); })
      .def_property_readonly("b", [](const MinHashObj &o) { return o.params_tensor(lm_minhash_b(o.m)); })
      .def_property_readonly("num_hashes",
                             [](const MinHashObj &o) { return static_cast<int64_t>(lm_minhash_num_hashes(o.m)); });
}

}  // namespace luminamoon
