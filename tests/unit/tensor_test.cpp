// Tensor element access and rounding to the element type.
#include <gtest/gtest.h>

#include <cmath>

#include "ir/tensor.h"

namespace kiln::ir {
namespace {

TEST(Tensor, RoundsDoublesOnceToHalfAndBfloat16) {
  // Just above a tie: rounding through float first would drop the 2^-40 and round to even.
  Tensor half(TensorType{DType::F16, {1}});
  half.set(0, 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40));
  EXPECT_EQ(half.get(0), 1.0 + std::ldexp(1.0, -10));

  Tensor brain(TensorType{DType::BF16, {1}});
  brain.set(0, 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40));
  EXPECT_EQ(brain.get(0), 1.0 + std::ldexp(1.0, -7));
  brain.set(0, 1.0 + std::ldexp(1.0, -8));  // an exact tie rounds to even
  EXPECT_EQ(brain.get(0), 1.0);
  brain.set(0, -3.0);
  EXPECT_EQ(brain.get(0), -3.0);
}

TEST(Tensor, ConvertsToIntegersByTruncationAndSaturation) {
  Tensor ints(TensorType{DType::I32, {4}});
  ints.set(0, -2.7);
  ints.set(1, 1e20);
  ints.set(2, NAN);
  ints.set(3, 7.9);
  EXPECT_EQ(ints.to_doubles(), (std::vector<double>{-2, 2147483647, 0, 7}));

  Tensor flags(TensorType{DType::Bool, {2}});
  flags.set(0, 0.5);
  flags.set(1, 0.0);
  EXPECT_EQ(flags.to_doubles(), (std::vector<double>{1, 0}));
}

TEST(Tensor, FromDoublesKeepsShapeAndValues) {
  Tensor t = Tensor::from_doubles(TensorType{DType::F32, {2, 2}}, {1, 2, 3, 4.5});
  EXPECT_EQ(t.num_elements(), 4);
  EXPECT_EQ(t.byte_size(), 16u);
  EXPECT_EQ(t.get(3), 4.5);
}

}  // namespace
}  // namespace kiln::ir
