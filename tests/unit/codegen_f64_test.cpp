// f64 kernels compute in double: reductions, GEMMs (matmul, dense, conv2d), the activation and
// math rows, arg reductions. The inputs are small integers plus multiples of 2^-12 (or 2^-20),
// so every product and sum here is exact in double and the comparison with the reference
// interpreter is exact too; in float most of them would round. Each graph also compiles with
// NVRTC (no spills).
#include <cmath>
#include <limits>
#include <random>
#include <string>

#include "codegen_test_util.h"

namespace kiln::codegen {
namespace {

using ir::DType;
using ir::Tensor;
using testing::check_graph;
using testing::contains;
using testing::kExact;
using testing::tensor;

// Integers in [-limit, limit] plus a multiple of 2^-fraction_bits: exact in double, not float.
Tensor dyadic(const ir::TensorType& type, int limit, int fraction_bits, uint32_t seed) {
  std::mt19937 rng(seed);
  Tensor out(type);
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    const double whole = static_cast<double>(static_cast<int>(rng() % (2 * limit + 1)) - limit);
    const double fraction = std::ldexp(static_cast<double>(rng() % 4096), -fraction_bits);
    out.set(i, whole + fraction);
  }
  return out;
}

// Rows long enough for the block strategy, short rows for the warp one, columns with slices.
TEST(CodegenF64, ReductionsInDouble) {
  const std::string text = R"(graph @f64_reduce(%x: f64[6,1000], %c: f64[300,5])
    -> (f64[6], f64[6], f64[6], f64[5], f64[5], f64[], f64[6,1]) {
  %0 = reduce_sum(%x) {axes = [1]} : f64[6]
  %1 = reduce_mean(%x) {axes = [-1]} : f64[6]
  %2 = reduce_max(%x) {axes = [1]} : f64[6]
  %3 = reduce_sum(%c) {axes = [0]} : f64[5]
  %4 = reduce_max(%c) {axes = [0]} : f64[5]
  %5 = reduce_sum(%c) {axes = [0, 1]} : f64[]
  %6 = reduce_max(%x) {axes = [1], keepdims = true} : f64[6,1]
  return %0, %1, %2, %3, %4, %5, %6
})";
  Tensor x = dyadic({DType::F64, {6, 1000}}, 1000, 20, 1);
  x.set(3 * 1000 + 417, std::numeric_limits<double>::quiet_NaN());  // row 3's max and sum: NaN
  const Tensor c = dyadic({DType::F64, {300, 5}}, 1000, 20, 2);
  // reduce_mean divides by 1000: not exact; the kernels and the reference divide the same sum.
  const Program program = check_graph("f64_reduce", text, {x, c}, kExact);
  EXPECT_TRUE(contains(program.source, "double acc = 0.0;"));
  EXPECT_TRUE(contains(program.source, "constexpr double kReducedCount = 1000.0;"));
}

TEST(CodegenF64, GemmsInDouble) {
  const std::string text = R"(graph @f64_gemm(%a: f64[2,37,70], %b: f64[70,5], %x: f64[9,70],
                                              %w: f64[65,70], %bias: f64[65],
                                              %image: f64[1,3,9,9], %k: f64[4,3,3,3],
                                              %kb: f64[4])
    -> (f64[2,37,5], f64[9,65], f64[1,4,9,9]) {
  %0 = matmul(%a, %b) : f64[2,37,5]
  %1 = dense(%x, %w, %bias) : f64[9,65]
  %2 = conv2d(%image, %k, %kb) {pad = [1, 1, 1, 1]} : f64[1,4,9,9]
  return %0, %1, %2
})";
  const ir::Graph graph = testing::parse(text);
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < graph.inputs.size(); ++i)
    inputs.push_back(dyadic(graph.inputs[i]->type, 8, 12, 10 + static_cast<uint32_t>(i)));
  const Program program = check_graph("f64_gemm", text, inputs, kExact);
  EXPECT_TRUE(contains(program.source, "double acc[kPerThreadM][kPerThreadN];"));
  EXPECT_TRUE(contains(program.source, "double* a_tiles = reinterpret_cast<double*>(kiln_smem);"));
  for (const Kernel& kernel : program.kernels) EXPECT_EQ(kernel.dynamic_shared_bytes, 2112u * sizeof(double));  // 16 x (64 + 2) slots per tile
}

// The rows are templates on T: with T = double they agree with the reference's double to the
// last bit on the host (the same libm); a device's double math is within an ulp or two.
TEST(CodegenF64, MathRowsInDouble) {
  const std::string text = R"(graph @f64_rows(%x: f64[8]) -> (f64[8], f64[8], f64[8], f64[8], f64[8]) {
  %0 = exp(%x) : f64[8]
  %1 = sigmoid(%x) : f64[8]
  %2 = round(%x) : f64[8]
  %3 = leaky_relu(%x) {alpha = 0.1} : f64[8]
  %4 = sqrt(%x) : f64[8]
  return %0, %1, %2, %3, %4
})";
  const Program program = check_graph(
      "f64_rows", text,
      {tensor(DType::F64, {8}, {-700.5, -1e-12, 0, 1e-12, 2.5, 3.5, 1 + 1e-15, 700})},
      testing::Tolerance{1e-15, 1e-300});
  EXPECT_TRUE(contains(program.source, "using T = double;"));
  EXPECT_TRUE(contains(program.source, "constexpr double alpha = 0.10000000000000001;"));
}

TEST(CodegenF64, ArgReductionsAtEveryWidth) {
  const std::string text = R"(graph @arg_widths(%d: f64[3,4], %u: u8[3,4], %l: u64[2,3])
    -> (i64[3], i64[4], i64[3], i64[2]) {
  %0 = argmax(%d) {axis = 1, keepdims = false} : i64[3]
  %1 = argmin(%d) {axis = 0, keepdims = false} : i64[4]
  %2 = argmax(%u) {axis = 1, keepdims = false, select_last_index = true} : i64[3]
  %3 = argmax(%l) {axis = 1, keepdims = false} : i64[2]
  return %0, %1, %2, %3
})";
  const double nan = std::numeric_limits<double>::quiet_NaN();
  check_graph("arg_widths", text,
              {tensor(DType::F64, {3, 4}, {1, 1 + 1e-15, 1, 0, nan, 2, 3, nan, -1, -1 - 1e-15, 5, 5}),
               tensor(DType::U8, {3, 4}, {255, 0, 255, 1, 0, 0, 0, 0, 7, 200, 199, 200}),
               tensor(DType::U64, {2, 3}, {std::ldexp(1.0, 63), 1, std::ldexp(1.0, 62), 0, 5, 4})},
              kExact);
}

}  // namespace
}  // namespace kiln::codegen
