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
  lm_batch_pool_free(&m->pool);
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

void lm_pii_buf_free(lm_pii_buf *b) { lm_bytebuf_free(b); }

static int buf_append(lm_pii_buf *b, const void *src, size_t len) {
  return len && lm_bytebuf_append(b, src, len, 256) != LM_OK ? -1 : 0;
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

/* lm_pii_run on the core's batch runner (lm_batch_run_ex): one range's
 * counters are its counts plus, when the replacement cycle runs across
 * documents, the position its first document starts from (relative to the
 * masker's cycle at the batch start), found by a counting pass. */
typedef struct {
  lm_pii_counts counts;
  uint64_t base[LM_PII_TYPE_COUNT];
} pii_range_counters;

static int pii_cycling(const lm_pii_masker *m) {
  int cycling = 0;
  if (m->cycle_across_documents)
    for (int t = 0; t < LM_PII_TYPE_COUNT; t++) cycling |= ((m->types >> t) & 1) && m->nrepl[t] > 1;
  return cycling;
}

/* One document with its range's counters; count_only: the output goes to `out` and is dropped. */
static lm_status pii_doc_common(const lm_pii_masker *m, const uint8_t *text, size_t len, lm_bytebuf *out,
                                int count_only, pii_range_counters *rc, int32_t *reason) {
  if (m->max_doc_bytes && len > m->max_doc_bytes) { /* refused: dropped, not passed through */
    rc->counts.docs_too_large += 1;
    *reason = LM_REASON_TOO_LARGE;
    return LM_OK;
  }
  uint64_t cyc[LM_PII_TYPE_COUNT];
  int cycling = pii_cycling(m);
  for (int t = 0; t < LM_PII_TYPE_COUNT; t++) cyc[t] = cycling ? m->cycle[t] + rc->base[t] + rc->counts.matches[t] : 0;
  size_t before = out->len;
  lm_pii_counts dc;
  lm_status s = lm_pii_mask_doc(m, text, len, cyc, out, &dc);
  if (s || count_only) out->len = before;
  if (s) return s;
  for (int t = 0; t < LM_PII_TYPE_COUNT; t++) rc->counts.matches[t] += dc.matches[t];
  rc->counts.docs += 1;
  rc->counts.docs_changed += dc.docs_changed;
  rc->counts.bytes_in += dc.bytes_in;
  rc->counts.bytes_out += dc.bytes_out;
  *reason = LM_REASON_KEPT;
  return LM_OK;
}

static lm_status pii_doc(const void *stage, void *scratch, const uint8_t *text, size_t len, lm_bytebuf *arena,
                         void *counters, int32_t *reason) {
  (void)scratch;
  return pii_doc_common((const lm_pii_masker *)stage, text, len, arena, 0, (pii_range_counters *)counters, reason);
}

static lm_status pii_pre_doc(const void *stage, void *scratch, const uint8_t *text, size_t len, void *counters) {
  int32_t reason;
  return pii_doc_common((const lm_pii_masker *)stage, text, len, (lm_bytebuf *)scratch, 1,
                        (pii_range_counters *)counters, &reason);
}

/* per-worker scratch: the counting pass's throw-away output buffer */
static lm_status pii_scratch_create(const void *stage, void **scratch) {
  (void)stage;
  *scratch = calloc(1, sizeof(lm_bytebuf));
  return *scratch ? LM_OK : LM_ENOMEM;
}

static void pii_scratch_destroy(void *scratch) {
  lm_bytebuf_free((lm_bytebuf *)scratch);
  free(scratch);
}

static void pii_pre_done(void *stage, void *counters, size_t nranges) {
  (void)stage;
  pii_range_counters *rc = (pii_range_counters *)counters;
  uint64_t acc[LM_PII_TYPE_COUNT] = {0};
  for (size_t r = 0; r < nranges; r++) {
    memcpy(rc[r].base, acc, sizeof acc);
    for (int t = 0; t < LM_PII_TYPE_COUNT; t++) acc[t] += rc[r].counts.matches[t];
    memset(&rc[r].counts, 0, sizeof rc[r].counts);
  }
}

static void pii_merge(void *stage, const void *counters) {
  lm_pii_masker *m = (lm_pii_masker *)stage;
  const lm_pii_counts *c = &((const pii_range_counters *)counters)->counts;
  lm_pii_counts *tot = &m->counters;
  for (int t = 0; t < LM_PII_TYPE_COUNT; t++) tot->matches[t] += c->matches[t];
  tot->docs += c->docs;
  tot->docs_too_large += c->docs_too_large;
  tot->docs_changed += c->docs_changed;
  tot->bytes_in += c->bytes_in;
  tot->bytes_out += c->bytes_out;
  /* the cycle advances by the batch's matches (merge runs after the whole batch, in range order) */
  if (pii_cycling(m))
    for (int t = 0; t < LM_PII_TYPE_COUNT; t++) m->cycle[t] += c->matches[t];
}

static const lm_batch_stage k_pii_stage = {64, sizeof(pii_range_counters), pii_scratch_create, pii_scratch_destroy,
                                           pii_doc, pii_merge};

lm_status lm_pii_run(lm_pii_masker *m, const lm_docs *docs, lm_batch_result *out, const lm_exec *exec) {
  if (!m || !out) return LM_EINVAL;
  /* The masker's arenas are kept between calls (no fresh page faults per batch), trimmed to a bound. */
  lm_batch_opts o = {NULL, NULL, &m->pool, 0};
  if (pii_cycling(m)) {
    o.pre_doc = pii_pre_doc;
    o.pre_done = pii_pre_done;
  }
  return lm_batch_run_ex(&k_pii_stage, &o, m, docs, out, exec);
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
