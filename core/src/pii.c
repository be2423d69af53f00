/* pii.c — PIIMasker object, per-document masking and the batch entry point.
 * The detectors live in pii_scan.c (strict) and pii_datatrove.c. */
#include <stdlib.h>
#include <string.h>

#include "luminamoon/bytebuf.h"
#include "pii_internal.h"

static const char *const k_strict_default[LM_PII_TYPE_COUNT] = {
    "<EMAIL>", "<IP_ADDRESS>", "<IP_ADDRESS>", "<PHONE>", "<CREDIT_CARD>", "<IBAN>"};
static const char *const k_dt_email[] = {"email@example.com", "firstname.lastname@example.org"};
static const char *const k_dt_ip[] = {"22.214.171.124", "126.96.36.199", "188.8.131.52",
                                      "184.108.40.206", "220.127.116.11", "18.104.22.168"};

lm_status lm_pii_params_default(lm_pii_params *p, lm_pii_mode mode) {
  if (!p || (mode != LM_PII_MODE_STRICT && mode != LM_PII_MODE_DATATROVE)) return LM_EINVAL;
  memset(p, 0, sizeof *p);
  p->mode = mode;
  if (mode == LM_PII_MODE_STRICT) {
    p->types = LM_PII_ALL_TYPES;
  } else {
    p->types = (1u << LM_PII_EMAIL) | (1u << LM_PII_IPV4);
    p->ipv4_public_only = 1;
    p->cycle_across_documents = 1;
  }
  return LM_OK;
}

void lm_pii_destroy(lm_pii_masker *m) {
  if (!m) return;
  for (size_t k = 0; k < m->nscratch; k++) lm_pii_buf_free(&m->scratch[k]);
  free(m->scratch);
  for (int t = 0; t < LM_PII_TYPE_COUNT; t++) {
    if (m->repl[t])
      for (size_t k = 0; k < m->nrepl[t]; k++) free(m->repl[t][k]);
    free(m->repl[t]);
    free(m->repl_len[t]);
  }
  free(m);
}

lm_status lm_pii_create(const lm_pii_params *params, lm_pii_masker **out) {
  if (!out) return LM_EINVAL;
  *out = NULL;
  lm_pii_params def;
  if (!params) {
    lm_pii_params_default(&def, LM_PII_MODE_STRICT);
    params = &def;
  }
  if ((params->mode != LM_PII_MODE_STRICT && params->mode != LM_PII_MODE_DATATROVE) ||
      (params->types & ~LM_PII_ALL_TYPES))
    return LM_EINVAL;
  for (int t = 0; t < LM_PII_TYPE_COUNT; t++) {
    if (params->n_replacements[t] && !params->replacements[t]) return LM_EINVAL;
    for (size_t k = 0; k < params->n_replacements[t]; k++)
      if (!params->replacements[t][k]) return LM_EINVAL;
  }
  lm_pii_masker *m = (lm_pii_masker *)calloc(1, sizeof *m);
  if (!m) return LM_ENOMEM;
  m->mode = params->mode;
  m->types = params->types;
  if (m->mode == LM_PII_MODE_DATATROVE) m->types &= (1u << LM_PII_EMAIL) | (1u << LM_PII_IPV4);
  m->ipv4_public_only = params->ipv4_public_only != 0;
  m->ipv6_public_only = params->ipv6_public_only != 0;
  m->cycle_across_documents = params->cycle_across_documents != 0;
  m->max_doc_bytes = params->max_doc_bytes;
  for (int t = 0; t < LM_PII_TYPE_COUNT; t++) {
    const char *const *src = params->replacements[t];
    size_t n = params->n_replacements[t];
    if (!n) {
      if (m->mode == LM_PII_MODE_DATATROVE && t == LM_PII_EMAIL) {
        src = k_dt_email;
        n = 2;
      } else if (m->mode == LM_PII_MODE_DATATROVE && t == LM_PII_IPV4) {
        src = k_dt_ip;
        n = 6;
      } else {
        src = &k_strict_default[t];
        n = 1;
      }
    }
    m->repl[t] = (char **)calloc(n, sizeof(char *));
    m->repl_len[t] = (size_t *)calloc(n, sizeof(size_t));
    if (!m->repl[t] || !m->repl_len[t]) {
      lm_pii_destroy(m);
      return LM_ENOMEM;
    }
    m->nrepl[t] = n;
    for (size_t k = 0; k < n; k++) {
      size_t len = strlen(src[k]);
      m->repl[t][k] = (char *)malloc(len + 1);
      if (!m->repl[t][k]) {
        lm_pii_destroy(m);
        return LM_ENOMEM;
      }
      memcpy(m->repl[t][k], src[k], len + 1);
      m->repl_len[t][k] = len;
    }
  }
  *out = m;
  return LM_OK;
}

void lm_pii_buf_free(lm_pii_buf *b) {
  if (!b) return;
  free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
}

static int buf_reserve(lm_pii_buf *b, size_t extra) {
  if (extra <= b->cap - b->len) return 0;
  if (extra > SIZE_MAX - b->len) return -1;
  return lm_grow_array((void **)&b->data, &b->cap, b->len + extra, 1, 256) == LM_OK ? 0 : -1;
}

static int buf_append(lm_pii_buf *b, const void *src, size_t len) {
  if (!len) return 0;
  if (buf_reserve(b, len)) return -1;
  memcpy(b->data + b->len, src, len);
  b->len += len;
  return 0;
}

/* ------------------------------------------------------------- masking */

typedef struct {
  const lm_pii_masker *m;
  const uint8_t *src;
  size_t copied;
  lm_pii_buf *out;
  uint64_t cyc[LM_PII_TYPE_COUNT];
  uint64_t cnt[LM_PII_TYPE_COUNT];
} mask_ctx;

static int mask_emit(void *vctx, lm_pii_type t, size_t st, size_t en) {
  mask_ctx *c = (mask_ctx *)vctx;
  const lm_pii_masker *m = c->m;
  size_t k = (size_t)((c->cyc[t] + c->cnt[t]) % m->nrepl[t]);
  if (buf_append(c->out, c->src + c->copied, st - c->copied)) return 1;
  if (buf_append(c->out, m->repl[t][k], m->repl_len[t][k])) return 1;
  c->cnt[t]++;
  c->copied = en;
  return 0;
}

/* One scan pass of src into out (appended), counting into c->cnt. */
static int mask_pass(mask_ctx *c, const uint8_t *src, size_t len, int pass) {
  c->src = src;
  c->copied = 0;
  int rc;
  if (c->m->mode == LM_PII_MODE_STRICT)
    rc = lm_pii_scan_strict(c->m, src, len, mask_emit, c);
  else if (pass == 0)
    rc = lm_pii_scan_dt_email(src, len, mask_emit, c);
  else
    rc = lm_pii_scan_dt_ipv4(c->m->ipv4_public_only, src, len, mask_emit, c);
  if (rc) return rc;
  return buf_append(c->out, src + c->copied, len - c->copied);
}

lm_status lm_pii_mask_doc(const lm_pii_masker *m, const uint8_t *text, size_t len, const uint64_t *cycle_start,
                          lm_pii_buf *out, lm_pii_counts *counts) {
  if (!m || !out || (len && !text)) return LM_EINVAL;
  if (m->max_doc_bytes && len > m->max_doc_bytes) return LM_ETOOBIG;
  static const uint8_t empty = 0;
  if (!len) text = &empty;
  mask_ctx c;
  memset(&c, 0, sizeof c);
  c.m = m;
  c.out = out;
  if (cycle_start) memcpy(c.cyc, cycle_start, sizeof c.cyc);
  size_t base = out->len;
  if (m->mode == LM_PII_MODE_STRICT) {
    if (mask_pass(&c, text, len, 0)) return LM_ENOMEM;
  } else {
    int do_email = (m->types >> LM_PII_EMAIL) & 1, do_ip = (m->types >> LM_PII_IPV4) & 1;
    if (do_email && mask_pass(&c, text, len, 0)) return LM_ENOMEM;
    if (do_ip) {
      if (do_email && c.cnt[LM_PII_EMAIL]) {
        /* the IPv4 pass reads the text after e-mail replacement (as datatrove does) */
        size_t mid_len = out->len - base;
        uint8_t *mid = (uint8_t *)malloc(mid_len ? mid_len : 1);
        if (!mid) return LM_ENOMEM;
        memcpy(mid, out->data + base, mid_len);
        out->len = base;
        int rc = mask_pass(&c, mid, mid_len, 1);
        free(mid);
        if (rc) return LM_ENOMEM;
      } else {
        out->len = base;
        if (mask_pass(&c, text, len, 1)) return LM_ENOMEM;
      }
    } else if (!do_email) {
      if (buf_append(out, text, len)) return LM_ENOMEM;
    }
  }
  if (counts) {
    memset(counts, 0, sizeof *counts);
    uint64_t tot = 0;
    for (int t = 0; t < LM_PII_TYPE_COUNT; t++) {
      counts->matches[t] = c.cnt[t];
      tot += c.cnt[t];
    }
    counts->docs = 1;
    counts->docs_changed = tot != 0;
    counts->bytes_in = len;
    counts->bytes_out = out->len - base;
  }
  return LM_OK;
}

/* --------------------------------------------------------------- find */

typedef struct {
  lm_pii_match *out;
  size_t cap, n;
} find_ctx;

static int find_emit(void *vctx, lm_pii_type t, size_t st, size_t en) {
  find_ctx *f = (find_ctx *)vctx;
  if (f->n < f->cap) {
    f->out[f->n].start = st;
    f->out[f->n].end = en;
    f->out[f->n].type = t;
  }
  f->n++;
  return 0;
}

lm_status lm_pii_find(const lm_pii_masker *m, const uint8_t *text, size_t len, lm_pii_match *out, size_t cap,
                      size_t *n_found) {
  if (!m || !n_found || (len && !text) || (cap && !out)) return LM_EINVAL;
  if (m->max_doc_bytes && len > m->max_doc_bytes) return LM_ETOOBIG;
  static const uint8_t empty = 0;
  if (!len) text = &empty;
  find_ctx f = {out, cap, 0};
  if (m->mode == LM_PII_MODE_STRICT) {
    lm_pii_scan_strict(m, text, len, find_emit, &f);
  } else {
    lm_pii_buf mid = {NULL, 0, 0};
    mask_ctx c;
    memset(&c, 0, sizeof c);
    c.m = m;
    c.out = &mid;
    const uint8_t *ip_src = text;
    size_t ip_len = len;
    if (m->types & (1u << LM_PII_EMAIL)) {
      lm_pii_scan_dt_email(text, len, find_emit, &f);
      if (f.n) {
        if (mask_pass(&c, text, len, 0)) {
          lm_pii_buf_free(&mid);
          return LM_ENOMEM;
        }
        ip_src = mid.data;
        ip_len = mid.len;
      }
    }
    if (m->types & (1u << LM_PII_IPV4)) lm_pii_scan_dt_ipv4(m->ipv4_public_only, ip_src, ip_len, find_emit, &f);
    lm_pii_buf_free(&mid);
  }
  *n_found = f.n;
  return LM_OK;
}

/* -------------------------------------------------------------- batch */

typedef struct {
  lm_pii_buf buf;
  size_t *lens;                      /* per document of the chunk */
  uint64_t cyc[LM_PII_TYPE_COUNT];   /* start positions for the chunk */
  lm_pii_counts counts;
} chunk_state;

typedef struct {
  const lm_pii_masker *m;
  const lm_docs *docs;
  chunk_state *chunks;
  size_t nchunks;
  int count_only;
} run_ctx;

static void chunk_range(size_t n, size_t nchunks, size_t c, size_t *b, size_t *e) {
  *b = n / nchunks * c + (c < n % nchunks ? c : n % nchunks);
  *e = *b + n / nchunks + (c < n % nchunks ? 1 : 0);
}

static lm_status run_chunks(void *vctx, size_t cb, size_t ce) {
  run_ctx *r = (run_ctx *)vctx;
  for (size_t c = cb; c < ce; c++) {
    chunk_state *cs = &r->chunks[c];
    size_t b, e;
    chunk_range(r->docs->n, r->nchunks, c, &b, &e);
    uint64_t cyc[LM_PII_TYPE_COUNT];
    memcpy(cyc, cs->cyc, sizeof cyc);
    for (size_t i = b; i < e; i++) {
      int64_t o0 = r->docs->offsets[i], o1 = r->docs->offsets[i + 1];
      lm_pii_counts dc;
      size_t before = cs->buf.len;
      if (r->m->max_doc_bytes && (size_t)(o1 - o0) > r->m->max_doc_bytes) {
        if (!r->count_only) cs->lens[i - b] = SIZE_MAX; /* refused: dropped, not passed through */
        cs->counts.docs_too_large += 1;
        continue;
      }
      lm_status s = lm_pii_mask_doc(r->m, r->docs->data + o0, (size_t)(o1 - o0), cyc, &cs->buf, &dc);
      if (s) return s;
      if (r->count_only) {
        cs->buf.len = before;
      } else {
        cs->lens[i - b] = cs->buf.len - before;
      }
      for (int t = 0; t < LM_PII_TYPE_COUNT; t++) {
        cs->counts.matches[t] += dc.matches[t];
        if (r->m->cycle_across_documents) cyc[t] += dc.matches[t];
      }
      cs->counts.docs += 1;
      cs->counts.docs_changed += dc.docs_changed;
      cs->counts.bytes_in += dc.bytes_in;
      cs->counts.bytes_out += dc.bytes_out;
    }
  }
  return LM_OK;
}

lm_status lm_pii_run(lm_pii_masker *m, const lm_docs *docs, lm_batch_result *out, const lm_exec *exec) {
  if (!m || !out) return LM_EINVAL;
  lm_status s = lm_docs_validate(docs);
  if (s) return s;
  size_t n = docs->n;
  size_t in_bytes = (size_t)(docs->offsets[n] - docs->offsets[0]);
  s = lm_batch_result_begin(out, n, in_bytes + 16);
  if (s) return s;
  if (!n) return LM_OK;

  size_t threads = 1;
  if (exec && exec->num_threads > 1) {
    size_t grain = exec->min_items_per_thread ? exec->min_items_per_thread : 16384;
    threads = (size_t)exec->num_threads;
    if (n / grain < threads) threads = n / grain ? n / grain : 1;
  }
  size_t nchunks = threads;
  chunk_state *chunks = (chunk_state *)calloc(nchunks, sizeof *chunks);
  if (!chunks) return LM_ENOMEM;
  if (m->nscratch < nchunks) { /* output buffers are reused across calls (no page faults per batch) */
    lm_pii_buf *ns = (lm_pii_buf *)realloc(m->scratch, nchunks * sizeof *ns);
    if (!ns) {
      free(chunks);
      return LM_ENOMEM;
    }
    memset(ns + m->nscratch, 0, (nchunks - m->nscratch) * sizeof *ns);
    m->scratch = ns;
    m->nscratch = nchunks;
  }
  for (size_t c = 0; c < nchunks; c++) {
    chunks[c].buf = m->scratch[c];
    chunks[c].buf.len = 0;
  }
  lm_exec ex = {(int)threads, 1};
  run_ctx rc = {m, docs, chunks, nchunks, 0};

  int cycling = 0;
  if (m->cycle_across_documents)
    for (int t = 0; t < LM_PII_TYPE_COUNT; t++) cycling |= ((m->types >> t) & 1) && m->nrepl[t] > 1;
  if (cycling && nchunks > 1) {
    /* pass 1: per-chunk match counts, so each chunk knows where its cycle starts */
    rc.count_only = 1;
    s = lm_parallel_for(&ex, nchunks, run_chunks, &rc);
    uint64_t acc[LM_PII_TYPE_COUNT];
    memcpy(acc, m->cycle, sizeof acc);
    for (size_t c = 0; c < nchunks && !s; c++) {
      uint64_t got[LM_PII_TYPE_COUNT];
      for (int t = 0; t < LM_PII_TYPE_COUNT; t++) got[t] = chunks[c].counts.matches[t];
      memcpy(chunks[c].cyc, acc, sizeof acc);
      for (int t = 0; t < LM_PII_TYPE_COUNT; t++) acc[t] += got[t];
      memset(&chunks[c].counts, 0, sizeof chunks[c].counts);
    }
    rc.count_only = 0;
  } else {
    for (size_t c = 0; c < nchunks; c++)
      if (cycling) memcpy(chunks[c].cyc, m->cycle, sizeof m->cycle);
  }
  for (size_t c = 0; c < nchunks && !s; c++) {
    size_t b, e;
    chunk_range(n, nchunks, c, &b, &e);
    chunks[c].lens = (size_t *)malloc((e - b ? e - b : 1) * sizeof(size_t));
    if (!chunks[c].lens) s = LM_ENOMEM;
  }
  if (!s) s = lm_parallel_for(&ex, nchunks, run_chunks, &rc);
  if (!s) {
    size_t total = 0;
    for (size_t c = 0; c < nchunks; c++) total += chunks[c].buf.len;
    uint8_t *dst;
    s = lm_batch_result_reserve_data(out, total, &dst);
    for (size_t c = 0; c < nchunks && !s; c++) {
      size_t b, e, off = 0;
      chunk_range(n, nchunks, c, &b, &e);
      for (size_t i = b; i < e && !s; i++) {
        size_t len = chunks[c].lens[i - b];
        if (len == SIZE_MAX) {
          out->reasons[i] = LM_REASON_TOO_LARGE;
          continue;
        }
        if (len) memcpy(out->data + out->data_len, chunks[c].buf.data + off, len);
        off += len;
        out->reasons[i] = LM_REASON_KEPT;
        s = lm_batch_result_commit(out, (int64_t)i, len);
      }
    }
  }
  if (!s) {
    lm_pii_counts *tot = &m->counters;
    for (size_t c = 0; c < nchunks; c++) {
      for (int t = 0; t < LM_PII_TYPE_COUNT; t++) {
        tot->matches[t] += chunks[c].counts.matches[t];
        if (cycling) m->cycle[t] += chunks[c].counts.matches[t];
      }
      tot->docs += chunks[c].counts.docs;
      tot->docs_too_large += chunks[c].counts.docs_too_large;
      tot->docs_changed += chunks[c].counts.docs_changed;
      tot->bytes_in += chunks[c].counts.bytes_in;
      tot->bytes_out += chunks[c].counts.bytes_out;
    }
  }
  for (size_t c = 0; c < nchunks; c++) {
    m->scratch[c] = chunks[c].buf; /* keep the (possibly grown) buffer */
    free(chunks[c].lens);
  }
  free(chunks);
  return s;
}

lm_status lm_pii_get_counters(const lm_pii_masker *m, lm_pii_counts *out) {
  if (!m || !out) return LM_EINVAL;
  *out = m->counters;
  return LM_OK;
}

lm_status lm_pii_reset_counters(lm_pii_masker *m) {
  if (!m) return LM_EINVAL;
  memset(&m->counters, 0, sizeof m->counters);
  memset(m->cycle, 0, sizeof m->cycle);
  return LM_OK;
}

lm_status lm_pii_get_cycle(const lm_pii_masker *m, uint64_t *out) {
  if (!m || !out) return LM_EINVAL;
  memcpy(out, m->cycle, sizeof m->cycle);
  return LM_OK;
}

lm_status lm_pii_set_cycle(lm_pii_masker *m, const uint64_t *in) {
  if (!m || !in) return LM_EINVAL;
  memcpy(m->cycle, in, sizeof m->cycle);
  return LM_OK;
}

lm_status lm_pii_max_doc_bytes(const lm_pii_masker *m, size_t *out) {
  if (!m || !out) return LM_EINVAL;
  *out = m->max_doc_bytes;
  return LM_OK;
}

lm_status lm_pii_replacement_count(const lm_pii_masker *m, lm_pii_type type, size_t *n) {
  if (!m || !n || (int)type < 0 || type >= LM_PII_TYPE_COUNT) return LM_EINVAL;
  *n = m->nrepl[type];
  return LM_OK;
}
