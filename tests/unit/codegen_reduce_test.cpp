// Codegen of reductions, softmax, layer_norm and losses: the emitted source has the expected
// kernels and strategies, compiles with NVRTC, and the host backend's results match the
// reference interpreter.
//
// Tolerances: kernels accumulate in float in a tree order (reduce_util.h), the reference in
// double. With inputs in [-1, 1] and n terms per result, a float sum's rounding error grows
// like sqrt(n) * eps * (typical partial sum), typically well below 1e-6 * sqrt(n); the tests
// allow |got - want| <= 1e-5 * |want| + 1e-6 * sqrt(n) (reduction_tolerance), and integer
// reductions are exact.
#include <cmath>
#include <limits>

#include "codegen_test_util.h"

namespace kiln::codegen {
namespace {

using ir::DType;
using ir::Tensor;
using ir::TensorType;
using testing::check_graph;
using testing::contains;
using testing::tensor;
using testing::kExact;
using testing::random_inputs;
using testing::Tolerance;


Tolerance reduction_tolerance(int64_t n) {
  return Tolerance{1e-5, 1e-6 * std::sqrt(static_cast<double>(n))};
}

const Kernel& kernel(const Program& program, const std::string& name) {
  const Kernel* found = program.find_kernel(name);
  EXPECT_NE(found, nullptr) << name;
  static const Kernel none;
  return found ? *found : none;
}

// --- reduce_sum / reduce_mean / reduce_max -------------------------------------------------------

// Every strategy on one [6,37,40] input: rows per warp (last axis), columns (middle and first
// axes), rows with a strided kept part (axes 0 and 2), the whole tensor per block.
TEST(CodegenReduce, AxesAndStrategies) {
  const std::string text = R"(graph @reduce(%x: f32[6,37,40])
    -> (f32[6,37], f32[6,40], f32[37], f32[], f32[6,37,1], f32[1,37,40], f32[6]) {
  %0 = reduce_sum(%x) {axes = [2]} : f32[6,37]
  %1 = reduce_mean(%x) {axes = [1]} : f32[6,40]
  %2 = reduce_max(%x) {axes = [0, 2]} : f32[37]
  %3 = reduce_sum(%x) : f32[]
  %4 = reduce_max(%x) {axes = [-1], keepdims = true} : f32[6,37,1]
  %5 = reduce_mean(%x) {axes = [0], keepdims = true} : f32[1,37,40]
  %6 = reduce_sum(%x) {axes = [1, 2]} : f32[6]
  return %0, %1, %2, %3, %4, %5, %6
})";
  const Program program = check_graph("reduce", text, random_inputs(testing::parse(text), -1, 1),
                                      reduction_tolerance(8880));
  // Last axis, 40 per row: one warp per row, shuffles only.
  EXPECT_TRUE(kernel(program, "reduce_sum_0").uses_barriers);
  EXPECT_EQ(kernel(program, "reduce_sum_0").dynamic_shared_bytes, 0u);
  EXPECT_TRUE(contains(testing::kernel_source(program, "reduce_sum_0"), "kiln_warp_sum(acc)"));
  // Middle axis: one thread per output, no cooperation.
  EXPECT_FALSE(kernel(program, "reduce_mean_1").uses_barriers);
  EXPECT_TRUE(contains(testing::kernel_source(program, "reduce_mean_1"), "acc / kReducedCount"));
  // Axes 0 and 2: kept dim 1 has stride 40, the reduced dims (6, 40) keep theirs.
  EXPECT_TRUE(contains(testing::kernel_source(program, "reduce_max_2"),
                       "constexpr int kReducedStrides[kReducedRank] = {1480, 1};"));
  // Everything: 8880 elements, one block with a shared-memory tree.
  EXPECT_GT(kernel(program, "reduce_sum_3").dynamic_shared_bytes, 0u);
  EXPECT_EQ(kernel(program, "reduce_sum_3").grid.x, 1u);
}

// Long rows (one block each) and long columns (split over 8 slices per output).
TEST(CodegenReduce, LongRowsAndColumns) {
  const std::string text = R"(graph @long(%x: f32[3,2000], %y: f32[300,17])
    -> (f32[3], f32[3], f32[17], f32[17]) {
  %0 = reduce_sum(%x) {axes = [1]} : f32[3]
  %1 = reduce_max(%x) {axes = [1]} : f32[3]
  %2 = reduce_sum(%y) {axes = [0]} : f32[17]
  %3 = reduce_max(%y) {axes = [0]} : f32[17]
  return %0, %1, %2, %3
})";
  const Program program = check_graph("long", text, random_inputs(testing::parse(text), -1, 1),
                                      reduction_tolerance(2000));
  EXPECT_EQ(kernel(program, "reduce_sum_0").grid.x, 3u);
  EXPECT_EQ(kernel(program, "reduce_sum_2").block, (Dim3{32, 8, 1}));
  EXPECT_TRUE(contains(testing::kernel_source(program, "reduce_sum_2"),
                       "partial[s * kColumns + threadIdx.x]"));
}

TEST(CodegenReduce, Integers) {
  const std::string text = R"(graph @ireduce(%a: i32[4,50], %b: i64[3,70], %c: i32[5])
    -> (i32[4], i32[50], i64[3], i64[70], i32[], i32[]) {
  %0 = reduce_sum(%a) {axes = [1]} : i32[4]
  %1 = reduce_max(%a) {axes = [0]} : i32[50]
  %2 = reduce_sum(%b) {axes = [1]} : i64[3]
  %3 = reduce_max(%b) {axes = [0]} : i64[70]
  %4 = reduce_sum(%c) : i32[]
  %5 = reduce_max(%c) : i32[]
  return %0, %1, %2, %3, %4, %5
})";
  std::vector<Tensor> inputs = random_inputs(testing::parse(text), -100000, 100000);
  // Saturates at 2^31 - 1 where an i32 accumulator would wrap.
  inputs[2] = tensor(DType::I32, {5}, {2147483647.0, 5, 100, -3, 2000000000});
  check_graph("ireduce", text, inputs, kExact);
}

// f16/bf16 load to float and round once on the store: within a unit in the last place of the
// 16-bit result (2^-10 relative for f16), plus the float sum's error.
TEST(CodegenReduce, HalfAndNaN) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::string text = R"(graph @hreduce(%h: f16[4,100], %x: f32[3,40], %s: f16[40],
                        %b: f16[40], %g: bf16[3,40], %y: f16[3,40])
    -> (f16[4], f16[100], f32[3], f32[40], f16[4,100], f16[3,40], bf16[3,40]) {
  %0 = reduce_mean(%h) {axes = [1]} : f16[4]
  %1 = reduce_sum(%h) {axes = [0]} : f16[100]
  %2 = reduce_max(%x) {axes = [1]} : f32[3]
  %3 = reduce_max(%x) {axes = [0]} : f32[40]
  %4 = log_softmax(%h) : f16[4,100]
  %5 = layer_norm(%y, %s, %b) : f16[3,40]
  %6 = softmax(%g) {axis = 0} : bf16[3,40]
  return %0, %1, %2, %3, %4, %5, %6
})";
  std::vector<Tensor> inputs = random_inputs(testing::parse(text), -1, 1);
  inputs[1].set(45, nan);  // row 1, column 5
  check_graph("hreduce", text, inputs, Tolerance{2e-3, 1e-3}, {{6, Tolerance{8e-3, 1e-3}}});
}

// Size-1 dims drop out: reducing only them folds one element per output, and softmax over an
// axis followed by size-1 dims reads contiguous rows.
TEST(CodegenReduce, SizeOneDims) {
  const std::string text = R"(graph @ones(%x: f32[5,1,3], %y: f32[1,1], %z: f32[4,7,1],
                     %s: f32[1,3], %b: f32[1,3])
    -> (f32[5,3], f32[], f32[4,7,1], f32[5,1,3], f32[1,1,3]) {
  %0 = reduce_sum(%x) {axes = [1]} : f32[5,3]
  %1 = reduce_max(%y) : f32[]
  %2 = softmax(%z) {axis = 1} : f32[4,7,1]
  %3 = layer_norm(%x, %s, %b) {axis = 1} : f32[5,1,3]
  %4 = reduce_mean(%x) {axes = [0], keepdims = true} : f32[1,1,3]
  return %0, %1, %2, %3, %4
})";
  const Program program =
      check_graph("ones", text, random_inputs(testing::parse(text), -1, 1), reduction_tolerance(7));
  EXPECT_FALSE(kernel(program, "reduce_sum_0").uses_barriers);
  EXPECT_TRUE(contains(testing::kernel_source(program, "softmax_2"), "constexpr int kLen = 7;"));
}

// --- softmax, log_softmax, layer_norm ------------------------------------------------------------

TEST(CodegenNormalize, Softmax) {
  const std::string text =
      R"(graph @softmax(%a: f32[5,37], %b: f32[3,2000], %c: f32[4,6,5], %h: f16[2,9])
    -> (f32[5,37], f32[5,37], f32[3,2000], f32[3,2000], f32[4,6,5], f32[4,6,5], f16[2,9]) {
  %0 = softmax(%a) : f32[5,37]
  %1 = log_softmax(%a) : f32[5,37]
  %2 = softmax(%b) {axis = 1} : f32[3,2000]
  %3 = log_softmax(%b) : f32[3,2000]
  %4 = softmax(%c) {axis = 1} : f32[4,6,5]
  %5 = log_softmax(%c) {axis = 0} : f32[4,6,5]
  %6 = softmax(%h) : f16[2,9]
  return %0, %1, %2, %3, %4, %5, %6
})";
  const Program program = check_graph("softmax", text, random_inputs(testing::parse(text), -6, 6),
                                      Tolerance{1e-5, 1e-6});
  EXPECT_EQ(kernel(program, "softmax_0").dynamic_shared_bytes, 0u);  // a warp per row
  EXPECT_EQ(kernel(program, "softmax_2").grid.x, 3u);                // a block per row
  EXPECT_FALSE(kernel(program, "softmax_4").uses_barriers);          // a thread per row
  EXPECT_TRUE(contains(testing::kernel_source(program, "log_softmax_1"),
                       "const float log_sum = logf(sum_v);"));
}

// Rows with -inf (skipped), only -inf (NaN), +inf (NaN) or NaN (NaN), as the reference.
TEST(CodegenNormalize, SoftmaxSpecialValues) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::string text = R"(graph @special(%x: f32[5,3]) -> (f32[5,3], f32[5,3]) {
  %0 = softmax(%x) : f32[5,3]
  %1 = log_softmax(%x) : f32[5,3]
  return %0, %1
})";
  check_graph(
      "special", text,
      {tensor(DType::F32, {5, 3}, {-inf, 1, 2, -inf, -inf, -inf, 0, inf, 1, 0, nan, 1, 3, 3, 3})},
      Tolerance{1e-6, 1e-7});
}

TEST(CodegenNormalize, LayerNorm) {
  const std::string text = R"(graph @layer_norm(%x: f32[4,7,33], %s1: f32[33], %b1: f32[33],
                           %s2: f32[7,33], %b2: f32[7,33], %y: f32[2,3000], %s3: f32[3000],
                           %b3: f32[3000])
    -> (f32[4,7,33], f32[4,7,33], f32[2,3000]) {
  %0 = layer_norm(%x, %s1, %b1) : f32[4,7,33]
  %1 = layer_norm(%x, %s2, %b2) {axis = 1, epsilon = 0.001} : f32[4,7,33]
  %2 = layer_norm(%y, %s3, %b3) : f32[2,3000]
  return %0, %1, %2
})";
  const Program program = check_graph(
      "layer_norm", text, random_inputs(testing::parse(text), -1, 1), reduction_tolerance(3000));
  EXPECT_EQ(kernel(program, "layer_norm_0").dynamic_shared_bytes, 0u);
  EXPECT_EQ(kernel(program, "layer_norm_2").grid.x, 2u);
  EXPECT_TRUE(contains(testing::kernel_source(program, "layer_norm_1"),
                       "constexpr float kEpsilon = 0.001f;"));
}

// --- losses --------------------------------------------------------------------------------------

TEST(CodegenLoss, SoftmaxCrossEntropyAndMse) {
  const std::string text =
      R"(graph @losses(%l: f32[37,10], %t: i32[37], %m: f32[5,1500], %u: i64[5],
                       %p: f32[123,457], %q: f32[123,457], %h: f16[3,4], %g: f16[3,4])
    -> (f32[], f32[], f32[], f16[]) {
  %0 = softmax_cross_entropy(%l, %t) : f32[]
  %1 = softmax_cross_entropy(%m, %u) : f32[]
  %2 = mse_loss(%p, %q) : f32[]
  %3 = mse_loss(%h, %g) : f16[]
  return %0, %1, %2, %3
})";
  std::vector<Tensor> inputs = random_inputs(testing::parse(text), -3, 3);
  inputs[1] = random_inputs(testing::parse(text), 0, 9, 3)[1];
  inputs[3] = tensor(DType::I64, {5}, {0, 1499, 7, 750, 3});
  const Program program = check_graph("losses", text, inputs, reduction_tolerance(123 * 457));
  EXPECT_EQ(kernel(program, "softmax_cross_entropy_0").grid.x, 1u);
  EXPECT_EQ(kernel(program, "mse_loss_2").block.x, 1024u);
  EXPECT_TRUE(contains(program.source, "const float picked = valid ? in_row[label] : kNaN;"));
}

// The reference rejects a label outside [0, C); the kernel makes the loss NaN.
TEST(CodegenLoss, OutOfRangeLabelIsNaN) {
  const Program program = emit_program(testing::parse(R"(graph @bad_label(%l: f32[3,4], %t: i32[3])
    -> (f32[]) {
  %0 = softmax_cross_entropy(%l, %t) : f32[]
  return %0
})"));
  testing::check_nvrtc(program, "bad_label");
#if KILN_CODEGEN_TEST_HOST
  const Tensor logits = tensor(DType::F32, {3, 4}, std::vector<double>(12, 0.5));
  const std::vector<Tensor> good =
      testing::run_on_host(program, "bad_label", {logits, tensor(DType::I32, {3}, {0, 3, 2})});
  EXPECT_NEAR(good[0].get(0), std::log(4.0), 1e-6);  // uniform logits: log C
  const std::vector<Tensor> bad =
      testing::run_on_host(program, "bad_label", {logits, tensor(DType::I32, {3}, {0, 4, 2})});
  EXPECT_TRUE(std::isnan(bad[0].get(0)));
#endif
}

}  // namespace
}  // namespace kiln::codegen
