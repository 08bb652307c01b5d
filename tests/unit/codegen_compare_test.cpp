// Codegen of comparisons, logic, where, the float predicates, the trigonometric and rounding
// math rows, power and mod, the arg reductions and gather_elements: the source compiles with
// NVRTC and the host backend matches the reference interpreter (exactly wherever the result is
// bool, an integer, an index or a selected element).
#include <cstring>
#include <limits>

#include "codegen_test_util.h"
#include "ir/diagnostic.h"
#include "ir/printer.h"
#include "passes/pass_manager.h"

namespace kiln::codegen {
namespace {

using ir::DType;
using ir::Tensor;
using testing::check_graph;
using testing::contains;
using testing::kElementwiseF32;
using testing::kExact;
using testing::random_inputs;
using testing::tensor;

const double kNan = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

// Every comparison on f32 with NaN, infinities, ties and broadcasting; i64 values that differ
// only below a double's precision (2^53 + 1 vs 2^53) must still compare unequal.
TEST(CodegenCompare, ComparisonsBroadcastAndNan) {
  const std::string text = R"(graph @cmp(%a: f32[2,4], %b: f32[4], %i: i64[3], %j: i64[3],
                                     %p: bool[3], %q: bool[1], %h: f16[3], %k: i32[3])
    -> (bool[2,4], bool[2,4], bool[2,4], bool[2,4], bool[2,4], bool[3], bool[3], bool[3],
        bool[3], bool[3]) {
  %0 = equal(%a, %b) : bool[2,4]
  %1 = less(%a, %b) : bool[2,4]
  %2 = less_equal(%a, %b) : bool[2,4]
  %3 = greater(%a, %b) : bool[2,4]
  %4 = greater_equal(%a, %b) : bool[2,4]
  %5 = equal(%i, %j) : bool[3]
  %6 = less(%i, %j) : bool[3]
  %7 = equal(%p, %q) : bool[3]
  %8 = greater(%h, %h) : bool[3]
  %9 = less_equal(%k, %k) : bool[3]
  return %0, %1, %2, %3, %4, %5, %6, %7, %8, %9
})";
  const double big = 9007199254740992.0;  // 2^53
  Tensor i = tensor(DType::I64, {3}, {big, -5, 7});
  Tensor j = tensor(DType::I64, {3}, {big, -5, 8});
  // 2^53 + 1 has no double: write its bits directly.
  const int64_t odd = 9007199254740993LL;
  std::memcpy(j.data(), &odd, sizeof(odd));
  const Program program = check_graph(
      "compare", text,
      {tensor(DType::F32, {2, 4}, {kNan, 1, 2, -kInf, 3, 0, -0.0, kInf}),
       tensor(DType::F32, {4}, {1, kNan, 2, -kInf}), i, j, tensor(DType::Bool, {3}, {1, 0, 1}),
       tensor(DType::Bool, {1}, {1}), tensor(DType::F16, {3}, {1, 2, 3}),
       tensor(DType::I32, {3}, {-1, 0, 1})},
      kExact);
  EXPECT_TRUE(contains(program.source, "return lhs <= rhs;"));
  EXPECT_TRUE(contains(program.source, "unsigned char* __restrict__ out"));
  // The reference itself: 2^53 + 1 != 2^53 in i64.
  const ir::Graph graph = testing::parse(text);
  std::map<std::string, Tensor> named;
  for (const ir::Value* input : graph.inputs) named[input->name] = Tensor(input->type);
  named["i"] = i;
  named["j"] = j;
  const std::vector<Tensor> got = eval::run_reference(graph, named);
  EXPECT_EQ(got[5].get(0), 0.0);
  EXPECT_EQ(got[6].get(0), 1.0);
}

TEST(CodegenCompare, LogicAndWhere) {
  const std::string text = R"(graph @logic(%p: bool[3,4], %q: bool[4], %c: bool[3,1],
                                       %a: f32[3,4], %b: f32[], %h: f16[4], %g: f16[3,4],
                                       %i: i64[3,4], %j: i64[1,4], %t: bool[3,4])
    -> (bool[3,4], bool[3,4], bool[3,4], bool[3,4], f32[3,4], f16[3,4], i64[3,4], bool[3,4]) {
  %0 = logical_and(%p, %q) : bool[3,4]
  %1 = logical_or(%p, %q) : bool[3,4]
  %2 = logical_xor(%p, %q) : bool[3,4]
  %3 = logical_not(%p) : bool[3,4]
  %4 = where(%c, %a, %b) : f32[3,4]
  %5 = where(%p, %h, %g) : f16[3,4]
  %6 = where(%c, %i, %j) : i64[3,4]
  %7 = where(%q, %t, %p) : bool[3,4]
  return %0, %1, %2, %3, %4, %5, %6, %7
})";
  std::vector<Tensor> inputs = random_inputs(testing::parse(text), -3, 3);
  // i64 beyond a double's exact range: where must move the bits, not round them.
  for (int64_t k = 0; k < 12; ++k) {
    const int64_t value = (int64_t{1} << 62) + 2 * k + 1;
    std::memcpy(inputs[7].data() + k * sizeof(int64_t), &value, sizeof(value));
  }
  const Program program = check_graph("logic", text, inputs, kExact);
  EXPECT_TRUE(contains(program.source, "return cond ? lhs : rhs;"));
  EXPECT_TRUE(contains(program.source, "return (lhs != 0) != (rhs != 0);"));
}

TEST(CodegenCompare, NanAndInfPredicates) {
  const std::string text = R"(graph @pred(%x: f32[6], %h: bf16[6])
    -> (bool[6], bool[6], bool[6], bool[6], bool[6]) {
  %0 = is_nan(%x) : bool[6]
  %1 = is_inf(%x) : bool[6]
  %2 = is_inf(%x) {detect_negative = false} : bool[6]
  %3 = is_inf(%x) {detect_positive = false} : bool[6]
  %4 = is_nan(%h) : bool[6]
  return %0, %1, %2, %3, %4
})";
  const std::vector<double> values = {kNan, kInf, -kInf, 0, -1e30, 3};
  const Program program =
      check_graph("predicates", text,
                  {tensor(DType::F32, {6}, values), tensor(DType::BF16, {6}, values)}, kExact);
  EXPECT_TRUE(contains(program.source, "return value != value;"));
  EXPECT_TRUE(contains(program.source, "return value == -INFINITY;"));
}

// The trigonometric, hyperbolic and rounding rows, each inside its domain.
TEST(CodegenCompare, TrigonometricAndRounding) {
  const std::string text = R"(graph @trig(%x: f32[9,7], %u: f32[9,7], %g: f32[9,7])
    -> (f32[9,7], f32[9,7], f32[9,7], f32[9,7], f32[9,7], f32[9,7], f32[9,7], f32[9,7],
        f32[9,7], f32[9,7], f32[9,7], f32[9,7], f32[9,7], f32[9,7], f32[9,7]) {
  %0 = sin(%x) : f32[9,7]
  %1 = cos(%x) : f32[9,7]
  %2 = tan(%u) : f32[9,7]
  %3 = asin(%u) : f32[9,7]
  %4 = acos(%u) : f32[9,7]
  %5 = atan(%x) : f32[9,7]
  %6 = sinh(%x) : f32[9,7]
  %7 = cosh(%x) : f32[9,7]
  %8 = asinh(%x) : f32[9,7]
  %9 = acosh(%g) : f32[9,7]
  %10 = atanh(%u) : f32[9,7]
  %11 = floor(%x) : f32[9,7]
  %12 = ceil(%x) : f32[9,7]
  %13 = round(%x) : f32[9,7]
  %14 = sign(%x) : f32[9,7]
  return %0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14
})";
  std::vector<Tensor> inputs = random_inputs(testing::parse(text), -6, 6);
  inputs[1] = random_inputs(testing::parse(text), -0.95, 0.95, 2)[1];
  inputs[2] = random_inputs(testing::parse(text), 1.01, 9, 3)[2];
  check_graph("trig", text, inputs, kElementwiseF32);
}

// round halves to even; floor, ceil and sign at the edges (signed zero, NaN, infinities).
TEST(CodegenCompare, RoundingEdges) {
  const std::string text = R"(graph @edges(%x: f32[12], %h: f16[12])
    -> (f32[12], f32[12], f32[12], f32[12], f16[12]) {
  %0 = round(%x) : f32[12]
  %1 = floor(%x) : f32[12]
  %2 = ceil(%x) : f32[12]
  %3 = sign(%x) : f32[12]
  %4 = round(%h) : f16[12]
  return %0, %1, %2, %3, %4
})";
  const std::vector<double> values = {0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999, -0.0, kNan, kInf, -kInf, 1e8};
  const Program program = check_graph(
      "rounding", text, {tensor(DType::F32, {12}, values), tensor(DType::F16, {12}, values)},
      kExact);
  EXPECT_TRUE(contains(program.source, "return rint(x);"));
}

TEST(CodegenCompare, PowerAndMod) {
  const std::string text = R"(graph @powmod(%a: f32[3,5], %b: f32[5], %n: f32[3,5], %e: f32[3,5],
                                        %i: i32[8], %j: i32[8], %k: i64[8], %l: i64[8],
                                        %x: f32[8], %y: f32[8])
    -> (f32[3,5], f32[3,5], i32[8], i32[8], i64[8], i64[8], f32[8], f32[8]) {
  %0 = power(%a, %b) : f32[3,5]
  %1 = power(%n, %e) : f32[3,5]
  %2 = mod(%i, %j) : i32[8]
  %3 = mod(%i, %j) {fmod = true} : i32[8]
  %4 = mod(%k, %l) : i64[8]
  %5 = mod(%k, %l) {fmod = true} : i64[8]
  %6 = mod(%x, %y) {fmod = true} : f32[8]
  %7 = mod(%x, %y) : f32[8]
  return %0, %1, %2, %3, %4, %5, %6, %7
})";
  std::vector<Tensor> inputs = random_inputs(testing::parse(text), 0.1, 3);
  // Negative bases with integral exponents: pow defines them.
  inputs[2] = random_inputs(testing::parse(text), -3, 3, 2)[2];
  inputs[3] = tensor(DType::F32, {3, 5}, {0, 1, 2, 3, -1, -2, 4, 5, 0, 1, 2, 3, -3, 2, 1});
  const std::vector<double> dividends = {7, -7, 7, -7, 0, 5, -2147483648.0, 13};
  const std::vector<double> divisors = {3, 3, -3, -3, 4, 5, -1, -4};
  inputs[4] = tensor(DType::I32, {8}, dividends);
  inputs[5] = tensor(DType::I32, {8}, divisors);
  inputs[6] = tensor(DType::I64, {8}, dividends);
  inputs[7] = tensor(DType::I64, {8}, divisors);
  inputs[8] = tensor(DType::F32, {8}, {5.5, -5.5, 5.5, -5.5, 0, 1e10, 3, -0.25});
  inputs[9] = tensor(DType::F32, {8}, {2, 2, -2, -2, 3, 7, kInf, 0.5});
  const Program program = check_graph("power_mod", text, inputs, kElementwiseF32);
  EXPECT_TRUE(contains(program.source, "return pow(lhs, rhs);"));
  EXPECT_TRUE(contains(program.source, "if (r != 0 && ((r < 0) != (rhs < 0))) r += rhs;"));
}

// Ties resolve to the first index (the last with select_last_index); a NaN wins.
TEST(CodegenCompare, ArgmaxArgmin) {
  const std::string text = R"(graph @arg(%x: f32[3,4,5], %t: f32[2,4], %i: i32[4,3])
    -> (i64[1,4,5], i64[3,4], i64[3,4,1], i64[2], i64[2], i64[2,1], i64[2], i64[4], i64[1,3]) {
  %0 = argmax(%x) : i64[1,4,5]
  %1 = argmin(%x) {axis = 2, keepdims = false} : i64[3,4]
  %2 = argmax(%x) {axis = -1} : i64[3,4,1]
  %3 = argmax(%t) {axis = 1, keepdims = false} : i64[2]
  %4 = argmax(%t) {axis = 1, keepdims = false, select_last_index = true} : i64[2]
  %5 = argmin(%t) {axis = 1, select_last_index = true} : i64[2,1]
  %6 = argmin(%t) {axis = -1, keepdims = false} : i64[2]
  %7 = argmin(%i) {axis = 1, keepdims = false, select_last_index = true} : i64[4]
  %8 = argmax(%i) : i64[1,3]
  return %0, %1, %2, %3, %4, %5, %6, %7, %8
})";
  std::vector<Tensor> inputs = random_inputs(testing::parse(text), -5, 5);
  inputs[1] = tensor(DType::F32, {2, 4}, {1, 3, 3, 1, 2, kNan, 7, kNan});
  inputs[2] = tensor(DType::I32, {4, 3}, {1, 1, 2, 5, 5, 5, -3, 0, -3, 9, 2, 9});
  const Program program = check_graph("arg_reduce", text, inputs, kExact);
  EXPECT_TRUE(contains(program.source, "if (best_value == best_value && (v != v || v >= best_value))"));
  // The reference's answers on the hand-made rows.
  const ir::Graph graph = testing::parse(text);
  std::map<std::string, Tensor> named = {{"x", inputs[0]}, {"t", inputs[1]}, {"i", inputs[2]}};
  const std::vector<Tensor> got = eval::run_reference(graph, named);
  EXPECT_EQ(got[3].to_doubles(), (std::vector<double>{1, 1}));  // first 3; first NaN
  EXPECT_EQ(got[4].to_doubles(), (std::vector<double>{2, 1}));  // last 3; NaN still first
  EXPECT_EQ(got[5].to_doubles(), (std::vector<double>{3, 1}));
  EXPECT_EQ(got[7].to_doubles(), (std::vector<double>{1, 2, 2, 1}));
}

TEST(CodegenCompare, GatherElements) {
  const std::string text = R"(graph @gather(%x: f32[3,4], %i: i64[2,4], %j: i32[3,2],
                                        %h: f16[2,3,2], %k: i64[2,2,2])
    -> (f32[2,4], f32[3,2], f16[2,2,2]) {
  %0 = gather_elements(%x, %i) : f32[2,4]
  %1 = gather_elements(%x, %j) {axis = 1} : f32[3,2]
  %2 = gather_elements(%h, %k) {axis = -2} : f16[2,2,2]
  return %0, %1, %2
})";
  std::vector<Tensor> inputs = random_inputs(testing::parse(text), -9, 9);
  inputs[1] = tensor(DType::I64, {2, 4}, {0, 2, -1, 1, -3, 0, 2, 2});
  inputs[2] = tensor(DType::I32, {3, 2}, {3, 0, -4, -1, 1, 2});
  inputs[4] = tensor(DType::I64, {2, 2, 2}, {2, 0, -1, 1, 0, 0, -3, 2});
  const Program program = check_graph("gather_elements", text, inputs, kExact);
  EXPECT_TRUE(contains(program.source, "if (index < 0) index += kAxisDim;"));
  const ir::Graph graph = testing::parse(text);
  std::map<std::string, Tensor> named;
  for (size_t n = 0; n < graph.inputs.size(); ++n) named[graph.inputs[n]->name] = inputs[n];
  const std::vector<Tensor> got = eval::run_reference(graph, named);
  const std::vector<double> x = inputs[0].to_doubles();
  // out[0][2] = x[-1 -> 2][2]; out[1][0] = x[-3 -> 0][0].
  EXPECT_EQ(got[0].get(2), x[2 * 4 + 2]);
  EXPECT_EQ(got[0].get(4), x[0]);
  // An index outside [-dim, dim) is a located run-time error in the reference.
  named["i"] = tensor(DType::I64, {2, 4}, {0, 0, 0, 3, 0, 0, 0, 0});
  EXPECT_THROW(eval::run_reference(graph, named), kiln::Error);
}

// An attention-style mask through -O1: the comparison, where and the math around them fuse
// into loop kernels (where's element function has three operands), an exp fuses into argmax's
// reduce kernel; the host backend runs the fused CUDA and matches the unfused reference.
TEST(CodegenCompare, FusedMaskWhereAndArgmax) {
  const std::string text = R"(graph @masked(%scores: f32[4,6], %limit: f32[6], %fill: f32[])
    -> (f32[4,6], i64[4]) {
  %0 = less(%scores, %limit) : bool[4,6]
  %1 = sin(%scores) : f32[4,6]
  %2 = where(%0, %1, %fill) : f32[4,6]
  %3 = mul(%2, %scores) : f32[4,6]
  %4 = exp(%3) : f32[4,6]
  %5 = argmax(%4) {axis = 1, keepdims = false} : i64[4]
  return %3, %5
})";
  const ir::Graph graph = testing::parse(text);
  const std::vector<Tensor> inputs = random_inputs(graph, -2, 2);
  std::map<std::string, Tensor> named;
  for (size_t i = 0; i < graph.inputs.size(); ++i) named[graph.inputs[i]->name] = inputs[i];
  const std::vector<Tensor> want = eval::run_reference(graph, named);

  ir::Graph fused = testing::parse(text);
  passes::PassManagerOptions options;
  options.verify_each = true;
  std::ostringstream log;
  passes::PassManager manager(options, log);
  manager.add_all(passes::inference_pipeline(1));
  manager.run(fused);
  const std::string fused_text = ir::print_graph(fused);
  EXPECT_TRUE(contains(fused_text, "kind = \"reduce\"")) << fused_text;
  EXPECT_TRUE(contains(fused_text, "kind = \"loop\"")) << fused_text;
  const Program program = emit_program(fused);
  testing::check_nvrtc(program, "fused_mask");
  EXPECT_TRUE(contains(program.source, "(int cond, float lhs, float rhs)"));
#if KILN_CODEGEN_TEST_HOST
  const std::vector<Tensor> got = testing::run_on_host(program, "fused_mask", inputs);
  ASSERT_EQ(got.size(), want.size());
  testing::expect_close(got[0], want[0], kElementwiseF32, "masked product");
  testing::expect_close(got[1], want[1], kExact, "argmax");
#endif
}

}  // namespace
}  // namespace kiln::codegen
