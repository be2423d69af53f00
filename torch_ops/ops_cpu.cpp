// The CPU kernels of the torch.ops.luminamoon operators: NAME_cpu for the operator NAME, registered
// at the end of this file.  Schemas: torch_ops/schema.cpp; CUDA kernels: ops_cuda.cu (NAME_cuda);
// fake kernels: python/luminamoon/ops.py.  minhash has its kernels in minhash.cpp / minhash_cuda.cu.
// Written against the LibTorch stable ABI only: part of the extension luminamoon._ops
// (torch_ops/stable/stable_common.h: the checks, the error types).
#include <algorithm>
#include <cstring>

#include "stable_common.h"

namespace luminamoon {
namespace {

lm_exec cpu_exec() {
  lm_exec e;
  e.num_threads = int(torch::stable::get_num_threads());
  e.min_items_per_thread = 0;
  return e;
}

const uint8_t *bytes_ptr(const Tensor &data) { return data.numel() ? cptr<uint8_t>(data) : nullptr; }

// check_strings_light, then on the CPU: one snapshot (a copy) of the offsets, validated and then used by
// the kernel: the caller's tensor may be written by another thread while the op runs (GIL released).
Tensor check_strings(const char *op, const Tensor &offsets, const Tensor &data, const char *on = "offsets",
                     const char *dn = "data") {
  check_strings_light(op, offsets, data, on, dn);
  if (!offsets.is_cpu()) return offsets;
  Tensor snap = torch::stable::clone(offsets);
  const size_t n = size_t(snap.numel() - 1), len = size_t(data.numel());
  lm_status s = is_int(snap) ? lm_offsets32_validate(cptr<int32_t>(snap), n, len)
                             : lm_offsets64_validate(cptr<int64_t>(snap), n, len);
  LM_CHECK_VALUE(s != LM_EINVAL, "luminamoon.", op, ": ", on, " must be non-negative and non-decreasing");
  LM_CHECK_VALUE(s != LM_ERANGE, "luminamoon.", op, ": ", on, " point past the end of ", dn, " (", dn, " has ", len,
                 " bytes)");
  return snap;
}

// A kernel refused the offsets (LM_EINVAL): the message check_strings gives for them.
[[noreturn]] void raise_bad_offsets(const char *op, const Tensor &offsets, const Tensor &data,
                                    const char *on = "offsets", const char *dn = "data") {
  check_strings(op, offsets, data, on, dn);  // raises for offsets that are still bad
  value_error("luminamoon.", op, ": ", on, " changed while the op ran (another thread wrote into it) and were not "
              "non-decreasing offsets inside ", dn, " at that moment");
}

const lm_string_view *views_ptr(const Tensor &views) {
  return views.numel() ? cptr<lm_string_view>(views) : nullptr;
}

// The lm_payloads of a list of buffer tensors (owns the pointer/size arrays).
struct Payloads {
  std::vector<const uint8_t *> ptrs;
  std::vector<size_t> sizes;
  lm_payloads p;
  explicit Payloads(const std::vector<Tensor> &buffers) {
    ptrs.reserve(buffers.size());
    sizes.reserve(buffers.size());
    for (const auto &b : buffers) {
      ptrs.push_back(b.numel() ? cptr<uint8_t>(b) : nullptr);
      sizes.push_back(size_t(b.numel()));
    }
    p = {ptrs.data(), sizes.data(), uint32_t(ptrs.size())};
  }
  const lm_payloads *get() const { return &p; }
};

// views: [N,16] uint8 contiguous on the CPU; buffers: 1-D uint8 contiguous CPU tensors.  The equality /
// hash kernels check the inline padding in their first pass over the views (LM_ECORRUPT: raise_view_bounds
// names the view; the prefix match never reads padding), and read each view they dereference once and
// re-check it, so a racing writer cannot make them read out of bounds: no copy of the views is needed.
const Tensor &check_views(const char *op, const Tensor &views, const std::vector<Tensor> &buffers,
                          const char *vn = "views") {
  LM_CHECK_TYPE(views.scalar_type() == ScalarType::Byte, "luminamoon.", op, ": ", vn, " must be uint8, got ",
                dtype_name(views.scalar_type()));
  LM_CHECK_VALUE(views.dim() == 2 && views.size(1) == 16, "luminamoon.", op, ": ", vn,
                 " must have shape [N, 16], got ", shape_of(views));
  LM_CHECK_VALUE(views.is_cpu(), "luminamoon.", op, ": ", vn, " must be on the CPU (the views layout is CPU-only)");
  LM_CHECK_VALUE(views.is_contiguous(), "luminamoon.", op, ": ", vn, " must be contiguous");
  for (size_t i = 0; i < buffers.size(); i++) {
    const auto &b = buffers[i];
    LM_CHECK_TYPE(b.scalar_type() == ScalarType::Byte, "luminamoon.", op, ": buffers[", i, "] must be uint8");
    LM_CHECK_VALUE(b.dim() == 1 && b.is_cpu() && b.is_contiguous(), "luminamoon.", op, ": buffers[", i,
                   "] must be a contiguous 1-D CPU tensor");
  }
  LM_CHECK_VALUE(buffers.size() <= UINT32_MAX, "luminamoon.", op, ": too many buffers");
  return views;
}

[[noreturn]] void raise_padding(const char *op, const char *vn, const Tensor &views) {
  size_t bad = 0;
  lm_views_check_padding(views_ptr(views), size_t(views.size(0)), &bad);
  value_error("luminamoon.", op, ": ", vn, "[", bad, "] is an inline view (length <= 12) with non-zero padding "
              "bytes after the string; Arrow string views must be zero-padded");
}

// check_views, then a private snapshot (a copy) of the views, checked (inline padding zero; every long
// view inside its buffer), for the kernel to read: a racing writer cannot move a view after its check.
Tensor check_views_bounds(const char *op, const Tensor &views_in, const std::vector<Tensor> &buffers,
                          const char *vn = "views") {
  check_views(op, views_in, buffers, vn);
  Tensor snap = torch::stable::clone(views_in);
  if (lm_views_check_padding(views_ptr(snap), size_t(snap.size(0)), nullptr) != LM_OK) raise_padding(op, vn, snap);
  Payloads p(buffers);
  lm_status s = lm_views_check_bounds(views_ptr(snap), size_t(snap.size(0)), p.sizes.data(), uint32_t(p.sizes.size()));
  LM_CHECK_VALUE(s == LM_OK, "luminamoon.", op, ": ", vn, " holds a view outside its payload buffer "
                 "(bad buffer index, offset or length)");
  return snap;
}

// Map a views-kernel status: LM_ECORRUPT -> ValueError naming the first inline view with non-zero
// padding; LM_ERANGE -> ValueError (a view outside its buffer).
void raise_view_bounds(lm_status s, const char *op, const char *vn, const Tensor &views) {
  if (s == LM_ECORRUPT) raise_padding(op, vn, views);
  LM_CHECK_VALUE(s != LM_ERANGE, "luminamoon.", op, ": ", vn, " holds a view outside its payload buffer "
                 "(bad buffer index, offset or length)");
  check(s, op);
}

// A bool [n] output on the device of `like`, as bytes.
Tensor bool_out(const Tensor &like, int64_t n) { return empty_on(like, {n}, ScalarType::Bool); }

// prefix_match / equal_scalar: one pattern against every string, the checked kernels of core/.
using match32_fn = lm_status (*)(const int32_t *, size_t, const uint8_t *, size_t, const uint8_t *, size_t, uint8_t *,
                                 const lm_exec *);
using match64_fn = lm_status (*)(const int64_t *, size_t, const uint8_t *, size_t, const uint8_t *, size_t, uint8_t *,
                                 const lm_exec *);

Tensor match_cpu(const char *op, const Tensor &offsets, const Tensor &data, const std::string &pat, match32_fn f32,
                 match64_fn f64) {
  check_strings_light(op, offsets, data);
  const int64_t n = offsets.numel() - 1;
  Tensor out = bool_out(offsets, n);
  const auto *p = reinterpret_cast<const uint8_t *>(pat.data());
  lm_exec e = cpu_exec();
  auto *o = mptr<uint8_t>(out);
  const uint8_t *d = bytes_ptr(data);
  const size_t len = size_t(data.numel());
  lm_status s = is_int(offsets) ? f32(cptr<int32_t>(offsets), n, d, len, p, pat.size(), o, &e)
                                : f64(cptr<int64_t>(offsets), n, d, len, p, pat.size(), o, &e);
  if (s == LM_EINVAL) raise_bad_offsets(op, offsets, data);
  check(s, op);
  return out;
}

Tensor prefix_match_cpu(Tensor offsets, Tensor data, std::string prefix) {
  return match_cpu("prefix_match", offsets, data, prefix, &lm_o32_prefix_match_checked, &lm_o64_prefix_match_checked);
}

Tensor equal_scalar_cpu(Tensor offsets, Tensor data, std::string str) {
  return match_cpu("equal_scalar", offsets, data, str, &lm_o32_equal_scalar_checked, &lm_o64_equal_scalar_checked);
}

Tensor equal_cpu(Tensor oa, Tensor da, Tensor ob, Tensor db) {
  check_strings_light("equal", oa, da, "offsets_a", "data_a");
  check_strings_light("equal", ob, db, "offsets_b", "data_b");
  LM_CHECK_VALUE(oa.numel() == ob.numel(), "luminamoon.equal: offsets_a and offsets_b must describe the same "
                 "number of strings, got ", oa.numel() - 1, " and ", ob.numel() - 1);
  LM_CHECK_TYPE(oa.scalar_type() == ob.scalar_type(), "luminamoon.equal: offsets_a and offsets_b must have "
                "the same dtype, got ", dtype_name(oa.scalar_type()), " and ", dtype_name(ob.scalar_type()));
  const int64_t n = oa.numel() - 1;
  Tensor out = bool_out(oa, n);
  lm_exec e = cpu_exec();
  auto *o = mptr<uint8_t>(out);
  const size_t la = size_t(da.numel()), lb = size_t(db.numel());
  lm_status s = is_int(oa) ? lm_o32_equal_checked(cptr<int32_t>(oa), bytes_ptr(da), la, cptr<int32_t>(ob),
                                                  bytes_ptr(db), lb, n, o, &e)
                           : lm_o64_equal_checked(cptr<int64_t>(oa), bytes_ptr(da), la, cptr<int64_t>(ob),
                                                  bytes_ptr(db), lb, n, o, &e);
  if (s == LM_EINVAL) {
    check_strings("equal", oa, da, "offsets_a", "data_a");
    raise_bad_offsets("equal", ob, db, "offsets_b", "data_b");
  }
  check(s, "equal");
  return out;
}

Tensor hash64_cpu(Tensor offsets, Tensor data, int64_t seed) {
  check_strings_light("hash64", offsets, data);
  const int64_t n = offsets.numel() - 1;
  Tensor out = empty_on(offsets, {n}, ScalarType::Long);
  lm_exec e = cpu_exec();
  auto *o = mptr<uint64_t>(out);
  const uint8_t *d = bytes_ptr(data);
  const size_t len = size_t(data.numel());
  lm_status s = is_int(offsets) ? lm_o32_hash64_checked(cptr<int32_t>(offsets), n, d, len, uint64_t(seed), o, &e)
                                : lm_o64_hash64_checked(cptr<int64_t>(offsets), n, d, len, uint64_t(seed), o, &e);
  if (s == LM_EINVAL) raise_bad_offsets("hash64", offsets, data);
  check(s, "hash64");
  return out;
}

std::tuple<Tensor, Tensor> pad_bytes_cpu(Tensor offsets_in, Tensor data, int64_t max_len, int64_t pad_id,
                                         int64_t bos_id, int64_t eos_id) {
  const Tensor offsets = check_strings("pad_bytes", offsets_in, data);
  const int64_t n = offsets.numel() - 1;
  check_matrix_size("pad_bytes", n, max_len);
  Tensor tokens = empty_on(offsets, {n, max_len}, ScalarType::Long);
  Tensor lengths = empty_on(offsets, {n}, ScalarType::Long);
  lm_exec e = cpu_exec();
  const uint8_t *d = bytes_ptr(data);
  int64_t *t = mptr<int64_t>(tokens), *l = mptr<int64_t>(lengths);
  if (is_int(offsets))
    check(lm_o32_pad_bytes(cptr<int32_t>(offsets), n, d, max_len, pad_id, bos_id, eos_id, t, l, &e), "pad_bytes");
  else
    check(lm_o64_pad_bytes(cptr<int64_t>(offsets), n, d, max_len, pad_id, bos_id, eos_id, t, l, &e), "pad_bytes");
  return {tokens, lengths};
}

std::tuple<Tensor, Tensor> gather_cpu(Tensor offsets_in, Tensor data, Tensor index) {
  const Tensor offsets = check_strings("gather", offsets_in, data);
  LM_CHECK_TYPE(index.scalar_type() == ScalarType::Long, "luminamoon.gather: index must be int64, got ",
                dtype_name(index.scalar_type()));
  LM_CHECK_VALUE(index.dim() == 1, "luminamoon.gather: index must be 1-D, got shape ", shape_of(index));
  LM_CHECK_VALUE(same_device(index, offsets), "luminamoon.gather: index must be on ", device_name(offsets), ", got ",
                 device_name(index));
  // a snapshot: checked below, then used
  const Tensor idx = index.is_contiguous() ? torch::stable::clone(index) : torch::stable::contiguous(index);
  const int64_t n = offsets.numel() - 1, m = idx.numel();
  Tensor out_off = empty_on(offsets, {m + 1}, offsets.scalar_type());
  const int64_t *ip = cptr<int64_t>(idx);
  for (int64_t k = 0; k < m; k++)
    LM_CHECK_INDEX(ip[k] >= 0 && ip[k] < n, "luminamoon.gather: index[", k, "] = ", ip[k], " is out of range for ", n,
                   " strings");
  lm_exec e = cpu_exec();
  Tensor out_data;
  const uint8_t *d = bytes_ptr(data);
  if (is_int(offsets)) {
    auto *oo = mptr<int32_t>(out_off);
    lm_status s = lm_o32_gather_offsets(cptr<int32_t>(offsets), n, ip, m, oo);
    LM_CHECK_VALUE(s != LM_EOVERFLOW, "luminamoon.gather: the gathered strings exceed 2 GiB; "
                   "pass int64 offsets for payloads that large");
    check(s, "gather");
    out_data = empty_on(data, {int64_t(oo[m])}, ScalarType::Byte);
    check(lm_o32_gather_data(cptr<int32_t>(offsets), d, ip, m, oo, mptr<uint8_t>(out_data), &e), "gather");
  } else {
    auto *oo = mptr<int64_t>(out_off);
    check(lm_o64_gather_offsets(cptr<int64_t>(offsets), n, ip, m, oo), "gather");
    out_data = empty_on(data, {oo[m]}, ScalarType::Byte);
    check(lm_o64_gather_data(cptr<int64_t>(offsets), d, ip, m, oo, mptr<uint8_t>(out_data), &e), "gather");
  }
  return {out_off, out_data};
}

std::tuple<Tensor, Tensor> compact_cpu(Tensor offsets_in, Tensor data, Tensor mask) {
  const Tensor offsets = check_strings("compact", offsets_in, data);
  LM_CHECK_TYPE(mask.scalar_type() == ScalarType::Bool, "luminamoon.compact: mask must be bool, got ",
                dtype_name(mask.scalar_type()));
  LM_CHECK_VALUE(mask.dim() == 1 && mask.numel() == offsets.numel() - 1, "luminamoon.compact: mask must have shape [",
                 offsets.numel() - 1, "], got ", shape_of(mask));
  LM_CHECK_VALUE(same_device(mask, offsets), "luminamoon.compact: mask must be on ", device_name(offsets), ", got ",
                 device_name(mask));
  // a snapshot: counted, then used for the copy
  const Tensor mk = mask.is_contiguous() ? torch::stable::clone(mask) : torch::stable::contiguous(mask);
  const int64_t n = offsets.numel() - 1;
  const uint8_t *mp = n ? cptr<uint8_t>(mk) : nullptr;
  size_t kn = 0;
  uint64_t kb = 0;
  const uint8_t *d = bytes_ptr(data);
  Tensor out_off, out_data;
  if (is_int(offsets)) {
    const int32_t *off = cptr<int32_t>(offsets);
    check(lm_o32_compact_count(off, n, mp, &kn, &kb), "compact");
    out_off = empty_on(offsets, {int64_t(kn) + 1}, ScalarType::Int);
    out_data = empty_on(data, {int64_t(kb)}, ScalarType::Byte);
    check(lm_o32_compact(off, n, d, mp, mptr<int32_t>(out_off), kb ? mptr<uint8_t>(out_data) : nullptr), "compact");
  } else {
    const int64_t *off = cptr<int64_t>(offsets);
    check(lm_o64_compact_count(off, n, mp, &kn, &kb), "compact");
    out_off = empty_on(offsets, {int64_t(kn) + 1}, ScalarType::Long);
    out_data = empty_on(data, {int64_t(kb)}, ScalarType::Byte);
    check(lm_o64_compact(off, n, d, mp, mptr<int64_t>(out_off), kb ? mptr<uint8_t>(out_data) : nullptr), "compact");
  }
  return {out_off, out_data};
}

Tensor views_from_offsets_cpu(Tensor offsets_in, Tensor data) {
  const Tensor offsets = check_strings("views_from_offsets", offsets_in, data);
  LM_CHECK_VALUE(offsets.is_cpu(), "luminamoon.views_from_offsets: offsets must be on the CPU");
  const int64_t n = offsets.numel() - 1;
  Tensor views = empty_on(data, {n, 16}, ScalarType::Byte);
  auto *v = n ? mptr<lm_string_view>(views) : nullptr;
  lm_exec e = cpu_exec();
  const uint8_t *d = bytes_ptr(data);
  const size_t len = size_t(data.numel());
  if (is_int(offsets))
    check(lm_views_from_offsets32(cptr<int32_t>(offsets), n, d, len, 0, v, &e), "views_from_offsets");
  else
    check(lm_views_from_offsets64(cptr<int64_t>(offsets), n, d, len, 0, v, &e), "views_from_offsets");
  return views;
}

std::tuple<Tensor, Tensor> offsets_from_views_cpu(Tensor views_in, std::vector<Tensor> buffers, bool large) {
  const Tensor views = check_views_bounds("offsets_from_views", views_in, buffers);
  const int64_t n = views.size(0);
  const lm_string_view *v = views_ptr(views);
  uint64_t total = 0;
  check(lm_views_total_bytes(v, n, &total), "offsets_from_views");
  LM_CHECK_VALUE(large || total <= uint64_t(INT32_MAX), "luminamoon.offsets_from_views: the strings hold ", total,
                 " bytes, more than int32 offsets can address; pass large=True for int64 offsets");
  Payloads p(buffers);
  Tensor offsets = empty_on(views, {n + 1}, large ? ScalarType::Long : ScalarType::Int);
  Tensor data = empty_on(views, {int64_t(total)}, ScalarType::Byte);
  uint8_t *dp = total ? mptr<uint8_t>(data) : nullptr;
  lm_exec e = cpu_exec();
  if (large)
    check(lm_views_to_offsets64(v, n, p.ptrs.data(), mptr<int64_t>(offsets), dp, &e), "offsets_from_views");
  else
    check(lm_views_to_offsets32(v, n, p.ptrs.data(), mptr<int32_t>(offsets), dp, &e), "offsets_from_views");
  return {offsets, data};
}

// ---- views-layout comparisons: decide on length + prefix before any payload access.

Tensor views_prefix_match_cpu(Tensor views_in, std::vector<Tensor> buffers, std::string prefix) {
  const Tensor &views = check_views("views_prefix_match", views_in, buffers);
  Tensor out = bool_out(views, views.size(0));
  Payloads p(buffers);
  lm_exec e = cpu_exec();
  raise_view_bounds(lm_views_prefix_match(views_ptr(views), views.size(0), p.get(),
                                          reinterpret_cast<const uint8_t *>(prefix.data()), prefix.size(),
                                          mptr<uint8_t>(out), &e),
                    "views_prefix_match", "views", views);
  return out;
}

Tensor views_equal_scalar_cpu(Tensor views_in, std::vector<Tensor> buffers, std::string s) {
  const Tensor &views = check_views("views_equal_scalar", views_in, buffers);
  Tensor out = bool_out(views, views.size(0));
  Payloads p(buffers);
  lm_exec e = cpu_exec();
  raise_view_bounds(lm_views_equal_scalar(views_ptr(views), views.size(0), p.get(),
                                          reinterpret_cast<const uint8_t *>(s.data()), s.size(), mptr<uint8_t>(out),
                                          &e),
                    "views_equal_scalar", "views", views);
  return out;
}

Tensor views_equal_cpu(Tensor va_in, std::vector<Tensor> ba, Tensor vb_in, std::vector<Tensor> bb) {
  const Tensor &va = check_views("views_equal", va_in, ba, "views_a");
  const Tensor &vb = check_views("views_equal", vb_in, bb, "views_b");
  LM_CHECK_VALUE(va.size(0) == vb.size(0), "luminamoon.views_equal: views_a and views_b must have the same "
                 "length, got ", va.size(0), " and ", vb.size(0));
  Tensor out = bool_out(va, va.size(0));
  Payloads pa(ba), pb(bb);
  lm_exec e = cpu_exec();
  lm_status s = lm_views_equal(views_ptr(va), pa.get(), views_ptr(vb), pb.get(), va.size(0), mptr<uint8_t>(out), &e);
  if (s == LM_ECORRUPT && lm_views_check_padding(views_ptr(va), size_t(va.size(0)), nullptr) != LM_OK)
    raise_padding("views_equal", "views_a", va);
  if (s == LM_ECORRUPT) raise_padding("views_equal", "views_b", vb);
  raise_view_bounds(s, "views_equal", "views_a or views_b", va);
  return out;
}

Tensor views_hash64_cpu(Tensor views_in, std::vector<Tensor> buffers, int64_t seed) {
  const Tensor &views = check_views("views_hash64", views_in, buffers);
  Tensor out = empty_on(views, {views.size(0)}, ScalarType::Long);
  Payloads p(buffers);
  lm_exec e = cpu_exec();
  raise_view_bounds(lm_views_hash64(views_ptr(views), views.size(0), p.get(), uint64_t(seed), mptr<uint64_t>(out), &e),
                    "views_hash64", "views", views);
  return out;
}

// The views where mask is true (no payload access): what StringTensor.mask and
// filter_by_prefix call on the CPU.  One counting pass over the mask, one
// branch-free copy (views[mask] in ATen is a nonzero + index_select, ~10x slower).
Tensor views_compact_cpu(Tensor views, Tensor mask) {
  LM_CHECK_TYPE(views.scalar_type() == ScalarType::Byte, "luminamoon.views_compact: views must be uint8, got ",
                dtype_name(views.scalar_type()));
  LM_CHECK_VALUE(views.dim() == 2 && views.size(1) == 16, "luminamoon.views_compact: views must have shape "
                 "[N, 16], got ", shape_of(views));
  LM_CHECK_VALUE(views.is_contiguous(), "luminamoon.views_compact: views must be contiguous");
  LM_CHECK_TYPE(mask.scalar_type() == ScalarType::Bool, "luminamoon.views_compact: mask must be bool, got ",
                dtype_name(mask.scalar_type()));
  LM_CHECK_VALUE(mask.dim() == 1 && mask.numel() == views.size(0), "luminamoon.views_compact: mask must have "
                 "shape [", views.size(0), "], got ", shape_of(mask));
  LM_CHECK_VALUE(same_device(mask, views), "luminamoon.views_compact: mask must be on ", device_name(views),
                 ", got ", device_name(mask));
  const Tensor mk = torch::stable::contiguous(mask);
  const int64_t n = views.size(0);
  const uint8_t *m = n ? cptr<uint8_t>(mk) : nullptr;
  const size_t kept = lm_mask_count(m, size_t(n));
  Tensor out = empty_on(views, {int64_t(kept) + 1, 16}, ScalarType::Byte);
  size_t written = 0;
  lm_status s = lm_views_compact(views_ptr(views), size_t(n), m, mptr<lm_string_view>(out), kept + 1, &written);
  LM_CHECK_VALUE(s != LM_ERANGE && written == kept, "luminamoon.views_compact: mask changed while the op ran "
                 "(another thread wrote into it)");
  check(s, "views_compact");
  return torch::stable::narrow(out, 0, 0, int64_t(kept));
}

// int64 [N, max_len]: 1 where column < lengths[i], else 0 (the attention mask of
// pad_bytes' output).  A row is two fills.
Tensor attention_mask_cpu(Tensor lengths, int64_t max_len) {
  LM_CHECK_TYPE(lengths.scalar_type() == ScalarType::Long, "luminamoon.attention_mask: lengths must be int64, got ",
                dtype_name(lengths.scalar_type()));
  LM_CHECK_VALUE(lengths.dim() == 1, "luminamoon.attention_mask: lengths must be 1-D, got shape ", shape_of(lengths));
  check_matrix_size("attention_mask", lengths.numel(), max_len);
  const Tensor len = torch::stable::contiguous(lengths);
  const int64_t n = len.numel();
  Tensor out = empty_on(len, {n, max_len}, ScalarType::Long);
  if (n == 0 || max_len == 0) return out;
  const int64_t *l = cptr<int64_t>(len);
  int64_t *o = mptr<int64_t>(out);
  torch::stable::parallel_for(0, n, 256, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; i++) {
      int64_t k = std::min(std::max(l[i], int64_t(0)), max_len);
      std::fill(o + i * max_len, o + i * max_len + k, int64_t(1));
      std::fill(o + i * max_len + k, o + (i + 1) * max_len, int64_t(0));
    }
  });
  return out;
}

}  // namespace
}  // namespace luminamoon

STABLE_TORCH_LIBRARY_IMPL(luminamoon, CPU, m) {
  using namespace luminamoon;
  m.impl("prefix_match", TORCH_BOX(&prefix_match_cpu));
  m.impl("equal", TORCH_BOX(&equal_cpu));
  m.impl("equal_scalar", TORCH_BOX(&equal_scalar_cpu));
  m.impl("hash64", TORCH_BOX(&hash64_cpu));
  m.impl("pad_bytes", TORCH_BOX(&pad_bytes_cpu));
  m.impl("attention_mask", TORCH_BOX(&attention_mask_cpu));
  m.impl("gather", TORCH_BOX(&gather_cpu));
  m.impl("compact", TORCH_BOX(&compact_cpu));
  m.impl("views_from_offsets", TORCH_BOX(&views_from_offsets_cpu));
  m.impl("offsets_from_views", TORCH_BOX(&offsets_from_views_cpu));
  m.impl("views_prefix_match", TORCH_BOX(&views_prefix_match_cpu));
  m.impl("views_equal_scalar", TORCH_BOX(&views_equal_scalar_cpu));
  m.impl("views_equal", TORCH_BOX(&views_equal_cpu));
  m.impl("views_hash64", TORCH_BOX(&views_hash64_cpu));
  m.impl("views_compact", TORCH_BOX(&views_compact_cpu));
}
