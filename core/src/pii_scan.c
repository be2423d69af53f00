/* pii_scan.c — the strict-mode PII detectors: one pass over the bytes, a small
 * deterministic parser at each anchor ('@', ':', '+', '(' and the start of a
 * digit run).  See pii.h for the rules and the priority between types. */
#include <string.h>

#include "pii_internal.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* A "word" byte for boundaries: ASCII letter or digit, '_', or any byte of a
 * multi-byte UTF-8 character (letters of other scripts glue like letters). */
static inline int is_word(uint8_t c) { return lm_pii_is_alnum(c) || c == '_' || c >= 0x80; }

static inline int is_anchor(uint8_t c) {
  return lm_pii_is_digit(c) || c == '@' || c == ':' || c == '+' || c == '(';
}

/* The next anchor at or after i (n if none). */
static size_t next_anchor(const uint8_t *s, size_t n, size_t i) {
  if (i < n && is_anchor(s[i])) return i; /* dense anchors ("((((", digits): no vector setup */
#if defined(__SSE2__)
  const __m128i at = _mm_set1_epi8('@'), co = _mm_set1_epi8(':'), pl = _mm_set1_epi8('+'),
                pa = _mm_set1_epi8('('), zero = _mm_set1_epi8('0'), nine = _mm_set1_epi8(9);
  while (i + 16 <= n) {
    __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
    __m128i d = _mm_sub_epi8(x, zero);
    /* unsigned d <= 9  <=>  max(d, 9) == 9 */
    __m128i isd = _mm_cmpeq_epi8(_mm_max_epu8(d, nine), nine);
    __m128i m = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, at), _mm_cmpeq_epi8(x, co)),
                             _mm_or_si128(_mm_cmpeq_epi8(x, pl), _mm_cmpeq_epi8(x, pa)));
    int mask = _mm_movemask_epi8(_mm_or_si128(m, isd));
    if (mask) return i + (size_t)__builtin_ctz((unsigned)mask);
    i += 16;
  }
#endif
  while (i < n && !is_anchor(s[i])) i++;
  return i;
}

/* ------------------------------------------------------------ boundaries */

/* May a number-like match start at i?  Not glued to a word, a '.', '+' or '@',
 * nor to "word-" / "word/" (package-version, path). */
static int num_left_ok(const uint8_t *s, size_t i) {
  if (i == 0) return 1;
  uint8_t p = s[i - 1];
  if (is_word(p) || p == '.' || p == '+' || p == '@') return 0;
  if ((p == '-' || p == '/') && i >= 2 && is_word(s[i - 2])) return 0;
  return 1;
}

/* May a number-like match end at e?  Not followed by a word byte, '@', nor by
 * '.', '-', '+', '~' that continue into a letter or digit ("1.2.3.4-1", "1.2.3.4~rc1"). */
static int num_right_ok(const uint8_t *s, size_t n, size_t e) {
  if (e >= n) return 1;
  uint8_t c = s[e];
  if (is_word(c) || c == '@') return 0;
  if ((c == '.' || c == '-' || c == '+' || c == '~') && e + 1 < n && lm_pii_is_alnum(s[e + 1])) return 0;
  return 1;
}

/* ------------------------------------------------------------------ IPv4 */

static size_t parse_ipv4(const uint8_t *s, size_t n, size_t i, uint32_t *addr) {
  size_t p = i;
  uint32_t a = 0;
  for (int k = 0; k < 4; k++) {
    if (k) {
      if (p >= n || s[p] != '.') return 0;
      p++;
    }
    size_t q = p;
    unsigned v = 0;
    while (q < n && lm_pii_is_digit(s[q]) && q - p < 4) v = v * 10u + (unsigned)(s[q++] - '0');
    size_t d = q - p;
    if (d == 0 || d > 3 || v > 255 || (d > 1 && s[p] == '0')) return 0;
    a = (a << 8) | v;
    p = q;
  }
  *addr = a;
  return p;
}

/* "192.168.001.001": every octet exactly three digits (zero-padded), <= 255. */
static size_t parse_ipv4_padded(const uint8_t *s, size_t n, size_t i, uint32_t *addr) {
  if (i + 15 > n) return 0;
  uint32_t a = 0;
  for (int k = 0; k < 4; k++) {
    const uint8_t *o = s + i + 4 * k;
    if (!lm_pii_is_digit(o[0]) || !lm_pii_is_digit(o[1]) || !lm_pii_is_digit(o[2])) return 0;
    if (k < 3 && o[3] != '.') return 0;
    unsigned v = (unsigned)(o[0] - '0') * 100u + (unsigned)(o[1] - '0') * 10u + (unsigned)(o[2] - '0');
    if (v > 255) return 0;
    a = (a << 8) | v;
  }
  if (i + 15 < n && lm_pii_is_digit(s[i + 15])) return 0;
  *addr = a;
  return i + 15;
}

/* A host name ends right before i, then " (" or "(": "mirror.example.com (8.8.8.8)". */
static int hostname_before_paren(const uint8_t *s, size_t i) {
  if (i < 2 || s[i - 1] != '(') return 0;
  size_t e = i - 1;
  if (s[e - 1] == ' ') e--;
  size_t j = e, last_dot = 0;
  while (j > 0 && (lm_pii_is_alnum(s[j - 1]) || s[j - 1] == '-' || s[j - 1] == '.') && e - j < 253) {
    if (s[j - 1] == '.' && !last_dot) last_dot = j;
    j--;
  }
  if (!last_dot || e - last_dot < 2) return 0;
  for (size_t k = last_dot; k < e; k++)
    if (!lm_pii_is_alpha(s[k])) return 0;
  return 1;
}

int lm_pii_ipv4_is_global(uint32_t a) {
  /* Python 3.11 ipaddress: _private_networks + _public_network (100.64/10). */
  static const struct {
    uint32_t net;
    int len;
  } nets[] = {{0x00000000u, 8},  {0x0A000000u, 8},  {0x7F000000u, 8},  {0xA9FE0000u, 16},
              {0xAC100000u, 12}, {0xC0000000u, 29}, {0xC00000AAu, 31}, {0xC0000200u, 24},
              {0xC0A80000u, 16}, {0xC6120000u, 15}, {0xC6336400u, 24}, {0xCB007100u, 24},
              {0xF0000000u, 4},  {0xFFFFFFFFu, 32}, {0x64400000u, 10}};
  for (size_t k = 0; k < sizeof nets / sizeof nets[0]; k++) {
    uint32_t mask = 0xFFFFFFFFu << (32 - nets[k].len);
    if ((a & mask) == nets[k].net) return 0;
  }
  return 1;
}

static int word_in(const char *w, const char *const *list, size_t n) {
  for (size_t k = 0; k < n; k++)
    if (strcmp(w, list[k]) == 0) return 1;
  return 0;
}

/* Words after which a dotted quad is an address whatever else the context says
 * ("Server 8.8.8.8", "ip.addr == 8.8.8.8", "From 8.8.8.8", French "vers 8.8.8.8"). */
static int ip_context_word(const char *w) {
  static const char *const words[] = {
      "ip",       "ips",      "ipv4",    "ip4",      "inet",    "addr",     "address",  "addresses",
      "adresse",  "host",     "hosts",   "hostname", "server",  "servers",  "dns",      "nameserver",
      "resolver", "gateway",  "gw",      "router",   "route",   "proxy",    "peer",     "client",
      "node",     "ping",     "ssh",     "src",      "dst",     "source",   "destination", "remote",
      "local",    "public",   "private", "static",   "vpn",     "lan",      "wan",      "subnet",
      "network",  "netmask",  "mask",    "broadcast", "bind",   "listen",   "blocked",  "banned",
      "attacker", "user",     "mirror",  "ntp",      "smtp",    "relay",    "mx",       "target",
      "connect",  "connected", "connecting", "tcp",  "udp",     "localhost", "loopback", "origin",
      "from",     "to",       "via",     "at",       "on",      "in",       "by",       "is",
      "was",      "for",      "with",    "and",      "or",      "of",       "the",      "see",
      "use",      "vers",     "de",      "von",      "nach",    "an",       "bei",      "desde",
      "hacia",    "para",     "por",     "depuis",   "sur",     "par",      "da",       "di",
      "contact",  "login",    "logged",  "visitor",  "allow",   "allowed",  "deny",     "denied",
      "refused",  "reject",   "rejected", "drop",    "dropped", "accept",   "accepted", "unknown"};
  return word_in(w, words, sizeof words / sizeof words[0]);
}

/* The ASCII letters ending at e (at most 20, not glued to a word byte before),
 * lower-cased into w; their start in *start.  0 if none. */
static size_t word_before(const uint8_t *s, size_t e, char w[24], size_t *start, int *titled) {
  size_t j = e;
  while (j > 0 && lm_pii_is_alpha(s[j - 1]) && e - j <= 20) j--;
  size_t wl = e - j;
  if (wl == 0 || wl > 20 || (j > 0 && is_word(s[j - 1]))) return 0;
  int lower = 0;
  for (size_t k = 0; k < wl; k++) {
    w[k] = (char)(s[j + k] | 0x20);
    lower |= k > 0 && lm_pii_is_lower(s[j + k]);
  }
  w[wl] = 0;
  *start = j;
  *titled = lm_pii_is_upper(s[j]) && lower; /* "Firefox", "LibreOffice"; not "DNS", "x" */
  return wl;
}

/* An identifier ending at e made of letters, digits and '_' ("__version__",
 * "app_version", "VERSION_NAME", "server_ip"): 1 if one of its letter parts is
 * a version word and none an address word (checked by the callers' lists). */
static int identifier_parts(const uint8_t *s, size_t e, int (*is_version)(const char *),
                            int (*is_ip)(const char *)) {
  size_t j = e;
  while (j > 0 && (lm_pii_is_alnum(s[j - 1]) || s[j - 1] == '_') && e - j < 48) j--;
  if (j > 0 && (is_word(s[j - 1]) || s[j - 1] == '_')) return 0;
  int ver = 0;
  size_t k = j;
  while (k < e) {
    while (k < e && !lm_pii_is_alpha(s[k])) k++;
    size_t b = k;
    while (k < e && lm_pii_is_alpha(s[k])) k++;
    if (k == b || k - b > 20) continue;
    char w[24];
    for (size_t q = b; q < k; q++) w[q - b] = (char)(s[q] | 0x20);
    w[k - b] = 0;
    if (is_ip(w)) return 0;
    ver |= is_version(w);
  }
  return ver;
}

/* "requests==2.31.0.1", "foo >= 1.2.3.4", "bar~=2.0.0.1": a version requirement,
 * unless the name compared is an address ("ip.addr == 8.8.8.8", "host==8.8.8.8"). */
static int version_operator(const uint8_t *s, size_t i) {
  size_t j = i;
  while (j > 0 && i - j < 2 && s[j - 1] == ' ') j--;
  if (j < 3 || s[j - 1] != '=') return 0;
  uint8_t op = s[j - 2];
  if (op != '=' && op != '<' && op != '>' && op != '~' && op != '!') return 0;
  j -= 2;
  if (j > 0 && s[j - 1] == '=') j--; /* "===" */
  while (j > 0 && i - j < 8 && s[j - 1] == ' ') j--;
  char w[24];
  size_t ws;
  int titled;
  if (!word_before(s, j, w, &ws, &titled)) {
    /* the name ends in a digit or '_' ("py3==", "foo_bar=="): still a name */
    return j > 0 && (lm_pii_is_digit(s[j - 1]) || s[j - 1] == '_' || s[j - 1] == '-');
  }
  return !ip_context_word(w);
}

static const char *const k_version_words[] = {
    "v",        "ver",     "version", "versions", "release",  "released", "releases", "rel",
    "rev",      "revision", "build",  "firmware", "kernel",   "update",   "updated",  "upgrade",
    "upgraded", "bump",    "bumped",  "changelog", "tag",     "tagged",   "patch",    "pkg",
    "package",  "snapshot", "since",  "until",    "upstream", "fixed",    "changes",  "section",
    "sections", "sec",     "chapter", "clause",   "rfc",      "paragraph", "para",    "item",
    "step",     "figure",  "fig",     "table",    "appendix", "part",     "versionname", "versioncode"};

static int version_word(const char *w) {
  return word_in(w, k_version_words, sizeof k_version_words / sizeof k_version_words[0]);
}

/* "version 1.2.3.4", "Release: 1.2.3.4", "(rev 1.2.3.4)", "\"version\": \"1.2.3.4\"",
 * "<version>1.2.3.4", "vers. 1.2.3.4", "__version__ = '1.2.3.4'": the word before
 * the number (after at most 5 spaces / ':' / '(' / '=' / quotes / '>') is a version
 * word, or an identifier with a version part and no address part; "Firefox
 * 115.0.2.1": a capitalised name right before (one space) that is not an address word. */
static int version_context_at(const uint8_t *s, size_t i, int depth) {
  /* abbreviations written with a period */
  static const char *const abbrev[] = {"v", "ver", "vers", "rev", "rel", "sec", "fig", "para", "pkg"};
  if (depth == 0 && version_operator(s, i)) return 1;
  size_t j = i, skipped = 0;
  while (j > 0 && skipped < 5 &&
         (s[j - 1] == ' ' || s[j - 1] == ':' || s[j - 1] == '(' || s[j - 1] == '=' || s[j - 1] == '\t' ||
          s[j - 1] == '"' || s[j - 1] == '\'' || s[j - 1] == '>')) {
    j--;
    skipped++;
  }
  if (!skipped) return 0;
  int dot = 0;
  if (j > 0 && s[j - 1] == '.' && s[i - 1] == ' ') {
    dot = 1;
    j--;
  }
  char w[24];
  size_t ws;
  int titled;
  if (!word_before(s, j, w, &ws, &titled)) {
    /* "__version__", "app_version", "VERSION_NAME" */
    return !dot && j > 0 && (lm_pii_is_alnum(s[j - 1]) || s[j - 1] == '_') &&
           identifier_parts(s, j, version_word, ip_context_word);
  }
  if (dot) return word_in(w, abbrev, sizeof abbrev / sizeof abbrev[0]);
  if (version_word(w)) return 1;
  /* "upgrade to 1.2.3.4", "bumped from 1.2.3.4": look one word further */
  if (depth == 0 && (strcmp(w, "to") == 0 || strcmp(w, "from") == 0)) return version_context_at(s, ws, 1);
  if (depth == 0 && titled && skipped == 1 && s[i - 1] == ' ' && !ip_context_word(w)) return 1;
  return 0;
}

static int version_context(const uint8_t *s, size_t i) { return version_context_at(s, i, 0); }

/* ------------------------------------------------------------------ IPv6 */

static size_t parse_ipv6(const uint8_t *s, size_t n, size_t t, uint8_t out[16]) {
  uint16_t g[8];
  int ng = 0, dc = -1, has_digit = 0;
  size_t p = t;
  if (p + 1 < n && s[p] == ':' && s[p + 1] == ':') {
    dc = 0;
    p += 2;
  } else if (p < n && s[p] == ':') {
    return 0;
  }
  for (;;) {
    size_t q = p;
    unsigned v = 0;
    int dig = 0;
    while (q < n && lm_pii_is_hex(s[q]) && q - p < 5) {
      uint8_t c = s[q];
      dig |= lm_pii_is_digit(c);
      v = v * 16u + (unsigned)(lm_pii_is_digit(c) ? c - '0' : (c | 0x20) - 'a' + 10);
      q++;
    }
    size_t d = q - p;
    if (d == 0) break;
    if (d > 4) return 0;
    if (q < n && s[q] == '.') { /* embedded IPv4 tail */
      uint32_t a4;
      if (ng > 6) return 0;
      size_t e4 = parse_ipv4(s, n, p, &a4);
      if (!e4) return 0;
      g[ng++] = (uint16_t)(a4 >> 16);
      g[ng++] = (uint16_t)(a4 & 0xFFFFu);
      p = e4;
      has_digit = 1;
      break;
    }
    if (ng >= 8) return 0;
    g[ng++] = (uint16_t)v;
    has_digit |= dig;
    p = q;
    if (p + 1 < n && s[p] == ':' && s[p + 1] == ':') {
      if (dc >= 0) return 0;
      dc = ng;
      p += 2;
      continue;
    }
    if (p + 1 < n && s[p] == ':' && lm_pii_is_hex(s[p + 1])) {
      p++;
      continue;
    }
    break;
  }
  if (ng == 0 || !has_digit) return 0;
  if (dc < 0 ? ng != 8 : ng > 7) return 0;
  uint16_t full[8] = {0};
  if (dc < 0) {
    memcpy(full, g, sizeof full);
  } else {
    for (int k = 0; k < dc; k++) full[k] = g[k];
    int tail = ng - dc;
    for (int k = 0; k < tail; k++) full[8 - tail + k] = g[dc + k];
  }
  for (int k = 0; k < 8; k++) {
    out[2 * k] = (uint8_t)(full[k] >> 8);
    out[2 * k + 1] = (uint8_t)full[k];
  }
  return p;
}

static int prefix_eq(const uint8_t a[16], const uint8_t *net, int bits) {
  int bytes = bits / 8, rem = bits % 8;
  if (memcmp(a, net, (size_t)bytes) != 0) return 0;
  if (rem) {
    uint8_t mask = (uint8_t)(0xFF << (8 - rem));
    if ((a[bytes] & mask) != (net[bytes] & mask)) return 0;
  }
  return 1;
}

/* Python 3.11 ipaddress IPv6Address.is_global (= not in _private_networks). */
static int ipv6_is_global(const uint8_t a[16]) {
  static const struct {
    uint8_t net[16];
    int len;
  } nets[] = {
      {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, 128},          /* ::1 */
      {{0}, 128},                                                         /* :: */
      {{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF}, 96},                  /* ::ffff:0:0/96 */
      {{0x01, 0x00}, 64},                                                /* 100::/64 */
      {{0x20, 0x01}, 23},                                                /* 2001::/23 */
      {{0x20, 0x01, 0x00, 0x02}, 48},                                    /* 2001:2::/48 */
      {{0x20, 0x01, 0x0D, 0xB8}, 32},                                    /* 2001:db8::/32 */
      {{0x20, 0x01, 0x00, 0x10}, 28},                                    /* 2001:10::/28 */
      {{0xFC}, 7},                                                       /* fc00::/7 */
      {{0xFE, 0x80}, 10},                                                /* fe80::/10 */
  };
  for (size_t k = 0; k < sizeof nets / sizeof nets[0]; k++)
    if (prefix_eq(a, nets[k].net, nets[k].len)) return 0;
  return 1;
}

/* At a ':' (index i): the token around it, if it is an IPv6 address. */
static int ipv6_at(const lm_pii_masker *m, const uint8_t *s, size_t n, size_t i, size_t lo, size_t *st,
                   size_t *en) {
  size_t t = i;
  while (t > lo && i - t < 5 && lm_pii_is_hex(s[t - 1])) t--;
  if (i - t > 4) return 0;
  if (t > 0 && (is_word(s[t - 1]) || s[t - 1] == ':' || s[t - 1] == '.')) return 0;
  uint8_t a[16];
  size_t e = parse_ipv6(s, n, t, a);
  if (!e) return 0;
  if (e < n && (is_word(s[e]) || s[e] == ':' || (s[e] == '.' && e + 1 < n && lm_pii_is_alnum(s[e + 1]))))
    return 0;
  if (m->ipv6_public_only && !ipv6_is_global(a)) return 0;
  *st = t;
  *en = e;
  return 1;
}

/* ----------------------------------------------------------------- phone */

/* "+CC ...": 8..15 digits in groups separated by one space, '-' or '.', with
 * optional "(0)" / "(123)" groups. */
static size_t parse_intl_phone(const uint8_t *s, size_t n, size_t i) {
  if (i > 0 && (is_word(s[i - 1]) || s[i - 1] == '+')) return 0;
  size_t p = i + 1, end = 0;
  if (p >= n || !lm_pii_is_digit(s[p]) || s[p] == '0') return 0;
  int digits = 0, groups = 0;
  for (;;) {
    if (p < n && s[p] == '(') {
      size_t q = p + 1;
      while (q < n && lm_pii_is_digit(s[q]) && q - p <= 4) q++;
      if (q == p + 1 || q - p > 5 || q >= n || s[q] != ')') break;
      if (digits + (int)(q - p - 1) > 15) break;
      digits += (int)(q - p - 1);
      p = q + 1;
      end = p;
      groups++;
      if (p < n && lm_pii_is_digit(s[p])) continue; /* "(0)30" */
    } else if (p < n && lm_pii_is_digit(s[p])) {
      size_t q = p;
      while (q < n && lm_pii_is_digit(s[q])) q++;
      if (digits + (int)(q - p) > 15) { /* a following number, not part of the phone */
        if (groups == 0) return 0;
        break;
      }
      digits += (int)(q - p);
      p = q;
      end = p;
      groups++;
    } else {
      break;
    }
    if (p + 1 < n && (s[p] == ' ' || s[p] == '-' || s[p] == '.') &&
        (lm_pii_is_digit(s[p + 1]) || s[p + 1] == '(')) {
      p++;
      continue;
    }
    if (p < n && s[p] == '(') continue;
    break;
  }
  if (digits < 8 || groups > 8) return 0;
  if (!num_right_ok(s, n, end)) return 0;
  return end;
}

/* Exactly k digits at p, the first in [lo_digit, 9]; 1 if so. */
static int digits_at(const uint8_t *s, size_t n, size_t p, size_t k, char lo_digit) {
  if (p + k > n) return 0;
  for (size_t j = 0; j < k; j++)
    if (!lm_pii_is_digit(s[p + j])) return 0;
  if (s[p] < lo_digit) return 0;
  return p + k >= n || !lm_pii_is_digit(s[p + k]);
}

/* NNN-NNN-NNNN or NNN.NNN.NNNN (same separator), the area code starting 2-9 (the
 * exchange may start with any digit: fictional 555-123-4567 numbers are common). */
static size_t nanp_core(const uint8_t *s, size_t n, size_t p) {
  if (!digits_at(s, n, p, 3, '2') || p + 3 >= n) return 0;
  uint8_t sep = s[p + 3];
  if (sep != '-' && sep != '.') return 0;
  if (!digits_at(s, n, p + 4, 3, '0') || p + 7 >= n || s[p + 7] != sep) return 0;
  if (!digits_at(s, n, p + 8, 4, '0')) return 0;
  return p + 12;
}

static size_t parse_nanp(const uint8_t *s, size_t n, size_t i) {
  size_t e = 0;
  if (s[i] == '1' && i + 2 < n && (s[i + 1] == '-' || s[i + 1] == '.' || s[i + 1] == ' ')) e = nanp_core(s, n, i + 2);
  if (!e) e = nanp_core(s, n, i);
  if (!e || !num_right_ok(s, n, e)) return 0;
  return e;
}

/* "(NNN) NNN-NNNN", "(NNN)NNN-NNNN", "(NNN) NNN NNNN", "(NNN) NNN.NNNN". */
static size_t parse_nanp_paren(const uint8_t *s, size_t n, size_t i) {
  if (i > 0 && is_word(s[i - 1])) return 0;
  if (!digits_at(s, n, i + 1, 3, '2') || i + 4 >= n || s[i + 4] != ')') return 0;
  size_t p = i + 5;
  if (p < n && s[p] == ' ') p++;
  if (!digits_at(s, n, p, 3, '0') || p + 3 >= n) return 0;
  uint8_t sep = s[p + 3];
  if (sep != '-' && sep != '.' && sep != ' ') return 0;
  if (!digits_at(s, n, p + 4, 4, '0')) return 0;
  size_t e = p + 8;
  return num_right_ok(s, n, e) ? e : 0;
}

/* ----------------------------------------------------------- credit card */

int lm_pii_luhn_valid(const char *str, size_t len) {
  int sum = 0, nd = 0;
  for (size_t k = len; k-- > 0;) {
    uint8_t c = (uint8_t)str[k];
    if (!lm_pii_is_digit(c)) continue;
    int d = c - '0';
    if (nd & 1) {
      d *= 2;
      if (d > 9) d -= 9;
    }
    sum += d;
    nd++;
  }
  return nd >= 2 && sum % 10 == 0;
}

/* Plausible issuer prefix (IIN) for a number of len digits. */
static int iin_ok(const char *d, int len) {
  int p1 = d[0] - '0', p2 = p1 * 10 + d[1] - '0', p3 = p2 * 10 + d[2] - '0', p4 = p3 * 10 + d[3] - '0';
  int p6 = p4 * 100 + (d[4] - '0') * 10 + (d[5] - '0');
  if (p1 == 4) return len == 13 || len == 16 || len == 19;         /* Visa */
  if (p2 >= 51 && p2 <= 55) return len == 16;                       /* Mastercard */
  if (p4 >= 2221 && p4 <= 2720) return len == 16;                   /* Mastercard 2-series */
  if (p4 >= 2200 && p4 <= 2204) return len >= 16;                   /* Mir */
  if (p2 == 34 || p2 == 37) return len == 15;                       /* American Express */
  if (p4 == 6011 || (p3 >= 644 && p3 <= 649) || p2 == 65) return len >= 16; /* Discover */
  if (p6 >= 622126 && p6 <= 622925) return len >= 16;               /* Discover / UnionPay co-brand */
  if (p2 == 62) return len >= 16;                                   /* UnionPay */
  if (p4 >= 3528 && p4 <= 3589) return len >= 16;                   /* JCB */
  if ((p3 >= 300 && p3 <= 305) || p2 == 36 || p2 == 38 || p2 == 39) return len >= 14; /* Diners */
  if (p2 == 50 || (p2 >= 56 && p2 <= 69)) return len >= 13;         /* Maestro */
  return 0;
}

static int card_groups_ok(const int *gl, int ng) {
  if (ng == 1) return 1;
  if (ng == 3 && gl[0] == 4 && gl[1] == 6 && (gl[2] == 5 || gl[2] == 4)) return 1; /* Amex, Diners */
  for (int k = 0; k < ng - 1; k++)
    if (gl[k] != 4) return 0;
  return gl[ng - 1] >= 1 && gl[ng - 1] <= 4;
}

static size_t parse_card(const uint8_t *s, size_t n, size_t i) {
  int gl[8], ng = 0, nd = 0;
  size_t gend[8];
  char dig[20];
  uint8_t sep = 0;
  size_t p = i;
  for (;;) {
    size_t q = p;
    while (q < n && lm_pii_is_digit(s[q]) && nd + (int)(q - p) < 20) dig[nd + (q - p)] = (char)s[q], q++;
    if (q < n && lm_pii_is_digit(s[q])) return 0; /* more than 19 digits */
    nd += (int)(q - p);
    gl[ng] = (int)(q - p);
    gend[ng++] = q;
    p = q;
    if (ng == 8 || nd > 19) break;
    if (p + 1 < n && (s[p] == ' ' || s[p] == '-') && lm_pii_is_digit(s[p + 1]) && (!sep || sep == s[p])) {
      sep = s[p];
      p++;
      continue;
    }
    break;
  }
  /* The longest prefix of whole groups that is a plausible, Luhn-valid card. */
  for (int k = ng; k >= 1; k--) {
    int tot = 0;
    for (int j = 0; j < k; j++) tot += gl[j];
    if (tot < 13 || tot > 19 || !card_groups_ok(gl, k)) continue;
    if (!iin_ok(dig, tot) || !lm_pii_luhn_valid(dig, (size_t)tot)) continue;
    if (!num_right_ok(s, n, gend[k - 1])) continue;
    if (k < ng && sep == '-') continue; /* "4111-...-1111-22": part of a longer number */
    return gend[k - 1];
  }
  return 0;
}

/* ------------------------------------------------------------------ IBAN */

int lm_pii_iban_country_length(const char cc[2]) {
  static const char table[] =
      "AD24AE23AL28AT20AZ28BA20BE16BG22BH22BR29BY28CH21CR22CY28CZ24DE22DK18DO28EE20EG29ES24FI18"
      "FO18FR27GB22GE22GI23GL18GR27GT28HR21HU28IE22IL23IQ23IS26IT27JO30KW30KZ20LB28LC32LI21LT20"
      "LU20LV21LY25MC27MD24ME22MK19MR27MT31MU30NL18NO15PK24PL28PS29PT25QA29RO24RS22SA24SC31SD18"
      "SE24SI19SK24SM27ST25SV28TL23TN24TR26UA29VA22VG24XK20";
  for (size_t k = 0; k + 4 <= sizeof table - 1; k += 4)
    if (table[k] == cc[0] && table[k + 1] == cc[1]) return (table[k + 2] - '0') * 10 + (table[k + 3] - '0');
  return 0;
}

int lm_pii_iban_mod97_valid(const char *str, size_t len) {
  char buf[64];
  size_t k = 0;
  for (size_t j = 0; j < len; j++) {
    uint8_t c = (uint8_t)str[j];
    if (c == ' ') continue;
    if (!(lm_pii_is_upper(c) || lm_pii_is_digit(c)) || k >= sizeof buf) return 0;
    buf[k++] = (char)c;
  }
  if (k < 5) return 0;
  unsigned r = 0;
  for (size_t j = 0; j < k; j++) {
    uint8_t c = (uint8_t)buf[(j + 4) % k];
    if (lm_pii_is_digit(c))
      r = (r * 10u + (unsigned)(c - '0')) % 97u;
    else
      r = (r * 100u + (unsigned)(c - 'A' + 10)) % 97u;
  }
  return r == 1;
}

/* At the start i of a digit run preceded by two letters: CCdd + BBAN, compact or
 * in groups of four separated by one space or one '-' (the same throughout), in
 * any letter case ("de89 3704 ...", "DE89-3704-..."); checked upper-cased. */
static size_t parse_iban(const uint8_t *s, size_t n, size_t i, size_t lo) {
  if (i < lo + 2 || !lm_pii_is_alpha(s[i - 2]) || !lm_pii_is_alpha(s[i - 1])) return 0;
  size_t st = i - 2;
  if (st > 0 && is_word(s[st - 1])) return 0;
  const char cc[2] = {(char)(s[st] & ~0x20), (char)(s[st + 1] & ~0x20)};
  int L = lm_pii_iban_country_length(cc);
  if (!L || i + 1 >= n || !lm_pii_is_digit(s[i + 1])) return 0;
  char buf[40];
  uint8_t sep = 0;
  size_t p = st;
  for (int k = 0; k < L;) {
    if (k > 0 && k % 4 == 0) {
      if (k == 4) sep = p < n && (s[p] == ' ' || s[p] == '-') ? s[p] : 0;
      if (sep) {
        if (p >= n || s[p] != sep) return 0;
        p++;
      }
    }
    if (p >= n || !lm_pii_is_alnum(s[p])) return 0;
    buf[k++] = (char)(lm_pii_is_lower(s[p]) ? s[p] - 32 : s[p]);
    p++;
  }
  if (p < n && is_word(s[p])) return 0;
  if (sep == '-' && p + 1 < n && s[p] == '-' && lm_pii_is_alnum(s[p + 1])) return 0; /* a longer dashed id */
  if (!lm_pii_iban_mod97_valid(buf, (size_t)L)) return 0;
  return p;
}

/* ----------------------------------------------------------------- email */

static inline int local_char(uint8_t c) {
  return lm_pii_is_alnum(c) || c == '_' || c == '%' || c == '+' || c == '-';
}

/* The other RFC 5322 atext characters, taken inside a local part only (between
 * two local characters): "O'Brien@", "a/b@", "x~y@".  Not '=', '?', '&' (query
 * strings: "?email=bob@x.org" keeps "email="). */
static inline int local_inner(uint8_t c) {
  return c == '\'' || c == '/' || c == '!' || c == '#' || c == '$' || c == '*' || c == '^' || c == '`' ||
         c == '{' || c == '|' || c == '}' || c == '~';
}

/* File names and image variants that look like addresses: "logo@2x.png",
 * "icon@3x.webp", "config@prod.json", "po/en@quot.header" (extensions that are
 * no top-level domain). */
static int file_name_domain(const uint8_t *s, size_t d0, size_t first_end, size_t tld0, size_t tld1) {
  static const char *const ext[] = {"png",  "jpg",  "jpeg", "gif", "svg",  "webp", "bmp",  "ico",   "tif",
                                    "tiff", "avif", "heic", "pdf", "txt",  "json", "yaml", "yml",   "html",
                                    "htm",  "css",  "js",   "xml", "cfg",  "ini",  "conf", "patch", "diff",
                                    "lock", "log",  "exe",  "dll", "md5",  "sha1", "gz",   "xz",    "po",
                                    "pot",  "gmo",  "header"}; /* gettext: "po/ca@valencia.po" */
  size_t q = d0;
  while (q < first_end && lm_pii_is_digit(s[q])) q++;
  if (q > d0 && q + 1 == first_end && (s[q] | 0x20) == 'x') return 1; /* "@2x." */
  if (tld1 - tld0 > 6) return 0;
  char w[8];
  for (size_t k = tld0; k < tld1; k++) w[k - tld0] = (char)(s[k] | 0x20);
  w[tld1 - tld0] = 0;
  for (size_t k = 0; k < sizeof ext / sizeof ext[0]; k++)
    if (strcmp(w, ext[k]) == 0) return 1;
  return 0;
}

/* A two-byte UTF-8 letter at p (U+00C0..U+07FF: accented Latin, Greek, Cyrillic,
 * Armenian, Hebrew, Arabic ...; not the Latin-1 punctuation « » · NBSP): 2, else 0.
 * Scripts written without spaces (CJK, 3-byte) are left out on purpose: text glued
 * to an address must not be swallowed into it. */
static inline size_t letter2_at(const uint8_t *s, size_t n, size_t p) {
  return p + 1 < n && s[p] >= 0xC3 && s[p] <= 0xDF && (s[p + 1] & 0xC0) == 0x80 ? 2 : 0;
}

/* The local-part character ending at j (j > lo): its length (1, or 2 for a
 * two-byte letter), 0 if none. */
static inline size_t local_before(const uint8_t *s, size_t j, size_t lo) {
  if (local_char(s[j - 1])) return 1;
  if (j >= lo + 2 && letter2_at(s, j, j - 2)) return 2;
  return 0;
}

static int email_at(const uint8_t *s, size_t n, size_t a, size_t lo, size_t *st, size_t *en) {
  size_t j = a;
  while (j > lo) {
    uint8_t c = s[j - 1];
    size_t w = local_before(s, j, lo);
    if (w) {
      j -= w;
    } else if ((c == '.' || local_inner(c)) && j < a && s[j] != '.' && j - 1 > lo && local_before(s, j - 1, lo)) {
      j--;
    } else if (c == 0x99 && j < a && lm_pii_is_alnum(s[j]) && j >= lo + 4 && s[j - 2] == 0x80 &&
               s[j - 3] == 0xE2 && lm_pii_is_alnum(s[j - 4])) {
      j -= 3; /* U+2019 RIGHT SINGLE QUOTATION MARK as an apostrophe: "O’Brien@" */
    } else {
      break;
    }
  }
  /* no leading '.', '-', '+', '%', ... */
  while (j < a && !(lm_pii_is_alnum(s[j]) || s[j] == '_' || letter2_at(s, a, j))) j++;
  if (j == a || a - j > 64) return 0;
  /* domain: labels of [A-Za-z0-9-] and two-byte letters (no '-' at either end),
   * at least two, the last (TLD) of 2+ letters. */
  size_t lend[32];
  int tld[32], nl = 0;
  size_t p = a + 1;
  while (nl < 32 && p < n && (lm_pii_is_alnum(s[p]) || letter2_at(s, n, p))) {
    size_t q = p;
    int alpha = 1;
    for (;;) {
      size_t w = letter2_at(s, n, q);
      if (w) {
        q += w;
      } else if (q < n && (lm_pii_is_alnum(s[q]) || s[q] == '-')) {
        alpha &= lm_pii_is_alpha(s[q++]);
      } else {
        break;
      }
    }
    size_t r = q;
    while (r > p && s[r - 1] == '-') r--;
    if (r - p > 63) return 0;
    lend[nl] = r;
    tld[nl++] = alpha && r - p >= 2;
    if (r != q) break;
    if (q + 1 < n && s[q] == '.' && (lm_pii_is_alnum(s[q + 1]) || letter2_at(s, n, q + 1))) {
      p = q + 1;
      continue;
    }
    break;
  }
  int k = nl;
  while (k >= 2 && !tld[k - 1]) k--;
  if (k < 2 || lend[k - 1] - a - 1 > 253) return 0;
  size_t tld0 = lend[k - 1];
  while (tld0 > a + 1 && s[tld0 - 1] != '.') tld0--;
  if (file_name_domain(s, a + 1, lend[0], tld0, lend[k - 1])) return 0;
  *st = j;
  *en = lend[k - 1];
  return 1;
}

/* ------------------------------------------------------------------ scan */

int lm_pii_scan_strict(const lm_pii_masker *m, const uint8_t *s, size_t n, lm_pii_emit_fn emit, void *ctx) {
  const unsigned T = m->types;
  size_t i = 0, lo = 0, last_ip4_end = (size_t)-1;
  while ((i = next_anchor(s, n, i)) < n) {
    uint8_t c = s[i];
    size_t st = i, en = 0;
    int type = -1;
    if (c == '@') {
      if ((T & (1u << LM_PII_EMAIL)) && email_at(s, n, i, lo, &st, &en)) type = LM_PII_EMAIL;
    } else if (c == ':') {
      if ((T & (1u << LM_PII_IPV6)) && ipv6_at(m, s, n, i, lo, &st, &en)) type = LM_PII_IPV6;
    } else if (c == '+') {
      if ((T & (1u << LM_PII_PHONE)) && (en = parse_intl_phone(s, n, i)) != 0) type = LM_PII_PHONE;
    } else if (c == '(') {
      /* in a run of '(' only the last can open "(NNN)": skip to it */
      while (i + 1 < n && s[i + 1] == '(') i++;
      st = i;
      if ((T & (1u << LM_PII_PHONE)) && (en = parse_nanp_paren(s, n, i)) != 0) type = LM_PII_PHONE;
    } else {
      /* start of a digit run (the rest of a run is skipped below) */
      if ((T & (1u << LM_PII_IBAN)) && (en = parse_iban(s, n, i, lo)) != 0) {
        type = LM_PII_IBAN;
        st = i - 2;
      } else {
        int left = num_left_ok(s, i);
        if (!left && i > 0 && s[i - 1] == '-' && i - 1 == last_ip4_end) left = 2; /* "a.b.c.d-e.f.g.h" */
        if (!left && i >= 2 && s[i - 1] == '@' && local_char(s[i - 2])) left = 2; /* "ssh root@8.8.4.4" */
        if (left == 1 && (T & (1u << LM_PII_CREDIT_CARD)) && (en = parse_card(s, n, i)) != 0) {
          type = LM_PII_CREDIT_CARD;
        } else if (left && (T & (1u << LM_PII_IPV4))) {
          uint32_t a4, b4;
          size_t e = parse_ipv4(s, n, i, &a4);
          if (!e) e = parse_ipv4_padded(s, n, i, &a4);
          if (e && !num_right_ok(s, n, e)) {
            int range = s[e] == '-' && e + 1 < n && parse_ipv4(s, n, e + 1, &b4) != 0; /* "a-b" range */
            if (!range) e = 0;
          }
          if (e && left == 1 && version_context(s, i)) e = 0;
          if (e && (a4 >> 24) == 0 && a4 != 0) e = 0; /* 0.x.y.z is no host address: a version */
          if (e && e - i == 7 && i > 0 && s[i - 1] == '(' && e < n && s[e] == ')' && !hostname_before_paren(s, i))
            e = 0; /* "pkg (1.2.0.4)", not "host.example.org (1.2.0.4)" */
          if (e && e + 4 <= n && memcmp(s + e, " -> ", 4) == 0) e = 0; /* changelog "1.1.1.0 -> 1.1.2" */
          if (e && m->ipv4_public_only && !lm_pii_ipv4_is_global(a4)) e = 0;
          if (e) {
            type = LM_PII_IPV4;
            en = e;
          }
        }
        if (type < 0 && left == 1 && (T & (1u << LM_PII_PHONE)) && (en = parse_nanp(s, n, i)) != 0)
          type = LM_PII_PHONE;
      }
      if (type < 0) {
        while (i < n && lm_pii_is_digit(s[i])) i++;
        continue;
      }
    }
    if (type < 0) {
      i++;
      continue;
    }
    int rc = emit(ctx, (lm_pii_type)type, st, en);
    if (rc) return rc;
    if (type == LM_PII_IPV4) last_ip4_end = en;
    i = lo = en;
  }
  return 0;
}
