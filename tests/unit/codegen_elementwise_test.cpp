// Codegen of elementwise, broadcasting and shape ops: the emitted source has the expected
// kernels and loops, compiles with NVRTC, and the host backend's results match the reference
// interpreter (exactly for integers and data movement, within kElementwiseF32 for f32 math).
#include <limits>
#include <string>

#include "kiln/error.h"

#include "codegen_test_util.h"

namespace kiln::codegen {
namespace {

using ir::DType;
using ir::Tensor;
using ir::TensorType;
using testing::check_graph;
using testing::contains;
using testing::tensor;
using testing::kElementwiseF32;
using testing::kExact;
using testing::random_inputs;


const Kernel& kernel(const Program& program, const std::string& name) {
  const Kernel* found = program.find_kernel(name);
  EXPECT_NE(found, nullptr) << name;
  static const Kernel none;
  return found ? *found : none;
}

// --- binary arithmetic ---------------------------------------------------------------------------

// 7x13 = 91 elements: the float4 loop covers 88, a scalar tail the last 3.
TEST(CodegenElementwise, BinaryF32OddSize) {
  const std::string text = R"(graph @binary(%a: f32[7,13], %b: f32[7,13])
    -> (f32[7,13], f32[7,13], f32[7,13], f32[7,13], f32[7,13], f32[7,13]) {
  %s = add(%a, %b) : f32[7,13]
  %d = sub(%a, %b) : f32[7,13]
  %m = mul(%a, %b) : f32[7,13]
  %q = div(%a, %b) : f32[7,13]
  %hi = maximum(%a, %b) : f32[7,13]
  %lo = minimum(%a, %b) : f32[7,13]
  return %s, %d, %m, %q, %hi, %lo
})";
  const Program program = check_graph(
      "binary_f32", text, random_inputs(testing::parse(text), 0.5, 2.0), kElementwiseF32);
  const std::string& source = program.source;
  EXPECT_TRUE(contains(source,
                       "extern \"C\" __global__ void __launch_bounds__(256) add_0(\n"
                       "    const float* __restrict__ a,\n"
                       "    const float* __restrict__ b,\n"
                       "    float* __restrict__ out) {"));
  EXPECT_TRUE(contains(source, "const float4* a4 = reinterpret_cast<const float4*>(a);"));
  EXPECT_TRUE(contains(source, "for (int i = kVectors * kVectorWidth + "));
  EXPECT_TRUE(contains(source, "return kiln_max(lhs, rhs);"));
  EXPECT_FALSE(kernel(program, "add_0").uses_barriers);
  EXPECT_EQ(kernel(program, "div_3").block.x, 256u);
}

// 1000x1000: a multiple of 4 (no tail), and enough elements for the grid-stride loop to wrap.
TEST(CodegenElementwise, LargeF32) {
  const std::string text = R"(graph @large(%a: f32[1000,1000], %b: f32[1000,1000])
    -> (f32[1000,1000]) {
  %s = add(%a, %b) : f32[1000,1000]
  %r = relu(%s) : f32[1000,1000]
  return %r
})";
  const Program program =
      check_graph("large_f32", text, random_inputs(testing::parse(text), -1, 1), kElementwiseF32);
  EXPECT_TRUE(contains(program.source, "no scalar tail"));
  EXPECT_EQ(kernel(program, "add_0").grid.x, grid_stride_blocks(250000));
}

TEST(CodegenElementwise, BroadcastShapes) {
  const std::string text = R"(graph @bcast(%a: f32[3,1,5], %b: f32[4,1], %c: f32[], %d: f32[1],
                       %e: f32[5,1], %f: f32[1,7], %g: f32[2,3,4], %h: f32[3,1])
    -> (f32[3,4,5], f32[3,1,5], f32[4,1], f32[5,7], f32[2,3,4]) {
  %0 = mul(%a, %b) : f32[3,4,5]
  %1 = add(%a, %c) : f32[3,1,5]
  %2 = sub(%d, %b) : f32[4,1]
  %3 = maximum(%e, %f) : f32[5,7]
  %4 = div(%g, %h) : f32[2,3,4]
  return %0, %1, %2, %3, %4
})";
  const Program program = check_graph(
      "broadcast", text, random_inputs(testing::parse(text), 0.5, 2.0), kElementwiseF32);
  const std::string& source = program.source;
  // [3,1,5] * [4,1]: a has strides (5, 0, 1) over [3,4,5], b (0, 1, 0).
  EXPECT_TRUE(contains(source, "constexpr int kAStrides[kRank] = {5, 0, 1};"));
  EXPECT_TRUE(contains(source, "constexpr int kBStrides[kRank] = {0, 1, 0};"));
  // [2,3,4] / [3,1]: the dims a reads in order merge, b keeps the broadcast dims apart.
  EXPECT_TRUE(contains(source, "constexpr int kDims[kRank] = {2, 3, 4};"));
  // Broadcasting kernels gather element by element: no float4.
  for (const char* name : {"mul_0", "add_1", "sub_2", "maximum_3", "div_4"})
    EXPECT_FALSE(contains(testing::kernel_source(program, name), "float4")) << name;
}

// Saturation at the i32 limits, truncating division with negative operands, INT_MIN / -1.
TEST(CodegenElementwise, IntegerArithmeticSaturates) {
  const std::string text = R"(graph @ints(%a: i32[8], %b: i32[8], %c: i64[6], %d: i64[6])
    -> (i32[8], i32[8], i32[8], i32[8], i64[6], i64[6], i64[6], i64[6], i32[8], i64[6]) {
  %0 = add(%a, %b) : i32[8]
  %1 = sub(%a, %b) : i32[8]
  %2 = mul(%a, %b) : i32[8]
  %3 = div(%a, %b) : i32[8]
  %4 = add(%c, %d) : i64[6]
  %5 = sub(%c, %d) : i64[6]
  %6 = mul(%c, %d) : i64[6]
  %7 = div(%c, %d) : i64[6]
  %8 = maximum(%a, %b) : i32[8]
  %9 = minimum(%c, %d) : i64[6]
  return %0, %1, %2, %3, %4, %5, %6, %7, %8, %9
})";
  const double i32_max = std::numeric_limits<int32_t>::max();
  const double i32_min = std::numeric_limits<int32_t>::min();
  // i64 values stay below 2^53, where the reference's doubles are exact.
  const double big = 4503599627370496.0;  // 2^52
  const std::vector<Tensor> inputs = {
      tensor(DType::I32, {8}, {i32_max, i32_min, 7, -7, 7, -7, i32_min, 100000}),
      tensor(DType::I32, {8}, {1, 1, 2, 2, -2, -2, -1, 100000}),
      tensor(DType::I64, {6}, {big, -big, 7, -7, 3, -1}),
      tensor(DType::I64, {6}, {big, big, -2, 2, 5, 1})};
  const Program program = check_graph("ints", text, inputs, kExact);
  EXPECT_TRUE(contains(program.source, "if (rhs == 0) return 0;"));
  EXPECT_TRUE(contains(program.source, "constexpr int kI32Max = 2147483647;"));
}

// The reference rejects integer division by zero; the kernels define it as 0.
TEST(CodegenElementwise, IntegerDivisionByZeroIsZero) {
  const Program program = emit_program(testing::parse(R"(graph @div0(%a: i32[4], %b: i32[4],
                                                                   %c: i64[2], %d: i64[2])
    -> (i32[4], i64[2]) {
  %0 = div(%a, %b) : i32[4]
  %1 = div(%c, %d) : i64[2]
  return %0, %1
})"));
  testing::check_nvrtc(program, "div0");
#if KILN_CODEGEN_TEST_HOST
  const std::vector<Tensor> got = testing::run_on_host(
      program, "div0",
      {tensor(DType::I32, {4}, {7, -7, 0, 9}), tensor(DType::I32, {4}, {0, 2, 0, -2}),
       tensor(DType::I64, {2}, {5, 6}), tensor(DType::I64, {2}, {0, 4})});
  EXPECT_EQ(got[0].to_doubles(), (std::vector<double>{0, -3, 0, -4}));
  EXPECT_EQ(got[1].to_doubles(), (std::vector<double>{0, 1}));
#endif
}

// Past 2^31 elements, indices are 64-bit. Too big to run here: emit and compile only.
TEST(CodegenElementwise, HugeTensorsUse64BitIndices) {
  const Program program = emit_program(testing::parse(R"(graph @huge(%a: f32[3,1000000000],
                                                                   %b: f32[1000000000])
    -> (f32[3,1000000000], f32[1000000000,3], f32[3], f32[6,1000000000]) {
  %0 = add(%a, %b) : f32[3,1000000000]
  %1 = transpose(%a) : f32[1000000000,3]
  %2 = reduce_sum(%a) {axes = [1]} : f32[3]
  %3 = concat(%a, %0) {axis = 0} : f32[6,1000000000]
  return %0, %1, %2, %3
})"));
  testing::check_nvrtc(program, "huge");
  for (const char* name : {"add_0", "transpose_1", "reduce_sum_2", "concat_3"})
    EXPECT_TRUE(contains(testing::kernel_source(program, name), "long long")) << name;
  EXPECT_TRUE(contains(testing::kernel_source(program, "add_0"),
                       "constexpr long long kCount = 3000000000LL;"));
}

// --- unary math ----------------------------------------------------------------------------------

// 37x29 = 1073 elements (both prime dims, 1073 % 4 == 1).
TEST(CodegenElementwise, UnaryF32) {
  const std::string text = R"(graph @unary(%x: f32[37,29], %p: f32[37,29])
    -> (f32[37,29], f32[37,29], f32[37,29], f32[37,29], f32[37,29], f32[37,29], f32[37,29],
        f32[37,29], f32[37,29], f32[37,29], f32[37,29], f32[37,29], f32[37,29], f32[37,29],
        f32[37,29], f32[37,29], f32[37,29], f32[37,29]) {
  %0 = relu(%x) : f32[37,29]
  %1 = leaky_relu(%x) {alpha = 0.2} : f32[37,29]
  %2 = sigmoid(%x) : f32[37,29]
  %3 = tanh(%x) : f32[37,29]
  %4 = gelu(%x) : f32[37,29]
  %5 = gelu(%x) {approximate = "tanh"} : f32[37,29]
  %6 = exp(%x) : f32[37,29]
  %7 = log(%p) : f32[37,29]
  %8 = sqrt(%p) : f32[37,29]
  %9 = rsqrt(%p) : f32[37,29]
  %10 = neg(%x) : f32[37,29]
  %11 = abs(%x) : f32[37,29]
  %12 = pow(%p) {exponent = 2.5} : f32[37,29]
  %13 = pow(%x) {exponent = 2} : f32[37,29]
  %14 = clip(%x) {min = -0.5, max = 0.75} : f32[37,29]
  %15 = clip(%x) {max = 0.25} : f32[37,29]
  %16 = dropout(%x) {rate = 0.3} : f32[37,29]
  %17 = cast(%x) {to = "f32"} : f32[37,29]
  return %0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17
})";
  std::vector<Tensor> inputs = random_inputs(testing::parse(text), -8, 8);
  inputs[1] = random_inputs(testing::parse(text), 0.01, 9, 2)[1];
  const Program program = check_graph("unary_f32", text, inputs, kElementwiseF32,
                                      {{4, testing::kGelu}, {5, testing::kGelu}});
  const std::string& source = program.source;
  // Activations are their op-table rows: attributes bound as named constants, the expression
  // as written in ir/ops.def, and the helpers of ir/scalar_math.h pasted into the unit.
  EXPECT_TRUE(contains(source, "constexpr float alpha = 0.2f;"));
  EXPECT_TRUE(contains(source, "return T(exponent) == T(2) ? x * x : pow(x, T(exponent));"));
  EXPECT_TRUE(contains(source, "return kiln_gelu(x, approximate);"));
  EXPECT_TRUE(contains(source, "erfc(-x * T(kInvSqrt2))"));
  // clip without a lower bound compares once.
  EXPECT_TRUE(contains(source, "return (value > kMax ? kMax : value);"));
  EXPECT_TRUE(contains(source, "// dropout at inference is the identity: a copy"));
}

// Far tails, where the textbook sigmoid and GELU forms lose their relative precision.
TEST(CodegenElementwise, ActivationTails) {
  const std::string text = R"(graph @tails(%x: f32[8]) -> (f32[8], f32[8], f32[8]) {
  %0 = sigmoid(%x) : f32[8]
  %1 = gelu(%x) : f32[8]
  %2 = gelu(%x) {approximate = "tanh"} : f32[8]
  return %0, %1, %2
})";
  // sigmoid(-90) = 8.2e-40 is a float denormal: still within 1e-5 relative (plus the
  // denormal spacing, 1.4e-45).
  check_graph("tails", text, {tensor(DType::F32, {8}, {-90, -30, -9, -5, 0, 5, 9, 30})},
              testing::Tolerance{1e-5, 1.5e-45}, {{1, testing::kGelu}, {2, testing::kGelu}});
}

TEST(CodegenElementwise, NanAndInfinityPassThrough) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::string text =
      R"(graph @nan(%a: f32[6], %b: f32[6]) -> (f32[6], f32[6], f32[6], f32[6], f32[6]) {
  %0 = relu(%a) : f32[6]
  %1 = maximum(%a, %b) : f32[6]
  %2 = minimum(%b, %a) : f32[6]
  %3 = clip(%a) {min = 0, max = 1} : f32[6]
  %4 = sigmoid(%a) : f32[6]
  return %0, %1, %2, %3, %4
})";
  check_graph("nan", text,
              {tensor(DType::F32, {6}, {nan, -inf, inf, -1, 2, nan}),
               tensor(DType::F32, {6}, {1, nan, 0, -inf, inf, nan})},
              kElementwiseF32);
}

TEST(CodegenElementwise, IntegerUnaryAndClip) {
  const std::string text = R"(graph @int_unary(%a: i32[6], %c: i64[4])
    -> (i32[6], i32[6], i32[6], i64[4], i64[4], i64[4]) {
  %0 = neg(%a) : i32[6]
  %1 = abs(%a) : i32[6]
  %2 = clip(%a) {min = -2.5, max = 3.7} : i32[6]
  %3 = neg(%c) : i64[4]
  %4 = abs(%c) : i64[4]
  %5 = clip(%c) {min = 1.5} : i64[4]
  return %0, %1, %2, %3, %4, %5
})";
  const Program program =
      check_graph("int_unary", text,
                  {tensor(DType::I32, {6}, {-2147483648.0, 2147483647.0, -3, -2, 3, 4}),
                   tensor(DType::I64, {4}, {-5, 0, 1, 2})},
                  kExact);
  // The fractional bounds truncate toward zero.
  EXPECT_TRUE(contains(program.source, "constexpr int kMin = -2;"));
  EXPECT_TRUE(contains(program.source, "constexpr int kMax = 3;"));
}

TEST(CodegenElementwise, Casts) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::string text =
      R"(graph @casts(%x: f32[9], %i: i32[3], %l: i64[3], %h: f16[3], %t: bool[3])
    -> (i32[9], i64[9], f16[9], bf16[9], bool[9], f32[3], i32[3], f32[3], f32[3], i64[3]) {
  %0 = cast(%x) {to = "i32"} : i32[9]
  %1 = cast(%x) {to = "i64"} : i64[9]
  %2 = cast(%x) {to = "f16"} : f16[9]
  %3 = cast(%x) {to = "bf16"} : bf16[9]
  %4 = cast(%x) {to = "bool"} : bool[9]
  %5 = cast(%i) {to = "f32"} : f32[3]
  %6 = cast(%l) {to = "i32"} : i32[3]
  %7 = cast(%h) {to = "f32"} : f32[3]
  %8 = cast(%t) {to = "f32"} : f32[3]
  %9 = cast(%t) {to = "i64"} : i64[3]
  return %0, %1, %2, %3, %4, %5, %6, %7, %8, %9
})";
  check_graph("casts", text,
              {tensor(DType::F32, {9}, {-2.7, 2.7, 0, -0.0, 3e9, -3e9, nan, 1e20, 65519}),
               tensor(DType::I32, {3}, {-16777217, 5, 2147483647}),
               tensor(DType::I64, {3}, {5e9, -5e9, -12}),
               tensor(DType::F16, {3}, {0.5, -1024, 65504}), tensor(DType::Bool, {3}, {1, 0, 1})},
              kExact);
}

// Half-precision math computes in float and rounds once on the store, as the reference rounds
// its double once: results agree to the half's last bit except on rare double-rounding ties.
TEST(CodegenElementwise, HalfAndBfloat16) {
  const std::string text = R"(graph @half(%a: f16[5,11], %b: f16[11], %c: bf16[5,11], %d: bf16[5,1])
    -> (f16[5,11], f16[5,11], bf16[5,11], bf16[5,11]) {
  %0 = add(%a, %b) : f16[5,11]
  %1 = gelu(%a) : f16[5,11]
  %2 = mul(%c, %d) : bf16[5,11]
  %3 = sigmoid(%c) : bf16[5,11]
  return %0, %1, %2, %3
})";
  check_graph("half", text, random_inputs(testing::parse(text), -4, 4),
              testing::Tolerance{8e-3, 1e-6});
}

// --- shape ops -----------------------------------------------------------------------------------

TEST(CodegenShape, ReshapeAndFlattenCopy) {
  const std::string text = R"(graph @copies(%x: f32[3,5,7], %h: f16[2,3,5], %t: bool[7,3])
    -> (f32[15,7], f32[3,35], f16[30], bool[21,1]) {
  %0 = reshape(%x) {shape = [-1, 7]} : f32[15,7]
  %1 = flatten(%x) : f32[3,35]
  %2 = reshape(%h) {shape = [30]} : f16[30]
  %3 = flatten(%t) {axis = 2} : bool[21,1]
  return %0, %1, %2, %3
})";
  const Program program =
      check_graph("copies", text, random_inputs(testing::parse(text), -1, 1), kExact);
  EXPECT_TRUE(contains(program.source, "out4[v] = x4[v];"));
  // 30 halves: 3 float4 moves of 8 elements, then 6 one at a time.
  EXPECT_TRUE(contains(program.source, "constexpr int kPerVector = 8;"));
}

TEST(CodegenShape, Transposes) {
  const std::string text =
      R"(graph @transposes(%m: f32[33,65], %n: f32[2,17,19,40], %c: f32[2,3,17,19],
                           %g: i64[3,4,5], %s: f16[1,40,1,50], %b: bool[70,9])
    -> (f32[65,33], f32[2,40,17,19], f32[2,17,19,3], i64[5,3,4], i64[4,3,5], f16[50,1,40,1],
        bool[9,70], f32[19,17,3,2]) {
  %0 = transpose(%m) : f32[65,33]
  %1 = transpose(%n) {perm = [0, 3, 1, 2]} : f32[2,40,17,19]
  %2 = transpose(%c) {perm = [0, 2, 3, 1]} : f32[2,17,19,3]
  %3 = transpose(%g) {perm = [2, 0, 1]} : i64[5,3,4]
  %4 = transpose(%g) {perm = [1, 0, 2]} : i64[4,3,5]
  %5 = transpose(%s) {perm = [3, 2, 1, 0]} : f16[50,1,40,1]
  %6 = transpose(%b) : bool[9,70]
  %7 = transpose(%c) : f32[19,17,3,2]
  return %0, %1, %2, %3, %4, %5, %6, %7
})";
  const Program program =
      check_graph("transposes", text, random_inputs(testing::parse(text), -100, 100), kExact);
  // 2-D, NHWC -> NCHW ([2, 323, 40] -> [2, 40, 323]), f16 and bool swaps use the tile.
  for (const char* name : {"transpose_0", "transpose_1", "transpose_5", "transpose_6"}) {
    EXPECT_TRUE(kernel(program, name).uses_barriers) << name;
    EXPECT_EQ(kernel(program, name).block, (Dim3{32, 8, 1})) << name;
  }
  EXPECT_EQ(kernel(program, "transpose_0").dynamic_shared_bytes, 32u * 33u * 4u);
  EXPECT_EQ(kernel(program, "transpose_5").dynamic_shared_bytes, 32u * 33u * 2u);
  // NCHW -> NHWC with C = 3 is too thin for a tile: a gather.
  for (const char* name : {"transpose_2", "transpose_3", "transpose_4", "transpose_7"})
    EXPECT_FALSE(kernel(program, name).uses_barriers) << name;
  EXPECT_TRUE(contains(program.source,
                       "tile[k * kTileStride + threadIdx.x] = in_plane[row * kCols + col];"));
}

// Permutations that only move size-1 dims are copies; with them dropped, [5,3] -> [3,5] is a
// transpose too thin for a tile.
TEST(CodegenShape, TransposeSizeOneDims) {
  const std::string text = R"(graph @t_ones(%x: i32[1,5,1,3]) -> (i32[1,5,1,3], i32[1,3,1,5]) {
  %0 = transpose(%x) {perm = [2, 1, 0, 3]} : i32[1,5,1,3]
  %1 = transpose(%x) {perm = [2, 3, 0, 1]} : i32[1,3,1,5]
  return %0, %1
})";
  const Program program =
      check_graph("t_ones", text, random_inputs(testing::parse(text), -100, 100), kExact);
  EXPECT_TRUE(contains(testing::kernel_source(program, "transpose_0"), "out4[v] = x4[v];"));
  EXPECT_TRUE(contains(testing::kernel_source(program, "transpose_1"), "kXStrides"));
}

TEST(CodegenShape, Concat) {
  const std::string text = R"(graph @concat(%a: f32[2,3,5], %b: f32[2,4,5], %c: f32[2,1,5],
                       %d: i64[3,2], %e: i64[4,2], %h: bool[3,7], %k: bool[3,1])
    -> (f32[2,8,5], i64[7,2], bool[3,8], f32[2,3,15]) {
  %0 = concat(%a, %b, %c) {axis = 1} : f32[2,8,5]
  %1 = concat(%d, %e) {axis = 0} : i64[7,2]
  %2 = concat(%h, %k) {axis = -1} : bool[3,8]
  %3 = concat(%a, %a, %a) {axis = 2} : f32[2,3,15]
  return %0, %1, %2, %3
})";
  const Program program =
      check_graph("concat", text, random_inputs(testing::parse(text), -100, 100), kExact);
  EXPECT_TRUE(contains(program.source, "const float* __restrict__ x2,"));
  EXPECT_TRUE(contains(program.source, "constexpr int kX2Offset = 35;"));
  // Concatenating along axis 0 is one contiguous copy per operand.
  EXPECT_TRUE(contains(program.source, "out[kX1Offset + i] = x1[i];"));
}

TEST(CodegenShape, Slices) {
  const std::string text = R"(graph @slices(%x: f32[10,11,12], %b: bool[9,4])
    -> (f32[3,11,12], f32[10,5,3], f32[5,11,1], bool[3,4], f32[10,11,12]) {
  %0 = slice(%x) {starts = [2], ends = [5]} : f32[3,11,12]
  %1 = slice(%x) {starts = [-9, 1], ends = [100, 11], axes = [1, 2], steps = [2, 4]} : f32[10,5,3]
  %2 = slice(%x) {starts = [0, -1], ends = [10, 12], axes = [0, -1], steps = [2, 1]} : f32[5,11,1]
  %3 = slice(%b) {starts = [1], ends = [9], steps = [3]} : bool[3,4]
  %4 = slice(%x) {starts = [0], ends = [10]} : f32[10,11,12]
  return %0, %1, %2, %3, %4
})";
  const Program program =
      check_graph("slices", text, random_inputs(testing::parse(text), -100, 100), kExact);
  // x[2:5] is one contiguous range from element 2 * 132.
  EXPECT_TRUE(contains(program.source, "constexpr int kXBase = 264;"));
}

}  // namespace
}  // namespace kiln::codegen
