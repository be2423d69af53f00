// lm_near_union_*: datatrove's MinhashDedupCluster union-find (union by size, ties keep
// the first element's root), checked against a plain reference written from datatrove's
// Python (a dict-based union with recursive find), plus bad input.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <random>
#include <vector>

extern "C" {
#include "luminamoon/near_cluster.h"
}

namespace {

// datatrove 0.10.1 MinhashDedupCluster.run's parent()/union(), transcribed.
struct DatatroveUF {
  std::map<int64_t, int64_t> union_set, set_size;
  int64_t parent(int64_t x) {
    auto it = union_set.find(x);
    if (it == union_set.end() || it->second == x) {
      union_set[x] = x;
      return x;
    }
    int64_t p = parent(it->second);
    union_set[x] = p;
    return p;
  }
  void unite(int64_t a, int64_t b) {
    int64_t ra = parent(a), rb = parent(b);
    if (ra == rb) return;
    int64_t sa = set_size.count(ra) ? set_size[ra] : 1, sb = set_size.count(rb) ? set_size[rb] : 1;
    if (sa < sb) std::swap(ra, rb);
    union_set[rb] = ra;
    set_size[ra] = sa + sb;
    set_size.erase(rb);
  }
};

TEST(NearCluster, MatchesDatatroveUnionOnRandomPairs) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 50; round++) {
    int64_t n = 1 + static_cast<int64_t>(rng() % 200);
    int64_t np = static_cast<int64_t>(rng() % 300);
    std::vector<int64_t> pairs(2 * np);
    for (auto &x : pairs) x = static_cast<int64_t>(rng() % n);
    std::vector<int64_t> parent(n), size(n), root(n);
    ASSERT_EQ(lm_near_union_init(n, parent.data(), size.data()), LM_OK);
    // apply in two calls: the forest carries over between calls
    int64_t half = np / 2;
    ASSERT_EQ(lm_near_union_pairs(n, parent.data(), size.data(), pairs.data(), half), LM_OK);
    ASSERT_EQ(lm_near_union_pairs(n, parent.data(), size.data(), pairs.data() + 2 * half, np - half), LM_OK);
    ASSERT_EQ(lm_near_union_roots(n, parent.data(), root.data()), LM_OK);
    DatatroveUF ref;
    for (int64_t k = 0; k < np; k++) ref.unite(pairs[2 * k], pairs[2 * k + 1]);
    for (int64_t i = 0; i < n; i++) {
      int64_t want = ref.union_set.count(i) ? ref.parent(i) : i;
      ASSERT_EQ(root[i], want) << "round " << round << " element " << i;
    }
  }
}

TEST(NearCluster, TiesKeepFirstRootLargerSetWins) {
  std::vector<int64_t> parent(5), size(5), root(5);
  ASSERT_EQ(lm_near_union_init(5, parent.data(), size.data()), LM_OK);
  int64_t p1[] = {3, 1};  // tie: 3 stays the root
  ASSERT_EQ(lm_near_union_pairs(5, parent.data(), size.data(), p1, 1), LM_OK);
  int64_t p2[] = {0, 1};  // {0} (1) vs {3,1} (2): 3 stays the root
  ASSERT_EQ(lm_near_union_pairs(5, parent.data(), size.data(), p2, 1), LM_OK);
  ASSERT_EQ(lm_near_union_roots(5, parent.data(), root.data()), LM_OK);
  EXPECT_EQ(root, (std::vector<int64_t>{3, 3, 2, 3, 4}));
  EXPECT_EQ(size[3], 3);
}

TEST(NearCluster, BadInput) {
  std::vector<int64_t> parent(3), size(3), root(3);
  EXPECT_EQ(lm_near_union_init(-1, parent.data(), size.data()), LM_EINVAL);
  EXPECT_EQ(lm_near_union_init(3, nullptr, size.data()), LM_EINVAL);
  EXPECT_EQ(lm_near_union_init(0, nullptr, nullptr), LM_OK);
  ASSERT_EQ(lm_near_union_init(3, parent.data(), size.data()), LM_OK);
  int64_t bad[] = {0, 1, 2, 3};
  EXPECT_EQ(lm_near_union_pairs(3, parent.data(), size.data(), bad, 2), LM_ERANGE);
  EXPECT_EQ(parent, (std::vector<int64_t>{0, 1, 2}));  // checked first: nothing changed
  int64_t neg[] = {-1, 0};
  EXPECT_EQ(lm_near_union_pairs(3, parent.data(), size.data(), neg, 1), LM_ERANGE);
  EXPECT_EQ(lm_near_union_pairs(3, parent.data(), size.data(), nullptr, 1), LM_EINVAL);
  EXPECT_EQ(lm_near_union_pairs(3, parent.data(), size.data(), bad, -1), LM_EINVAL);
  EXPECT_EQ(lm_near_union_pairs(3, parent.data(), size.data(), nullptr, 0), LM_OK);
  std::vector<int64_t> cyc = {1, 2, 0};  // not a forest
  int64_t p[] = {0, 1};
  EXPECT_EQ(lm_near_union_pairs(3, cyc.data(), size.data(), p, 1), LM_ECORRUPT);
  std::vector<int64_t> out = {0, 7, 2};  // a parent out of range
  EXPECT_EQ(lm_near_union_roots(3, out.data(), root.data()), LM_ECORRUPT);
  EXPECT_EQ(lm_near_union_roots(3, nullptr, root.data()), LM_EINVAL);
}

}  // namespace
