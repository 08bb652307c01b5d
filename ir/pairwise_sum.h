// The order of pairwise_sum (ir/ops.def), in one place: the reference evaluator and the
// communicator's mean over ranks (runtime/distributed/) call it; generated kernels write the
// same loop in CUDA (emit_pairwise_sum in codegen/kernels/reduce.cpp).
//
// Terms join a binary tree in binary-counter order: term i becomes a block of one, then, while
// a finished block of the same size waits on its left, the two merge (left + right). After
// `count` terms one block is left per set bit of count, largest (leftmost) first; they are added
// left to right. For count = 8 that is ((t0+t1)+(t2+t3))+((t4+t5)+(t6+t7)); for count = 6,
// ((t0+t1)+(t2+t3))+(t4+t5).
//
// Why this order: every block of 2^k terms starting at a multiple of 2^k is a subtree, and the
// blocks of count = R x 2^k terms are added as the R block sums would be. So R processes that
// each sum 2^k consecutive terms this way, then sum their R results this way, get the bits of
// one process summing all the terms: data-parallel gradients equal to one process's, bit for
// bit, when each rank's batch is a power of two (docs/distributed.md).
#pragma once

#include <cstdint>

namespace kiln::ir {

// The sum of load(0), ..., load(count - 1) in the order above, accumulated in Acc (a float type).
template <typename Acc, typename Load>
Acc pairwise_sum(int64_t count, Load&& load) {
  Acc level[64];  // level[l]: a finished block of 2^l terms waiting for its right neighbour
  for (int64_t i = 0; i < count; ++i) {
    Acc carry = static_cast<Acc>(load(i));
    int l = 0;
    for (; (i >> l) & 1; ++l) carry = level[l] + carry;
    level[l] = carry;
  }
  Acc total = 0;
  bool first = true;  // the first block is taken as it is (0 + -0 would lose its sign)
  for (int l = 63; l >= 0; --l) {
    if (((count >> l) & 1) == 0) continue;
    total = first ? level[l] : total + level[l];
    first = false;
  }
  return total;
}

}  // namespace kiln::ir
