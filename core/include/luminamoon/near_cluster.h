/* luminamoon/near_cluster.h — the union-find of offline near-duplicate clustering
 * (issue 12 part 3), with datatrove 0.10.1's MinhashDedupCluster semantics.
 *
 * Elements are document indices 0..n-1.  parent[i] is i's parent (i for a root);
 * size[r] is the number of elements of root r's set (1 for an element never joined).
 * lm_near_union_pairs takes pairs (a, b) IN ORDER and does datatrove's union(a, b):
 *   ra = find(a), rb = find(b); if ra != rb: if size[ra] < size[rb] swap(ra, rb);
 *   parent[rb] = ra; size[ra] += size[rb]
 * i.e. union by size, and on equal sizes the root of a's set stays the root.  Path
 * compression (which never changes a root) keeps finds short.  Which element of a
 * set is its root depends on the order of the pairs; datatrove keeps the root of each
 * cluster and removes the others.
 *
 * Ownership: the caller owns every array; nothing is allocated.
 * Thread-safety: a call mutates parent/size; calls on distinct arrays are independent.
 */
#ifndef LUMINAMOON_NEAR_CLUSTER_H
#define LUMINAMOON_NEAR_CLUSTER_H

#include <stdint.h>

#include "luminamoon/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Sets parent[i] = i and size[i] = 1 for i in [0, n).
 * Errors: LM_EINVAL (n < 0, or a NULL array with n > 0). */
lm_status lm_near_union_init(int64_t n, int64_t *parent, int64_t *size);

/* Applies union(pairs[2k], pairs[2k+1]) for k = 0 .. n_pairs-1, in order.
 * parent/size: n elements each, a valid forest (as from lm_near_union_init and earlier
 * calls).  Every pair element must be in [0, n): pairs are all checked first, so on
 * LM_ERANGE nothing changed.
 * Errors: LM_EINVAL (n < 0, n_pairs < 0, a NULL array where elements are needed),
 * LM_ERANGE (a pair element outside [0, n)), LM_ECORRUPT (parent is not a forest of
 * [0, n): a parent out of range, or a cycle found while following parents). */
lm_status lm_near_union_pairs(int64_t n, int64_t *parent, int64_t *size, const int64_t *pairs, int64_t n_pairs);

/* root[i] = the root of i, for i in [0, n) (root may be parent: then it is fully compressed).
 * Errors: LM_EINVAL (n < 0 or NULL arrays with n > 0), LM_ECORRUPT (as above). */
lm_status lm_near_union_roots(int64_t n, int64_t *parent, int64_t *root);

#ifdef __cplusplus
}
#endif
#endif
