// TORCH_LIBRARY_IMPL(luminamoon, CUDA): the CUDA kernels NAME_cuda of the operators NAME whose
// schemas are in schema.cpp (CPU kernels: ops_cpu.cpp; minhash: minhash_cuda.cu).  Thin: check arguments, take pointers from tensors, call csrc/ (the C ABI of
// luminamoon_cuda.h) on torch's current stream, wrap results.  CPU and CUDA give identical results.
//
// Argument errors raise before any op kernel runs: wrong dtype (TypeError), wrong shape, not
// contiguous, mixed devices (ValueError), out-of-range gather index (IndexError).
// Synchronisation (the host waits for the device) happens only:
//   * once per op to validate the offsets: a one-pass check kernel (negative first offset,
//     decreasing offsets, last offset past the payload) and a 4-byte copy back, so that bad
//     offsets raise a ValueError as on the CPU.  Skipped while the stream is being captured
//     into a CUDA graph (a sync is illegal there); the kernels then still never read out of
//     bounds (they clamp every string into the payload), but bad offsets give unspecified values.
//   * gather and compact: once more, to read the output size (it depends on the data); gather
//     reads the bad-index flag in the same copy.
#include <ATen/ATen.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cstring>
#include <string>
#include <tuple>

#include "common.h"
#include "luminamoon_cuda.h"

namespace luminamoon {
namespace {

void cuda_check(cudaError_t e, const char *op) {
  TORCH_CHECK(e == cudaSuccess, "luminamoon.", op, ": CUDA error: ", cudaGetErrorString(e));
}

lm_cuda_strings strings_of(const at::Tensor &offsets, const at::Tensor &data) {
  lm_cuda_strings s;
  s.offsets = offsets.data_ptr();
  s.offset_bytes = offsets.scalar_type() == at::kInt ? 4 : 8;
  s.n = static_cast<size_t>(offsets.numel() - 1);
  s.data = data.numel() ? data.data_ptr<uint8_t>() : nullptr;
  s.data_len = static_cast<size_t>(data.numel());
  return s;
}

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream, &st) == cudaSuccess && st != cudaStreamCaptureStatusNone;
}

// The checks of check_strings (dtype, shape, contiguity, one device) plus: on a CUDA device, and
// the offsets' values (one check kernel + one 4-byte copy back: a synchronisation).
// `guard` is pointed at the tensors' device once the arguments are known to be fine.
lm_cuda_strings checked_strings(const char *op, const at::Tensor &offsets, const at::Tensor &data,
                                c10::cuda::OptionalCUDAGuard &guard, const char *on = "offsets",
                                const char *dn = "data") {
  check_strings(op, offsets, data, on, dn);
  TORCH_CHECK_VALUE(offsets.is_cuda(), "luminamoon.", op, ": ", on, " must be on a CUDA device, got ",
                    offsets.device());
  guard.set_device(offsets.device());
  lm_cuda_strings s = strings_of(offsets, data);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  if (capturing(stream)) return s;
  at::Tensor flag = at::empty({1}, offsets.options().dtype(at::kInt));
  cuda_check(lm_cuda_validate_offsets(s, flag.data_ptr<int32_t>(), stream), op);
  const int32_t f = flag.item<int32_t>();  // the synchronisation
  TORCH_CHECK_VALUE(!(f & (LM_CUDA_BAD_NEGATIVE | LM_CUDA_BAD_DECREASING)), "luminamoon.", op, ": ", on,
                    " must be non-negative and non-decreasing");
  TORCH_CHECK_VALUE(!(f & LM_CUDA_BAD_PAST_END), "luminamoon.", op, ": ", on, " point past the end of ", dn, " (",
                    dn, " has ", data.numel(), " bytes)");
  return s;
}

at::Tensor workspace(const at::Tensor &like, size_t bytes) {
  return at::empty({static_cast<int64_t>(bytes ? bytes : 1)}, like.options().dtype(at::kByte));
}

using match_fn = cudaError_t (*)(lm_cuda_strings, const uint8_t *, const uint8_t *, size_t, uint8_t *, cudaStream_t);

at::Tensor match_cuda(const char *op, const at::Tensor &offsets, const at::Tensor &data, const std::string &pat,
                      match_fn kernel) {
  c10::cuda::OptionalCUDAGuard guard;
  lm_cuda_strings s = checked_strings(op, offsets, data, guard);
  at::Tensor out = at::empty({static_cast<int64_t>(s.n)}, offsets.options().dtype(at::kBool));
  if (s.n == 0) return out;
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  const uint8_t *host = reinterpret_cast<const uint8_t *>(pat.data());
  at::Tensor dev;
  if (pat.size() > LM_CUDA_PATTERN_INLINE_MAX) {  // long patterns: pinned staging + async copy
    at::Tensor pinned = at::empty({static_cast<int64_t>(pat.size())}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
    std::memcpy(pinned.data_ptr<uint8_t>(), pat.data(), pat.size());
    dev = pinned.to(offsets.device(), /*non_blocking=*/true);
  }
  cuda_check(kernel(s, host, dev.defined() ? dev.data_ptr<uint8_t>() : nullptr, pat.size(),
                    reinterpret_cast<uint8_t *>(out.data_ptr<bool>()), stream),
             op);
  return out;
}

at::Tensor prefix_match_cuda(const at::Tensor &offsets, const at::Tensor &data, c10::string_view prefix) {
  return match_cuda("prefix_match", offsets, data, std::string(prefix), &lm_cuda_prefix_match);
}

at::Tensor equal_scalar_cuda(const at::Tensor &offsets, const at::Tensor &data, c10::string_view str) {
  return match_cuda("equal_scalar", offsets, data, std::string(str), &lm_cuda_equal_scalar);
}

at::Tensor equal_cuda(const at::Tensor &oa, const at::Tensor &da, const at::Tensor &ob, const at::Tensor &db) {
  c10::cuda::OptionalCUDAGuard guard;
  check_strings("equal", oa, da, "offsets_a", "data_a");
  check_strings("equal", ob, db, "offsets_b", "data_b");
  TORCH_CHECK_VALUE(oa.device() == ob.device(), "luminamoon.equal: offsets_a and offsets_b must be on the same device, got ",
                    oa.device(), " and ", ob.device());
  TORCH_CHECK_VALUE(oa.numel() == ob.numel(), "luminamoon.equal: offsets_a and offsets_b must describe the same number "
                    "of strings, got ", oa.numel() - 1, " and ", ob.numel() - 1);
  TORCH_CHECK_TYPE(oa.scalar_type() == ob.scalar_type(), "luminamoon.equal: offsets_a and offsets_b must have the same "
                   "dtype, got ", oa.scalar_type(), " and ", ob.scalar_type());
  lm_cuda_strings a = checked_strings("equal", oa, da, guard, "offsets_a", "data_a");
  lm_cuda_strings b = checked_strings("equal", ob, db, guard, "offsets_b", "data_b");
  at::Tensor out = at::empty({static_cast<int64_t>(a.n)}, oa.options().dtype(at::kBool));
  if (a.n == 0) return out;
  at::Tensor ws = workspace(oa, lm_cuda_equal_workspace_size(a.n));
  cuda_check(lm_cuda_equal(a, b, ws.data_ptr(), static_cast<size_t>(ws.numel()),
                           reinterpret_cast<uint8_t *>(out.data_ptr<bool>()), c10::cuda::getCurrentCUDAStream().stream()),
             "equal");
  return out;
}

at::Tensor hash64_cuda(const at::Tensor &offsets, const at::Tensor &data, int64_t seed) {
  c10::cuda::OptionalCUDAGuard guard;
  lm_cuda_strings s = checked_strings("hash64", offsets, data, guard);
  at::Tensor out = at::empty({static_cast<int64_t>(s.n)}, offsets.options().dtype(at::kLong));
  if (s.n == 0) return out;
  at::Tensor ws = workspace(offsets, lm_cuda_hash64_workspace_size(s));
  cuda_check(lm_cuda_hash64(s, static_cast<uint64_t>(seed), ws.data_ptr(), static_cast<size_t>(ws.numel()),
                            reinterpret_cast<uint64_t *>(out.data_ptr<int64_t>()), c10::cuda::getCurrentCUDAStream().stream()),
             "hash64");
  return out;
}

std::tuple<at::Tensor, at::Tensor> pad_bytes_cuda(const at::Tensor &offsets, const at::Tensor &data, int64_t max_len,
                                                  int64_t pad_id, int64_t bos_id, int64_t eos_id) {
  c10::cuda::OptionalCUDAGuard guard;
  TORCH_CHECK_VALUE(max_len >= 0, "luminamoon.pad_bytes: max_len must be >= 0, got ", max_len);
  lm_cuda_strings s = checked_strings("pad_bytes", offsets, data, guard);
  const int64_t n = static_cast<int64_t>(s.n);
  check_matrix_size("pad_bytes", n, max_len);
  at::Tensor tokens = at::empty({n, max_len}, offsets.options().dtype(at::kLong));
  at::Tensor lengths = at::empty({n}, offsets.options().dtype(at::kLong));
  if (n == 0) return {tokens, lengths};
  cuda_check(lm_cuda_pad_bytes(s, static_cast<size_t>(max_len), pad_id, bos_id, eos_id,
                               max_len ? tokens.data_ptr<int64_t>() : nullptr, lengths.data_ptr<int64_t>(),
                               c10::cuda::getCurrentCUDAStream().stream()),
             "pad_bytes");
  return {tokens, lengths};
}

// Output offsets (int64 from the kernels) in the input's dtype; checks the 2 GiB limit of int32.
at::Tensor offsets_like(const at::Tensor &offsets, at::Tensor out64, int64_t total, const char *op) {
  if (offsets.scalar_type() == at::kLong) return out64;
  TORCH_CHECK_VALUE(total <= INT32_MAX, "luminamoon.", op, ": the ", op == std::string("gather") ? "gathered" : "kept",
                    " strings exceed 2 GiB (", total, " bytes); use int64 offsets");
  return out64.to(at::kInt);
}

std::tuple<at::Tensor, at::Tensor> gather_cuda(const at::Tensor &offsets, const at::Tensor &data,
                                               const at::Tensor &index_in) {
  c10::cuda::OptionalCUDAGuard guard;
  TORCH_CHECK_TYPE(index_in.scalar_type() == at::kLong, "luminamoon.gather: index must be int64, got ",
                   index_in.scalar_type());
  TORCH_CHECK_VALUE(index_in.dim() == 1, "luminamoon.gather: index must be 1-D, got shape ", index_in.sizes());
  TORCH_CHECK_VALUE(index_in.device() == offsets.device(), "luminamoon.gather: index must be on ", offsets.device(),
                    ", got ", index_in.device());
  lm_cuda_strings s = checked_strings("gather", offsets, data, guard);
  const at::Tensor index = index_in.contiguous();
  const size_t m = static_cast<size_t>(index.numel());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  at::Tensor out64 = at::empty({static_cast<int64_t>(m) + 1}, offsets.options().dtype(at::kLong));
  at::Tensor bad = at::empty({1}, offsets.options().dtype(at::kInt));
  at::Tensor ws = workspace(offsets, lm_cuda_gather_offsets_workspace_size(m));
  cuda_check(lm_cuda_gather_offsets(s, m ? index.data_ptr<int64_t>() : nullptr, m, out64.data_ptr<int64_t>(),
                                    bad.data_ptr<int32_t>(), ws.data_ptr(), static_cast<size_t>(ws.numel()), stream),
             "gather");
  // One copy back (the synchronisation): the total bytes and the bad-index flag.
  at::Tensor back = at::cat({out64.narrow(0, static_cast<int64_t>(m), 1), bad.to(at::kLong)}).cpu();
  const int64_t total = back.data_ptr<int64_t>()[0];
  TORCH_CHECK_INDEX(back.data_ptr<int64_t>()[1] == 0, "luminamoon.gather: index holds a value outside [0, ", s.n,
                    ") (negative indices are not allowed)");
  at::Tensor out_offsets = offsets_like(offsets, out64, total, "gather");
  at::Tensor out_data = at::empty({total}, data.options());
  cuda_check(lm_cuda_gather_data(s, m ? index.data_ptr<int64_t>() : nullptr, m, out64.data_ptr<int64_t>(),
                                 static_cast<uint64_t>(total), total ? out_data.data_ptr<uint8_t>() : nullptr, stream),
             "gather");
  return {out_offsets, out_data};
}

std::tuple<at::Tensor, at::Tensor> compact_cuda(const at::Tensor &offsets, const at::Tensor &data,
                                                const at::Tensor &mask_in) {
  c10::cuda::OptionalCUDAGuard guard;
  TORCH_CHECK_TYPE(mask_in.scalar_type() == at::kBool, "luminamoon.compact: mask must be bool, got ",
                   mask_in.scalar_type());
  TORCH_CHECK_VALUE(mask_in.dim() == 1 && mask_in.numel() == offsets.numel() - 1,
                    "luminamoon.compact: mask must have shape [", offsets.numel() - 1, "], got ", mask_in.sizes());
  TORCH_CHECK_VALUE(mask_in.device() == offsets.device(), "luminamoon.compact: mask must be on ", offsets.device(),
                    ", got ", mask_in.device());
  lm_cuda_strings s = checked_strings("compact", offsets, data, guard);
  const at::Tensor mask = mask_in.contiguous();
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  if (s.n == 0)
    return {at::zeros({1}, offsets.options()), at::empty({0}, data.options())};
  at::Tensor index = at::empty({static_cast<int64_t>(s.n)}, offsets.options().dtype(at::kLong));
  at::Tensor count = at::empty({1}, offsets.options().dtype(at::kLong));
  at::Tensor incl = at::empty({static_cast<int64_t>(s.n)}, offsets.options().dtype(at::kLong));
  at::Tensor ws = workspace(offsets, lm_cuda_compact_select_workspace_size(s.n));
  cuda_check(lm_cuda_compact_select(s, reinterpret_cast<const uint8_t *>(mask.data_ptr<bool>()),
                                    index.data_ptr<int64_t>(), count.data_ptr<int64_t>(), incl.data_ptr<int64_t>(),
                                    ws.data_ptr(), static_cast<size_t>(ws.numel()), stream),
             "compact");
  // One copy back (the synchronisation): the kept count and their total bytes.
  at::Tensor back = at::cat({count, incl.narrow(0, static_cast<int64_t>(s.n) - 1, 1)}).cpu();
  const int64_t m = back.data_ptr<int64_t>()[0];
  const int64_t total = back.data_ptr<int64_t>()[1];
  at::Tensor out64 = at::empty({m + 1}, offsets.options().dtype(at::kLong));
  cuda_check(lm_cuda_compact_offsets(incl.data_ptr<int64_t>(), index.data_ptr<int64_t>(), static_cast<size_t>(m),
                                     out64.data_ptr<int64_t>(), stream),
             "compact");
  at::Tensor out_offsets = offsets_like(offsets, out64, total, "compact");
  at::Tensor out_data = at::empty({total}, data.options());
  cuda_check(lm_cuda_compact_data(s, index.data_ptr<int64_t>(), static_cast<size_t>(m), out64.data_ptr<int64_t>(),
                                  static_cast<uint64_t>(total), total ? out_data.data_ptr<uint8_t>() : nullptr, stream),
             "compact");
  return {out_offsets, out_data};
}

// int64 [N, max_len]: 1 where column < lengths[i] (ATen ops on the current stream).
at::Tensor attention_mask_cuda(const at::Tensor &lengths, int64_t max_len) {
  c10::cuda::OptionalCUDAGuard guard(lengths.device());
  return attention_mask_aten(lengths, max_len);
}

}  // namespace
}  // namespace luminamoon

TORCH_LIBRARY_IMPL(luminamoon, CUDA, m) {
  m.impl("prefix_match", &luminamoon::prefix_match_cuda);
  m.impl("equal", &luminamoon::equal_cuda);
  m.impl("equal_scalar", &luminamoon::equal_scalar_cuda);
  m.impl("hash64", &luminamoon::hash64_cuda);
  m.impl("pad_bytes", &luminamoon::pad_bytes_cuda);
  m.impl("attention_mask", &luminamoon::attention_mask_cuda);
  m.impl("gather", &luminamoon::gather_cuda);
  m.impl("compact", &luminamoon::compact_cuda);
}
