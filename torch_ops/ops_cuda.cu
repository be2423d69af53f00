// STABLE_TORCH_LIBRARY_IMPL(luminamoon, CUDA): the CUDA kernels NAME_cuda of the operators NAME whose
// schemas are in schema.cpp (CPU kernels: ops_cpu.cpp; minhash: minhash_cuda.cu).  Thin: check arguments,
// take pointers from tensors, call csrc/ (the C ABI of luminamoon_cuda.h) on torch's current stream,
// wrap results.  CPU and CUDA give identical results.  Written against the LibTorch stable ABI only
// (part of luminamoon._ops; torch_ops/stable/stable_common.h): the device guard is
// torch::stable::accelerator::DeviceGuard, the current stream comes from the C shim
// (aoti_torch_get_current_cuda_stream), allocations from torch::stable::new_empty (torch's caching
// allocator), and the few values the host needs back are copied with cudaMemcpyAsync on that stream.
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
//     reads the bad-index flag in the same synchronisation.
#include <torch/csrc/stable/accelerator.h>

#include <cuda_runtime.h>

#include <cstring>
#include <string>
#include <tuple>

#include "stable_common.h"
#include "luminamoon_cuda.h"

namespace luminamoon {
namespace {

void cuda_check(cudaError_t e, const char *op) {
  LM_CHECK(e == cudaSuccess, "luminamoon.", op, ": CUDA error: ", cudaGetErrorString(e));
}

// torch's current CUDA stream of the device (the C shim: a cudaStream_t).
cudaStream_t current_stream(const Tensor &on) {
  void *s = nullptr;
  LM_CHECK(aoti_torch_get_current_cuda_stream(int32_t(on.get_device_index()), &s) == AOTI_TORCH_SUCCESS,
           "luminamoon: cannot get the current CUDA stream");
  return static_cast<cudaStream_t>(s);
}

// Copy `bytes` from device memory to the host on `stream` and wait for them (the synchronisation).
void read_back(void *host, const void *dev, size_t bytes, cudaStream_t stream, const char *op) {
  cuda_check(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, stream), op);
  cuda_check(cudaStreamSynchronize(stream), op);
}

lm_cuda_strings strings_of(const Tensor &offsets, const Tensor &data) {
  lm_cuda_strings s;
  s.offsets = offsets.const_data_ptr();
  s.offset_bytes = is_int(offsets) ? 4 : 8;
  s.n = static_cast<size_t>(offsets.numel() - 1);
  s.data = data.numel() ? cptr<uint8_t>(data) : nullptr;
  s.data_len = static_cast<size_t>(data.numel());
  return s;
}

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream, &st) == cudaSuccess && st != cudaStreamCaptureStatusNone;
}

// The checks of check_strings_light (dtype, shape, contiguity, one device) plus: on a CUDA device, and
// the offsets' values (one check kernel + one 4-byte copy back: a synchronisation).  The caller's
// DeviceGuard is pointed at the tensors' device once the arguments are known to be fine.
lm_cuda_strings checked_strings(const char *op, const Tensor &offsets, const Tensor &data,
                                torch::stable::accelerator::DeviceGuard &guard, const char *on = "offsets",
                                const char *dn = "data") {
  check_strings_light(op, offsets, data, on, dn);
  LM_CHECK_VALUE(offsets.is_cuda(), "luminamoon.", op, ": ", on, " must be on a CUDA device, got ",
                 device_name(offsets));
  guard.set_index(offsets.get_device_index());
  lm_cuda_strings s = strings_of(offsets, data);
  cudaStream_t stream = current_stream(offsets);
  if (capturing(stream)) return s;
  Tensor flag = empty_on(offsets, {1}, ScalarType::Int);
  cuda_check(lm_cuda_validate_offsets(s, mptr<int32_t>(flag), stream), op);
  int32_t f = 0;
  read_back(&f, flag.const_data_ptr(), sizeof f, stream, op);
  LM_CHECK_VALUE(!(f & (LM_CUDA_BAD_NEGATIVE | LM_CUDA_BAD_DECREASING)), "luminamoon.", op, ": ", on,
                 " must be non-negative and non-decreasing");
  LM_CHECK_VALUE(!(f & LM_CUDA_BAD_PAST_END), "luminamoon.", op, ": ", on, " point past the end of ", dn, " (", dn,
                 " has ", data.numel(), " bytes)");
  return s;
}

Tensor workspace(const Tensor &like, size_t bytes) {
  return empty_on(like, {static_cast<int64_t>(bytes ? bytes : 1)}, ScalarType::Byte);
}

// The guard starts on the current device; checked_strings moves it to the tensors' device.
torch::stable::accelerator::DeviceGuard current_device_guard() {
  return torch::stable::accelerator::DeviceGuard(torch::stable::accelerator::getCurrentDeviceIndex());
}

using match_fn = cudaError_t (*)(lm_cuda_strings, const uint8_t *, const uint8_t *, size_t, uint8_t *, cudaStream_t);

Tensor match_cuda(const char *op, const Tensor &offsets, const Tensor &data, const std::string &pat,
                  match_fn kernel) {
  auto guard = current_device_guard();
  lm_cuda_strings s = checked_strings(op, offsets, data, guard);
  Tensor out = empty_on(offsets, {static_cast<int64_t>(s.n)}, ScalarType::Bool);
  if (s.n == 0) return out;
  cudaStream_t stream = current_stream(offsets);
  const uint8_t *host = reinterpret_cast<const uint8_t *>(pat.data());
  Tensor dev;
  if (pat.size() > LM_CUDA_PATTERN_INLINE_MAX) {  // long patterns: pinned staging + async copy
    const int64_t len = static_cast<int64_t>(pat.size());
    Tensor pinned = torch::stable::empty({len}, ScalarType::Byte, std::nullopt,
                                         torch::stable::Device(torch::headeronly::DeviceType::CPU), true);
    std::memcpy(pinned.mutable_data_ptr(), pat.data(), pat.size());
    dev = torch::stable::to(pinned, offsets.device(), /*non_blocking=*/true);
  }
  cuda_check(kernel(s, host, dev.defined() ? cptr<uint8_t>(dev) : nullptr, pat.size(), mptr<uint8_t>(out), stream),
             op);
  return out;
}

Tensor prefix_match_cuda(Tensor offsets, Tensor data, std::string prefix) {
  return match_cuda("prefix_match", offsets, data, prefix, &lm_cuda_prefix_match);
}

Tensor equal_scalar_cuda(Tensor offsets, Tensor data, std::string str) {
  return match_cuda("equal_scalar", offsets, data, str, &lm_cuda_equal_scalar);
}

Tensor equal_cuda(Tensor oa, Tensor da, Tensor ob, Tensor db) {
  auto guard = current_device_guard();
  check_strings_light("equal", oa, da, "offsets_a", "data_a");
  check_strings_light("equal", ob, db, "offsets_b", "data_b");
  LM_CHECK_VALUE(same_device(oa, ob), "luminamoon.equal: offsets_a and offsets_b must be on the same device, got ",
                 device_name(oa), " and ", device_name(ob));
  LM_CHECK_VALUE(oa.numel() == ob.numel(), "luminamoon.equal: offsets_a and offsets_b must describe the same number "
                 "of strings, got ", oa.numel() - 1, " and ", ob.numel() - 1);
  LM_CHECK_TYPE(oa.scalar_type() == ob.scalar_type(), "luminamoon.equal: offsets_a and offsets_b must have the same "
                "dtype, got ", dtype_name(oa.scalar_type()), " and ", dtype_name(ob.scalar_type()));
  lm_cuda_strings a = checked_strings("equal", oa, da, guard, "offsets_a", "data_a");
  lm_cuda_strings b = checked_strings("equal", ob, db, guard, "offsets_b", "data_b");
  Tensor out = empty_on(oa, {static_cast<int64_t>(a.n)}, ScalarType::Bool);
  if (a.n == 0) return out;
  Tensor ws = workspace(oa, lm_cuda_equal_workspace_size(a.n));
  cuda_check(lm_cuda_equal(a, b, ws.mutable_data_ptr(), static_cast<size_t>(ws.numel()), mptr<uint8_t>(out),
                           current_stream(oa)),
             "equal");
  return out;
}

Tensor hash64_cuda(Tensor offsets, Tensor data, int64_t seed) {
  auto guard = current_device_guard();
  lm_cuda_strings s = checked_strings("hash64", offsets, data, guard);
  Tensor out = empty_on(offsets, {static_cast<int64_t>(s.n)}, ScalarType::Long);
  if (s.n == 0) return out;
  Tensor ws = workspace(offsets, lm_cuda_hash64_workspace_size(s));
  cuda_check(lm_cuda_hash64(s, static_cast<uint64_t>(seed), ws.mutable_data_ptr(), static_cast<size_t>(ws.numel()),
                            mptr<uint64_t>(out), current_stream(offsets)),
             "hash64");
  return out;
}

std::tuple<Tensor, Tensor> pad_bytes_cuda(Tensor offsets, Tensor data, int64_t max_len, int64_t pad_id,
                                          int64_t bos_id, int64_t eos_id) {
  auto guard = current_device_guard();
  LM_CHECK_VALUE(max_len >= 0, "luminamoon.pad_bytes: max_len must be >= 0, got ", max_len);
  lm_cuda_strings s = checked_strings("pad_bytes", offsets, data, guard);
  const int64_t n = static_cast<int64_t>(s.n);
  check_matrix_size("pad_bytes", n, max_len);
  Tensor tokens = empty_on(offsets, {n, max_len}, ScalarType::Long);
  Tensor lengths = empty_on(offsets, {n}, ScalarType::Long);
  if (n == 0) return {tokens, lengths};
  cuda_check(lm_cuda_pad_bytes(s, static_cast<size_t>(max_len), pad_id, bos_id, eos_id,
                               max_len ? mptr<int64_t>(tokens) : nullptr, mptr<int64_t>(lengths),
                               current_stream(offsets)),
             "pad_bytes");
  return {tokens, lengths};
}

// Output offsets (int64 from the kernels) in the input's dtype; checks the 2 GiB limit of int32.
Tensor offsets_like(const Tensor &offsets, const Tensor &out64, int64_t total, const char *op) {
  if (offsets.scalar_type() == ScalarType::Long) return out64;
  LM_CHECK_VALUE(total <= INT32_MAX, "luminamoon.", op, ": the ", op == std::string("gather") ? "gathered" : "kept",
                 " strings exceed 2 GiB (", total, " bytes); use int64 offsets");
  return torch::stable::to(out64, ScalarType::Int);
}

std::tuple<Tensor, Tensor> gather_cuda(Tensor offsets, Tensor data, Tensor index_in) {
  auto guard = current_device_guard();
  LM_CHECK_TYPE(index_in.scalar_type() == ScalarType::Long, "luminamoon.gather: index must be int64, got ",
                dtype_name(index_in.scalar_type()));
  LM_CHECK_VALUE(index_in.dim() == 1, "luminamoon.gather: index must be 1-D, got shape ", shape_of(index_in));
  LM_CHECK_VALUE(same_device(index_in, offsets), "luminamoon.gather: index must be on ", device_name(offsets),
                 ", got ", device_name(index_in));
  lm_cuda_strings s = checked_strings("gather", offsets, data, guard);
  const Tensor index = torch::stable::contiguous(index_in);
  const size_t m = static_cast<size_t>(index.numel());
  cudaStream_t stream = current_stream(offsets);
  Tensor out64 = empty_on(offsets, {static_cast<int64_t>(m) + 1}, ScalarType::Long);
  Tensor bad = empty_on(offsets, {1}, ScalarType::Int);
  Tensor ws = workspace(offsets, lm_cuda_gather_offsets_workspace_size(m));
  const int64_t *ip = m ? cptr<int64_t>(index) : nullptr;
  cuda_check(lm_cuda_gather_offsets(s, ip, m, mptr<int64_t>(out64), mptr<int32_t>(bad), ws.mutable_data_ptr(),
                                    static_cast<size_t>(ws.numel()), stream),
             "gather");
  // One synchronisation: the total bytes and the bad-index flag.
  int64_t total = 0;
  int32_t bad_index = 0;
  cuda_check(cudaMemcpyAsync(&total, cptr<int64_t>(out64) + m, sizeof total, cudaMemcpyDeviceToHost, stream),
             "gather");
  read_back(&bad_index, bad.const_data_ptr(), sizeof bad_index, stream, "gather");
  LM_CHECK_INDEX(bad_index == 0, "luminamoon.gather: index holds a value outside [0, ", s.n,
                 ") (negative indices are not allowed)");
  Tensor out_offsets = offsets_like(offsets, out64, total, "gather");
  Tensor out_data = empty_on(data, {total}, ScalarType::Byte);
  cuda_check(lm_cuda_gather_data(s, ip, m, cptr<int64_t>(out64), static_cast<uint64_t>(total),
                                 total ? mptr<uint8_t>(out_data) : nullptr, stream),
             "gather");
  return {out_offsets, out_data};
}

std::tuple<Tensor, Tensor> compact_cuda(Tensor offsets, Tensor data, Tensor mask_in) {
  auto guard = current_device_guard();
  LM_CHECK_TYPE(mask_in.scalar_type() == ScalarType::Bool, "luminamoon.compact: mask must be bool, got ",
                dtype_name(mask_in.scalar_type()));
  LM_CHECK_VALUE(mask_in.dim() == 1 && mask_in.numel() == offsets.numel() - 1,
                 "luminamoon.compact: mask must have shape [", offsets.numel() - 1, "], got ", shape_of(mask_in));
  LM_CHECK_VALUE(same_device(mask_in, offsets), "luminamoon.compact: mask must be on ", device_name(offsets),
                 ", got ", device_name(mask_in));
  lm_cuda_strings s = checked_strings("compact", offsets, data, guard);
  const Tensor mask = torch::stable::contiguous(mask_in);
  cudaStream_t stream = current_stream(offsets);
  if (s.n == 0) return {torch::stable::new_zeros(offsets, {1}), empty_on(data, {0}, ScalarType::Byte)};
  const int64_t n = static_cast<int64_t>(s.n);
  Tensor index = empty_on(offsets, {n}, ScalarType::Long);
  Tensor count = empty_on(offsets, {1}, ScalarType::Long);
  Tensor incl = empty_on(offsets, {n}, ScalarType::Long);
  Tensor ws = workspace(offsets, lm_cuda_compact_select_workspace_size(s.n));
  cuda_check(lm_cuda_compact_select(s, cptr<uint8_t>(mask), mptr<int64_t>(index), mptr<int64_t>(count),
                                    mptr<int64_t>(incl), ws.mutable_data_ptr(), static_cast<size_t>(ws.numel()),
                                    stream),
             "compact");
  // One synchronisation: the kept count and their total bytes.
  int64_t m = 0, total = 0;
  cuda_check(cudaMemcpyAsync(&m, count.const_data_ptr(), sizeof m, cudaMemcpyDeviceToHost, stream), "compact");
  read_back(&total, cptr<int64_t>(incl) + (n - 1), sizeof total, stream, "compact");
  Tensor out64 = empty_on(offsets, {m + 1}, ScalarType::Long);
  cuda_check(lm_cuda_compact_offsets(cptr<int64_t>(incl), cptr<int64_t>(index), static_cast<size_t>(m),
                                     mptr<int64_t>(out64), stream),
             "compact");
  Tensor out_offsets = offsets_like(offsets, out64, total, "compact");
  Tensor out_data = empty_on(data, {total}, ScalarType::Byte);
  cuda_check(lm_cuda_compact_data(s, cptr<int64_t>(index), static_cast<size_t>(m), cptr<int64_t>(out64),
                                  static_cast<uint64_t>(total), total ? mptr<uint8_t>(out_data) : nullptr, stream),
             "compact");
  return {out_offsets, out_data};
}

// attention_mask: one thread per output element, out[i, j] = j < clamp(lengths[i], 0, max_len).
__global__ void attention_mask_kernel(const int64_t *lengths, int64_t n, int64_t max_len, int64_t *out) {
  const int64_t total = n * max_len;
  for (int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < total; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = k / max_len, j = k - i * max_len;
    out[k] = j < lengths[i] ? 1 : 0;  // j >= 0, so a negative length gives 0 and j < max_len clamps above
  }
}

// int64 [N, max_len]: 1 where column < lengths[i] (the kernel above, on the current stream; the CPU
// kernel's argument checks).
Tensor attention_mask_cuda(Tensor lengths, int64_t max_len) {
  LM_CHECK_TYPE(lengths.scalar_type() == ScalarType::Long, "luminamoon.attention_mask: lengths must be int64, got ",
                dtype_name(lengths.scalar_type()));
  LM_CHECK_VALUE(lengths.dim() == 1, "luminamoon.attention_mask: lengths must be 1-D, got shape ", shape_of(lengths));
  check_matrix_size("attention_mask", lengths.numel(), max_len);
  torch::stable::accelerator::DeviceGuard guard(lengths.get_device_index());
  const Tensor len = torch::stable::contiguous(lengths);
  const int64_t n = len.numel();
  Tensor out = empty_on(len, {n, max_len}, ScalarType::Long);
  if (n == 0 || max_len == 0) return out;
  const int64_t total = n * max_len;
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((total + threads - 1) / threads, 65535 * 8);
  attention_mask_kernel<<<unsigned(blocks), threads, 0, current_stream(len)>>>(cptr<int64_t>(len), n, max_len,
                                                                                  mptr<int64_t>(out));
  cuda_check(cudaGetLastError(), "attention_mask");
  return out;
}

}  // namespace
}  // namespace luminamoon

STABLE_TORCH_LIBRARY_IMPL(luminamoon, CUDA, m) {
  using namespace luminamoon;
  m.impl("prefix_match", TORCH_BOX(&prefix_match_cuda));
  m.impl("equal", TORCH_BOX(&equal_cuda));
  m.impl("equal_scalar", TORCH_BOX(&equal_scalar_cuda));
  m.impl("hash64", TORCH_BOX(&hash64_cuda));
  m.impl("pad_bytes", TORCH_BOX(&pad_bytes_cuda));
  m.impl("attention_mask", TORCH_BOX(&attention_mask_cuda));
  m.impl("gather", TORCH_BOX(&gather_cuda));
  m.impl("compact", TORCH_BOX(&compact_cuda));
}
