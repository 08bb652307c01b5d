// Codegen for the integer widths past i32 and i64 (i8, u8, i16, u16, u32, u64) and for f64:
// data movement and the element-wise ops whose functions are written for every width. Each
// graph compiles with NVRTC and runs on the host backend against the reference interpreter,
// exactly: integer arithmetic saturates at the type's limits as the reference's store does,
// casts saturate (NaN -> 0), and f64 arithmetic stays in double. Ops that would compute an f64
// or a small integer in float are refused, naming the op and the value. f64 -> f16 and bf16
// round once.
#include <cmath>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "kiln/error.h"

#include "codegen_test_util.h"

namespace kiln::codegen {
namespace {

using ir::DType;
using ir::Tensor;
using testing::check_graph;
using testing::contains;
using testing::kExact;
using testing::tensor;

// add, sub, mul, div, maximum, minimum and mod of two [8] inputs of `dtype`.
std::string arithmetic_graph(const std::string& dtype) {
  std::string text = fmt::format(
      "graph @arith_{0}(%a: {0}[8], %b: {0}[8])\n    -> ({0}[8], {0}[8], {0}[8], {0}[8], {0}[8], "
      "{0}[8], {0}[8]) {{\n",
      dtype);
  const char* const ops[] = {"add", "sub", "mul", "div", "maximum", "minimum", "mod"};
  for (int k = 0; k < 7; ++k) text += fmt::format("  %{} = {}(%a, %b) : {}[8]\n", k, ops[k], dtype);
  return text + "  return %0, %1, %2, %3, %4, %5, %6\n}";
}

struct WidthCase {
  DType dtype;
  std::vector<double> a, b;  // b has no zero: the reference rejects division by zero
};

// Every width: sums, differences and products that leave the range in both directions,
// kMin / -1, and mixed signs for the floor-style mod.
TEST(CodegenIntWidths, ArithmeticSaturatesAtEveryWidth) {
  const double p32 = 4294967296.0, p62 = std::ldexp(1.0, 62), p63 = std::ldexp(1.0, 63);
  const std::vector<WidthCase> cases = {
      {DType::I8, {127, -128, 100, -100, 7, -7, -128, 50}, {1, 1, 2, 3, -2, 2, -1, -3}},
      {DType::U8, {255, 0, 200, 17, 7, 255, 128, 3}, {1, 1, 2, 5, 9, 255, 2, 250}},
      {DType::I16, {32767, -32768, 300, -300, 7, -7, -32768, 181}, {1, 1, 300, 300, -2, 2, -1, 181}},
      {DType::U16, {65535, 0, 300, 17, 7, 65535, 256, 3}, {1, 1, 300, 5, 9, 65535, 256, 60000}},
      {DType::U32,
       {p32 - 1, 0, 65536, 17, 7, p32 - 1, 3000000000.0, 3},
       {1, 1, 65536, 5, 9, p32 - 1, 2, 4000000000.0}},
      // Values the reference's doubles hold exactly; 2^63 + 2^63 and 2^32 * 2^32 overflow.
      {DType::U64, {p63, 0, p32, 17, 7, p63, 3, std::ldexp(1.0, 53)}, {p63, 1, p32, 5, 9, p62, 4, 2}},
  };
  for (const WidthCase& c : cases) {
    const std::string dtype(ir::dtype_name(c.dtype));
    SCOPED_TRACE(dtype);
    const Program program =
        check_graph("arith_" + dtype, arithmetic_graph(dtype),
                    {tensor(c.dtype, {8}, c.a), tensor(c.dtype, {8}, c.b)}, kExact);
    EXPECT_TRUE(contains(program.source, "saturating to " + dtype));
  }
}

TEST(CodegenIntWidths, UnaryClipAndBitShift) {
  const std::string text = R"(graph @narrow_unary(%s: i8[6], %u: u8[6], %w: u16[4], %x: u32[4],
                                                  %y: u64[4], %n: u64[4])
    -> (i8[6], i8[6], i8[6], u8[6], u8[6], u8[6], u16[4], u32[4], u64[4], u64[4]) {
  %0 = neg(%s) : i8[6]
  %1 = abs(%s) : i8[6]
  %2 = clip(%s) {min = -2.5, max = 300.0} : i8[6]
  %3 = neg(%u) : u8[6]
  %4 = abs(%u) : u8[6]
  %5 = clip(%u) {min = -7.0, max = 100.9} : u8[6]
  %6 = bit_shift(%w, %w) {direction = "left"} : u16[4]
  %7 = bit_shift(%x, %x) {direction = "right"} : u32[4]
  %8 = bit_shift(%y, %n) {direction = "left"} : u64[4]
  %9 = bit_shift(%y, %n) {direction = "right"} : u64[4]
  return %0, %1, %2, %3, %4, %5, %6, %7, %8, %9
})";
  const Program program = check_graph(
      "narrow_unary", text,
      {tensor(DType::I8, {6}, {-128, 127, -3, -2, 3, 0}),
       tensor(DType::U8, {6}, {0, 1, 100, 101, 255, 7}), tensor(DType::U16, {4}, {1, 3, 15, 16}),
       tensor(DType::U32, {4}, {1, 31, 32, 40}),
       tensor(DType::U64, {4}, {1, 3, std::ldexp(1.0, 40), 5}), tensor(DType::U64, {4}, {63, 1, 30, 64})},
      kExact);
  // The bounds saturate to the type (300 -> 127, -7 -> 0) and truncate toward zero.
  EXPECT_TRUE(contains(program.source, "constexpr int kMax = 127;"));
  EXPECT_TRUE(contains(program.source, "constexpr int kMin = -2;"));
  EXPECT_TRUE(contains(program.source, "constexpr int kMin = 0;"));
}

TEST(CodegenIntWidths, CastsSaturate) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::string text = R"(graph @width_casts(%x: f32[8], %i: i32[5], %l: u64[5], %d: f64[5],
                                                 %b: u8[3], %h: i16[3])
    -> (i8[8], u8[8], i16[8], u16[8], u32[8], u64[8], u8[5], i8[5], u16[5], u64[5], u32[5],
        i32[5], u8[5], f32[5], i32[5], u8[5], f32[5], u64[5], f64[3], i64[3], bool[3], f16[3]) {
  %0 = cast(%x) {to = "i8"} : i8[8]
  %1 = cast(%x) {to = "u8"} : u8[8]
  %2 = cast(%x) {to = "i16"} : i16[8]
  %3 = cast(%x) {to = "u16"} : u16[8]
  %4 = cast(%x) {to = "u32"} : u32[8]
  %5 = cast(%x) {to = "u64"} : u64[8]
  %6 = cast(%i) {to = "u8"} : u8[5]
  %7 = cast(%i) {to = "i8"} : i8[5]
  %8 = cast(%i) {to = "u16"} : u16[5]
  %9 = cast(%i) {to = "u64"} : u64[5]
  %10 = cast(%i) {to = "u32"} : u32[5]
  %11 = cast(%l) {to = "i32"} : i32[5]
  %12 = cast(%l) {to = "u8"} : u8[5]
  %13 = cast(%l) {to = "f32"} : f32[5]
  %14 = cast(%d) {to = "i32"} : i32[5]
  %15 = cast(%d) {to = "u8"} : u8[5]
  %16 = cast(%d) {to = "f32"} : f32[5]
  %17 = cast(%d) {to = "u64"} : u64[5]
  %18 = cast(%b) {to = "f64"} : f64[3]
  %19 = cast(%b) {to = "i64"} : i64[3]
  %20 = cast(%b) {to = "bool"} : bool[3]
  %21 = cast(%h) {to = "f16"} : f16[3]
  return %0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18,
         %19, %20, %21
})";
  const double p63 = std::ldexp(1.0, 63);
  const Program program = check_graph(
      "width_casts", text,
      {tensor(DType::F32, {8}, {-2.7, 2.7, 300, -300, nan, 1e20, -1e20, 65535.5}),
       tensor(DType::I32, {5}, {-1, 255, 256, 70000, -2147483648.0}),
       tensor(DType::U64, {5}, {0, 255, 256, 4294967296.0, p63}),
       tensor(DType::F64, {5}, {-0.5, 255.99999999, 2147483647.5, 1e300, 0.1}),
       tensor(DType::U8, {3}, {0, 1, 255}), tensor(DType::I16, {3}, {-32768, 2049, 32767})},
      kExact);
  EXPECT_TRUE(contains(program.source, "cast f32 -> u8, truncating toward zero and saturating"));
  EXPECT_TRUE(contains(program.source, "cast u8 -> i64: exact"));
}

// f64 -> f16 and bf16 round once: through a float rounded to nearest, a double just above a
// half-way point between two f16 (or bf16) values would land on it and round to even, down.
TEST(CodegenIntWidths, F64ToHalfRoundsOnce) {
  const std::string text = R"(graph @f64_to_half(%d: f64[5]) -> (f16[5], bf16[5]) {
  %h = cast(%d) {to = "f16"} : f16[5]
  %b = cast(%d) {to = "bf16"} : bf16[5]
  return %h, %b
})";
  const double tiny = std::ldexp(1.0, -40);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<Tensor> got_want = {tensor(
      DType::F64, {5}, {1 + std::ldexp(1.0, -11) + tiny, -(1 + std::ldexp(1.0, -8) + tiny), 1e300, nan, 0.1})};
  const Program program = check_graph("f64_to_half", text, got_want, kExact);
  EXPECT_TRUE(contains(program.source, "__int_as_float(bits | 1)"));  // rounded to odd, then to 16 bits
#if KILN_CODEGEN_TEST_HOST
  // The reference's answers, spelled out: 1 + 2^-10 in f16 and -(1 + 2^-7) in bf16.
  const std::vector<Tensor> got = testing::run_on_host(program, "f64_to_half", got_want);
  EXPECT_EQ(got[0].get(0), 1 + std::ldexp(1.0, -10));
  EXPECT_EQ(got[1].get(1), -(1 + std::ldexp(1.0, -7)));
#endif
}

// A cast to bf16 or f16 inside a fused kernel rounds there, though nothing stores its value:
// cast to 16 bits and back is a rounding, as in the reference (1 + 2^-8 + 2^-12 is past the
// midpoint of two bf16 values, 1 + 2^-12 short of two f16 ones'; ties go to even).
TEST(CodegenIntWidths, CastToHalfAndBackRoundsInsideAKernel) {
  const std::string text = R"(graph @round_trip(%x: f32[4]) -> (f32[4], f32[4]) {
  %b = kernel @bf16_0(%x) {kind = "loop"} : f32[4] {
    %xb = cast(%x) {to = "bf16"} : bf16[4]
    %b = cast(%xb) {to = "f32"} : f32[4]
    return %b
  }
  %h = kernel @f16_1(%x) {kind = "loop"} : f32[4] {
    %xh = cast(%x) {to = "f16"} : f16[4]
    %h = cast(%xh) {to = "f32"} : f32[4]
    return %h
  }
  return %b, %h
})";
  const float x[] = {1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -12), 1.0f + std::ldexp(1.0f, -12),
                     1.0f + 3 * std::ldexp(1.0f, -11), 0.1f};
  const Program program = check_graph("round_trip", text, {tensor(DType::F32, {4}, {x[0], x[1], x[2], x[3]})}, kExact);
  EXPECT_TRUE(contains(program.source, "kiln_bf16_to_float(kiln_float_to_bf16(value))"));
#if KILN_CODEGEN_TEST_HOST
  const std::vector<Tensor> got =
      testing::run_on_host(program, "round_trip", {tensor(DType::F32, {4}, {x[0], x[1], x[2], x[3]})});
  EXPECT_EQ(got[0].get(0), 1 + std::ldexp(1.0, -7));   // bf16: past the midpoint, up
  EXPECT_EQ(got[1].get(1), 1.0);                       // f16: 1 + 2^-12 is under half an ulp
  EXPECT_EQ(got[1].get(2), 1 + std::ldexp(1.0, -9));   // f16: a tie (1.5 ulp) goes to even (2 ulp)
#endif
}

// f64 arithmetic stays in double: 1 + 1e-12 survives, as it would not in float.
TEST(CodegenIntWidths, F64ArithmeticInDouble) {
  const std::string text = R"(graph @f64_math(%a: f64[4], %b: f64[4])
    -> (f64[4], f64[4], f64[4], f64[4], f64[4], f64[4], f64[4], f64[4], f64[4], f64[4],
        bool[4], f64[4]) {
  %0 = add(%a, %b) : f64[4]
  %1 = sub(%a, %b) : f64[4]
  %2 = mul(%a, %b) : f64[4]
  %3 = div(%a, %b) : f64[4]
  %4 = maximum(%a, %b) : f64[4]
  %5 = minimum(%a, %b) : f64[4]
  %6 = neg(%a) : f64[4]
  %7 = abs(%a) : f64[4]
  %8 = clip(%a) {min = 1.0000000001, max = 1e300} : f64[4]
  %9 = mod(%a, %b) {fmod = true} : f64[4]
  %10 = less(%a, %b) : bool[4]
  %11 = transpose(%a) {perm = [0]} : f64[4]
  return %0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11
})";
  const double nan = std::numeric_limits<double>::quiet_NaN();
  check_graph("f64_math", text,
              {tensor(DType::F64, {4}, {1.0, -3.0000000001, nan, 1e200}),
               tensor(DType::F64, {4}, {1e-12, 7.0, 2.0, 1e150})},
              kExact);
}

void expect_refused(const std::string& text, const std::string& message) {
  try {
    (void)emit_program(testing::parse(text));
    ADD_FAILURE() << "emitting did not throw; expected: " << message;
  } catch (const kiln::Error& error) {
    EXPECT_NE(std::string(error.what()).find(message), std::string::npos) << error.what();
  }
}

TEST(CodegenIntWidths, FloatComputingOpsAreRefusedWithTheValue) {  // reductions, GEMMs, math
  expect_refused(R"(graph @bytes(%a: u8[4]) -> (u8[]) {
  %sum = reduce_sum(%a) {axes = [0]} : u8[]
  return %sum
})",
                 "reduce_sum: codegen has no u8 kernel for reduce_sum yet (%a is u8[4]); "
                 "graphs with u8 run on --backend=reference");
}

}  // namespace
}  // namespace kiln::codegen
