// Tensor element access and rounding to the element type.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>

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

  // The small and unsigned integers saturate the same way (ONNX's int8 ... uint64).
  Tensor bytes(TensorType{DType::U8, {4}});
  bytes.set(0, 300);
  bytes.set(1, -1);
  bytes.set(2, 254.9);
  bytes.set(3, NAN);
  EXPECT_EQ(bytes.to_doubles(), (std::vector<double>{255, 0, 254, 0}));
  Tensor small(TensorType{DType::I8, {2}});
  small.set(0, -200);
  small.set(1, 127.5);
  EXPECT_EQ(small.to_doubles(), (std::vector<double>{-128, 127}));
  Tensor shorts(TensorType{DType::I16, {1}});
  shorts.set(0, 40000);
  EXPECT_EQ(shorts.get(0), 32767);
  Tensor words(TensorType{DType::U16, {1}});
  words.set(0, 70000);
  EXPECT_EQ(words.get(0), 65535);
  Tensor wide(TensorType{DType::U32, {2}});
  wide.set(0, 5e9);
  wide.set(1, -5);
  EXPECT_EQ(wide.to_doubles(), (std::vector<double>{4294967295.0, 0}));
  Tensor widest(TensorType{DType::U64, {2}});
  widest.set(0, 1e30);
  widest.set(1, 12345);
  EXPECT_EQ(widest.get(1), 12345);
  uint64_t top;
  std::memcpy(&top, widest.data(), sizeof top);
  EXPECT_EQ(top, ~uint64_t{0});

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
