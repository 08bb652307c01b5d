// 2:4 sparse tensor cores: ir/two_four.h's compressed form (kept values and their positions),
// the host backend's emulation of mma.sp m16n8k32 on bf16 and f16 operands (the PTX ISA's
// fragment and metadata layouts, runtime/host/warp_collective.cpp), and the device library's
// kiln_mma_sp_{bf16,f16}_m16n8k32, compiled by NVRTC for sm_80 and sm_90 and run on the host.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "codegen/device_library.h"
#include "codegen_nn_util.h"
#include "ir/two_four.h"
#include "kiln/error.h"

namespace kiln::codegen {
namespace {

// A rows x k matrix with at most 2 nonzeros in every group of 4 along its rows: group (r, q)
// keeps the pair of positions number (r + 3q) % 6 of the six increasing pairs, except that
// every fifth group keeps one value and every seventh none. Values are small integers when
// `integers` (exact in bf16 and f16), else uniform in [-1, 1].
std::vector<float> two_four_matrix(int64_t rows, int64_t k, bool integers, uint32_t seed) {
  static constexpr int kPairs[6][2] = {{0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}};
  std::mt19937 random(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> dense(static_cast<size_t>(rows * k), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t q = 0; q < k / 4; ++q) {
      const int64_t serial = r * (k / 4) + q;
      if (serial % 7 == 6) continue;
      const int* pair = kPairs[(r + 3 * q) % 6];
      for (int i = 0; i < (serial % 5 == 4 ? 1 : 2); ++i)
        dense[r * k + q * 4 + pair[i]] = integers ? static_cast<float>((r * 5 + q * 3 + i) % 9 - 4 + (i == 0 ? 5 : 0))
                                                  : uniform(random);
    }
  return dense;
}

TEST(TwoFour, CompressionKeepsEveryNonzeroInIncreasingPositions) {
  for (const int64_t k : {4, 16, 20, 96}) {
    std::vector<float> dense = two_four_matrix(5, k, false, 7);
    // A zero of either sign is dropped; a NaN is kept.
    for (size_t i = 1; i < dense.size(); i += 2)
      if (dense[i] == 0.0f) dense[i] = -0.0f;
    for (size_t i = static_cast<size_t>(k); i < dense.size(); ++i)
      if (dense[i] != 0.0f) {
        dense[i] = std::nanf("");
        break;
      }
    ir::TwoFourMatrix compressed;
    ASSERT_EQ(ir::compress_two_four(dense.data(), 5, k, &compressed), "") << k;
    EXPECT_EQ(compressed.values.size(), static_cast<size_t>(5 * k / 2));
    EXPECT_EQ(compressed.metadata.size(), static_cast<size_t>(5 * ((k + 15) / 16)));
    const std::vector<float> expanded = ir::expand_two_four(compressed);
    for (size_t i = 0; i < dense.size(); ++i) {
      if (std::isnan(dense[i])) {
        EXPECT_TRUE(std::isnan(expanded[i])) << "k " << k << ", element " << i;
      } else {
        EXPECT_EQ(expanded[i], dense[i] == 0.0f ? 0.0f : dense[i]) << "k " << k << ", element " << i;
      }
    }
    for (int64_t r = 0; r < 5; ++r)
      for (int64_t c = 0; c < k / 2; c += 2)
        EXPECT_LT(compressed.position(r, c), compressed.position(r, c + 1)) << "row " << r << ", group " << c / 2;
    // Groups past k in a row's last word read as positions 0 and 1 (0b0100).
    if (k % 16 != 0) {
      EXPECT_EQ(compressed.metadata[compressed.words_per_row() - 1] >> (k % 16 / 2 * 2), 0x4444u >> (k % 16 / 2 * 2));
    }
  }
  // The positions of a known row: groups {0, 2}, {1, 3}, {3} -> {0, 3}, {} -> {0, 1}.
  const float row[16] = {1, 0, 2, 0, 0, 3, 0, 4, 0, 0, 0, 5, 0, 0, 0, 0};
  ir::TwoFourMatrix compressed;
  ASSERT_EQ(ir::compress_two_four(row, 1, 16, &compressed), "");
  EXPECT_EQ(compressed.metadata[0], 0b0100'1100'1101'1000);
  EXPECT_EQ(compressed.values, (std::vector<float>{1, 2, 3, 4, 0, 5, 0, 0}));
}

TEST(TwoFour, CompressionSaysWhereThePatternBreaks) {
  std::vector<float> dense = two_four_matrix(3, 32, true, 1);
  dense[2 * 32 + 9] = dense[2 * 32 + 10] = dense[2 * 32 + 11] = 1.0f;
  ir::TwoFourMatrix compressed;
  EXPECT_EQ(ir::compress_two_four(dense.data(), 3, 32, &compressed), "row 2, k 8..11 has 3 nonzeros or more");
  EXPECT_EQ(ir::compress_two_four(dense.data(), 3, 30, &compressed), "k = 30 is not a multiple of 4");
  EXPECT_EQ(compressed.rows, 0) << "a failed compression leaves its output alone";
}

// One warp computes out (16 x 8) = A (16 x k, 2:4 sparse) * B (k x 8) with mma.sp, k a multiple
// of 32: A as its kept values (16 x k / 2, 16-bit patterns, row-major) and positions (16 x
// k / 16 words, ir::TwoFourMatrix's), B as its 8 columns of k (B^T row-major). Each lane loads
// its fragments straight from global memory in the layouts the device library names; lanes
// 4g + 2 and 4g + 3 load metadata too, which mma.sp ignores (selector 0).
constexpr const char* kSparseTile = R"(
__device__ __forceinline__ unsigned int kept_pair(const unsigned short* kept, int k, int row, int column) {
  return *reinterpret_cast<const unsigned int*>(kept + row * (k / 2) + column);
}
extern "C" __global__ void sparse_tile(const unsigned short* kept, const unsigned short* positions,
                                       const unsigned short* bt, float* out, const int* shape) {
  const int k = shape[0], bf16 = shape[1];
  const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int k0 = 0; k0 < k; k0 += 32) {
    const int c0 = k0 / 2;  // the step's first kept column
    const unsigned int a[4] = {kept_pair(kept, k, g, c0 + 2 * t), kept_pair(kept, k, g + 8, c0 + 2 * t),
                               kept_pair(kept, k, g, c0 + 2 * t + 8), kept_pair(kept, k, g + 8, c0 + 2 * t + 8)};
    unsigned int b[4];
    for (int j = 0; j < 4; ++j) b[j] = *reinterpret_cast<const unsigned int*>(bt + g * k + k0 + 2 * t + 8 * j);
    const int words = k / 16, word = k0 / 16 + t % 2;
    const unsigned int metadata = positions[g * words + word] | static_cast<unsigned int>(positions[(g + 8) * words + word]) << 16;
    if (bf16)
      kiln_mma_sp_bf16_m16n8k32(acc, a, b, metadata);
    else
      kiln_mma_sp_f16_m16n8k32(acc, a, b, metadata);
  }
  out[g * 8 + 2 * t] = acc[0];
  out[g * 8 + 2 * t + 1] = acc[1];
  out[(g + 8) * 8 + 2 * t] = acc[2];
  out[(g + 8) * 8 + 2 * t + 1] = acc[3];
}
)";

constexpr const char* kSparseTileEntry = R"(
extern "C" void kiln_host_entry_sparse_tile(void* const* args) {
  sparse_tile(static_cast<const unsigned short*>(args[0]), static_cast<const unsigned short*>(args[1]),
              static_cast<const unsigned short*>(args[2]), static_cast<float*>(args[3]),
              static_cast<const int*>(args[4]));
}
)";

std::string sparse_tile_source() {
  return "#ifndef __CUDACC__\n#include \"kiln_host_prelude.h\"\n#endif\n" + std::string(device_library()) +
         kSparseTile + "#ifndef __CUDACC__\n" + kSparseTileEntry + "#endif\n";
}

const runtime::host::HostModule& sparse_tile_module() {
  static const runtime::host::HostModule module =
      runtime::host::HostModule::compile(sparse_tile_source(), "sparse_tile", &testing::test_cache());
  return module;
}

uint16_t to_bits(float value, bool bf16) {
  return bf16 ? ir::float_to_bfloat16_bits(value) : ir::float_to_half_bits(value);
}
float from_bits(uint16_t bits, bool bf16) {
  return bf16 ? ir::bfloat16_bits_to_float(bits) : ir::half_bits_to_float(bits);
}

struct SparseTileRun {
  std::vector<float> out;   // 16 x 8, as the emulated mma.sp computed it
  std::vector<double> exact, magnitude;  // A B and |A| |B| of the 16-bit operands, in double
};

// Runs sparse_tile on the host for the dense 2:4 A (16 x k) and B (k x 8), both rounded to the
// 16-bit type; `corrupt` may change the compressed form before the launch.
SparseTileRun run_sparse_tile(const std::vector<float>& a, const std::vector<float>& b, int k, bool bf16,
                              void (*corrupt)(ir::TwoFourMatrix&) = nullptr) {
  ir::TwoFourMatrix compressed;
  EXPECT_EQ(ir::compress_two_four(a.data(), 16, k, &compressed), "");
  if (corrupt) corrupt(compressed);
  std::vector<uint16_t> kept(compressed.values.size()), bt(static_cast<size_t>(8 * k));
  for (size_t i = 0; i < kept.size(); ++i) kept[i] = to_bits(compressed.values[i], bf16);
  for (int kk = 0; kk < k; ++kk)
    for (int n = 0; n < 8; ++n) bt[n * k + kk] = to_bits(b[kk * 8 + n], bf16);
  SparseTileRun run;
  run.out.assign(16 * 8, -1.0f);
  int shape[2] = {k, bf16 ? 1 : 0};
  void* args[] = {kept.data(), compressed.metadata.data(), bt.data(), run.out.data(), shape};
  runtime::host::HostOptions options;
  options.strict = true;
  sparse_tile_module().launch("sparse_tile", args, Dim3{1, 1, 1}, Dim3{32, 1, 1}, 0, true, options);
  run.exact.assign(16 * 8, 0.0);
  run.magnitude.assign(16 * 8, 0.0);
  for (int i = 0; i < 16; ++i)
    for (int n = 0; n < 8; ++n)
      for (int kk = 0; kk < k; ++kk) {
        const double product = static_cast<double>(from_bits(to_bits(a[i * k + kk], bf16), bf16)) *
                               from_bits(bt[n * k + kk], bf16);
        run.exact[i * 8 + n] += product;
        run.magnitude[i * 8 + n] += std::fabs(product);
      }
  return run;
}

// Small integers: every sum is exact, so the emulation must give A B exactly. A's groups take
// each of the six increasing position pairs, some one value or none, so a mistake in the
// positions' bit order, in which lanes supply them or in which row's half they fill, moves a
// value to another k and fails.
TEST(CodegenMmaSparse, EmulatedMmaSpUsesThePtxLayouts) {
  for (const bool bf16 : {true, false}) {
    const int k = 64;
    const std::vector<float> a = two_four_matrix(16, k, true, 3);
    std::vector<float> b(static_cast<size_t>(k * 8));
    for (int i = 0; i < k * 8; ++i) b[i] = static_cast<float>((i * 7) % 11 - 5);
    const SparseTileRun run = run_sparse_tile(a, b, k, bf16);
    for (int i = 0; i < 16 * 8; ++i)
      EXPECT_EQ(run.out[i], run.exact[i]) << (bf16 ? "bf16" : "f16") << " out[" << i / 8 << "][" << i % 8 << "]";
  }
}

// Values of every magnitude: each k step of 32 rounds its sum once to float, so the result lies
// within steps * 2^-24 * sum |a b| of the exact product (the double sums add far less).
TEST(CodegenMmaSparse, EmulatedMmaSpRoundsOncePerStep) {
  for (const bool bf16 : {true, false}) {
    const int k = 96;
    const std::vector<float> a = two_four_matrix(16, k, false, 11);
    std::mt19937 random(5);
    std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
    std::vector<float> b(static_cast<size_t>(k * 8));
    for (float& v : b) v = uniform(random);
    const SparseTileRun run = run_sparse_tile(a, b, k, bf16);
    for (int i = 0; i < 16 * 8; ++i)
      EXPECT_LE(std::fabs(run.out[i] - run.exact[i]), 3 * std::ldexp(run.magnitude[i], -24) + 1e-30)
          << (bf16 ? "bf16" : "f16") << " out[" << i / 8 << "][" << i % 8 << "]";
  }
}

// mma.sp::ordered_metadata leaves the result undefined when a group's positions do not
// increase: the emulation stops the launch and says where.
TEST(CodegenMmaSparse, EmulatedMmaSpRejectsUnorderedPositions) {
  const int k = 32;
  const std::vector<float> a = two_four_matrix(16, k, true, 3);
  const std::vector<float> b(static_cast<size_t>(k * 8), 1.0f);
  // Row 9, group 5 (k 20..23, kept columns 10 and 11): positions 1 and 1.
  const auto corrupt = [](ir::TwoFourMatrix& m) {
    uint16_t& word = m.metadata[9 * m.words_per_row() + 1];
    word = static_cast<uint16_t>((word & ~(0xf << 4)) | (0b0101 << 4));
  };
  try {
    run_sparse_tile(a, b, k, true, corrupt);
    FAIL() << "the launch should fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the metadata of row 9, k 20..23 (lane 5, bits 20..23) gives positions 1 "
                                         "and 1: ::ordered_metadata needs two increasing positions"),
              std::string::npos)
        << e.what();
  }
}

// The device library's mma.sp compiles for real GPUs: the PTX holds the instruction as written,
// and neither arch spills or keeps a stack frame.
TEST(CodegenMmaSparse, NvrtcCompilesMmaSpForSm80AndSm90) {
  runtime::NvrtcOptions nvrtc;
  nvrtc.cache = &testing::test_cache();
  const runtime::CudaBinary binary = runtime::compile_with_nvrtc(sparse_tile_source(), "sparse_tile.cu", nvrtc);
  EXPECT_NE(binary.ptx.find("mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.bf16.bf16.f32"),
            std::string::npos);
  EXPECT_NE(binary.ptx.find("mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32"),
            std::string::npos);
  ASSERT_EQ(binary.resources.size(), 2u);
  for (const runtime::KernelResources& r : binary.resources) {
    EXPECT_EQ(r.spill_store_bytes + r.spill_load_bytes, 0) << r.arch;
    EXPECT_EQ(r.stack_frame_bytes, 0) << r.arch;
  }
}

}  // namespace
}  // namespace kiln::codegen
