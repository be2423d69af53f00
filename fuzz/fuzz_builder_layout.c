/* fuzz_builder_layout.c — the StringTensor builder, views <-> offsets
 * conversions, views/offsets validation and the ops of both layouts.
 *
 * Input: a parameter header, then length-prefixed strings (fuzz_common.h), and
 * what is left over is used as raw views/offsets to validate.
 * Invariants (against naive references written here):
 *  - builder: LM_EUTF8 exactly when validating and the reference says invalid;
 *    finish holds exactly the appended strings; lm_views_validate accepts it;
 *  - views -> offsets (32 and 64): offsets[0] = 0, monotone, data = concatenation;
 *    offsets -> views -> offsets is exact; 1 thread and 3 threads agree;
 *  - ops (prefix_match, equal_scalar, equal, hash64, pad_bytes, gather, compact)
 *    on views and on offsets equal the naive results; slice/take/compact on the tensor;
 *  - raw bytes as views: lm_views_validate / lm_views_check_bounds equal a
 *    reference check; ops never crash and succeed whenever the bounds check does;
 *  - raw bytes as offsets: lm_offsets{32,64}_validate equal a reference check.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "luminamoon/hash.h"
#include "luminamoon/string_tensor.h"

#define MAX_STRS 64

typedef struct {
  const uint8_t *s;
  size_t len;
} str;

static int starts_with(str a, const uint8_t *p, size_t pl) { return a.len >= pl && (pl == 0 || memcmp(a.s, p, pl) == 0); }
static int equals(str a, const uint8_t *p, size_t pl) { return a.len == pl && (pl == 0 || memcmp(a.s, p, pl) == 0); }

/* The bytes a raw (bounds-checked) view refers to. */
static str view_str(const lm_string_view *v, const uint8_t *const *bufs) {
  str r;
  r.len = v->len;
  r.s = v->len <= LM_INLINE_MAX ? v->prefix_or_inline : bufs[lm_sv_buffer_index(v)] + lm_sv_offset(v);
  return r;
}

static void check_pad(const str *ss, size_t n, size_t max_len, int64_t pad, int64_t bos, int64_t eos,
                      const int64_t *tokens, const int64_t *lengths) {
  for (size_t i = 0; i < n; i++) {
    size_t room = max_len, k = 0;
    int64_t row[64];
    CHECK(max_len <= 64);
    if (bos >= 0 && room) row[k++] = bos, room--;
    size_t content = ss[i].len;
    size_t reserve_eos = eos >= 0 ? 1 : 0;
    if (room < reserve_eos) reserve_eos = room;
    if (content > room - reserve_eos) content = room - reserve_eos;
    for (size_t j = 0; j < content; j++) row[k++] = ss[i].s[j];
    if (eos >= 0 && k < max_len) row[k++] = eos;
    CHECK(lengths[i] == (int64_t)k);
    for (size_t j = 0; j < max_len; j++) CHECK(tokens[i * max_len + j] == (j < k ? row[j] : pad));
  }
}

static void offsets_roundtrip(const str *ss, size_t n, const lm_string_view *views, const uint8_t *const *bufs,
                              const lm_exec *ex) {
  uint64_t total = 0;
  CHECK(lm_views_total_bytes(views, n, &total) == LM_OK);
  uint64_t want = 0;
  for (size_t i = 0; i < n; i++) want += ss[i].len;
  CHECK(total == want);
  int32_t *o32 = malloc((n + 1) * sizeof *o32);
  int64_t *o64 = malloc((n + 1) * sizeof *o64);
  uint8_t *d32 = malloc(total + 1), *d64 = malloc(total + 1);
  CHECK(lm_views_to_offsets32(views, n, bufs, o32, d32, ex) == LM_OK);
  CHECK(lm_views_to_offsets64(views, n, bufs, o64, d64, ex) == LM_OK);
  CHECK(o32[0] == 0 && o64[0] == 0);
  for (size_t i = 0; i < n; i++) {
    CHECK(o32[i + 1] >= o32[i] && o64[i + 1] == o32[i + 1]);
    CHECK((size_t)(o32[i + 1] - o32[i]) == ss[i].len);
    CHECK(ss[i].len == 0 || memcmp(d32 + o32[i], ss[i].s, ss[i].len) == 0);
  }
  CHECK(total == 0 || memcmp(d32, d64, total) == 0);
  CHECK(lm_offsets32_validate(o32, n, total) == LM_OK);
  CHECK(lm_offsets64_validate(o64, n, total) == LM_OK);

  /* offsets -> views -> offsets */
  lm_string_view *v2 = calloc(n + 1, sizeof *v2), *v3 = calloc(n + 1, sizeof *v3);
  CHECK(lm_views_from_offsets32(o32, n, d32, total, 0, v2, ex) == LM_OK);
  CHECK(lm_views_from_offsets64(o64, n, d64, total, 0, v3, ex) == LM_OK);
  const uint8_t *b32[1] = {d32}, *b64[1] = {d64};
  size_t sz[1] = {total};
  CHECK(lm_views_validate(v2, n, b32, sz, 1) == LM_OK);
  CHECK(lm_views_validate(v3, n, b64, sz, 1) == LM_OK);
  for (size_t i = 0; i < n; i++) {
    str a = view_str(&v2[i], b32), b = view_str(&v3[i], b64);
    CHECK(equals(a, ss[i].s, ss[i].len) && equals(b, ss[i].s, ss[i].len));
    CHECK(lm_sv_head(&v2[i]) == lm_sv_head(&views[i])); /* same length + prefix word */
  }
  int32_t *o32b = malloc((n + 1) * sizeof *o32b);
  uint8_t *d32b = malloc(total + 1);
  CHECK(lm_views_to_offsets32(v2, n, b32, o32b, d32b, NULL) == LM_OK);
  CHECK(memcmp(o32, o32b, (n + 1) * sizeof *o32) == 0 && (total == 0 || memcmp(d32, d32b, total) == 0));

  /* offsets-layout ops agree with the naive results */
  const uint8_t *pre = ss[0].s;
  size_t pl = ss[0].len > 5 ? 5 : ss[0].len;
  uint8_t *m32 = malloc(n + 1), *m64 = malloc(n + 1);
  CHECK(lm_o32_prefix_match(o32, n, d32, pre, pl, m32, ex) == LM_OK);
  CHECK(lm_o64_prefix_match(o64, n, d64, pre, pl, m64, ex) == LM_OK);
  for (size_t i = 0; i < n; i++) CHECK(m32[i] == starts_with(ss[i], pre, pl) && m64[i] == m32[i]);
  CHECK(lm_o32_equal_scalar(o32, n, d32, ss[n - 1].s, ss[n - 1].len, m32, ex) == LM_OK);
  CHECK(lm_o64_equal_scalar(o64, n, d64, ss[n - 1].s, ss[n - 1].len, m64, ex) == LM_OK);
  for (size_t i = 0; i < n; i++) CHECK(m32[i] == equals(ss[i], ss[n - 1].s, ss[n - 1].len) && m64[i] == m32[i]);
  uint64_t *h = malloc((n + 1) * 8);
  CHECK(lm_o32_hash64(o32, n, d32, 7, h, ex) == LM_OK);
  for (size_t i = 0; i < n; i++) CHECK(h[i] == lm_hash64(ss[i].s, ss[i].len, 7));
  CHECK(lm_o64_hash64(o64, n, d64, 7, h, ex) == LM_OK);
  for (size_t i = 0; i < n; i++) CHECK(h[i] == lm_hash64(ss[i].s, ss[i].len, 7));

  size_t max_len = (ss[0].len % 9) + 1;
  int64_t *tok = malloc(n * max_len * 8), *lens = malloc(n * 8);
  int64_t bos = (ss[0].len & 1) ? 256 : -1, eos = (ss[0].len & 2) ? 257 : -1;
  CHECK(lm_o32_pad_bytes(o32, n, d32, max_len, 300, bos, eos, tok, lens, ex) == LM_OK);
  check_pad(ss, n, max_len, 300, bos, eos, tok, lens);
  CHECK(lm_o64_pad_bytes(o64, n, d64, max_len, 300, bos, eos, tok, lens, ex) == LM_OK);
  check_pad(ss, n, max_len, 300, bos, eos, tok, lens);

  /* gather: reversed order plus one out-of-range index that must be refused */
  int64_t *idx = malloc((n + 1) * 8);
  for (size_t k = 0; k < n; k++) idx[k] = (int64_t)(n - 1 - k);
  int32_t *go = malloc((n + 1) * 4);
  CHECK(lm_o32_gather_offsets(o32, n, idx, n, go) == LM_OK);
  uint8_t *gd = malloc((size_t)go[n] + 1);
  CHECK(lm_o32_gather_data(o32, d32, idx, n, go, gd, ex) == LM_OK);
  for (size_t k = 0; k < n; k++) {
    str g = {gd + go[k], (size_t)(go[k + 1] - go[k])};
    CHECK(equals(g, ss[n - 1 - k].s, ss[n - 1 - k].len));
  }
  idx[n] = (int64_t)n;
  int32_t *go2 = malloc((n + 2) * 4);
  CHECK(lm_o32_gather_offsets(o32, n, idx, n + 1, go2) == LM_ERANGE);
  /* compact: keep strings of odd length */
  uint8_t *mask = malloc(n + 1);
  size_t kn = 0, want_n = 0;
  uint64_t kb = 0, want_b = 0;
  for (size_t i = 0; i < n; i++) {
    mask[i] = (uint8_t)(ss[i].len & 1 ? 1 + (ss[i].len % 200) : 0);
    if (mask[i]) want_n++, want_b += ss[i].len;
  }
  CHECK(lm_o64_compact_count(o64, n, mask, &kn, &kb) == LM_OK && kn == want_n && kb == want_b);
  int64_t *co = malloc((kn + 1) * 8);
  uint8_t *cd = malloc(kb + 1);
  CHECK(lm_o64_compact(o64, n, d64, mask, co, cd) == LM_OK);
  for (size_t i = 0, k = 0; i < n; i++) {
    if (!mask[i]) continue;
    str c = {cd + co[k], (size_t)(co[k + 1] - co[k])};
    CHECK(equals(c, ss[i].s, ss[i].len));
    k++;
  }
  free(o32), free(o64), free(d32), free(d64), free(v2), free(v3), free(o32b), free(d32b), free(m32), free(m64);
  free(h), free(tok), free(lens), free(idx), free(go), free(gd), free(go2), free(mask), free(co), free(cd);
}

static void tensor_checks(const str *ss, size_t n, lm_string_tensor *st, const lm_exec *ex) {
  CHECK(st->n == n);
  size_t *sizes = calloc(st->nbuffers + 1, sizeof *sizes);
  for (uint32_t b = 0; b < st->nbuffers; b++) {
    sizes[b] = lm_buffer_size(st->buffers[b]);
    CHECK(st->buffer_data[b] == lm_buffer_data(st->buffers[b]));
  }
  CHECK(lm_views_validate(st->views, n, st->buffer_data, sizes, st->nbuffers) == LM_OK);
  CHECK(lm_views_check_bounds(st->views, n, sizes, st->nbuffers) == LM_OK);
  for (size_t i = 0; i < n; i++) {
    const uint8_t *d;
    uint32_t l;
    CHECK(lm_st_get(st, i, &d, &l) == LM_OK);
    CHECK(equals((str){d, l}, ss[i].s, ss[i].len));
  }
  const uint8_t *d0;
  uint32_t l0;
  CHECK(lm_st_get(st, n, &d0, &l0) == LM_ERANGE);

  /* views ops vs naive */
  lm_payloads p = {st->buffer_data, sizes, st->nbuffers};
  uint8_t *m = malloc(n);
  size_t pl = ss[n - 1].len > 6 ? 6 : ss[n - 1].len;
  CHECK(lm_views_prefix_match(st->views, n, &p, ss[n - 1].s, pl, m, ex) == LM_OK);
  for (size_t i = 0; i < n; i++) CHECK(m[i] == starts_with(ss[i], ss[n - 1].s, pl));
  CHECK(lm_views_equal_scalar(st->views, n, &p, ss[0].s, ss[0].len, m, ex) == LM_OK);
  for (size_t i = 0; i < n; i++) CHECK(m[i] == equals(ss[i], ss[0].s, ss[0].len));
  uint64_t *h = malloc(n * 8);
  CHECK(lm_views_hash64(st->views, n, &p, 11, h, ex) == LM_OK);
  for (size_t i = 0; i < n; i++) CHECK(h[i] == lm_hash64(ss[i].s, ss[i].len, 11));

  /* slice / take / compact share the payload and keep the strings */
  size_t b = n / 3, e = n - n / 4;
  lm_string_tensor *sl = NULL, *tk = NULL, *cp = NULL;
  CHECK(lm_st_slice(st, b, e, &sl) == LM_OK && sl->n == e - b);
  int64_t *idx = malloc(n * 8);
  for (size_t k = 0; k < n; k++) idx[k] = (int64_t)((k * 7 + 3) % n);
  CHECK(lm_st_take(st, idx, n, &tk) == LM_OK && tk->n == n);
  for (size_t k = 0; k < n; k++) m[k] = (uint8_t)(ss[k].len % 3 == 0);
  CHECK(lm_st_compact(st, m, &cp) == LM_OK);
  /* equal(a, b) on views, tensor against its own take */
  lm_payloads pt = {tk->buffer_data, sizes, tk->nbuffers};
  uint8_t *eq = malloc(n);
  CHECK(tk->nbuffers == st->nbuffers);
  CHECK(lm_views_equal(st->views, &p, tk->views, &pt, n, eq, ex) == LM_OK);
  for (size_t k = 0; k < n; k++) {
    const uint8_t *d;
    uint32_t l;
    CHECK(lm_st_get(tk, k, &d, &l) == LM_OK && equals((str){d, l}, ss[idx[k]].s, ss[idx[k]].len));
    str other = ss[idx[k]];
    CHECK(eq[k] == equals(ss[k], other.s, other.len));
  }
  for (size_t k = 0; k < sl->n; k++) {
    const uint8_t *d;
    uint32_t l;
    CHECK(lm_st_get(sl, k, &d, &l) == LM_OK && equals((str){d, l}, ss[b + k].s, ss[b + k].len));
  }
  for (size_t k = 0, j = 0; k < n; k++) {
    if (!m[k]) continue;
    const uint8_t *d;
    uint32_t l;
    CHECK(lm_st_get(cp, j++, &d, &l) == LM_OK && equals((str){d, l}, ss[k].s, ss[k].len));
  }
  idx[0] = -1;
  lm_string_tensor *bad = NULL;
  CHECK(lm_st_take(st, idx, n, &bad) == LM_ERANGE);
  lm_st_destroy(sl), lm_st_destroy(tk), lm_st_destroy(cp);
  offsets_roundtrip(ss, n, st->views, st->buffer_data, ex);
  free(sizes), free(m), free(h), free(idx), free(eq);
}

/* Raw bytes as views + two payload buffers: validation against the reference,
 * then the ops must never read out of bounds. */
static void raw_views(const uint8_t *raw, size_t len, const uint8_t *bufbytes, size_t buflen) {
  size_t n = len / 16;
  if (!n) return;
  lm_string_view *v = malloc(n * 16);
  memcpy(v, raw, n * 16);
  /* two buffers: the first half and the whole of bufbytes (heap copies so ASan sees their bounds) */
  size_t s0 = buflen / 2, s1 = buflen;
  uint8_t *b0 = malloc(s0 + 1), *b1 = malloc(s1 + 1);
  memcpy(b0, bufbytes, s0);
  memcpy(b1, bufbytes, s1);
  const uint8_t *bufs[2] = {b0, b1};
  size_t sizes[2] = {s0, s1};
  int ref_bounds = 1, ref_valid = 1, ref_pad = 1;
  for (size_t i = 0; i < n; i++) {
    const lm_string_view *x = &v[i];
    if (x->len <= LM_INLINE_MAX) {
      uint8_t bytes[12];
      memcpy(bytes, x->prefix_or_inline, 4);
      memcpy(bytes + 4, x->suffix_or_offset, 8);
      for (uint32_t k = x->len; k < 12; k++)
        if (bytes[k]) ref_valid = ref_pad = 0;
      continue;
    }
    uint32_t b = lm_sv_buffer_index(x), off = lm_sv_offset(x);
    int in = x->len <= 0x7fffffffu && b < 2 && (uint64_t)off + x->len <= sizes[b];
    if (!in) ref_bounds = ref_valid = 0;
    else if (memcmp(bufs[b] + off, x->prefix_or_inline, 4) != 0) ref_valid = 0;
  }
  lm_status vs = lm_views_validate(v, n, bufs, sizes, 2);
  lm_status bs = lm_views_check_bounds(v, n, sizes, 2);
  CHECK((vs == LM_OK) == ref_valid && (vs == LM_OK || vs == LM_ECORRUPT));
  CHECK((bs == LM_OK) == ref_bounds && (bs == LM_OK || bs == LM_ERANGE));
  lm_payloads p = {bufs, sizes, 2};
  uint8_t *m = malloc(n);
  uint64_t *h = malloc(n * 8);
  lm_status a = lm_views_prefix_match(v, n, &p, (const uint8_t *)"ab", 2, m, NULL);
  lm_status c = lm_views_equal_scalar(v, n, &p, bufbytes, buflen > 20 ? 20 : buflen, m, NULL);
  lm_status d = lm_views_hash64(v, n, &p, 0, h, NULL);
  lm_status e = lm_views_equal(v, &p, v, &p, n, m, NULL);
  /* prefix_match never reads a padding byte; equal_scalar, hash64 and equal refuse inline views
   * with non-zero padding (LM_ECORRUPT), since their answer would depend on it. */
  CHECK(a == LM_OK || a == LM_ERANGE);
  CHECK(c == LM_OK || c == LM_ERANGE || (!ref_pad && c == LM_ECORRUPT));
  CHECK(d == LM_OK || d == LM_ERANGE || (!ref_pad && d == LM_ECORRUPT));
  CHECK(e == LM_OK || e == LM_ERANGE || (!ref_pad && e == LM_ECORRUPT));
  if (ref_bounds) CHECK(a == LM_OK);
  if (ref_bounds && !ref_pad) CHECK(c == LM_ECORRUPT && d == LM_ECORRUPT && e == LM_ECORRUPT);
  if (ref_bounds && ref_pad) {
    CHECK(a == LM_OK && c == LM_OK && d == LM_OK && e == LM_OK);
    for (size_t i = 0; i < n; i++) {
      str s = view_str(&v[i], bufs);
      CHECK(h[i] == lm_hash64(s.s, s.len, 0));
      CHECK(m[i] == 1); /* equal to itself */
    }
    uint64_t total = 0;
    CHECK(lm_views_total_bytes(v, n, &total) == LM_OK);
    if (total < (1u << 20)) {
      int64_t *o = malloc((n + 1) * 8);
      uint8_t *dd = malloc(total + 1);
      CHECK(lm_views_to_offsets64(v, n, bufs, o, dd, NULL) == LM_OK);
      for (size_t i = 0; i < n; i++) {
        str s = view_str(&v[i], bufs);
        CHECK((size_t)(o[i + 1] - o[i]) == s.len && (s.len == 0 || memcmp(dd + o[i], s.s, s.len) == 0));
      }
      free(o), free(dd);
    }
  } else if (!ref_bounds) {
    CHECK(d == LM_ERANGE || (!ref_pad && d == LM_ECORRUPT));
  }
  free(v), free(b0), free(b1), free(m), free(h);
}

/* Raw bytes as offsets (n+1 int32 / int64) over a payload of data_len bytes. */
static void raw_offsets(const uint8_t *raw, size_t len, size_t data_len) {
  size_t n32 = len / 4, n64 = len / 8;
  uint8_t *data = malloc(data_len + 1);
  memset(data, 'x', data_len + 1);
  if (n32 >= 1) {
    int32_t *o = malloc(n32 * 4);
    memcpy(o, raw, n32 * 4);
    size_t n = n32 - 1;
    int ref = o[0] >= 0;
    for (size_t i = 0; i < n && ref; i++) ref = o[i + 1] >= o[i];
    int in = ref && (uint64_t)o[n] <= data_len;
    lm_status s = lm_offsets32_validate(o, n, data_len);
    CHECK((s == LM_OK) == in);
    lm_string_view *v = calloc(n + 1, 16);
    lm_status f = lm_views_from_offsets32(o, n, data, data_len, 0, v, NULL);
    CHECK((f == LM_OK) == in);
    if (in) {
      const uint8_t *b[1] = {data};
      size_t sz[1] = {data_len};
      CHECK(lm_views_validate(v, n, b, sz, 1) == LM_OK);
      uint8_t *m = malloc(n + 1);
      CHECK(lm_o32_prefix_match(o, n, data, (const uint8_t *)"xx", 2, m, NULL) == LM_OK);
      for (size_t i = 0; i < n; i++) CHECK(m[i] == (o[i + 1] - o[i] >= 2));
      free(m);
    }
    free(v), free(o);
  }
  if (n64 >= 1) {
    int64_t *o = malloc(n64 * 8);
    memcpy(o, raw, n64 * 8);
    size_t n = n64 - 1;
    int ref = o[0] >= 0;
    for (size_t i = 0; i < n && ref; i++) ref = o[i + 1] >= o[i];
    int in = ref && (uint64_t)o[n] <= data_len;
    CHECK((lm_offsets64_validate(o, n, data_len) == LM_OK) == in);
    lm_string_view *v = calloc(n + 1, 16);
    CHECK((lm_views_from_offsets64(o, n, data, data_len, 0, v, NULL) == LM_OK) == in);
    free(v), free(o);
  }
  free(data);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz f = {data, size};
  uint8_t mode = fz_u8(&f);
  if (mode & 0x80) { /* raw layout validation */
    size_t split = fz_u8(&f);
    size_t buflen = fz_u8(&f);
    size_t got, braw;
    const uint8_t *bufbytes = fz_bytes(&f, buflen, &got);
    size_t rest = f.n;
    const uint8_t *raw = fz_bytes(&f, rest, &braw);
    (void)split;
    if (mode & 0x40) raw_offsets(raw, braw, got);
    else raw_views(raw, braw, bufbytes, got);
    return 0;
  }
  size_t block = (mode & 3) == 0 ? 0 : (size_t)16 << (mode & 3) * 2; /* 0, 64, 256, 1024 */
  unsigned flags = (mode & 4) ? LM_BUILDER_VALIDATE_UTF8 : 0;
  lm_exec ex3 = {3, 1};
  const lm_exec *ex = (mode & 8) ? &ex3 : NULL;
  lm_builder *b = NULL;
  CHECK(lm_builder_create(block, flags, &b) == LM_OK);
  str ss[MAX_STRS];
  size_t n = 0;
  while (f.n && n < MAX_STRS) {
    size_t len;
    const uint8_t *s = fz_str(&f, &len);
    lm_status st = lm_builder_append(b, s, len);
    if (flags && !ref_utf8_valid(s, len)) {
      CHECK_EQ_STATUS(st, LM_EUTF8);
      continue;
    }
    CHECK_EQ_STATUS(st, LM_OK);
    ss[n].s = s;
    ss[n].len = len;
    n++;
  }
  lm_string_tensor *t = NULL;
  CHECK(lm_builder_finish(b, &t) == LM_OK);
  if (n) tensor_checks(ss, n, t, ex);
  else CHECK(t->n == 0);
  lm_st_destroy(t);
  /* the builder is reusable after finish */
  CHECK(lm_builder_append(b, (const uint8_t *)"reuse-after-finish", 18) == LM_OK);
  CHECK(lm_builder_finish(b, &t) == LM_OK && t->n == 1);
  lm_st_destroy(t);
  lm_builder_destroy(b);
  return 0;
}
