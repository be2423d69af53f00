// The CPU kernels of the torch.ops.luminamoon operators: NAME_cpu for the operator NAME, registered
// at the end of this file.  Schemas: torch_ops/schema.cpp; CUDA kernels: ops_cuda.cu (NAME_cuda);
// fake kernels: python/luminamoon/ops.py.  minhash has its kernels in minhash.cpp / minhash_cuda.cu.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>

#include "common.h"

namespace luminamoon {

lm_exec cpu_exec() {
  lm_exec e;
  e.num_threads = at::get_num_threads();
  e.min_items_per_thread = 0;
  return e;
}

at::Tensor check_strings(const char *op, const at::Tensor &offsets, const at::Tensor &data, const char *on,
                         const char *dn) {
  TORCH_CHECK_TYPE(offsets.scalar_type() == at::kInt || offsets.scalar_type() == at::kLong,
                   "luminamoon.", op, ": ", on, " must be an int32 or int64 tensor, got ", offsets.scalar_type());
  TORCH_CHECK_TYPE(data.scalar_type() == at::kByte, "luminamoon.", op, ": ", dn,
                   " must be a uint8 tensor, got ", data.scalar_type());
  TORCH_CHECK_VALUE(offsets.dim() == 1 && offsets.numel() >= 1, "luminamoon.", op, ": ", on,
                    " must be 1-D with N+1 >= 1 entries, got shape ", offsets.sizes());
  TORCH_CHECK_VALUE(data.dim() == 1, "luminamoon.", op, ": ", dn, " must be 1-D, got shape ", data.sizes());
  TORCH_CHECK_VALUE(offsets.is_contiguous(), "luminamoon.", op, ": ", on, " must be contiguous");
  TORCH_CHECK_VALUE(data.is_contiguous(), "luminamoon.", op, ": ", dn, " must be contiguous");
  TORCH_CHECK_VALUE(offsets.device() == data.device(), "luminamoon.", op, ": ", on, " and ", dn,
                    " must be on the same device, got ", offsets.device(), " and ", data.device());
  if (!offsets.is_cpu()) return offsets;
  // One snapshot, checked and then used by the kernel: the caller's tensor may be
  // written by another thread while the op runs with the GIL released.
  at::Tensor snap = offsets.clone();
  const size_t n = size_t(snap.numel() - 1), len = size_t(data.numel());
  lm_status s = snap.scalar_type() == at::kInt ? lm_offsets32_validate(snap.data_ptr<int32_t>(), n, len)
                                               : lm_offsets64_validate(snap.data_ptr<int64_t>(), n, len);
  TORCH_CHECK_VALUE(s != LM_EINVAL, "luminamoon.", op, ": ", on, " must be non-negative and non-decreasing");
  TORCH_CHECK_VALUE(s != LM_ERANGE, "luminamoon.", op, ": ", on, " point past the end of ", dn, " (",
                    dn, " has ", len, " bytes)");
  return snap;
}

std::vector<size_t> buffer_sizes(const at::TensorList buffers) {
  std::vector<size_t> s;
  s.reserve(buffers.size());
  for (const auto &b : buffers) s.push_back(size_t(b.numel()));
  return s;
}

std::vector<const uint8_t *> buffer_ptrs(const at::TensorList buffers) {
  std::vector<const uint8_t *> p;
  p.reserve(buffers.size());
  for (const auto &b : buffers) p.push_back(b.numel() ? b.data_ptr<uint8_t>() : nullptr);
  return p;
}

at::Tensor check_views(const char *op, const at::Tensor &views, const at::TensorList buffers, const char *vn) {
  TORCH_CHECK_TYPE(views.scalar_type() == at::kByte, "luminamoon.", op, ": ", vn, " must be uint8, got ",
                   views.scalar_type());
  TORCH_CHECK_VALUE(views.dim() == 2 && views.size(1) == 16, "luminamoon.", op, ": ", vn,
                    " must have shape [N, 16], got ", views.sizes());
  TORCH_CHECK_VALUE(views.is_cpu(), "luminamoon.", op, ": ", vn, " must be on the CPU (the views layout is CPU-only)");
  TORCH_CHECK_VALUE(views.is_contiguous(), "luminamoon.", op, ": ", vn, " must be contiguous");
  for (size_t i = 0; i < buffers.size(); i++) {
    const auto &b = buffers[i];
    TORCH_CHECK_TYPE(b.scalar_type() == at::kByte, "luminamoon.", op, ": buffers[", i, "] must be uint8");
    TORCH_CHECK_VALUE(b.dim() == 1 && b.is_cpu() && b.is_contiguous(), "luminamoon.", op, ": buffers[", i,
                      "] must be a contiguous 1-D CPU tensor");
  }
  TORCH_CHECK_VALUE(buffers.size() <= UINT32_MAX, "luminamoon.", op, ": too many buffers");
  // The equality / hash kernels check the inline padding in their first pass over the
  // views (LM_ECORRUPT: raise_view_bounds names the view; the prefix match never reads
  // padding, so its answer cannot depend on it), and read each view they dereference
  // once and re-check it, so a racing writer cannot make them read out of bounds: no copy
  // of the whole views tensor is needed.
  return views;
}

[[noreturn]] void raise_padding(const char *op, const char *vn, const at::Tensor &views) {
  size_t bad = 0;
  lm_views_check_padding(views_ptr(views), size_t(views.size(0)), &bad);
  TORCH_CHECK_VALUE(false, "luminamoon.", op, ": ", vn, "[", bad, "] is an inline view (length <= 12) with "
                    "non-zero padding bytes after the string; Arrow string views must be zero-padded");
}

at::Tensor check_views_bounds(const char *op, const at::Tensor &views_in, const at::TensorList buffers,
                              const char *vn) {
  check_views(op, views_in, buffers, vn);  // shapes and types
  // One snapshot, checked and then used by the kernel (see check_strings): these ops read
  // every payload anyway, so the copy of the views costs little next to them.
  at::Tensor snap = views_in.clone();
  if (lm_views_check_padding(views_ptr(snap), size_t(snap.size(0)), nullptr) != LM_OK) raise_padding(op, vn, snap);
  auto sizes = buffer_sizes(buffers);
  lm_status s = lm_views_check_bounds(views_ptr(snap), size_t(snap.size(0)), sizes.data(), uint32_t(sizes.size()));
  TORCH_CHECK_VALUE(s == LM_OK, "luminamoon.", op, ": ", vn, " holds a view outside its payload buffer "
                    "(bad buffer index, offset or length)");
  return snap;
}

void raise_view_bounds(lm_status s, const char *op, const char *vn, const at::Tensor &views) {
  if (s == LM_ECORRUPT) raise_padding(op, vn, views);
  TORCH_CHECK_VALUE(s != LM_ERANGE, "luminamoon.", op, ": ", vn, " holds a view outside its payload buffer "
                    "(bad buffer index, offset or length)");
  check(s, op);
}

void check_attention_mask_args(const at::Tensor &lengths, int64_t max_len) {
  TORCH_CHECK_TYPE(lengths.scalar_type() == at::kLong, "luminamoon.attention_mask: lengths must be int64, got ",
                   lengths.scalar_type());
  TORCH_CHECK_VALUE(lengths.dim() == 1, "luminamoon.attention_mask: lengths must be 1-D, got shape ", lengths.sizes());
  check_matrix_size("attention_mask", lengths.numel(), max_len);
}

at::Tensor attention_mask_aten(const at::Tensor &lengths, int64_t max_len) {
  check_attention_mask_args(lengths, max_len);
  return at::arange(max_len, lengths.options()).lt(lengths.unsqueeze(1)).to(at::kLong);
}

namespace {

// Shapes, dtypes, devices and contiguity of (offsets, data), as check_strings, but no
// snapshot and no validation pass: the element-wise kernels below (the lm_*_checked
// forms) check each pair of offsets as they read it, once, and refuse bad offsets
// (LM_EINVAL); raise_bad_offsets then names the problem.  The snapshot and the separate
// pass cost more than the op itself on short strings (words: 2 of ~3 ns a string).
void check_strings_light(const char *op, const at::Tensor &offsets, const at::Tensor &data,
                         const char *on = "offsets", const char *dn = "data") {
  TORCH_CHECK_TYPE(offsets.scalar_type() == at::kInt || offsets.scalar_type() == at::kLong,
                   "luminamoon.", op, ": ", on, " must be an int32 or int64 tensor, got ", offsets.scalar_type());
  TORCH_CHECK_TYPE(data.scalar_type() == at::kByte, "luminamoon.", op, ": ", dn,
                   " must be a uint8 tensor, got ", data.scalar_type());
  TORCH_CHECK_VALUE(offsets.dim() == 1 && offsets.numel() >= 1, "luminamoon.", op, ": ", on,
                    " must be 1-D with N+1 >= 1 entries, got shape ", offsets.sizes());
  TORCH_CHECK_VALUE(data.dim() == 1, "luminamoon.", op, ": ", dn, " must be 1-D, got shape ", data.sizes());
  TORCH_CHECK_VALUE(offsets.is_contiguous(), "luminamoon.", op, ": ", on, " must be contiguous");
  TORCH_CHECK_VALUE(data.is_contiguous(), "luminamoon.", op, ": ", dn, " must be contiguous");
  TORCH_CHECK_VALUE(offsets.device() == data.device(), "luminamoon.", op, ": ", on, " and ", dn,
                    " must be on the same device, got ", offsets.device(), " and ", data.device());
}

// A kernel refused the offsets (LM_EINVAL): the message check_strings gives for them.
[[noreturn]] void raise_bad_offsets(const char *op, const at::Tensor &offsets, const at::Tensor &data,
                                    const char *on = "offsets", const char *dn = "data") {
  check_strings(op, offsets, data, on, dn);  // raises for offsets that are still bad
  TORCH_CHECK_VALUE(false, "luminamoon.", op, ": ", on, " changed while the op ran (another thread wrote into "
                    "it) and were not non-decreasing offsets inside ", dn, " at that moment");
}

const uint8_t *bytes_ptr(const at::Tensor &data) { return data.numel() ? data.data_ptr<uint8_t>() : nullptr; }

template <typename Fn32, typename Fn64>
void dispatch_offsets(const at::Tensor &offsets, Fn32 f32, Fn64 f64) {
  if (offsets.scalar_type() == at::kInt) f32(offsets.data_ptr<int32_t>());
  else f64(offsets.data_ptr<int64_t>());
}

at::Tensor prefix_match_cpu(const at::Tensor &offsets, const at::Tensor &data, c10::string_view prefix) {
  check_strings_light("prefix_match", offsets, data);
  const int64_t n = offsets.numel() - 1;
  auto out = at::empty({n}, offsets.options().dtype(at::kBool));
  const auto *p = reinterpret_cast<const uint8_t *>(prefix.data());
  lm_exec e = cpu_exec();
  auto *o = reinterpret_cast<uint8_t *>(out.data_ptr<bool>());
  const uint8_t *d = bytes_ptr(data);
  const size_t len = size_t(data.numel());
  lm_status s = offsets.scalar_type() == at::kInt
                    ? lm_o32_prefix_match_checked(offsets.data_ptr<int32_t>(), n, d, len, p, prefix.size(), o, &e)
                    : lm_o64_prefix_match_checked(offsets.data_ptr<int64_t>(), n, d, len, p, prefix.size(), o, &e);
  if (s == LM_EINVAL) raise_bad_offsets("prefix_match", offsets, data);
  check(s, "prefix_match");
  return out;
}

at::Tensor equal_scalar_cpu(const at::Tensor &offsets, const at::Tensor &data, c10::string_view str) {
  check_strings_light("equal_scalar", offsets, data);
  const int64_t n = offsets.numel() - 1;
  auto out = at::empty({n}, offsets.options().dtype(at::kBool));
  const auto *p = reinterpret_cast<const uint8_t *>(str.data());
  lm_exec e = cpu_exec();
  auto *o = reinterpret_cast<uint8_t *>(out.data_ptr<bool>());
  const uint8_t *d = bytes_ptr(data);
  const size_t len = size_t(data.numel());
  lm_status s = offsets.scalar_type() == at::kInt
                    ? lm_o32_equal_scalar_checked(offsets.data_ptr<int32_t>(), n, d, len, p, str.size(), o, &e)
                    : lm_o64_equal_scalar_checked(offsets.data_ptr<int64_t>(), n, d, len, p, str.size(), o, &e);
  if (s == LM_EINVAL) raise_bad_offsets("equal_scalar", offsets, data);
  check(s, "equal_scalar");
  return out;
}

at::Tensor equal_cpu(const at::Tensor &oa, const at::Tensor &da, const at::Tensor &ob, const at::Tensor &db) {
  check_strings_light("equal", oa, da, "offsets_a", "data_a");
  check_strings_light("equal", ob, db, "offsets_b", "data_b");
  TORCH_CHECK_VALUE(oa.numel() == ob.numel(), "luminamoon.equal: offsets_a and offsets_b must describe the same "
                    "number of strings, got ", oa.numel() - 1, " and ", ob.numel() - 1);
  TORCH_CHECK_TYPE(oa.scalar_type() == ob.scalar_type(), "luminamoon.equal: offsets_a and offsets_b must have "
                   "the same dtype, got ", oa.scalar_type(), " and ", ob.scalar_type());
  const int64_t n = oa.numel() - 1;
  auto out = at::empty({n}, oa.options().dtype(at::kBool));
  lm_exec e = cpu_exec();
  auto *o = reinterpret_cast<uint8_t *>(out.data_ptr<bool>());
  const size_t la = size_t(da.numel()), lb = size_t(db.numel());
  lm_status s =
      oa.scalar_type() == at::kInt
          ? lm_o32_equal_checked(oa.data_ptr<int32_t>(), bytes_ptr(da), la, ob.data_ptr<int32_t>(), bytes_ptr(db), lb,
                                 n, o, &e)
          : lm_o64_equal_checked(oa.data_ptr<int64_t>(), bytes_ptr(da), la, ob.data_ptr<int64_t>(), bytes_ptr(db), lb,
                                 n, o, &e);
  if (s == LM_EINVAL) {
    check_strings("equal", oa, da, "offsets_a", "data_a");
    raise_bad_offsets("equal", ob, db, "offsets_b", "data_b");
  }
  check(s, "equal");
  return out;
}

at::Tensor hash64_cpu(const at::Tensor &offsets, const at::Tensor &data, int64_t seed) {
  check_strings_light("hash64", offsets, data);
  const int64_t n = offsets.numel() - 1;
  auto out = at::empty({n}, offsets.options().dtype(at::kLong));
  lm_exec e = cpu_exec();
  auto *o = reinterpret_cast<uint64_t *>(out.data_ptr<int64_t>());
  const uint8_t *d = bytes_ptr(data);
  const size_t len = size_t(data.numel());
  lm_status s = offsets.scalar_type() == at::kInt
                    ? lm_o32_hash64_checked(offsets.data_ptr<int32_t>(), n, d, len, uint64_t(seed), o, &e)
                    : lm_o64_hash64_checked(offsets.data_ptr<int64_t>(), n, d, len, uint64_t(seed), o, &e);
  if (s == LM_EINVAL) raise_bad_offsets("hash64", offsets, data);
  check(s, "hash64");
  return out;
}

std::tuple<at::Tensor, at::Tensor> pad_bytes_cpu(const at::Tensor &offsets_in, const at::Tensor &data, int64_t max_len,
                                                 int64_t pad_id, int64_t bos_id, int64_t eos_id) {
  const at::Tensor offsets = check_strings("pad_bytes", offsets_in, data);
  const int64_t n = offsets.numel() - 1;
  check_matrix_size("pad_bytes", n, max_len);
  auto tokens = at::empty({n, max_len}, offsets.options().dtype(at::kLong));
  auto lengths = at::empty({n}, offsets.options().dtype(at::kLong));
  lm_exec e = cpu_exec();
  const uint8_t *d = data.data_ptr<uint8_t>();
  int64_t *t = tokens.data_ptr<int64_t>(), *l = lengths.data_ptr<int64_t>();
  dispatch_offsets(
      offsets,
      [&](const int32_t *off) { check(lm_o32_pad_bytes(off, n, d, max_len, pad_id, bos_id, eos_id, t, l, &e), "pad_bytes"); },
      [&](const int64_t *off) { check(lm_o64_pad_bytes(off, n, d, max_len, pad_id, bos_id, eos_id, t, l, &e), "pad_bytes"); });
  return {tokens, lengths};
}

std::tuple<at::Tensor, at::Tensor> gather_cpu(const at::Tensor &offsets_in, const at::Tensor &data,
                                              const at::Tensor &index) {
  const at::Tensor offsets = check_strings("gather", offsets_in, data);
  TORCH_CHECK_TYPE(index.scalar_type() == at::kLong, "luminamoon.gather: index must be int64, got ",
                   index.scalar_type());
  TORCH_CHECK_VALUE(index.dim() == 1, "luminamoon.gather: index must be 1-D, got shape ", index.sizes());
  TORCH_CHECK_VALUE(index.device() == offsets.device(), "luminamoon.gather: index must be on ", offsets.device(),
                    ", got ", index.device());
  auto idx = index.clone(at::MemoryFormat::Contiguous);  // a snapshot: checked below, then used
  const int64_t n = offsets.numel() - 1, m = idx.numel();
  auto out_off = at::empty({m + 1}, offsets.options());
  const int64_t *ip = idx.data_ptr<int64_t>();
  for (int64_t k = 0; k < m; k++)
    TORCH_CHECK_INDEX(ip[k] >= 0 && ip[k] < n, "luminamoon.gather: index[", k, "] = ", ip[k],
                      " is out of range for ", n, " strings");
  lm_exec e = cpu_exec();
  at::Tensor out_data;
  const uint8_t *d = data.data_ptr<uint8_t>();
  if (offsets.scalar_type() == at::kInt) {
    auto *oo = out_off.data_ptr<int32_t>();
    lm_status s = lm_o32_gather_offsets(offsets.data_ptr<int32_t>(), n, ip, m, oo);
    TORCH_CHECK_VALUE(s != LM_EOVERFLOW, "luminamoon.gather: the gathered strings exceed 2 GiB; "
                      "pass int64 offsets for payloads that large");
    check(s, "gather");
    out_data = at::empty({int64_t(oo[m])}, data.options());
    check(lm_o32_gather_data(offsets.data_ptr<int32_t>(), d, ip, m, oo, out_data.data_ptr<uint8_t>(), &e), "gather");
  } else {
    auto *oo = out_off.data_ptr<int64_t>();
    check(lm_o64_gather_offsets(offsets.data_ptr<int64_t>(), n, ip, m, oo), "gather");
    out_data = at::empty({oo[m]}, data.options());
    check(lm_o64_gather_data(offsets.data_ptr<int64_t>(), d, ip, m, oo, out_data.data_ptr<uint8_t>(), &e), "gather");
  }
  return {out_off, out_data};
}

std::tuple<at::Tensor, at::Tensor> compact_cpu(const at::Tensor &offsets_in, const at::Tensor &data,
                                               const at::Tensor &mask) {
  const at::Tensor offsets = check_strings("compact", offsets_in, data);
  TORCH_CHECK_TYPE(mask.scalar_type() == at::kBool, "luminamoon.compact: mask must be bool, got ", mask.scalar_type());
  TORCH_CHECK_VALUE(mask.dim() == 1 && mask.numel() == offsets.numel() - 1,
                    "luminamoon.compact: mask must have shape [", offsets.numel() - 1, "], got ", mask.sizes());
  TORCH_CHECK_VALUE(mask.device() == offsets.device(), "luminamoon.compact: mask must be on ", offsets.device(),
                    ", got ", mask.device());
  auto mk = mask.clone(at::MemoryFormat::Contiguous);  // a snapshot: counted, then used for the copy
  const int64_t n = offsets.numel() - 1;
  const auto *mp = reinterpret_cast<const uint8_t *>(mk.data_ptr<bool>());
  size_t kn = 0;
  uint64_t kb = 0;
  const uint8_t *d = data.data_ptr<uint8_t>();
  at::Tensor out_off, out_data;
  if (offsets.scalar_type() == at::kInt) {
    const int32_t *off = offsets.data_ptr<int32_t>();
    check(lm_o32_compact_count(off, n, mp, &kn, &kb), "compact");
    out_off = at::empty({int64_t(kn) + 1}, offsets.options());
    out_data = at::empty({int64_t(kb)}, data.options());
    check(lm_o32_compact(off, n, d, mp, out_off.data_ptr<int32_t>(), out_data.data_ptr<uint8_t>()), "compact");
  } else {
    const int64_t *off = offsets.data_ptr<int64_t>();
    check(lm_o64_compact_count(off, n, mp, &kn, &kb), "compact");
    out_off = at::empty({int64_t(kn) + 1}, offsets.options());
    out_data = at::empty({int64_t(kb)}, data.options());
    check(lm_o64_compact(off, n, d, mp, out_off.data_ptr<int64_t>(), out_data.data_ptr<uint8_t>()), "compact");
  }
  return {out_off, out_data};
}

at::Tensor views_from_offsets_cpu(const at::Tensor &offsets_in, const at::Tensor &data) {
  const at::Tensor offsets = check_strings("views_from_offsets", offsets_in, data);
  TORCH_CHECK_VALUE(offsets.is_cpu(), "luminamoon.views_from_offsets: offsets must be on the CPU");
  const int64_t n = offsets.numel() - 1;
  auto views = at::empty({n, 16}, data.options());
  auto *v = reinterpret_cast<lm_string_view *>(views.data_ptr<uint8_t>());
  lm_exec e = cpu_exec();
  const uint8_t *d = data.data_ptr<uint8_t>();
  const size_t len = size_t(data.numel());
  dispatch_offsets(
      offsets, [&](const int32_t *off) { check(lm_views_from_offsets32(off, n, d, len, 0, v, &e), "views_from_offsets"); },
      [&](const int64_t *off) { check(lm_views_from_offsets64(off, n, d, len, 0, v, &e), "views_from_offsets"); });
  return views;
}

std::tuple<at::Tensor, at::Tensor> offsets_from_views_cpu(const at::Tensor &views_in, at::TensorList buffers,
                                                          bool large) {
  const at::Tensor views = check_views_bounds("offsets_from_views", views_in, buffers);
  const int64_t n = views.size(0);
  const lm_string_view *v = views_ptr(views);
  uint64_t total = 0;
  check(lm_views_total_bytes(v, n, &total), "offsets_from_views");
  TORCH_CHECK_VALUE(large || total <= uint64_t(INT32_MAX), "luminamoon.offsets_from_views: the strings hold ", total,
                    " bytes, more than int32 offsets can address; pass large=True for int64 offsets");
  auto ptrs = buffer_ptrs(buffers);
  auto offsets = at::empty({n + 1}, views.options().dtype(large ? at::kLong : at::kInt));
  auto data = at::empty({int64_t(total)}, views.options());
  lm_exec e = cpu_exec();
  if (large)
    check(lm_views_to_offsets64(v, n, ptrs.data(), offsets.data_ptr<int64_t>(), data.data_ptr<uint8_t>(), &e),
          "offsets_from_views");
  else
    check(lm_views_to_offsets32(v, n, ptrs.data(), offsets.data_ptr<int32_t>(), data.data_ptr<uint8_t>(), &e),
          "offsets_from_views");
  return {offsets, data};
}

// ---- views-layout comparisons: decide on length + prefix before any payload access.

at::Tensor views_prefix_match_cpu(const at::Tensor &views_in, at::TensorList buffers, c10::string_view prefix) {
  const at::Tensor views = check_views("views_prefix_match", views_in, buffers);
  auto out = at::empty({views.size(0)}, views.options().dtype(at::kBool));
  Payloads p(buffers);
  lm_exec e = cpu_exec();
  raise_view_bounds(lm_views_prefix_match(views_ptr(views), views.size(0), p.get(),
                                          reinterpret_cast<const uint8_t *>(prefix.data()), prefix.size(),
                                          reinterpret_cast<uint8_t *>(out.data_ptr<bool>()), &e),
                    "views_prefix_match", "views", views);
  return out;
}

at::Tensor views_equal_scalar_cpu(const at::Tensor &views_in, at::TensorList buffers, c10::string_view s) {
  const at::Tensor views = check_views("views_equal_scalar", views_in, buffers);
  auto out = at::empty({views.size(0)}, views.options().dtype(at::kBool));
  Payloads p(buffers);
  lm_exec e = cpu_exec();
  raise_view_bounds(lm_views_equal_scalar(views_ptr(views), views.size(0), p.get(),
                                          reinterpret_cast<const uint8_t *>(s.data()), s.size(),
                                          reinterpret_cast<uint8_t *>(out.data_ptr<bool>()), &e),
                    "views_equal_scalar", "views", views);
  return out;
}

at::Tensor views_equal_cpu(const at::Tensor &va_in, at::TensorList ba, const at::Tensor &vb_in, at::TensorList bb) {
  const at::Tensor va = check_views("views_equal", va_in, ba, "views_a");
  const at::Tensor vb = check_views("views_equal", vb_in, bb, "views_b");
  TORCH_CHECK_VALUE(va.size(0) == vb.size(0), "luminamoon.views_equal: views_a and views_b must have the same "
                    "length, got ", va.size(0), " and ", vb.size(0));
  auto out = at::empty({va.size(0)}, va.options().dtype(at::kBool));
  Payloads pa(ba), pb(bb);
  lm_exec e = cpu_exec();
  lm_status s = lm_views_equal(views_ptr(va), pa.get(), views_ptr(vb), pb.get(), va.size(0),
                               reinterpret_cast<uint8_t *>(out.data_ptr<bool>()), &e);
  if (s == LM_ECORRUPT && lm_views_check_padding(views_ptr(va), size_t(va.size(0)), nullptr) != LM_OK)
    raise_padding("views_equal", "views_a", va);
  if (s == LM_ECORRUPT) raise_padding("views_equal", "views_b", vb);
  raise_view_bounds(s, "views_equal", "views_a or views_b", va);
  return out;
}

at::Tensor views_hash64_cpu(const at::Tensor &views_in, at::TensorList buffers, int64_t seed) {
  const at::Tensor views = check_views("views_hash64", views_in, buffers);
  auto out = at::empty({views.size(0)}, views.options().dtype(at::kLong));
  Payloads p(buffers);
  lm_exec e = cpu_exec();
  raise_view_bounds(lm_views_hash64(views_ptr(views), views.size(0), p.get(), uint64_t(seed),
                                    reinterpret_cast<uint64_t *>(out.data_ptr<int64_t>()), &e),
                    "views_hash64", "views", views);
  return out;
}

// The views where mask is true (no payload access): what StringTensor.mask and
// filter_by_prefix call on the CPU.  One counting pass over the mask, one
// branch-free copy (views[mask] in ATen is a nonzero + index_select, ~10x slower).
at::Tensor views_compact_cpu(const at::Tensor &views, const at::Tensor &mask) {
  TORCH_CHECK_TYPE(views.scalar_type() == at::kByte, "luminamoon.views_compact: views must be uint8, got ",
                   views.scalar_type());
  TORCH_CHECK_VALUE(views.dim() == 2 && views.size(1) == 16, "luminamoon.views_compact: views must have shape "
                    "[N, 16], got ", views.sizes());
  TORCH_CHECK_VALUE(views.is_contiguous(), "luminamoon.views_compact: views must be contiguous");
  TORCH_CHECK_TYPE(mask.scalar_type() == at::kBool, "luminamoon.views_compact: mask must be bool, got ",
                   mask.scalar_type());
  TORCH_CHECK_VALUE(mask.dim() == 1 && mask.numel() == views.size(0), "luminamoon.views_compact: mask must have "
                    "shape [", views.size(0), "], got ", mask.sizes());
  TORCH_CHECK_VALUE(mask.device() == views.device(), "luminamoon.views_compact: mask must be on ", views.device(),
                    ", got ", mask.device());
  const at::Tensor mk = mask.contiguous();
  const int64_t n = views.size(0);
  const auto *m = reinterpret_cast<const uint8_t *>(mk.data_ptr<bool>());
  const size_t kept = lm_mask_count(m, size_t(n));
  auto out = at::empty({int64_t(kept) + 1, 16}, views.options());
  size_t written = 0;
  lm_status s = lm_views_compact(views_ptr(views), size_t(n), m,
                                 reinterpret_cast<lm_string_view *>(out.data_ptr<uint8_t>()), kept + 1, &written);
  TORCH_CHECK_VALUE(s != LM_ERANGE && written == kept, "luminamoon.views_compact: mask changed while the op ran "
                    "(another thread wrote into it)");
  check(s, "views_compact");
  return out.narrow(0, 0, int64_t(kept));
}

// int64 [N, max_len]: 1 where column < lengths[i], else 0 (the attention mask of
// pad_bytes' output).  A row is two fills.
at::Tensor attention_mask_cpu(const at::Tensor &lengths, int64_t max_len) {
  check_attention_mask_args(lengths, max_len);
  auto len = lengths.contiguous();
  const int64_t n = len.numel();
  auto out = at::empty({n, max_len}, len.options());
  const int64_t *l = len.data_ptr<int64_t>();
  int64_t *o = out.data_ptr<int64_t>();
  at::parallel_for(0, n, 256, [&](int64_t b, int64_t e) {
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

TORCH_LIBRARY_IMPL(luminamoon, CPU, m) {
  using namespace luminamoon;
  m.impl("prefix_match", &prefix_match_cpu);
  m.impl("equal", &equal_cpu);
  m.impl("equal_scalar", &equal_scalar_cpu);
  m.impl("hash64", &hash64_cpu);
  m.impl("pad_bytes", &pad_bytes_cpu);
  m.impl("attention_mask", &attention_mask_cpu);
  m.impl("gather", &gather_cpu);
  m.impl("compact", &compact_cpu);
  m.impl("views_from_offsets", &views_from_offsets_cpu);
  m.impl("offsets_from_views", &offsets_from_views_cpu);
  m.impl("views_prefix_match", &views_prefix_match_cpu);
  m.impl("views_equal_scalar", &views_equal_scalar_cpu);
  m.impl("views_equal", &views_equal_cpu);
  m.impl("views_hash64", &views_hash64_cpu);
  m.impl("views_compact", &views_compact_cpu);
}

// attention_mask on devices with no kernel of their own (CPU: attention_mask_cpu, CUDA:
// attention_mask_cuda): the same result from ATen ops.
TORCH_LIBRARY_IMPL(luminamoon, CompositeExplicitAutograd, m) {
  m.impl("attention_mask", &luminamoon::attention_mask_aten);
}
