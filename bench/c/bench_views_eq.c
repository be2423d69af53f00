/* fast_eq(StringTensor) in C, without Python around it (issue 13): equality of two string
 * arrays built as bench/bench_strings.py builds them, from a docs file (bench_docs.h; made from
 * the shared corpus as bench_fused_threads.c says): the regime's strings (words: split on ASCII
 * whitespace; lines: split on '\n'; docs: the documents), and the right-hand side in a payload
 * of its own with every other string replaced by its neighbour (about half the pairs equal).
 * One thread, CPU time, best of R rounds, the rows interleaved in every round:
 *   views    lm_views_equal (what StringTensor.fast_eq(StringTensor) runs on the CPU)
 *   offsets  lm_o32_equal (torch.ops.luminamoon.equal on int32 offsets)
 *   peer     per pair: the two lengths from int32 offsets, then memcmp when they are equal
 *            (what an Arrow kernel does per element, without its null handling)
 *   masked   (CPUs with AVX-512 BW) per pair, no branch on the lengths up to 128 bytes: masked
 *            loads and compares (masked512 below)
 *   stream   one memcmp of the left payload against a copy of it: the two payloads' bytes read
 *            as two sequential streams, no per-pair work (the pairs' own bytes lie in both
 *            payloads' every cache line where strings are shorter than a line or two)
 *   read     the floor of any per-pair kernel on the offsets layout: both offsets arrays and
 *            both payloads loaded once each (32-byte loads ORed together, no compare, no
 *            branch on a pair), walked 256 pairs at a time in the order a kernel walks them;
 *            a kernel needs every offset and, where strings are shorter than a cache line or
 *            two, nearly every line of both payloads (lines: ~92% / ~97% of them hold a byte of
 *            an equal-length pair), so no kernel reading from memory is faster than this row
 * prints ns a string for each and peer / row.  Under valgrind --tool=callgrind use R = 1 and a
 * small N: the instruction counts of the first loop repeat exactly.
 *
 *   build-cmake/bench_views_eq DOCS_FILE words|lines|docs [N] [R]
 */
#define _GNU_SOURCE
#include <ctype.h>

#include "bench_docs.h"
#include "luminamoon/string_tensor.h"

typedef struct {
  size_t n;
  int32_t *off;
  uint8_t *data;
} arr;

static void push(arr *a, size_t *cap, const uint8_t *s, size_t len, size_t *bytes_cap) {
  if (a->n + 2 > *cap) {
    *cap = *cap ? 2 * *cap : 1024;
    a->off = (int32_t *)realloc(a->off, *cap * 4);
  }
  const size_t at = a->n ? (size_t)a->off[a->n] : 0;
  if (at + len > *bytes_cap) {
    *bytes_cap = 2 * (at + len) + 4096;
    a->data = (uint8_t *)realloc(a->data, *bytes_cap);
  }
  if (!a->n) a->off[0] = 0;
  memcpy(a->data + at, s, len);
  a->off[a->n + 1] = (int32_t)(at + len);
  a->n++;
}

static int peer_equal(const arr *a, const arr *b, uint8_t *out) {
  for (size_t i = 0; i < a->n; i++) {
    const int32_t la = a->off[i + 1] - a->off[i], lb = b->off[i + 1] - b->off[i];
    out[i] = la == lb && memcmp(a->data + a->off[i], b->data + b->off[i], (size_t)la) == 0;
  }
  return 0;
}


#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* The same per pair with no branch on the lengths for strings up to 128 bytes: AVX-512 masked
 * loads of min(la, lb) bytes (two 64-byte halves, none read past either string) compared in
 * one step each; memcmp only past 128 bytes.  It trusts the offsets (a benchmark's own
 * arrays).  A kernel with ~30 instructions a pair and no mispredicted size class, against
 * memcmp's ~20 per call and its branches: if it is no faster, the pairs' bytes (memory),
 * not the instructions, set the time. */
__attribute__((target("avx512f,avx512bw,avx512vl,bmi2"))) static int masked512(const arr *a, const arr *b, uint8_t *out) {
  const int32_t *oa = a->off, *ob = b->off;
  const uint8_t *da = a->data, *db = b->data;
  uint32_t a0 = (uint32_t)oa[0], x0 = (uint32_t)ob[0];
  for (size_t i = 0; i < a->n; i++) {
    const uint32_t a1 = (uint32_t)oa[i + 1], x1 = (uint32_t)ob[i + 1];
    const uint32_t la = a1 - a0, lb = x1 - x0;
    const uint32_t m = la < lb ? la : lb;
    const uint32_t m1 = m < 64 ? m : 64, r2 = m - m1, m2 = r2 < 64 ? r2 : 64;
    const __mmask64 k1 = _bzhi_u64(~0ull, m1), k2 = _bzhi_u64(~0ull, m2);
    const uint8_t *p = da + a0, *q = db + x0;
    __mmask64 ne = _mm512_mask_cmpneq_epi8_mask(k1, _mm512_maskz_loadu_epi8(k1, p), _mm512_maskz_loadu_epi8(k1, q));
    ne |= _mm512_mask_cmpneq_epi8_mask(k2, _mm512_maskz_loadu_epi8(k2, p + 64), _mm512_maskz_loadu_epi8(k2, q + 64));
    unsigned e = (la == lb) & (ne == 0);
    if (e && la > 128) e = memcmp(p + 128, q + 128, la - 128) == 0;
    out[i] = (uint8_t)e;
    a0 = a1;
    x0 = x1;
  }
  return 0;
}
#endif

/* The read floor (the "read" row): every offset and payload byte of both sides loaded once. */
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2"))) static uint64_t read_floor(const arr *a, const arr *b) {
  __m256i acc = _mm256_setzero_si256();
#define LM_RD(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
  for (size_t i = 0; i < a->n; i += 256) {
    const size_t j = i + 256 < a->n ? i + 256 : a->n;
    const uint8_t *oa = (const uint8_t *)(a->off + i), *ob = (const uint8_t *)(b->off + i);
    const uint8_t *pa = a->data + a->off[i], *pb = b->data + b->off[i];
    const size_t lo = (j - i) * 4, la = (size_t)(a->off[j] - a->off[i]), lb = (size_t)(b->off[j] - b->off[i]);
    const size_t l = la < lb ? la : lb;
    size_t k = 0;
    for (k = 0; k + 32 <= lo; k += 32) acc = _mm256_or_si256(acc, _mm256_or_si256(LM_RD(oa + k), LM_RD(ob + k)));
    for (k = 0; k + 32 <= l; k += 32) acc = _mm256_or_si256(acc, _mm256_or_si256(LM_RD(pa + k), LM_RD(pb + k)));
    for (size_t q = k; q + 32 <= la; q += 32) acc = _mm256_or_si256(acc, LM_RD(pa + q));
    for (size_t q = k; q + 32 <= lb; q += 32) acc = _mm256_or_si256(acc, LM_RD(pb + q));
  }
#undef LM_RD
  return (uint64_t)_mm256_extract_epi64(acc, 0) ^ (uint64_t)_mm256_extract_epi64(acc, 3);
}
#else
static uint64_t read_floor(const arr *a, const arr *b) {
  uint64_t s = 0;
  for (size_t i = 0; i <= a->n; i++) s |= (uint64_t)a->off[i] | (uint64_t)b->off[i];
  for (size_t k = 0; k < (size_t)a->off[a->n]; k++) s |= a->data[k];
  for (size_t k = 0; k < (size_t)b->off[b->n]; k++) s |= b->data[k];
  return s;
}
#endif

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s DOCS_FILE words|lines|docs [N] [R]\n", argv[0]);
    return 2;
  }
  corpus c;
  if (load(argv[1], &c)) {
    fprintf(stderr, "cannot read %s\n", argv[1]);
    return 2;
  }
  (void)get_usage; /* bench_docs.h's helpers this benchmark does not need */
  (void)machine_busy;
  const char *regime = argv[2];
  size_t want = argc > 3 ? strtoull(argv[3], NULL, 10) : 0;
  const int rounds = argc > 4 ? atoi(argv[4]) : 15;
  if (!want) want = !strcmp(regime, "words") ? 1000000 : !strcmp(regime, "lines") ? 500000 : (size_t)c.n;
  arr a = {0, NULL, NULL}, b = {0, NULL, NULL};
  size_t cap = 0, bcap = 0, cap2 = 0, bcap2 = 0;
  for (uint64_t d = 0; d < c.n && a.n < want; d++) {
    const uint8_t *s = c.data + c.off[d], *e = c.data + c.off[d + 1];
    if (!strcmp(regime, "docs")) {
      push(&a, &cap, s, (size_t)(e - s), &bcap);
    } else if (!strcmp(regime, "lines")) {
      const uint8_t *p = s;
      for (const uint8_t *q = s; q <= e && a.n < want; q++)
        if (q == e || *q == '\n') {
          push(&a, &cap, p, (size_t)(q - p), &bcap);
          p = q + 1;
        }
    } else {
      const uint8_t *p = s;
      while (p < e && a.n < want) {
        while (p < e && isspace(*p)) p++;
        const uint8_t *q = p;
        while (q < e && !isspace(*q)) q++;
        if (q > p) push(&a, &cap, p, (size_t)(q - p), &bcap);
        p = q;
      }
    }
  }
  const size_t n = a.n;
  for (size_t i = 0; i < n; i++) {
    const size_t j = i % 2 == 0 ? i : (i + 1) % n;
    push(&b, &cap2, a.data + a.off[j], (size_t)(a.off[j + 1] - a.off[j]), &bcap2);
  }
  lm_string_view *va = (lm_string_view *)malloc(n * sizeof *va), *vb = (lm_string_view *)malloc(n * sizeof *vb);
  if (lm_views_from_offsets32(a.off, n, a.data, (size_t)a.off[n], 0, va, NULL) ||
      lm_views_from_offsets32(b.off, n, b.data, (size_t)b.off[n], 0, vb, NULL)) {
    fprintf(stderr, "views failed (payload over 2 GiB?)\n");
    return 2;
  }
  const uint8_t *pda[1] = {a.data}, *pdb[1] = {b.data};
  const size_t psa[1] = {(size_t)a.off[n]}, psb[1] = {(size_t)b.off[n]};
  const lm_payloads pa = {pda, psa, 1}, pb = {pdb, psb, 1};
  uint8_t *o1 = (uint8_t *)malloc(n + 1), *o2 = (uint8_t *)malloc(n + 1), *o3 = (uint8_t *)malloc(n + 1), *o4 = (uint8_t *)malloc(n + 1);
  double best[6] = {1e30, 1e30, 1e30, 1e30, 1e30, 1e30};
  const size_t abytes = (size_t)a.off[n];
  uint8_t *acopy = (uint8_t *)malloc(abytes + 1);
  memcpy(acopy, a.data, abytes);
  volatile int sink = 0;
  int have512 = 0;
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  have512 = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("bmi2");
#endif
  size_t equal = 0;
  for (int r = 0; r < rounds; r++) {
    /* the rows in a rotating order: the arrays are larger than the L3, and what one row leaves
     * there helps or hurts the next */
    for (int q = 0; q < 6; q++) {
      const int k = (q + r) % 6;
      const double t0 = now(CLOCK_PROCESS_CPUTIME_ID);
      if (k == 0 && lm_views_equal(va, &pa, vb, &pb, n, o1, NULL)) return 3;
      if (k == 1 && lm_o32_equal(a.off, a.data, b.off, b.data, n, o2, NULL)) return 3;
      if (k == 2) peer_equal(&a, &b, o3);
      if (k == 3) {
        if (have512) masked512(&a, &b, o4);
        else memcpy(o4, o3, n);
      }
      if (k == 4) sink += memcmp(a.data, acopy, abytes);
      if (k == 5) sink += (int)(read_floor(&a, &b) & 1);
      const double t = now(CLOCK_PROCESS_CPUTIME_ID) - t0;
      if (t < best[k]) best[k] = t;
    }
    if (memcmp(o1, o3, n) || memcmp(o2, o3, n) || memcmp(o4, o3, n)) {
      fprintf(stderr, "answers differ\n");
      return 4;
    }
  }
  for (size_t i = 0; i < n; i++) equal += o3[i];
  printf("%s: %zu strings, %.1f MB (%.1f B each), %zu pairs equal\n", regime, n, (double)a.off[n] / 1e6,
         (double)a.off[n] / (double)n, equal);
  static const char *names[6] = {"views  ", "offsets", "peer   ", "masked ", "stream ", "read   "};
  const double bytes = (double)abytes + (double)b.off[n];
  for (int k = 0; k < 6; k++)
    if (k != 3 || have512)
      printf("  %s %6.2f ns a string   peer / this %.2fx   %5.1f GB/s of the two payloads\n", names[k],
             best[k] / (double)n * 1e9, best[2] / best[k], bytes / best[k] / 1e9);
  (void)sink;
  return 0;
}
