/* pii_datatrove.c — datatrove-compatible detectors: an exact emulation of the
 * two regexes of datatrove's PIIFormatter (pipeline/formatters/pii.py) as
 * Python's re.sub applies them (leftmost-first, backtracking), without a regex
 * engine:
 *
 *   e-mail: \b[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@
 *           (?:(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?
 *            |\[(?:(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)\.){3}
 *              (?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?|[A-Za-z0-9-]*[A-Za-z0-9]:)\])
 *   IPv4:   (?:(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)\.){3}(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)
 *           validated by ipaddress.ip_address (no leading zeros) and, when asked, is_global.
 *
 * Why the emulation is exact: the local part cannot contain '@' or backtrack
 * into a different '@', so each '@' has one candidate region and Python takes
 * its leftmost start where \b holds; the domain alternatives are deterministic
 * once the greedy repetition's single useful backtrack (dropping a last
 * "label." when no final label follows) is taken into account.  For the IPv4
 * regex, an octet followed by '.' must end where its digit run ends, so only
 * the first octet's start (within its digit run) and the last octet's length
 * (3, 2 or 1 digits, greedy) vary.  Python's \b uses Unicode \w: letters
 * (L*), numbers (N*) and '_'; utf8proc gives the categories.
 */
#include <string.h>
#include <utf8proc.h>

#include "pii_internal.h"

static inline int dt_lab(uint8_t c) { return lm_pii_is_alnum(c); } /* [A-Za-z0-9] (datatrove 0.10) */

static inline int dt_local(uint8_t c) {
  if (dt_lab(c)) return 1;
  switch (c) {
    case '!': case '#': case '$': case '%': case '&': case '\'': case '*': case '+': case '/':
    case '=': case '?': case '^': case '_': case '`': case '{': case '|': case '}': case '~': case '-':
      return 1;
    default:
      return 0;
  }
}

static inline int ascii_word(uint8_t c) { return lm_pii_is_alnum(c) || c == '_'; }

/* Is the character that ends just before byte i a Python (Unicode) \w character? */
static int py_word_before(const uint8_t *s, size_t i) {
  if (i == 0) return 0;
  uint8_t c = s[i - 1];
  if (c < 0x80) return ascii_word(c);
  size_t j = i - 1;
  int k = 0;
  while (j > 0 && (s[j] & 0xC0) == 0x80 && k < 3) {
    j--;
    k++;
  }
  utf8proc_int32_t cp = -1;
  utf8proc_ssize_t r = utf8proc_iterate(s + j, (utf8proc_ssize_t)(i - j), &cp);
  if (r != (utf8proc_ssize_t)(i - j) || cp < 0) return 0;
  switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
      return 1;
    default:
      return 0;
  }
}

/* Octet alternatives at p, in the regex's order of preference (longest first). */
static int valid3(const uint8_t *s, size_t n, size_t p) {
  if (p + 2 >= n || !lm_pii_is_digit(s[p]) || !lm_pii_is_digit(s[p + 1]) || !lm_pii_is_digit(s[p + 2])) return 0;
  if (s[p] == '0' || s[p] == '1') return 1;
  if (s[p] == '2' && s[p + 1] <= '4') return 1;
  return s[p] == '2' && s[p + 1] == '5' && s[p + 2] <= '5';
}

static int octet_lens(const uint8_t *s, size_t n, size_t p, int lens[3]) {
  int k = 0;
  if (valid3(s, n, p)) lens[k++] = 3;
  if (p + 1 < n && lm_pii_is_digit(s[p]) && lm_pii_is_digit(s[p + 1])) lens[k++] = 2;
  if (p < n && lm_pii_is_digit(s[p])) lens[k++] = 1;
  return k;
}

/* "[" octet "." octet "." octet "." (octet | [A-Za-z0-9-]*[A-Za-z0-9] ":") "]" from octet k at p. */
static size_t dt_bracket(const uint8_t *s, size_t n, size_t p, int k) {
  int lens[3], nl = octet_lens(s, n, p, lens);
  if (k == 3) {
    for (int j = 0; j < nl; j++)
      if (p + (size_t)lens[j] < n && s[p + (size_t)lens[j]] == ']') return p + (size_t)lens[j] + 1;
    size_t r = p;
    while (r < n && (dt_lab(s[r]) || s[r] == '-')) r++;
    if (r > p && dt_lab(s[r - 1]) && r + 1 < n && s[r] == ':' && s[r + 1] == ']') return r + 2;
    return 0;
  }
  for (int j = 0; j < nl; j++) {
    size_t q = p + (size_t)lens[j];
    if (q < n && s[q] == '.') {
      size_t r = dt_bracket(s, n, q + 1, k + 1);
      if (r) return r;
    }
  }
  return 0;
}

/* The end of the domain part starting at p, or 0. */
static size_t dt_domain(const uint8_t *s, size_t n, size_t p) {
  size_t q = p;
  int k = 0;
  while (q < n && dt_lab(s[q])) {
    size_t r = q;
    while (r < n && (dt_lab(s[r]) || s[r] == '-')) r++;
    if (r < n && s[r] == '.' && dt_lab(s[r - 1])) {
      k++;
      q = r + 1;
      continue;
    }
    break;
  }
  if (k >= 1) {
    if (q < n && dt_lab(s[q])) { /* final label: the longest prefix of the run ending in [A-Za-z0-9] */
      size_t r = q, last = q;
      while (r < n && (dt_lab(s[r]) || s[r] == '-')) {
        if (dt_lab(s[r])) last = r;
        r++;
      }
      return last + 1;
    }
    if (k >= 2) return q - 1; /* backtrack: the last "label." serves as the final label */
    return 0;
  }
  if (p < n && s[p] == '[') return dt_bracket(s, n, p + 1, 0);
  return 0;
}

int lm_pii_scan_dt_email(const uint8_t *s, size_t n, lm_pii_emit_fn emit, void *ctx) {
  size_t i = 0, resume = 0;
  while (i < n) {
    const uint8_t *at = (const uint8_t *)memchr(s + i, '@', n - i);
    if (!at) break;
    size_t a = (size_t)(at - s);
    i = a + 1;
    if (a == 0 || a - 1 < resume || !dt_local(s[a - 1])) continue;
    size_t j = a - 1; /* s[j] is a local character; extend left over runs joined by single dots */
    while (j > resume) {
      uint8_t c = s[j - 1];
      if (dt_local(c)) {
        j--;
      } else if (c == '.' && j - 1 > resume && dt_local(s[j - 2])) {
        j--;
      } else {
        break;
      }
    }
    size_t end = dt_domain(s, n, a + 1);
    if (!end) continue;
    size_t st = (size_t)-1;
    for (size_t k = j; k < a; k++) {
      if (s[k] == '.') continue;
      if (py_word_before(s, k) != ascii_word(s[k])) {
        st = k;
        break;
      }
    }
    if (st == (size_t)-1) continue;
    int rc = emit(ctx, LM_PII_EMAIL, st, end);
    if (rc) return rc;
    i = resume = end;
  }
  return 0;
}

/* Octets 2..4 from p (the regex after the first "octet."): the match end or 0. */
static size_t dt_ip_tail(const uint8_t *s, size_t n, size_t p) {
  for (int k = 0; k < 2; k++) {
    size_t q = p;
    while (q < n && lm_pii_is_digit(s[q]) && q - p < 4) q++;
    size_t d = q - p;
    if (d == 0 || d > 3 || (d == 3 && !valid3(s, n, p)) || q >= n || s[q] != '.') return 0;
    p = q + 1;
  }
  if (p >= n || !lm_pii_is_digit(s[p])) return 0;
  if (valid3(s, n, p)) return p + 3;
  if (p + 1 < n && lm_pii_is_digit(s[p + 1])) return p + 2;
  return p + 1;
}

int lm_pii_scan_dt_ipv4(int public_only, const uint8_t *s, size_t n, lm_pii_emit_fn emit, void *ctx) {
  size_t p = 0;
  while (p < n) {
    while (p < n && !lm_pii_is_digit(s[p])) p++;
    if (p >= n) break;
    size_t r0 = p, r1 = p;
    while (r1 < n && lm_pii_is_digit(s[r1])) r1++;
    p = r1;
    if (r1 >= n || s[r1] != '.') continue;
    size_t e = dt_ip_tail(s, n, r1 + 1);
    if (!e) continue;
    size_t q0 = r1 - r0 > 3 ? r1 - 3 : r0;
    if (r1 - q0 == 3 && !valid3(s, n, q0)) q0++;
    /* ipaddress.ip_address: no leading zeros; then is_global when asked. */
    int ok = 1;
    uint32_t addr = 0;
    size_t x = q0;
    for (int k = 0; k < 4; k++) {
      size_t y = x;
      unsigned v = 0;
      while (y < e && lm_pii_is_digit(s[y])) v = v * 10u + (unsigned)(s[y++] - '0');
      if (y - x > 1 && s[x] == '0') ok = 0;
      addr = (addr << 8) | v;
      x = y + 1;
    }
    if (ok && public_only && !lm_pii_ipv4_is_global(addr)) ok = 0;
    if (ok) {
      int rc = emit(ctx, LM_PII_IPV4, q0, e);
      if (rc) return rc;
    }
    p = e; /* a rejected match is consumed too (replaced by itself) */
  }
  return 0;
}
