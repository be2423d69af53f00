// The schemas of every torch.ops.luminamoon operator, in one place.
//
// Each operator NAME is found by its one name (tests/python/test_op_layout.py checks this):
//   schema       here, as the m.def of the signature NAME(...) -> ...
//   CPU kernel   torch_ops/ops_cpu.cpp        NAME_cpu, registered as m.impl("NAME", &NAME_cpu)
//                (minhash: torch_ops/minhash.cpp), calling the core/ function named after it
//                (lm_o32_NAME / lm_o64_NAME / lm_views_NAME ..., core/include/luminamoon/*.h)
//   CUDA kernel  torch_ops/ops_cuda.cu        NAME_cuda, registered as m.impl("NAME", &NAME_cuda)
//                (minhash: torch_ops/minhash_cuda.cu), calling csrc/ lm_cuda_NAME...
//                (csrc/luminamoon_cuda.h)
//   fake kernel  python/luminamoon/ops.py     @torch.library.register_fake("luminamoon::NAME")
//   tests        tests/python/test_ops.py (opcheck, torch.compile), test_kernel_emulation.py (the CUDA
//                kernels emulated on the host), tests/gpu/test_gpu_ops.py (on a GPU)
//
// CPU-only operators (the views layout of Arrow string views lives in host memory; these have no
// CUDA kernel, and a CUDA tensor raises the dispatcher's NotImplementedError):
//   cpu-only: views_from_offsets offsets_from_views views_prefix_match views_equal_scalar
//   cpu-only: views_equal views_hash64 views_compact
//
// The operators form their own extension, luminamoon._ops (setup.py), written against the LibTorch
// stable ABI only (STABLE_TORCH_LIBRARY, torch::stable::Tensor, TORCH_TARGET_VERSION 2.10): one binary
// for every torch >= 2.10 (docs/stable_abi.md; checks and error types: torch_ops/stable/stable_common.h).
// python/luminamoon/ops.py loads it (torch.ops.load_library) and registers the fake kernels.
#include <torch/csrc/stable/library.h>

STABLE_TORCH_LIBRARY(luminamoon, m) {
  // ---- offsets layout: N+1 int32/int64 offsets + a uint8 payload (CPU and CUDA)
  m.def("prefix_match(Tensor offsets, Tensor data, str prefix) -> Tensor");
  m.def("equal(Tensor offsets_a, Tensor data_a, Tensor offsets_b, Tensor data_b) -> Tensor");
  m.def("equal_scalar(Tensor offsets, Tensor data, str s) -> Tensor");
  m.def("hash64(Tensor offsets, Tensor data, int seed=0) -> Tensor");
  m.def("pad_bytes(Tensor offsets, Tensor data, int max_len, int pad_id=0, int bos_id=-1, int eos_id=-1) "
        "-> (Tensor, Tensor)");
  m.def("attention_mask(Tensor lengths, int max_len) -> Tensor");
  m.def("gather(Tensor offsets, Tensor data, Tensor index) -> (Tensor, Tensor)");
  m.def("compact(Tensor offsets, Tensor data, Tensor mask) -> (Tensor, Tensor)");
  // ---- views layout: [N, 16] uint8 Arrow string views + payload buffers (CPU only)
  m.def("views_from_offsets(Tensor offsets, Tensor data) -> Tensor");
  m.def("offsets_from_views(Tensor views, Tensor[] buffers, bool large=False) -> (Tensor, Tensor)");
  m.def("views_prefix_match(Tensor views, Tensor[] buffers, str prefix) -> Tensor");
  m.def("views_equal_scalar(Tensor views, Tensor[] buffers, str s) -> Tensor");
  m.def("views_equal(Tensor views_a, Tensor[] buffers_a, Tensor views_b, Tensor[] buffers_b) -> Tensor");
  m.def("views_hash64(Tensor views, Tensor[] buffers, int seed=0) -> Tensor");
  m.def("views_compact(Tensor views, Tensor mask) -> Tensor");
  // ---- MinHash signatures from shingle hashes (CPU and CUDA); documented in torch_ops/minhash.cpp
  m.def("minhash(Tensor shingle_hashes, Tensor doc_offsets, Tensor a, Tensor b, int precision=64) -> Tensor");
}
