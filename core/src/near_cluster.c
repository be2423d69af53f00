/* near_cluster.c — datatrove-compatible union-find for offline near-dup clustering.
 * See luminamoon/near_cluster.h for the contract. */
#include "luminamoon/near_cluster.h"

#include <stddef.h>

lm_status lm_near_union_init(int64_t n, int64_t *parent, int64_t *size) {
  if (n < 0 || (n > 0 && (parent == NULL || size == NULL))) return LM_EINVAL;
  for (int64_t i = 0; i < n; i++) {
    parent[i] = i;
    size[i] = 1;
  }
  return LM_OK;
}

/* The root of x, compressing the path to it.  A parent outside [0, n) or a path
 * longer than n (a cycle) is LM_ECORRUPT. */
static lm_status find_root(int64_t n, int64_t *parent, int64_t x, int64_t *out) {
  int64_t r = x;
  int64_t steps = 0;
  while (parent[r] != r) {
    int64_t p = parent[r];
    if (p < 0 || p >= n || ++steps > n) return LM_ECORRUPT;
    r = p;
  }
  while (parent[x] != r) {
    int64_t next = parent[x];
    parent[x] = r;
    x = next;
  }
  *out = r;
  return LM_OK;
}

lm_status lm_near_union_pairs(int64_t n, int64_t *parent, int64_t *size, const int64_t *pairs, int64_t n_pairs) {
  if (n < 0 || n_pairs < 0) return LM_EINVAL;
  if (n_pairs == 0) return LM_OK;
  if (pairs == NULL || parent == NULL || size == NULL) return LM_EINVAL;
  for (int64_t k = 0; k < 2 * n_pairs; k++)
    if (pairs[k] < 0 || pairs[k] >= n) return LM_ERANGE;
  for (int64_t k = 0; k < n_pairs; k++) {
    int64_t ra, rb;
    lm_status s = find_root(n, parent, pairs[2 * k], &ra);
    if (s != LM_OK) return s;
    s = find_root(n, parent, pairs[2 * k + 1], &rb);
    if (s != LM_OK) return s;
    if (ra == rb) continue;
    if (size[ra] < size[rb]) {  /* the larger set's root stays; ties: a's root */
      int64_t t = ra;
      ra = rb;
      rb = t;
    }
    parent[rb] = ra;
    size[ra] += size[rb];
  }
  return LM_OK;
}

lm_status lm_near_union_roots(int64_t n, int64_t *parent, int64_t *root) {
  if (n < 0 || (n > 0 && (parent == NULL || root == NULL))) return LM_EINVAL;
  for (int64_t i = 0; i < n; i++) {
    if (parent[i] < 0 || parent[i] >= n) return LM_ECORRUPT;
  }
  for (int64_t i = 0; i < n; i++) {
    int64_t r;
    lm_status s = find_root(n, parent, i, &r);
    if (s != LM_OK) return s;
    root[i] = r;
  }
  return LM_OK;
}
