/* csrc/luminamoon_cuda.h — the C ABI of luminamoon's CUDA kernels.
 *
 * Raw device pointers, sizes and a cudaStream_t; no torch types.  Every function only enqueues
 * work on `stream` (asynchronous, no host synchronisation, no allocation: scratch memory is a
 * caller-provided workspace whose size is given by the matching *_workspace_size function) and
 * returns the cudaError_t of its launches (cudaSuccess, or e.g. cudaErrorInvalidValue for bad
 * arguments detected on the host).  Errors raised by kernels surface later, as usual in CUDA.
 *
 * Strings: `lm_cuda_strings` = N+1 offsets (int32 or int64, little-endian, on the device) + a
 * uint8 payload of data_len bytes on the device.  Offsets are expected to be non-negative,
 * non-decreasing and <= data_len (lm_cuda_validate_offsets checks exactly that).  Whatever the
 * offsets, no kernel reads or writes out of bounds: every kernel clamps each string to
 * start = clamp(offsets[i], 0, data_len), end = clamp(offsets[i+1], start, data_len); results
 * for invalid offsets are those of the clamped strings (unspecified, but memory-safe).
 *
 * Payload reads: 8-byte reads of unaligned strings load the aligned words holding the bytes;
 * each aligned word loaded holds at least one byte of the payload, so reads stay inside the
 * 8-byte-aligned span that covers [data, data + data_len) (device allocations are 256-byte
 * aligned, so this never leaves the allocation).
 *
 * Entry points are named after the operators they serve (torch_ops/schema.cpp): operator NAME
 * calls lm_cuda_NAME (and lm_cuda_NAME_workspace_size, or the passes lm_cuda_NAME_offsets /
 * lm_cuda_NAME_select / lm_cuda_NAME_data).
 *
 * Work split (thresholds are starting points, to be tuned by measurement on the H200):
 *   prefix_match / equal_scalar: one thread per string; patterns longer than 8 bytes are
 *     compared by the whole warp, for the strings of its tile of 32 that pass the length check.
 *   equal: tiles of 32 pairs per warp; one thread per equal-length pair up to
 *     LM_CUDA_EQ_THREAD_MAX bytes, the whole warp (256 bytes a step) per pair up to
 *     LM_CUDA_EQ_GRID_MIN (the corpus case: tens to thousands of bytes, no scan or search);
 *     longer pairs are cut into LM_CUDA_SEGMENT_BYTES segments spread over the whole grid (a scan
 *     of segment counts + a binary search per segment), so a megabyte pair uses many SMs.
 *   hash64: one thread per string up to 240 bytes (XXH3's short and mid-size paths); 8 threads
 *     (one per XXH3 lane) per string above; strings of LM_CUDA_HASH_HUGE_MIN bytes or more get
 *     the contributions of their full 1024-byte blocks computed by segments over the whole grid
 *     first, then the 8 threads run the cheap serial scramble chain over those contributions.
 *   pad_bytes: one warp per row (coalesced 8-byte token stores).
 *   gather / compact copy: the output payload is cut into fixed-size byte ranges, one per
 *     block (two binary searches in the output offsets per block): balanced whatever the
 *     lengths.  The block's threads load the descriptors of its strings in parallel (output
 *     range, index, source offsets: one thread each), copy strings of up to 32 bytes themselves,
 *     and the warps copy the longer ones from the descriptors in shared memory.
 *   compact selection and all scans: CUB (cub::DeviceSelect::Flagged, cub::DeviceScan).
 *
 * Thread-safety: the functions keep no state; calls on different streams may run concurrently.
 */
#ifndef LUMINAMOON_CUDA_H
#define LUMINAMOON_CUDA_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LM_CUDA_PATTERN_INLINE_MAX 512            /* patterns up to this size travel as kernel arguments */
#define LM_CUDA_EQ_THREAD_MAX 64                  /* equal: pairs up to this length, one thread each */
#define LM_CUDA_SEGMENT_BYTES (16 * 1024)         /* work unit of the grid-wide long-string kernels */
#define LM_CUDA_EQ_GRID_MIN (64 * 1024)           /* equal: pairs from this length use the grid-wide path */
#define LM_CUDA_HASH_HUGE_MIN (64 * 1024)         /* hash64: strings from this length use the grid-wide path */
#define LM_CUDA_COPY_CHUNK_BYTES (16 * 1024)      /* gather/compact: output bytes per block */

/* Flags of lm_cuda_validate_offsets. */
#define LM_CUDA_BAD_NEGATIVE 1    /* offsets[0] < 0 */
#define LM_CUDA_BAD_DECREASING 2  /* offsets[i+1] < offsets[i] for some i */
#define LM_CUDA_BAD_PAST_END 4    /* offsets[N] > data_len */

typedef struct lm_cuda_strings {
  const void *offsets; /* device, n + 1 entries of offset_bytes each */
  int offset_bytes;    /* 4 (int32) or 8 (int64) */
  size_t n;            /* number of strings */
  const uint8_t *data; /* device payload (may be NULL when data_len == 0) */
  size_t data_len;
} lm_cuda_strings;

/* *d_flags (device int32) = OR of LM_CUDA_BAD_* for these offsets (the function zeroes it first).
 * One pass over the offsets; the caller copies the flag back (one synchronisation). */
cudaError_t lm_cuda_validate_offsets(lm_cuda_strings s, int32_t *d_flags, cudaStream_t stream);

/* out[i] = 1 when string i starts with the pattern (exact == 0) or equals it (exact != 0).
 * pattern_host (host memory) is used when plen <= LM_CUDA_PATTERN_INLINE_MAX and travels with
 * the launch (no copy, the host buffer may be freed on return); otherwise pattern_dev must be a
 * device copy of the pattern, valid until the kernel has run. */
cudaError_t lm_cuda_match(lm_cuda_strings s, const uint8_t *pattern_host, const uint8_t *pattern_dev,
                          size_t plen, int exact, uint8_t *out, cudaStream_t stream);
/* The kernels of the operators prefix_match and equal_scalar: lm_cuda_match with exact = 0 / 1. */
cudaError_t lm_cuda_prefix_match(lm_cuda_strings s, const uint8_t *pattern_host, const uint8_t *pattern_dev,
                                 size_t plen, uint8_t *out, cudaStream_t stream);
cudaError_t lm_cuda_equal_scalar(lm_cuda_strings s, const uint8_t *pattern_host, const uint8_t *pattern_dev,
                                 size_t plen, uint8_t *out, cudaStream_t stream);

/* out[i] = 1 when a[i] == b[i] (a.n == b.n).  Needs the workspace below (0 when n == 0). */
size_t lm_cuda_equal_workspace_size(size_t n);
cudaError_t lm_cuda_equal(lm_cuda_strings a, lm_cuda_strings b, void *workspace, size_t workspace_bytes,
                          uint8_t *out, cudaStream_t stream);

/* out[i] = XXH3_64bits_withSeed(string i, seed), bit-identical to libxxhash. */
size_t lm_cuda_hash64_workspace_size(lm_cuda_strings s);
cudaError_t lm_cuda_hash64(lm_cuda_strings s, uint64_t seed, void *workspace, size_t workspace_bytes, uint64_t *out,
                           cudaStream_t stream);

/* Byte-level tokens, exactly as lm_o32_pad_bytes: row i = [bos] bytes... [eos] then pad_id,
 * max_len columns; bos/eos < 0 mean none; content truncated to max_len - #specials; eos is
 * written only while it fits.  tokens: n * max_len int64; lengths: n int64. */
cudaError_t lm_cuda_pad_bytes(lm_cuda_strings s, size_t max_len, int64_t pad_id, int64_t bos_id, int64_t eos_id,
                              int64_t *tokens, int64_t *lengths, cudaStream_t stream);

/* Gather, pass 1: out_offsets (m + 1 int64, starting at 0) of the strings index[0..m).
 * *d_bad_index (device int32) is set to 1 when an index lies outside [0, n) (the function
 * zeroes it first); such entries count as empty strings.  out_offsets[m] is the total. */
size_t lm_cuda_gather_offsets_workspace_size(size_t m);
cudaError_t lm_cuda_gather_offsets(lm_cuda_strings s, const int64_t *index, size_t m, int64_t *out_offsets,
                                   int32_t *d_bad_index, void *workspace, size_t workspace_bytes,
                                   cudaStream_t stream);

/* Compact, pass 1: out_index[0..*d_count) = the i with mask[i] != 0, in order (CUB select;
 * *d_count is a device int64), and incl_bytes[i] = the total length of the kept strings up to
 * and including i (CUB scan; incl_bytes[n-1] is the output payload size).  The caller reads
 * *d_count and incl_bytes[n-1] back (one synchronisation), then calls lm_cuda_compact_offsets
 * and lm_cuda_copy_strings with index = out_index, m = *d_count. */
size_t lm_cuda_compact_select_workspace_size(size_t n);
cudaError_t lm_cuda_compact_select(lm_cuda_strings s, const uint8_t *mask, int64_t *out_index, int64_t *d_count,
                                   int64_t *incl_bytes, void *workspace, size_t workspace_bytes, cudaStream_t stream);

/* Compact, pass 2: out_offsets[0] = 0, out_offsets[k+1] = incl_bytes[out_index[k]] for k < m. */
cudaError_t lm_cuda_compact_offsets(const int64_t *incl_bytes, const int64_t *out_index, size_t m,
                                    int64_t *out_offsets, cudaStream_t stream);

/* Gather/compact, pass 2: copy string index[k] to out_data + out_offsets[k] for k < m
 * (index NULL = identity).  total_bytes = out_offsets[m], as read back by the caller. */
cudaError_t lm_cuda_copy_strings(lm_cuda_strings s, const int64_t *index, size_t m, const int64_t *out_offsets,
                                 uint64_t total_bytes, uint8_t *out_data, cudaStream_t stream);
/* Pass 2 under the operators' names: gather copies index[0..m) (lm_cuda_gather_offsets gave
 * out_offsets), compact the out_index of lm_cuda_compact_select; both are lm_cuda_copy_strings. */
cudaError_t lm_cuda_gather_data(lm_cuda_strings s, const int64_t *index, size_t m, const int64_t *out_offsets,
                                uint64_t total_bytes, uint8_t *out_data, cudaStream_t stream);
cudaError_t lm_cuda_compact_data(lm_cuda_strings s, const int64_t *out_index, size_t m, const int64_t *out_offsets,
                                 uint64_t total_bytes, uint8_t *out_data, cudaStream_t stream);

/* ---- MinHash (csrc/minhash.cu) ----
 * out[d * num_hashes + j] (uint64, n x num_hashes) = min over the shingle hashes of document d
 * (d_hashes[d_offsets[d] .. d_offsets[d+1]), int64 offsets) of ((h * a[j] + b[j]) mod 2^64) mod
 * (2^61 - 1), masked to 32 bits for precision 32; UINT64_MAX for a document without shingles.
 * Tiles of LM_CUDA_MINHASH_TILE shingles per block (balanced whatever the lengths; atomicMin joins a
 * document cut by tiles).  Offsets are clamped into [0, m]: invalid ones give unspecified values,
 * never an out-of-bounds access; lm_cuda_minhash_validate sets *d_flags to the OR of LM_CUDA_BAD_*
 * (negative first, decreasing, last > m). */
#define LM_CUDA_MINHASH_TILE 256
cudaError_t lm_cuda_minhash_validate(const int64_t *d_offsets, size_t n, size_t m, int32_t *d_flags,
                                     cudaStream_t stream);
cudaError_t lm_cuda_minhash(const uint64_t *d_hashes, size_t m, const int64_t *d_offsets, size_t n,
                            const uint64_t *d_a, const uint64_t *d_b, size_t num_hashes, int precision,
                            uint64_t *d_out, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
