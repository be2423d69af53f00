/* Template for the offsets-layout operations; included by ops_offsets.c once
 * per offset width with SUF (o32/o64) and OFF_T (int32_t/int64_t) defined. */

#define LM_CAT_(a, b) a##b
#define LM_CAT(a, b) LM_CAT_(a, b)
#define FN(name) LM_CAT(LM_CAT(lm_, SUF), LM_CAT(_, name))
#define CTX(name) LM_CAT(SUF, LM_CAT(_ctx_, name))
#define RNG(name) LM_CAT(SUF, LM_CAT(_range_, name))

/* ---- prefix match */
typedef struct {
  const OFF_T *off;
  const uint8_t *data, *p;
  size_t plen;
  uint8_t *out;
} CTX(prefix);

/* Pass 1 decides on the lengths alone (vectorised: restrict, no branches);
 * pass 2 compares the bytes of the few candidates. */
static void LM_CAT(SUF, _len_ge)(const OFF_T *restrict off, uint8_t *restrict out, size_t begin, size_t end,
                                 uint64_t plen) {
  for (size_t i = begin; i < end; i++) out[i] = (uint64_t)(off[i + 1] - off[i]) >= plen;
}

static void LM_CAT(SUF, _len_eq)(const OFF_T *restrict off, uint8_t *restrict out, size_t begin, size_t end,
                                 uint64_t len) {
  for (size_t i = begin; i < end; i++) out[i] = (uint64_t)(off[i + 1] - off[i]) == len;
}

static lm_status RNG(prefix)(void *ctx, size_t begin, size_t end) {
  const CTX(prefix) *c = ctx;
  LM_CAT(SUF, _len_ge)(c->off, c->out, begin, end, c->plen);
  if (c->plen == 0) return LM_OK;
  for (size_t i = begin; i < end; i++)
    if (c->out[i]) c->out[i] = memcmp(c->data + c->off[i], c->p, c->plen) == 0;
  return LM_OK;
}

lm_status FN(prefix_match)(const OFF_T *offsets, size_t n, const uint8_t *data, const uint8_t *prefix,
                           size_t plen, uint8_t *out, const lm_exec *exec) {
  if (!offsets || (n && !out) || (plen && !prefix)) return LM_EINVAL;
  CTX(prefix) c = {offsets, data, prefix, plen, out};
  lm_exec e = grain(exec, 32768);
  return lm_parallel_for(&e, n, RNG(prefix), &c);
}

/* ---- equal scalar */
static lm_status RNG(eqs)(void *ctx, size_t begin, size_t end) {
  const CTX(prefix) *c = ctx;
  LM_CAT(SUF, _len_eq)(c->off, c->out, begin, end, c->plen);
  if (c->plen == 0) return LM_OK;
  for (size_t i = begin; i < end; i++)
    if (c->out[i]) c->out[i] = memcmp(c->data + c->off[i], c->p, c->plen) == 0;
  return LM_OK;
}

lm_status FN(equal_scalar)(const OFF_T *offsets, size_t n, const uint8_t *data, const uint8_t *s, size_t slen,
                           uint8_t *out, const lm_exec *exec) {
  if (!offsets || (n && !out) || (slen && !s)) return LM_EINVAL;
  CTX(prefix) c = {offsets, data, s, slen, out};
  lm_exec e = grain(exec, 32768);
  return lm_parallel_for(&e, n, RNG(eqs), &c);
}

/* ---- equal */
typedef struct {
  const OFF_T *oa, *ob;
  const uint8_t *da, *db;
  uint8_t *out;
} CTX(eq);

static lm_status RNG(eq)(void *ctx, size_t begin, size_t end) {
  const CTX(eq) *c = ctx;
  for (size_t i = begin; i < end; i++) {
    size_t la = (size_t)(c->oa[i + 1] - c->oa[i]), lb = (size_t)(c->ob[i + 1] - c->ob[i]);
    c->out[i] = la == lb && (la == 0 || memcmp(c->da + c->oa[i], c->db + c->ob[i], la) == 0);
  }
  return LM_OK;
}

lm_status FN(equal)(const OFF_T *offsets_a, const uint8_t *data_a, const OFF_T *offsets_b, const uint8_t *data_b,
                    size_t n, uint8_t *out, const lm_exec *exec) {
  if (!offsets_a || !offsets_b || (n && !out)) return LM_EINVAL;
  CTX(eq) c = {offsets_a, offsets_b, data_a, data_b, out};
  lm_exec e = grain(exec, 32768);
  return lm_parallel_for(&e, n, RNG(eq), &c);
}

/* ---- hash64 */
typedef struct {
  const OFF_T *off;
  const uint8_t *data;
  uint64_t seed;
  uint64_t *out;
} CTX(hash);

static lm_status RNG(hash)(void *ctx, size_t begin, size_t end) {
  const CTX(hash) *c = ctx;
  for (size_t i = begin; i < end; i++)
    c->out[i] = lm_hash64(c->data + c->off[i], (size_t)(c->off[i + 1] - c->off[i]), c->seed);
  return LM_OK;
}

lm_status FN(hash64)(const OFF_T *offsets, size_t n, const uint8_t *data, uint64_t seed, uint64_t *out,
                     const lm_exec *exec) {
  if (!offsets || (n && !out)) return LM_EINVAL;
  CTX(hash) c = {offsets, data, seed, out};
  lm_exec e = grain(exec, 4096);
  return lm_parallel_for(&e, n, RNG(hash), &c);
}

/* ---- pad_bytes */
typedef struct {
  const OFF_T *off;
  const uint8_t *data;
  size_t max_len;
  int64_t pad, bos, eos;
  int64_t *tokens, *lengths;
} CTX(pad);

static lm_status RNG(pad)(void *ctx, size_t begin, size_t end) {
  const CTX(pad) *c = ctx;
  const size_t specials = (size_t)(c->bos >= 0) + (size_t)(c->eos >= 0);
  const size_t room = c->max_len > specials ? c->max_len - specials : 0;
  for (size_t i = begin; i < end; i++) {
    int64_t *row = c->tokens + i * c->max_len;
    size_t len = (size_t)(c->off[i + 1] - c->off[i]);
    if (len > room) len = room;
    const uint8_t *s = c->data + c->off[i];
    size_t k = 0;
    if (c->bos >= 0 && k < c->max_len) row[k++] = c->bos;
    for (size_t j = 0; j < len; j++) row[k++] = s[j];
    if (c->eos >= 0 && k < c->max_len) row[k++] = c->eos;
    c->lengths[i] = (int64_t)k;
    for (; k < c->max_len; k++) row[k] = c->pad;
  }
  return LM_OK;
}

lm_status FN(pad_bytes)(const OFF_T *offsets, size_t n, const uint8_t *data, size_t max_len, int64_t pad_id,
                        int64_t bos_id, int64_t eos_id, int64_t *tokens, int64_t *lengths, const lm_exec *exec) {
  if (!offsets || (n && !lengths) || (n && max_len && !tokens)) return LM_EINVAL;
  if (max_len && n > SIZE_MAX / max_len) return LM_EOVERFLOW;
  CTX(pad) c = {offsets, data, max_len, pad_id, bos_id, eos_id, tokens, lengths};
  lm_exec e = grain(exec, 8192);
  return lm_parallel_for(&e, n, RNG(pad), &c);
}

/* ---- gather */
lm_status FN(gather_offsets)(const OFF_T *offsets, size_t n, const int64_t *index, size_t m, OFF_T *out_offsets) {
  if (!offsets || !out_offsets || (m && !index)) return LM_EINVAL;
  uint64_t pos = 0;
  out_offsets[0] = 0;
  for (size_t k = 0; k < m; k++) {
    int64_t i = index[k];
    if (i < 0 || (uint64_t)i >= n) return LM_ERANGE;
    pos += (uint64_t)(offsets[i + 1] - offsets[i]);
    if (pos > (uint64_t)OFF_MAX) return LM_EOVERFLOW;
    out_offsets[k + 1] = (OFF_T)pos;
  }
  return LM_OK;
}

typedef struct {
  const OFF_T *off;
  const uint8_t *data;
  const int64_t *index;
  const OFF_T *out_off;
  uint8_t *out;
} CTX(gather);

static lm_status RNG(gather)(void *ctx, size_t begin, size_t end) {
  const CTX(gather) *c = ctx;
  for (size_t k = begin; k < end; k++) {
    size_t len = (size_t)(c->out_off[k + 1] - c->out_off[k]);
    if (len) memcpy(c->out + c->out_off[k], c->data + c->off[c->index[k]], len);
  }
  return LM_OK;
}

lm_status FN(gather_data)(const OFF_T *offsets, const uint8_t *data, const int64_t *index, size_t m,
                          const OFF_T *out_offsets, uint8_t *out_data, const lm_exec *exec) {
  if (!offsets || !out_offsets || (m && !index) || (out_offsets[m] && !out_data)) return LM_EINVAL;
  CTX(gather) c = {offsets, data, index, out_offsets, out_data};
  lm_exec e = grain(exec, 32768);
  return lm_parallel_for(&e, m, RNG(gather), &c);
}

/* ---- compact */
lm_status FN(compact_count)(const OFF_T *offsets, size_t n, const uint8_t *mask, size_t *out_n,
                            uint64_t *out_bytes) {
  if (!offsets || (n && !mask) || !out_n || !out_bytes) return LM_EINVAL;
  size_t k = 0;
  uint64_t bytes = 0;
  for (size_t i = 0; i < n; i++) {
    uint64_t keep = mask[i] != 0;
    k += keep;
    bytes += keep * (uint64_t)(offsets[i + 1] - offsets[i]);
  }
  *out_n = k;
  *out_bytes = bytes;
  return LM_OK;
}

lm_status FN(compact)(const OFF_T *offsets, size_t n, const uint8_t *data, const uint8_t *mask,
                      OFF_T *out_offsets, uint8_t *out_data) {
  if (!offsets || (n && !mask) || !out_offsets) return LM_EINVAL;
  size_t k = 0;
  uint64_t pos = 0;
  out_offsets[0] = 0;
  for (size_t i = 0; i < n; i++) {
    if (!mask[i]) continue;
    size_t len = (size_t)(offsets[i + 1] - offsets[i]);
    if (len) memcpy(out_data + pos, data + offsets[i], len);
    pos += len;
    out_offsets[++k] = (OFF_T)pos;
  }
  return LM_OK;
}

#undef FN
#undef CTX
#undef RNG
