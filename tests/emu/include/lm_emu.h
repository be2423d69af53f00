// tests/emu/include/lm_emu.h — host emulation of the CUDA launch model for csrc/*.cu.
//
// The kernels' device code is compiled as host C++ (g++) against this header (the stand-in
// cuda_runtime.h, cub/ and thrust/ headers next to it include it).  tests/emu/build.py rewrites
// `kernel<<<grid, block, smem, stream>>>(args)` into `lmemu::launch(grid, block, smem, stream,
// kernel, args)`; everything else is the unchanged source.
//
// Launch layout: the blocks of a grid run one after the other; the threads of a block are
// fibers on one OS thread (a 6-register stack switch on x86-64, ucontext elsewhere), run round-robin: a fiber runs until it reaches a warp
// collective (__shfl*_sync, __ballot_sync, __all_sync, __any_sync, __syncwarp) or
// __syncthreads, where it waits for the lanes named in the mask (or the whole block).  The last
// lane to arrive computes every participant's result with CUDA's rules (width segments, the
// own value for out-of-segment sources).  __shared__ variables are function statics (one block
// at a time).  Errors that are undefined behaviour on a GPU are reported, not guessed:
// a collective whose mask omits the caller, names a lane that has exited or sits at a different
// collective, a shuffle from a lane outside the mask, a deadlock.  The first error is kept;
// cudaGetLastError() returns cudaErrorLaunchFailure and lm_emu_last_error() says why.
//
// Host stand-ins: cudaMemsetAsync (memset), streams (ignored: everything runs on the call),
// cudaOccupancyMaxActiveBlocksPerMultiprocessor and the SM count (small, LM_EMU_SMS / 2 blocks
// per SM, so that persistent grid-stride kernels really loop), cub::DeviceScan::InclusiveSum,
// cub::DeviceSelect::Flagged, thrust::counting_iterator.  "Device memory" is host memory.
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>

#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

// ------------------------------------------------------------------ keywords and intrinsics
#ifndef __CUDACC__
#define __CUDACC__ 1
#endif
#ifndef __CUDA_ARCH__
#define __CUDA_ARCH__ 900  // the device code paths of xxh3.h (aligned-word reads, __umul64hi)
#endif
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __constant__
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

struct dim3 {
  unsigned x, y, z;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
typedef dim3 uint3;

enum cudaError_t { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorLaunchFailure = 719 };
typedef struct CUstream_st *cudaStream_t;
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16 };

namespace lmemu {

enum Op { kNone, kIdx, kUp, kDown, kXor, kBallot, kAll, kAny, kSync };

#if defined(__x86_64__) && !defined(LM_EMU_UCONTEXT)
#define LM_EMU_FAST_SWITCH 1
}  // namespace lmemu
// Saves the callee-saved registers on the current stack, stores its pointer in *save, switches
// to the stack `to` and restores the registers found there (lm_emu_runtime.cpp).
extern "C" void lm_emu_switch(void **save, void *to);
namespace lmemu {
#endif

struct Fiber {
#ifdef LM_EMU_FAST_SWITCH
  void *sp = nullptr;
#else
  ucontext_t ctx;
#endif
  char *stack = nullptr;
  uint3 tid;
  unsigned linear = 0;
  bool done = false;
  bool at_barrier = false;
  // the collective in progress
  int state = 0;  // 0 idle, 1 arrived, 2 done
  Op op = kNone;
  unsigned mask = 0;
  uint64_t val = 0, res = 0;
  int param = 0, width = 32;
};

constexpr size_t kStack = 128 * 1024;

struct Block {
  std::vector<Fiber> fibers;
  unsigned nthreads = 0;
  uint64_t progress = 0;
  uint64_t bar_gen = 0;
};

#ifdef LM_EMU_FAST_SWITCH
inline void *g_sched_sp = nullptr;
#else
inline ucontext_t g_sched;
#endif
inline Fiber *g_cur = nullptr;
inline Block g_block;
inline dim3 g_blockIdx, g_blockDim, g_gridDim;
inline void (*g_body)(void *) = nullptr;
inline void *g_body_arg = nullptr;
inline bool g_failed = false;
inline bool g_abort_block = false;
inline std::string g_error;
inline uint64_t g_launches = 0, g_threads_run = 0, g_collectives = 0;

inline void fail(const std::string &what) {
  if (!g_failed) {
    g_failed = true;
    g_error = what + " (block " + std::to_string(g_blockIdx.x) + ", thread " +
              std::to_string(g_cur ? g_cur->linear : 0u) + ")";
  }
  g_abort_block = true;
}

#ifdef LM_EMU_FAST_SWITCH
inline void yield() { lm_emu_switch(&g_cur->sp, g_sched_sp); }
#else
inline void yield() { swapcontext(&g_cur->ctx, &g_sched); }
#endif

inline void fiber_entry() {
  g_body(g_body_arg);
  g_cur->done = true;
  ++g_block.progress;
  yield();  // never resumed
  abort();
}

inline void fiber_start(Fiber &f) {
#ifdef LM_EMU_FAST_SWITCH
  // A stack that lm_emu_switch "returns" into fiber_entry from, aligned as after a call.
  uintptr_t top = (reinterpret_cast<uintptr_t>(f.stack) + kStack) & ~(uintptr_t)15;
  void **sp = reinterpret_cast<void **>(top);
  *--sp = nullptr;                                 // fiber_entry's return address (never used)
  *--sp = reinterpret_cast<void *>(&fiber_entry);  // popped by ret
  for (int r = 0; r < 6; ++r) *--sp = nullptr;     // rbp rbx r12 r13 r14 r15
  f.sp = sp;
#else
  getcontext(&f.ctx);
  f.ctx.uc_stack.ss_sp = f.stack;
  f.ctx.uc_stack.ss_size = kStack;
  f.ctx.uc_link = nullptr;
  makecontext(&f.ctx, fiber_entry, 0);
#endif
}

inline void fiber_resume(Fiber &f) {
#ifdef LM_EMU_FAST_SWITCH
  lm_emu_switch(&g_sched_sp, f.sp);
#else
  swapcontext(&g_sched, &f.ctx);
#endif
}

inline uint64_t collective(Op op, unsigned mask, uint64_t val, int param, int width) {
  Fiber *f = g_cur;
  ++g_collectives;
  const unsigned lane = f->linear & 31u, warp0 = f->linear & ~31u;
  if (!(mask & (1u << lane))) {
    fail("collective: the calling lane is not in the mask");
    yield();
  }
  if (width <= 0 || width > 32 || (width & (width - 1))) {
    fail("collective: width must be a power of two <= 32");
    yield();
  }
  f->op = op;
  f->mask = mask;
  f->val = val;
  f->param = param;
  f->width = width;
  f->state = 1;
  ++g_block.progress;
  for (;;) {
    if (g_abort_block) yield();
    if (f->state == 2) {
      f->state = 0;
      return f->res;
    }
    bool all = true;
    for (unsigned j = 0; j < 32 && all; ++j) {
      if (!(mask & (1u << j))) continue;
      if (warp0 + j >= g_block.nthreads) {
        fail("collective: the mask names a lane past the end of the block");
        break;
      }
      const Fiber &o = g_block.fibers[warp0 + j];
      if (o.done) {
        fail("collective: a lane named in the mask has exited");
        break;
      }
      if (o.state != 1) {
        all = false;
      } else if (o.mask != mask || o.op != op) {
        fail("collective: lanes of the mask are at different collectives");
        break;
      }
    }
    if (g_abort_block) continue;
    if (!all) {
      yield();
      continue;
    }
    uint64_t ballot = 0;
    bool every = true, some = false;
    for (unsigned j = 0; j < 32; ++j)
      if (mask & (1u << j)) {
        const bool p = g_block.fibers[warp0 + j].val != 0;
        ballot |= p ? (1ull << j) : 0;
        every = every && p;
        some = some || p;
      }
    for (unsigned j = 0; j < 32; ++j) {
      if (!(mask & (1u << j))) continue;
      Fiber &o = g_block.fibers[warp0 + j];
      const unsigned w = (unsigned)o.width, seg = j & ~(w - 1);
      long src = j;
      switch (op) {
        case kIdx: src = seg + ((unsigned)o.param & (w - 1)); break;
        case kUp: src = ((j & (w - 1)) < (unsigned)o.param) ? (long)j : (long)j - o.param; break;
        case kDown: src = ((j & (w - 1)) + (unsigned)o.param >= w) ? (long)j : (long)j + o.param; break;
        case kXor: {
          const long x = (long)(j ^ (unsigned)o.param);
          src = (x > 31 || (unsigned)(x & ~(long)(w - 1)) > seg) ? (long)j : x;
          break;
        }
        default: break;
      }
      if (op == kIdx || op == kUp || op == kDown || op == kXor) {
        if (!(mask & (1u << src))) {
          fail("shuffle: source lane " + std::to_string(src) + " is not in the mask");
          break;
        }
        o.res = g_block.fibers[warp0 + src].val;
      } else if (op == kBallot) {
        o.res = ballot;
      } else if (op == kAll) {
        o.res = every;
      } else if (op == kAny) {
        o.res = some;
      } else {
        o.res = 0;
      }
      o.state = 2;
    }
    ++g_block.progress;
  }
}

inline void syncthreads() {
  Fiber *f = g_cur;
  const uint64_t gen = g_block.bar_gen;
  f->at_barrier = true;
  ++g_block.progress;
  for (;;) {
    if (g_abort_block) yield();
    if (g_block.bar_gen != gen) return;
    bool all = true;
    for (auto &o : g_block.fibers)
      if (!o.done && !o.at_barrier) all = false;
    if (all) {
      for (auto &o : g_block.fibers) o.at_barrier = false;
      ++g_block.bar_gen;
      ++g_block.progress;
      return;
    }
    yield();
  }
}

inline void run_grid(dim3 grid, dim3 block, void (*body)(void *), void *arg) {
  if (g_failed) return;
  const unsigned nt = block.x * block.y * block.z;
  if (nt == 0 || nt > 1024 || grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535) {
    fail("launch: bad configuration");
    return;
  }
  ++g_launches;
  g_gridDim = grid;
  g_blockDim = block;
  g_body = body;
  g_body_arg = arg;
  if (g_block.fibers.size() < nt) {
    size_t old = g_block.fibers.size();
    g_block.fibers.resize(nt);
    for (size_t t = old; t < nt; ++t) g_block.fibers[t].stack = static_cast<char *>(malloc(kStack));
    for (size_t t = 0; t < nt; ++t)
      if (!g_block.fibers[t].stack) {
        fail("launch: out of memory for fiber stacks");
        return;
      }
  }
  g_block.nthreads = nt;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        g_blockIdx = dim3(bx, by, bz);
        g_abort_block = false;
        for (unsigned t = 0; t < nt; ++t) {
          Fiber &f = g_block.fibers[t];
          char *stack = f.stack;
          f = Fiber();
          f.stack = stack;
          f.linear = t;
          f.tid = dim3(t % block.x, (t / block.x) % block.y, t / (block.x * block.y));
          fiber_start(f);
        }
        g_threads_run += nt;
        for (;;) {
          const uint64_t before = g_block.progress;
          bool live = false;
          for (unsigned t = 0; t < nt; ++t) {
            Fiber &f = g_block.fibers[t];
            if (f.done) continue;
            live = true;
            g_cur = &f;
            fiber_resume(f);
            g_cur = nullptr;
            if (g_abort_block) break;
          }
          if (g_abort_block || !live) break;
          if (g_block.progress == before) {
            fail("deadlock: every live thread of the block waits");
            break;
          }
        }
        if (g_failed) return;
      }
}

template <typename... P, typename... A>
cudaError_t launch(dim3 grid, dim3 block, size_t smem, cudaStream_t, void (*kern)(P...), A &&...args) {
  (void)smem;
  std::tuple<std::decay_t<P>...> packed(std::forward<A>(args)...);
  struct Call {
    void (*k)(P...);
    std::tuple<std::decay_t<P>...> *a;
  } call{kern, &packed};
  run_grid(
      grid, block,
      [](void *p) {
        Call *c = static_cast<Call *>(p);
        std::apply(c->k, *c->a);  // each thread gets its own copies of the by-value arguments
      },
      &call);
  return g_failed ? cudaErrorLaunchFailure : cudaSuccess;
}

template <typename T>
inline uint64_t bits(T v) {
  static_assert(sizeof(T) <= 8, "shuffle of at most 8 bytes");
  uint64_t u = 0;
  memcpy(&u, &v, sizeof(T));
  return u;
}
template <typename T>
inline T unbits(uint64_t u) {
  T v;
  memcpy(&v, &u, sizeof(T));
  return v;
}

inline int sms() {
  const char *e = getenv("LM_EMU_SMS");
  const int v = e ? atoi(e) : 2;
  return v > 0 ? v : 2;
}

}  // namespace lmemu

#define threadIdx (::lmemu::g_cur->tid)
#define blockIdx (::lmemu::g_blockIdx)
#define blockDim (::lmemu::g_blockDim)
#define gridDim (::lmemu::g_gridDim)

template <typename T>
inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  return lmemu::unbits<T>(lmemu::collective(lmemu::kIdx, mask, lmemu::bits(v), src, width));
}
template <typename T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32) {
  return lmemu::unbits<T>(lmemu::collective(lmemu::kUp, mask, lmemu::bits(v), (int)d, width));
}
template <typename T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32) {
  return lmemu::unbits<T>(lmemu::collective(lmemu::kDown, mask, lmemu::bits(v), (int)d, width));
}
template <typename T>
inline T __shfl_xor_sync(unsigned mask, T v, int lm, int width = 32) {
  return lmemu::unbits<T>(lmemu::collective(lmemu::kXor, mask, lmemu::bits(v), lm, width));
}
inline unsigned __ballot_sync(unsigned mask, int p) {
  return (unsigned)lmemu::collective(lmemu::kBallot, mask, p != 0, 0, 32);
}
inline int __all_sync(unsigned mask, int p) { return (int)lmemu::collective(lmemu::kAll, mask, p != 0, 0, 32); }
inline int __any_sync(unsigned mask, int p) { return (int)lmemu::collective(lmemu::kAny, mask, p != 0, 0, 32); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { lmemu::collective(lmemu::kSync, mask, 0, 0, 32); }
inline void __syncthreads() { lmemu::syncthreads(); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline uint64_t __umul64hi(uint64_t a, uint64_t b) {
  return (uint64_t)(((unsigned __int128)a * (unsigned __int128)b) >> 64);
}
template <typename T>
inline T __ldg(const T *p) {
  return *p;
}
// Fibers share one OS thread: plain read-modify-write is atomic here.
template <typename T>
inline T atomicOr(T *p, T v) {
  T o = *p;
  *p = o | v;
  return o;
}
template <typename T>
inline T atomicAdd(T *p, T v) {
  T o = *p;
  *p = o + v;
  return o;
}
template <typename T>
inline T atomicMax(T *p, T v) {
  T o = *p;
  *p = o < v ? v : o;
  return o;
}
template <typename T>
inline T atomicMin(T *p, T v) {
  T o = *p;
  *p = v < o ? v : o;
  return o;
}
template <typename A, typename B>
inline std::common_type_t<A, B> min(A a, B b) {
  return a < b ? a : b;
}
template <typename A, typename B>
inline std::common_type_t<A, B> max(A a, B b) {
  return a < b ? b : a;
}

// ------------------------------------------------------------------ runtime API stand-ins
inline cudaError_t cudaGetLastError() { return lmemu::g_failed ? cudaErrorLaunchFailure : cudaSuccess; }
inline cudaError_t cudaPeekAtLastError() { return cudaGetLastError(); }
inline const char *cudaGetErrorString(cudaError_t e) {
  return e == cudaSuccess ? "no error" : e == cudaErrorInvalidValue ? "invalid argument" : "emulated launch failure";
}
inline cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t = nullptr) {
  if (n && !p) return cudaErrorInvalidValue;
  if (n) memset(p, v, n);
  return cudaSuccess;
}
inline cudaError_t cudaGetDevice(int *d) {
  *d = 0;
  return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int) {
  if (a != cudaDevAttrMultiProcessorCount) return cudaErrorInvalidValue;
  *v = lmemu::sms();
  return cudaSuccess;
}
template <typename K>
inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, K, int threads, size_t) {
  *blocks = threads > 0 ? 2 : 0;
  return cudaSuccess;
}

namespace thrust {
template <typename T>
struct counting_iterator {
  T v;
  explicit counting_iterator(T x) : v(x) {}
  T operator[](ptrdiff_t i) const { return v + (T)i; }
};
}  // namespace thrust

namespace cub {
struct DeviceScan {
  template <typename In, typename Out, typename N>
  static cudaError_t InclusiveSum(void *tmp, size_t &bytes, In in, Out out, N n, cudaStream_t = nullptr) {
    if (!tmp) {
      bytes = 8;
      return cudaSuccess;
    }
    if (bytes < 8) return cudaErrorInvalidValue;
    std::remove_cv_t<std::remove_reference_t<decltype(out[0])>> acc{};
    for (N i = 0; i < n; ++i) {
      acc = acc + in[i];
      out[i] = acc;
    }
    return cudaSuccess;
  }
};
struct DeviceSelect {
  template <typename In, typename Flags, typename Out, typename Count, typename N>
  static cudaError_t Flagged(void *tmp, size_t &bytes, In in, Flags flags, Out out, Count count, N n,
                             cudaStream_t = nullptr) {
    if (!tmp) {
      bytes = 8;
      return cudaSuccess;
    }
    if (bytes < 8) return cudaErrorInvalidValue;
    N k = 0;
    for (N i = 0; i < n; ++i)
      if (flags[i]) out[k++] = in[i];
    *count = k;
    return cudaSuccess;
  }
};
}  // namespace cub

extern "C" const char *lm_emu_last_error(void);
extern "C" void lm_emu_reset(void);
extern "C" void lm_emu_stats(uint64_t *launches, uint64_t *threads, uint64_t *collectives);
