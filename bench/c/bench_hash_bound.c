/* How fast one core can hash documents with XXH3-64, against how fast it can read the
 * same bytes: the bound on hash64 over documents (issue 13).  A payload of N MB (default
 * 47, the shared corpus' size: more than this VM's 32 MB L3) of random bytes is cut into
 * strings of about 690 bytes (uniform 200..1180); one thread, CPU time, best of R rounds
 * (default 15), interleaved:
 *   read     a sum of every 8-byte word of the payload in vector registers, 4 independent sums
 *            (the loads only: what one core reads from memory; AVX2 loads where the CPU has them)
 *   hash64   lm_o64_hash64 on the offsets (the op StringTensor.hash64 runs on documents)
 *   in L2    lm_o64_hash64 on the strings of the first 1 MB only, 16 times a round (they stay
 *            in this core's 2 MB L2: the hash's own speed, no memory in the way)
 *   one str  lm_o64_hash64 on the whole payload as one string: XXH3's long loop streaming from
 *            memory with no per-string work at all (setup, last stripe, merge, short strings)
 * prints GB/s and ns a string for each: hashing from memory runs at most at the slower of
 * `read` and `in L2`.  Then one thread against two (wall time, best of R, interleaved):
 *   read x2  each of two threads reads its half of the payload (the loads only): how much more
 *            this machine's memory gives two cores than one, the bound on how any memory-bound
 *            op (equality and hashing of documents) can scale on 2 threads
 *   hash64   lm_o64_hash64 with 1 and with 2 threads (exec {2, 0}: the core's pool)
 *
 *   build-cmake/bench_hash_bound [N_MB] [R]
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <time.h>

#include "luminamoon/string_tensor.h"

typedef uint64_t v4 __attribute__((vector_size(32))); /* GCC/Clang vectors: 2 SSE2 or 1 AVX2 register */

/* the sum of every 8-byte word of p[0..bytes) (bytes a multiple of 128), 4 independent vector sums */
#define READ_BODY                                        \
  v4 s0 = {0, 0, 0, 0}, s1 = s0, s2 = s0, s3 = s0;       \
  for (size_t i = 0; i + 128 <= bytes; i += 128) {       \
    v4 a, b, c, d;                                       \
    memcpy(&a, p + i, 32);                               \
    memcpy(&b, p + i + 32, 32);                          \
    memcpy(&c, p + i + 64, 32);                          \
    memcpy(&d, p + i + 96, 32);                          \
    s0 += a;                                             \
    s1 += b;                                             \
    s2 += c;                                             \
    s3 += d;                                             \
  }                                                      \
  s0 += s1 + s2 + s3;                                    \
  return s0[0] + s0[1] + s0[2] + s0[3];
static uint64_t read_sse2(const uint8_t *p, size_t bytes) { READ_BODY }
#if defined(__x86_64__) && defined(__GNUC__)
/* 32-byte loads where the CPU has AVX2: the SSE2 loop reads memory slower on this Zen 4
 * VM (21.9 against 33 GB/s), so it would understate the bound */
__attribute__((target("avx2"))) static uint64_t read_avx2(const uint8_t *p, size_t bytes) { READ_BODY }
#endif
static uint64_t read_all(const uint8_t *p, size_t bytes, int avx2) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (avx2) return read_avx2(p, bytes);
#endif
  (void)avx2;
  return read_sse2(p, bytes);
}

typedef struct {
  const uint8_t *p;
  size_t bytes;
  int avx2;
  uint64_t sum;
} read_job;

static void *read_thread(void *arg) {
  read_job *j = (read_job *)arg;
  j->sum = read_all(j->p, j->bytes, j->avx2);
  return NULL;
}

static double wall_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static double cpu_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

int main(int argc, char **argv) {
  const size_t mb = argc > 1 ? (size_t)atol(argv[1]) : 47;
  const int rounds = argc > 2 ? atoi(argv[2]) : 15;
  const size_t bytes = mb << 20;
  uint8_t *data = malloc(bytes + 8);
  if (!data) return 1;
  uint64_t x = 88172645463325252ull;
  for (size_t i = 0; i < bytes; i++) { /* xorshift bytes */
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    data[i] = (uint8_t)x;
  }
  size_t n = 0, cap = bytes / 200 + 2;
  int64_t *off = malloc(sizeof(int64_t) * (cap + 1));
  uint64_t *out = malloc(sizeof(uint64_t) * cap);
  if (!off || !out) return 1;
  off[0] = 0;
  while ((size_t)off[n] < bytes && n < cap) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    size_t len = 200 + (size_t)(x % 981);
    if ((size_t)off[n] + len > bytes) len = bytes - (size_t)off[n];
    off[n + 1] = off[n] + (int64_t)len;
    n++;
  }
  const lm_exec one = {1, 0};
  int avx2 = 0;
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  avx2 = __builtin_cpu_supports("avx2");
#endif
  double best_read = 1e30, best_hash = 1e30, best_l2 = 1e30, best_one = 1e30;
  const int64_t whole[2] = {0, (int64_t)bytes};
  size_t n2 = 0; /* the strings of the first 1 MB */
  while (n2 < n && (size_t)off[n2 + 1] <= ((size_t)1 << 20)) n2++;
  uint64_t sink = 0;
  for (int r = 0; r < rounds; r++) {
    double t0 = cpu_ns();
    sink += read_all(data, bytes, avx2);
    double t1 = cpu_ns();
    if (lm_o64_hash64(off, n, data, 0, out, &one) != LM_OK) return 1;
    double t2 = cpu_ns();
    sink += out[n / 2];
    if (lm_o64_hash64(off, n2, data, 0, out, &one) != LM_OK) return 1; /* into L2 */
    double t3 = cpu_ns();
    for (int k = 0; k < 16; k++)
      if (lm_o64_hash64(off, n2, data, 0, out, &one) != LM_OK) return 1;
    double t4 = cpu_ns();
    sink += out[n2 / 2];
    if ((t4 - t3) / 16 < best_l2) best_l2 = (t4 - t3) / 16;
    if (lm_o64_hash64(whole, 1, data, 0, out, &one) != LM_OK) return 1;
    double t5 = cpu_ns();
    sink += out[0];
    if (t5 - t4 < best_one) best_one = t5 - t4;
    if (t1 - t0 < best_read) best_read = t1 - t0;
    if (t2 - t1 < best_hash) best_hash = t2 - t1;
  }
  printf("payload %zu MB, %zu strings (%.0f B each), best of %d rounds, one thread (CPU time):\n", mb, n,
         (double)bytes / (double)n, rounds);
  printf("  read   %6.1f GB/s  %6.1f ns a string (%s loads)\n", (double)bytes / best_read, best_read / (double)n,
         avx2 ? "AVX2 32-byte" : "SSE2 16-byte");
  printf("  hash64 %6.1f GB/s  %6.1f ns a string\n", (double)bytes / best_hash, best_hash / (double)n);
  if (n2)
    printf("  in L2  %6.1f GB/s  %6.1f ns a string (the first %zu strings, %.2f MB, 16 times)\n",
           (double)off[n2] / best_l2, best_l2 / (double)n2, n2, (double)off[n2] / 1e6);
  printf("  one str %5.1f GB/s  (the whole payload as one string)\n", (double)bytes / best_one);
  /* one thread against two, wall time */
  double w_read1 = 1e30, w_read2 = 1e30, w_hash1 = 1e30, w_hash2 = 1e30;
  const lm_exec two = {2, 0};
  const size_t half = (bytes / 2) & ~(size_t)127;
  for (int r = 0; r < rounds; r++) {
    double t0 = wall_ns();
    sink += read_all(data, bytes, avx2);
    double t1 = wall_ns();
    read_job j[2] = {{data, half, avx2, 0}, {data + half, bytes - half, avx2, 0}};
    pthread_t th;
    if (pthread_create(&th, NULL, read_thread, &j[1]) != 0) return 1;
    read_thread(&j[0]);
    pthread_join(th, NULL);
    double t2 = wall_ns();
    sink += j[0].sum + j[1].sum;
    if (lm_o64_hash64(off, n, data, 0, out, &one) != LM_OK) return 1;
    double t3 = wall_ns();
    if (lm_o64_hash64(off, n, data, 0, out, &two) != LM_OK) return 1;
    double t4 = wall_ns();
    sink += out[n / 3];
    if (t1 - t0 < w_read1) w_read1 = t1 - t0;
    if (t2 - t1 < w_read2) w_read2 = t2 - t1;
    if (t3 - t2 < w_hash1) w_hash1 = t3 - t2;
    if (t4 - t3 < w_hash2) w_hash2 = t4 - t3;
  }
  printf("one thread against two (wall time, best of %d, interleaved):\n", rounds);
  printf("  read    1: %6.1f GB/s  2: %6.1f GB/s  speed-up %.2fx\n", (double)bytes / w_read1,
         (double)bytes / w_read2, w_read1 / w_read2);
  printf("  hash64  1: %6.1f GB/s  2: %6.1f GB/s  speed-up %.2fx\n", (double)bytes / w_hash1,
         (double)bytes / w_hash2, w_hash1 / w_hash2);
  printf("(%llx)\n", (unsigned long long)sink);
  free(data);
  free(off);
  free(out);
  return 0;
}
