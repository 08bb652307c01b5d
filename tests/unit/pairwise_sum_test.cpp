// ir/pairwise_sum.h: the order pairwise_sum and the communicator's mean over ranks share. What
// batch-invariant training rests on: summing R blocks of 2^k terms this way, then the R block
// sums this way, gives the bits of summing all R x 2^k terms at once.
#include "ir/pairwise_sum.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace kiln {
namespace {

std::vector<float> random_terms(size_t count, uint32_t seed) {
  std::mt19937 engine(seed);
  // Mixed magnitudes and signs, so that the order of the additions shows in the last bits.
  std::normal_distribution<float> normal;
  std::vector<float> terms(count);
  for (float& t : terms) t = normal(engine) * std::pow(10.0f, normal(engine));
  return terms;
}

float tree_sum(const std::vector<float>& terms, size_t begin, size_t count) {
  return ir::pairwise_sum<float>(static_cast<int64_t>(count),
                                 [&](int64_t i) { return terms[begin + static_cast<size_t>(i)]; });
}

TEST(PairwiseSumTest, SmallCountsHaveTheDocumentedTree) {
  const std::vector<float> t = random_terms(8, 1);
  EXPECT_EQ(tree_sum(t, 0, 0), 0.0f);
  EXPECT_EQ(tree_sum(t, 0, 1), t[0]);
  EXPECT_EQ(tree_sum(t, 0, 3), (t[0] + t[1]) + t[2]);
  EXPECT_EQ(tree_sum(t, 0, 6), ((t[0] + t[1]) + (t[2] + t[3])) + (t[4] + t[5]));
  EXPECT_EQ(tree_sum(t, 0, 7), (((t[0] + t[1]) + (t[2] + t[3])) + (t[4] + t[5])) + t[6]);
  EXPECT_EQ(tree_sum(t, 0, 8), ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7])));
}

TEST(PairwiseSumTest, BlocksOfAPowerOfTwoAddUpToTheWholeBitForBit) {
  // R ranks of B = 2^k samples each, for every R up to 9 (not only powers of two) and B up to 64.
  for (size_t ranks = 1; ranks <= 9; ++ranks) {
    for (size_t block = 1; block <= 64; block *= 2) {
      const std::vector<float> terms = random_terms(ranks * block, static_cast<uint32_t>(ranks * 1000 + block));
      std::vector<float> block_sums(ranks);
      for (size_t r = 0; r < ranks; ++r) block_sums[r] = tree_sum(terms, r * block, block);
      const float whole = tree_sum(terms, 0, terms.size());
      const float of_blocks = tree_sum(block_sums, 0, ranks);
      EXPECT_EQ(std::memcmp(&whole, &of_blocks, sizeof(float)), 0)
          << ranks << " blocks of " << block << ": " << whole << " against " << of_blocks;
    }
  }
}

TEST(PairwiseSumTest, SequentialBlocksWouldNotBeTheSame) {
  // The property is the tree's: left-to-right sums of the same blocks differ in the last bits
  // for some of these cases (else the test above would prove nothing).
  int differ = 0;
  for (uint32_t seed = 0; seed < 20; ++seed) {
    const std::vector<float> terms = random_terms(16, seed);
    float whole = 0, first = 0, second = 0;
    for (size_t i = 0; i < 16; ++i) whole += terms[i];
    for (size_t i = 0; i < 8; ++i) first += terms[i];
    for (size_t i = 8; i < 16; ++i) second += terms[i];
    differ += whole != first + second;
  }
  EXPECT_GT(differ, 0);
}

TEST(PairwiseSumTest, KeepsTheSignOfASingleNegativeZero) {
  const std::vector<float> t = {-0.0f};
  EXPECT_TRUE(std::signbit(tree_sum(t, 0, 1)));
}

}  // namespace
}  // namespace kiln
