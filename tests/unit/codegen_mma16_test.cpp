// --precision=bf16 and f16: the GEMM kernels on tensor cores with 16-bit operands (mma.sync
// m16n8k16, f32 sums), compiled for real GPUs (NVRTC sm_80 and sm_90: no spills, no stack) and
// run on the host backend, whose warp collective emulates mma.sync m16n8k16 with the PTX ISA's
// fragment layouts. Each result must equal the reference interpreter run on operands rounded
// to bf16 (f16) to the f32 tolerance, and stay within the rounding's derived bound of the exact
// result (check_cases in codegen_nn_util.h); the CUDA bodies run there too and must equal the
// host-specific ones bit for bit. The tiles hold the operands rounded to 16 bits; ldmatrix
// loads the fragments from outer-major tiles (16-bit tensors copied by cp.async with k
// contiguous) and ldmatrix.trans from k-major ones (staged, or copied with the outer index
// contiguous), so the cases cover each for A and B.
#include <gtest/gtest.h>

#include <cstring>

#include "codegen/device_library.h"
#include "codegen_nn_util.h"

namespace kiln::codegen {
namespace {

using ir::DType;
using ir::TensorType;
using testing::check_cases;
using testing::CheckOptions;
using testing::OpCase;
using Ints = std::vector<int64_t>;

TensorType f32(ir::Shape shape) { return TensorType{DType::F32, std::move(shape)}; }

CheckOptions options_for(Precision precision) {
  CheckOptions options;
  options.precision = precision;
  return options;
}

OpCase matmul(int64_t m, int64_t n, int64_t k) { return {"matmul", {f32({m, k}), f32({k, n})}, {}, k}; }

OpCase conv(ir::Shape x, ir::Shape w, ir::AttrMap attrs, DType dtype = DType::F32) {
  const int64_t terms = w[1] * w[2] * w[3];
  return {"conv2d", {TensorType{dtype, std::move(x)}, TensorType{dtype, std::move(w)}}, std::move(attrs), terms};
}

// Every kernel of the program runs on the 16-bit tensor cores.
void expect_mma16(const testing::CheckResult& result, Precision precision) {
  const std::string call = precision == Precision::Bf16 ? "kiln_mma_bf16_m16n8k16(" : "kiln_mma_f16_m16n8k16(";
  for (const Kernel& kernel : result.program.kernels) {
    EXPECT_NE(testing::kernel_text(result.program, kernel.name).find(call), std::string::npos)
        << kernel.name << " does not use " << call;
    EXPECT_TRUE(kernel.tensor_cores) << kernel.name;
    EXPECT_EQ(kernel.tensor_core_inputs, precision) << kernel.name;
  }
}

// The GEMM layouts of codegen_tf32_test.cpp's EveryGemmLayout, and sizes at the tiles' edges.
std::vector<OpCase> layout_cases() {
  return {
      matmul(1, 1, 1),
      matmul(7, 16, 33),
      matmul(33, 100, 16),
      matmul(100, 129, 7),
      {"matmul", {f32({2, 1, 5, 7}), f32({3, 7, 9})}, {}, 7},
      {"matmul", {f32({3, 33, 7}), f32({3, 33, 100})}, {{"transpose_a", true}}, 33},
      {"matmul", {f32({2, 65, 19}), f32({1, 70, 19})}, {{"transpose_b", true}}, 19},
      {"matmul", {f32({2, 20, 66}), f32({67, 20})}, {{"transpose_a", true}, {"transpose_b", true}}, 20},
      // cp.async for both of A's layouts (outer-major and k-major tiles), B staged.
      {"matmul", {f32({2, 40, 64}), f32({2, 40, 26})}, {{"transpose_a", true}}, 40},
      {"matmul", {f32({70, 24}), f32({24, 30})}, {}, 24},
      // f16 tensors: converted as staged, then rounded again (exactly, for f16).
      {"matmul", {TensorType{DType::F16, {2, 9, 40}}, TensorType{DType::F16, {40, 70}}}, {}, 40},
      {"dense", {f32({3, 5, 33}), f32({7, 33}), f32({7})}, {}, 33},
      {"dense", {f32({100, 128}), f32({65, 128}), f32({65})}, {}, 128},
      conv({2, 5, 12, 12}, {66, 5, 3, 3}, {{"pad", Ints{1, 1, 1, 1}}}),
      conv({1, 8, 9, 9}, {8, 2, 3, 3}, {{"groups", int64_t{4}}, {"stride", Ints{2, 2}}}),
      conv({2, 8, 6, 6}, {20, 8, 1, 1}, {}),
  };
}

// GEMMs on tensors stored in the unit's 16-bit type (autocast's weights and activations):
// copied by cp.async 8 values at a time where rows (or planes) hold whole groups of 8, else
// loaded 4 at a time, or staged one by one.
std::vector<OpCase> stored_16bit_cases(DType dtype) {
  const auto t = [dtype](ir::Shape shape) { return TensorType{dtype, std::move(shape)}; };
  return {
      // A outer-major (k contiguous), B k-major (columns contiguous), both by cp.async.
      {"matmul", {t({2, 40, 64}), t({2, 64, 48})}, {}, 64},
      // A k-major by cp.async (rows contiguous), B outer-major by cp.async.
      {"matmul", {t({2, 40, 64}), t({2, 24, 40})}, {{"transpose_a", true}, {"transpose_b", true}}, 40},
      // K a multiple of 4, not 8: A and B by 4 x 16-bit loads, stored as loaded.
      {"matmul", {t({9, 20}), t({20, 12})}, {}, 20},
      // Odd sizes: staged one by one, ragged in every dimension.
      {"matmul", {t({7, 33}), t({33, 17})}, {}, 33},
      {"dense", {t({3, 5, 32}), t({7, 32}), t({7})}, {}, 32},
      // A 1x1 convolution reads x's planes of 16 pixels by cp.async; a 3x3 one gathers them.
      conv({2, 8, 4, 4}, {16, 8, 1, 1}, {}, dtype),
      conv({2, 8, 6, 6}, {12, 8, 3, 3}, {{"pad", Ints{1, 1, 1, 1}}}, dtype),
  };
}

TEST(CodegenMma16, Bf16EveryGemmLayout) {
  std::vector<OpCase> cases = layout_cases();
  for (OpCase& c : stored_16bit_cases(DType::BF16)) cases.push_back(std::move(c));
  const testing::CheckResult result = check_cases("bf16_layouts", cases, options_for(Precision::Bf16));
  expect_mma16(result, Precision::Bf16);
  const std::string& source = result.program.source;
  EXPECT_NE(source.find("mma.sync m16n8k16, bf16 operands, f32 sums), 64x64x32 tiles"), std::string::npos);
  EXPECT_NE(source.find("A and B by cp.async, 3 stages"), std::string::npos);
  EXPECT_NE(source.find("A and B by 4 x bf16 loads"), std::string::npos);
  EXPECT_NE(source.find("A and B by float4 loads"), std::string::npos);  // f32 tensors, rounded as staged
  EXPECT_NE(source.find("staged through registers"), std::string::npos);
  // Both ldmatrix forms, from 16-bit tiles.
  EXPECT_NE(source.find("kiln_ldmatrix_x4(a_frag[i]"), std::string::npos);
  EXPECT_NE(source.find("kiln_ldmatrix_x4(&b_frag[j][0]"), std::string::npos);
  EXPECT_NE(source.find("kiln_ldmatrix_x4_trans(a_frag[i]"), std::string::npos);
  EXPECT_NE(source.find("kiln_ldmatrix_x4_trans(&b_frag[j][0]"), std::string::npos);
  EXPECT_NE(source.find("unsigned short* a_tiles"), std::string::npos);
  EXPECT_EQ(source.find("float* a_tiles"), std::string::npos);
}

TEST(CodegenMma16, F16EveryGemmLayout) {
  std::vector<OpCase> cases = layout_cases();
  for (OpCase& c : stored_16bit_cases(DType::F16)) cases.push_back(std::move(c));
  const testing::CheckResult result = check_cases("f16_layouts", cases, options_for(Precision::F16));
  expect_mma16(result, Precision::F16);
  EXPECT_NE(result.program.source.find("mma.sync m16n8k16, f16 operands, f32 sums"), std::string::npos);
  EXPECT_NE(result.program.source.find("A and B by cp.async, 3 stages"), std::string::npos);
}

// Matmuls of seeded random sizes on stored bf16 and f16 tensors (both transposes, a broadcast
// batch), so that cp.async's groups of 8, the 4-wide loads and the scalar staging meet ragged
// tiles, K not a multiple of the k tile and batch offsets in every combination the seed draws.
TEST(CodegenMma16, SeededRandomShapesOnStoredTensors) {
  for (DType dtype : {DType::BF16, DType::F16}) {
    uint64_t state = dtype == DType::BF16 ? 17 : 29;
    const auto next = [&state](int64_t low, int64_t high) {  // in [low, high]
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      return low + static_cast<int64_t>((state >> 33) % static_cast<uint64_t>(high - low + 1));
    };
    const auto size = [&] {  // multiples of 8 and of 4, and anything
      const int64_t base = next(1, 90);
      const int64_t kind = next(0, 2);
      return kind == 0 ? (base + 7) / 8 * 8 : kind == 1 ? (base + 3) / 4 * 4 : base;
    };
    std::vector<OpCase> cases;
    for (int i = 0; i < 12; ++i) {
      const int64_t m = size(), n = size(), k = size();
      const bool ta = next(0, 1) == 1, tb = next(0, 1) == 1;
      const int64_t batch = next(1, 3);
      ir::Shape a = ta ? ir::Shape{batch, k, m} : ir::Shape{batch, m, k};
      ir::Shape b = tb ? ir::Shape{n, k} : ir::Shape{k, n};  // broadcast over the batch
      if (next(0, 1) == 1) b.insert(b.begin(), batch);
      ir::AttrMap attrs;
      if (ta) attrs["transpose_a"] = true;
      if (tb) attrs["transpose_b"] = true;
      cases.push_back({"matmul", {TensorType{dtype, a}, TensorType{dtype, b}}, attrs, k});
    }
    const Precision precision = dtype == DType::BF16 ? Precision::Bf16 : Precision::F16;
    const testing::CheckResult result =
        check_cases("random_" + std::string(ir::dtype_name(dtype)), cases, options_for(precision));
    expect_mma16(result, precision);
    // The seeds draw all three ways of filling the tiles.
    const std::string& source = result.program.source;
    EXPECT_NE(source.find("by cp.async, 3 stages"), std::string::npos) << ir::dtype_name(dtype);
    EXPECT_NE(source.find(fmt::format("by 4 x {} loads", ir::dtype_name(dtype))), std::string::npos);
    EXPECT_NE(source.find("staged through registers"), std::string::npos) << ir::dtype_name(dtype);
  }
}

TEST(CodegenMma16, LargeProblemsTake128Tiles) {
  // 132 problems of 130 x 129 fill an H100 with 128 x 128 tiles: 2 x 2 ragged tiles each; the
  // bf16 one copies A outer-major and B k-major by cp.async, K = 40 ragged against the k tile.
  const TensorType a16{DType::BF16, {132, 130, 40}}, b16{DType::BF16, {132, 40, 136}};
  const std::vector<OpCase> cases = {
      {"matmul", {f32({132, 130, 24}), f32({132, 24, 129})}, {}, 24},
      {"matmul", {a16, b16}, {}, 40},
  };
  const testing::CheckResult result = check_cases("bf16_matmul_128", cases, options_for(Precision::Bf16));
  expect_mma16(result, Precision::Bf16);
  EXPECT_NE(result.program.source.find("kTileM = 128"), std::string::npos);
  EXPECT_NE(result.program.source.find("128x128x32 tiles, 8 warps of 64x32, A and B by cp.async, 3 stages"),
            std::string::npos);
}

// Both gradients of a convolution on the template (the weight gradient split along K too).
TEST(CodegenMma16, ConvGradients) {
  const auto grad_weight = [](ir::Shape dy, ir::Shape x, ir::Shape w, ir::AttrMap attrs) {
    attrs["shape"] = Ints(w.begin(), w.end());
    const int64_t terms = dy[0] * dy[2] * dy[3];
    return OpCase{"conv2d_grad_weight", {f32(std::move(dy)), f32(std::move(x))}, std::move(attrs), terms};
  };
  const auto grad_input = [](ir::Shape dy, ir::Shape w, ir::Shape x, ir::AttrMap attrs) {
    attrs["shape"] = Ints(x.begin(), x.end());
    const int64_t terms = w[0] * w[2] * w[3];
    return OpCase{"conv2d_grad_input", {f32(std::move(dy)), f32(std::move(w))}, std::move(attrs), terms};
  };
  const std::vector<OpCase> cases = {
      grad_weight({2, 8, 5, 5}, {2, 3, 7, 7}, {8, 3, 3, 3}, {}),
      grad_weight({2, 16, 16, 16}, {2, 16, 16, 16}, {16, 16, 3, 3},
                  {{"pad", Ints{1, 1, 1, 1}}, {"k_chunk", int64_t{256}}}),
      grad_input({2, 8, 5, 5}, {8, 3, 3, 3}, {2, 3, 7, 7}, {}),
      grad_input({1, 6, 4, 4}, {6, 4, 3, 3}, {1, 4, 8, 8}, {{"stride", Ints{2, 2}}, {"pad", Ints{1, 1, 1, 1}}}),
  };
  for (Precision precision : {Precision::Bf16, Precision::F16}) {
    const testing::CheckResult result =
        check_cases(std::string(precision_name(precision)) + "_conv_grads", cases, options_for(precision));
    expect_mma16(result, precision);
  }
}

// The emulated mma.sync m16n8k16 itself, against the PTX ISA's fragment layouts transcribed
// here ("Matrix Fragments for mma.m16n8k16 with floating point type"): a warp of fibers posts
// fragments of known 16x16 and 16x8 matrices, two 16-bit values per register with the lower
// index in the low half, and must get D = A B + C in the C layout. The values are small
// integers (exact in bf16 and f16), so every sum is exact and so is the comparison.
void expect_emulated_mma16(bool bf16) {
  const char* source = R"(
#ifndef __CUDACC__
#include "kiln_host_prelude.h"
#endif
static unsigned int pack(float lo, float hi, int bf16) {
  unsigned int bits_lo, bits_hi;
  if (bf16) {
    bits_lo = static_cast<unsigned int>(__float_as_int(lo)) >> 16;
    bits_hi = static_cast<unsigned int>(__float_as_int(hi)) >> 16;
  } else {
    bits_lo = __builtin_bit_cast(unsigned short, static_cast<_Float16>(lo));
    bits_hi = __builtin_bit_cast(unsigned short, static_cast<_Float16>(hi));
  }
  return bits_lo | bits_hi << 16;
}
extern "C" __global__ void mma_tile(const float* A, const float* B, const float* C, float* D, const int* bf16) {
  const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  const int f = *bf16;
  unsigned int a[4] = {pack(A[g * 16 + 2 * t], A[g * 16 + 2 * t + 1], f),
                       pack(A[(g + 8) * 16 + 2 * t], A[(g + 8) * 16 + 2 * t + 1], f),
                       pack(A[g * 16 + 2 * t + 8], A[g * 16 + 2 * t + 9], f),
                       pack(A[(g + 8) * 16 + 2 * t + 8], A[(g + 8) * 16 + 2 * t + 9], f)};
  unsigned int b[2] = {pack(B[(2 * t) * 8 + g], B[(2 * t + 1) * 8 + g], f),
                       pack(B[(2 * t + 8) * 8 + g], B[(2 * t + 9) * 8 + g], f)};
  float d[4] = {C[g * 8 + 2 * t], C[g * 8 + 2 * t + 1], C[(g + 8) * 8 + 2 * t], C[(g + 8) * 8 + 2 * t + 1]};
  kiln_host_mma_16bit_m16n8k16(d, a, b, f ? KILN_HOST_WARP_MMA_BF16_M16N8K16 : KILN_HOST_WARP_MMA_F16_M16N8K16);
  D[g * 8 + 2 * t] = d[0];
  D[g * 8 + 2 * t + 1] = d[1];
  D[(g + 8) * 8 + 2 * t] = d[2];
  D[(g + 8) * 8 + 2 * t + 1] = d[3];
}
extern "C" void kiln_host_entry_mma_tile(void* const* args) {
  mma_tile(static_cast<const float*>(args[0]), static_cast<const float*>(args[1]),
           static_cast<const float*>(args[2]), static_cast<float*>(args[3]), static_cast<const int*>(args[4]));
}
)";
  const runtime::host::HostModule module =
      runtime::host::HostModule::compile(source, "mma_tile", &testing::test_cache());
  std::vector<float> a(16 * 16), b(16 * 8), c(16 * 8), d(16 * 8, -1.0f);
  for (int i = 0; i < 16 * 16; ++i) a[i] = static_cast<float>(i % 7 - 3);
  for (int i = 0; i < 16 * 8; ++i) b[i] = static_cast<float>(i % 5 - 2);
  for (int i = 0; i < 16 * 8; ++i) c[i] = static_cast<float>(i % 3);
  int format = bf16 ? 1 : 0;
  void* args[] = {a.data(), b.data(), c.data(), d.data(), &format};
  runtime::host::HostOptions options;
  options.strict = true;
  module.launch("mma_tile", args, Dim3{1, 1, 1}, Dim3{32, 1, 1}, 0, true, options);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) {
      float want = c[i * 8 + j];
      for (int k = 0; k < 16; ++k) want += a[i * 16 + k] * b[k * 8 + j];
      EXPECT_EQ(d[i * 8 + j], want) << (bf16 ? "bf16" : "f16") << " D[" << i << "][" << j << "]";
    }
}

TEST(CodegenMma16, EmulatedMmaUsesThePtxFragmentLayouts) {
  expect_emulated_mma16(true);
  expect_emulated_mma16(false);
}

// The emulated ldmatrix.x4 on 16-bit elements, plain and .trans, against the PTX ISA's layout
// ("Warp-level matrix load instruction: ldmatrix"): lanes 8j .. 8j + 7 give the rows of matrix
// j (8 elements each); lane i receives elements 2 (i % 4) and 2 (i % 4) + 1 of row i / 4 of
// each matrix, the lower in the low half, and with .trans those of the transposed matrix:
// element i / 4 of rows 2 (i % 4) and 2 (i % 4) + 1. The lanes point at rows in a scrambled
// order, so a lane-order mistake cannot pass.
TEST(CodegenMma16, EmulatedLdmatrixTransposesSixteenBitMatrices) {
  const char* source = R"(
#ifndef __CUDACC__
#include "kiln_host_prelude.h"
#endif
extern "C" __global__ void load_rows(const unsigned short* rows, const int* order, unsigned int* out) {
  const int lane = threadIdx.x;
  unsigned int d[4], t[4];
  kiln_host_ldmatrix_x4(d, rows + order[lane], KILN_HOST_WARP_LDMATRIX_X4);
  kiln_host_ldmatrix_x4(t, rows + order[lane], KILN_HOST_WARP_LDMATRIX_X4_TRANS);
  for (int j = 0; j < 4; ++j) {
    out[lane * 8 + j] = d[j];
    out[lane * 8 + 4 + j] = t[j];
  }
}
extern "C" void kiln_host_entry_load_rows(void* const* args) {
  load_rows(static_cast<const unsigned short*>(args[0]), static_cast<const int*>(args[1]),
            static_cast<unsigned int*>(args[2]));
}
)";
  const runtime::host::HostModule module =
      runtime::host::HostModule::compile(source, "load_rows", &testing::test_cache());
  alignas(16) unsigned short rows[32 * 8];
  for (unsigned int i = 0; i < 32 * 8; ++i) rows[i] = static_cast<unsigned short>(1000 + i);
  std::vector<int> order(32);
  for (int lane = 0; lane < 32; ++lane) order[lane] = (lane * 7 + 3) % 32 * 8;  // element offsets
  std::vector<unsigned int> out(32 * 8, 0);
  void* args[] = {rows, order.data(), out.data()};
  runtime::host::HostOptions options;
  options.strict = true;
  module.launch("load_rows", args, Dim3{1, 1, 1}, Dim3{32, 1, 1}, 0, true, options);
  // Element (r, c) of matrix j: column c of the row lane 8j + r points at.
  const auto element = [&](int j, int r, int c) -> unsigned int { return rows[order[8 * j + r] + c]; };
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    for (int j = 0; j < 4; ++j) {
      EXPECT_EQ(out[lane * 8 + j], element(j, g, 2 * t) | element(j, g, 2 * t + 1) << 16)
          << "lane " << lane << ", d[" << j << "]";
      EXPECT_EQ(out[lane * 8 + 4 + j], element(j, 2 * t, g) | element(j, 2 * t + 1, g) << 16)
          << "lane " << lane << ", .trans d[" << j << "]";
    }
  }
}

// The packing the kernels use on the host: the lower index in the low half, rounded to nearest
// even (ties to even), as cvt.rn.bf16x2.f32 and cvt.rn.f16x2.f32 do.
TEST(CodegenMma16, PackingRoundsToNearestEven) {
  // 1 + 2^-8 is halfway between two bf16 values (1 and 1 + 2^-7): even is 1. 1 + 3 * 2^-8 is
  // halfway between 1 + 2^-7 and 1 + 2^-6: even is 1 + 2^-6.
  EXPECT_EQ(ir::float_to_bfloat16_bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(ir::float_to_bfloat16_bits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  const char* source = R"(
#ifndef __CUDACC__
#include "kiln_host_prelude.h"
#endif
)";
  std::string program = std::string(source) + std::string(device_library()) + R"(
extern "C" __global__ void pack_pairs(const float* in, unsigned int* out) {
  out[0] = kiln_pack_bf16x2(in[0], in[1]);
  out[1] = kiln_pack_f16x2(in[0], in[1]);
}
extern "C" void kiln_host_entry_pack_pairs(void* const* args) {
  pack_pairs(static_cast<const float*>(args[0]), static_cast<unsigned int*>(args[1]));
}
)";
  const runtime::host::HostModule module =
      runtime::host::HostModule::compile(program, "pack_pairs", &testing::test_cache());
  float in[2] = {1.0f + std::ldexp(1.0f, -8), -2.0f - 3 * std::ldexp(1.0f, -10)};
  unsigned int out[2] = {};
  void* args[] = {in, out};
  module.launch("pack_pairs", args, Dim3{1, 1, 1}, Dim3{1, 1, 1}, 0, false, {});
  EXPECT_EQ(out[0], 0x3f80u | static_cast<unsigned int>(ir::float_to_bfloat16_bits(in[1])) << 16);
  EXPECT_EQ(out[1], static_cast<unsigned int>(ir::float_to_half_bits(in[0])) |
                        static_cast<unsigned int>(ir::float_to_half_bits(in[1])) << 16);
  // -2 - 3 * 2^-10 lies halfway between f16's -2 - 2^-9 and -2 - 2^-8 (0xc001 and 0xc002):
  // even is 0xc002.
  EXPECT_EQ(out[1] >> 16, 0xc002u);
}

}  // namespace
}  // namespace kiln::codegen
