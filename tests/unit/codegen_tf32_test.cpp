// --precision=tf32: the GEMM kernels on tensor cores (mma.sync m16n8k8), compiled for real GPUs
// (NVRTC sm_80 and sm_90: no spills, no stack frame, mma.sync and cvt.rna.tf32 in the PTX) and
// run on the host backend, whose warp collective emulates mma.sync with the PTX ISA's fragment
// layouts and whose cp.async lands only when waited for. Each result must equal the reference interpreter run on TF32-rounded operands (to
// the f32 tolerance of codegen_nn_util.h) and stay within the derived TF32 bound of the exact
// result (check_cases). Shapes hit the 64 and 128 tile edges, every GEMM's layouts (transposes,
// batches, broadcasts, folded batches, gathered convolution patches), operands copied by
// cp.async and staged through registers, and the emulation itself.
#include <gtest/gtest.h>

#include <cstring>

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

CheckOptions tf32_options() {
  CheckOptions options;
  options.precision = Precision::Tf32;
  return options;
}

OpCase matmul(int64_t m, int64_t n, int64_t k) { return {"matmul", {f32({m, k}), f32({k, n})}, {}, k}; }

OpCase conv(ir::Shape x, ir::Shape w, ir::AttrMap attrs) {
  const int64_t terms = w[1] * w[2] * w[3];
  return {"conv2d", {f32(std::move(x)), f32(std::move(w))}, std::move(attrs), terms};
}

// Every kernel of the program runs on tensor cores, and its PTX says so.
void expect_tensor_cores(const testing::CheckResult& result) {
  for (const Kernel& kernel : result.program.kernels)
    EXPECT_NE(testing::kernel_text(result.program, kernel.name).find("kiln_mma_tf32_m16n8k8("),
              std::string::npos)
        << kernel.name << " does not use the tensor cores";
}

TEST(CodegenTf32, MatmulEdgesOfBothTilings) {
  // Sizes below, at and past the 64 tiles' edges (one tile, ragged, two), K below, at and past
  // the 16-deep k tile and the 8-deep mma step.
  const std::vector<OpCase> cases = {
      matmul(1, 1, 1),   matmul(7, 16, 33), matmul(16, 7, 8),  matmul(33, 100, 16),
      matmul(64, 64, 64), matmul(100, 129, 7), matmul(129, 33, 129),
  };
  const testing::CheckResult result = check_cases("tf32_matmul", cases, tf32_options());
  expect_tensor_cores(result);
  // 64 tiles: a 3-stage cp.async ring (30 KB), whose copies land only when waited for on the
  // host, so a wrong wait count would read a stale stage.
  EXPECT_NE(result.program.source.find("A and B by cp.async, 3 stages"), std::string::npos);
  EXPECT_NE(result.program.source.find("kiln_cp_async_wait<kStages - 1>();"), std::string::npos);
}

TEST(CodegenTf32, LargeProblemsTake128Tiles) {
  // 132 problems of 130 x 129 fill an H100 with 128 x 128 tiles: 2 x 2 ragged tiles each.
  const std::vector<OpCase> cases = {
      {"matmul", {f32({132, 130, 24}), f32({132, 24, 129})}, {}, 24},
  };
  const testing::CheckResult result = check_cases("tf32_matmul_128", cases, tf32_options());
  expect_tensor_cores(result);
  EXPECT_NE(result.program.source.find("kTileM = 128"), std::string::npos);
  // 128 tiles: 3 stages too (A outer-major, B k-major: 3 x 18.5 KB), past the 48 KB a launch
  // takes without the opt-in that the CUDA runtime makes (cuda_mock_driver_test checks it).
  EXPECT_NE(result.program.source.find("by cp.async, 3 stages"), std::string::npos);
  ASSERT_EQ(result.program.kernels.size(), 1u);
  EXPECT_EQ(result.program.kernels[0].dynamic_shared_bytes, 3u * (128 * (16 + 4) + 16 * (128 + 8)) * 4);
  EXPECT_GT(result.program.kernels[0].dynamic_shared_bytes, 48u * 1024);
}

TEST(CodegenTf32, EveryGemmLayout) {
  const std::vector<OpCase> cases = {
      {"matmul", {f32({2, 1, 5, 7}), f32({3, 7, 9})}, {}, 7},
      {"matmul", {f32({4, 33, 16}), f32({16, 7})}, {}, 16},
      {"matmul", {f32({3, 33, 7}), f32({3, 33, 100})}, {{"transpose_a", true}}, 33},
      {"matmul", {f32({2, 65, 19}), f32({1, 70, 19})}, {{"transpose_b", true}}, 19},
      {"matmul", {f32({2, 20, 66}), f32({67, 20})}, {{"transpose_a", true}, {"transpose_b", true}}, 20},
      // cp.async for both layouts of A: k contiguous ([M][K], outer-major in shared memory)
      // and rows contiguous (transposed, [K][M], k-major), with B staged through registers.
      {"matmul", {f32({2, 40, 64}), f32({2, 40, 26})}, {{"transpose_a", true}}, 40},
      {"matmul", {f32({70, 24}), f32({24, 30})}, {}, 24},
      {"matmul", {TensorType{DType::F16, {2, 9, 40}}, TensorType{DType::F16, {40, 70}}}, {}, 40},
      {"dense", {f32({3, 5, 33}), f32({7, 33}), f32({7})}, {}, 33},
      {"dense", {f32({100, 129}), f32({65, 129}), f32({65})}, {}, 129},
      conv({2, 5, 12, 12}, {66, 5, 3, 3}, {{"pad", Ints{1, 1, 1, 1}}}),
      conv({1, 8, 9, 9}, {8, 2, 3, 3}, {{"groups", int64_t{4}}, {"stride", Ints{2, 2}}}),
      conv({1, 3, 11, 11}, {5, 3, 3, 3}, {{"dilation", Ints{2, 2}}}),
      // 1x1, stride 1: x is the patch matrix, copied by cp.async when a plane is a multiple
      // of 4 (6 x 6), staged when not (5 x 5); groups offset the channels.
      conv({2, 8, 6, 6}, {20, 8, 1, 1}, {}),
      conv({1, 12, 5, 5}, {8, 12, 1, 1}, {}),
      conv({1, 8, 4, 4}, {8, 2, 1, 1}, {{"groups", int64_t{4}}}),
  };
  const testing::CheckResult result = check_cases("tf32_layouts", cases, tf32_options());
  expect_tensor_cores(result);
  EXPECT_NE(result.program.source.find("x is the patch matrix"), std::string::npos);
  // The same 1x1 convolutions on the FMA units.
  const std::vector<OpCase> pointwise(cases.end() - 3, cases.end());
  check_cases("f32_pointwise", pointwise, CheckOptions{});
}

// conv2d_grad_weight: the GEMM template, or one thread per weight when the GEMM's few tiles
// would leave the GPU idle (a 64x64x3x3 weight: 9 tiles against 144 blocks); on tensor cores
// always the GEMM. Both against the reference.
TEST(CodegenTf32, ConvWeightGradientOnEitherKernel) {
  const auto grad_weight = [](ir::Shape dy, ir::Shape x, ir::Shape w, ir::AttrMap attrs) {
    attrs["shape"] = Ints(w.begin(), w.end());
    const int64_t terms = dy[0] * dy[2] * dy[3];
    return OpCase{"conv2d_grad_weight", {f32(std::move(dy)), f32(std::move(x))}, std::move(attrs), terms};
  };
  const std::vector<OpCase> cases = {
      grad_weight({2, 8, 5, 5}, {2, 3, 7, 7}, {8, 3, 3, 3}, {}),
      grad_weight({1, 64, 4, 4}, {1, 64, 4, 4}, {64, 64, 3, 3}, {{"pad", Ints{1, 1, 1, 1}}}),
  };
  CheckOptions f32_options;
  const testing::CheckResult f32_result = check_cases("grad_weight_f32", cases, f32_options);
  EXPECT_NE(f32_result.program.source.find("as a GEMM per group"), std::string::npos);
  EXPECT_NE(f32_result.program.source.find("one thread per weight element"), std::string::npos);
  const testing::CheckResult tf32_result = check_cases("grad_weight_tf32", cases, tf32_options());
  EXPECT_EQ(tf32_result.program.source.find("one thread per weight element"), std::string::npos);
  expect_tensor_cores(tf32_result);
}

// Split-K partial weight gradients (k_chunk, from the split-k pass): chunks a multiple of the
// k tile, ragged ones, one not a multiple of 4 (no cp.async of dy along k), a single chunk,
// groups; on the FMA units and on tensor cores, against the reference's partials.
TEST(CodegenTf32, ConvWeightGradientSplitK) {
  const auto partials = [](ir::Shape dy, ir::Shape x, ir::Shape w, int64_t chunk, ir::AttrMap attrs) {
    attrs["shape"] = Ints(w.begin(), w.end());
    attrs["k_chunk"] = chunk;
    return OpCase{"conv2d_grad_weight", {f32(std::move(dy)), f32(std::move(x))}, std::move(attrs), chunk};
  };
  const std::vector<OpCase> cases = {
      partials({2, 8, 6, 8}, {2, 3, 6, 8}, {8, 3, 3, 3}, 32, {{"pad", Ints{1, 1, 1, 1}}}),
      partials({3, 8, 5, 5}, {3, 3, 7, 7}, {8, 3, 3, 3}, 20, {}),
      partials({2, 66, 4, 4}, {2, 70, 4, 4}, {66, 70, 1, 1}, 13, {}),
      partials({1, 8, 4, 4}, {1, 8, 9, 9}, {8, 2, 3, 3}, 64, {{"groups", int64_t{4}}, {"stride", Ints{2, 2}}}),
  };
  const testing::CheckResult f32_result = check_cases("split_k_f32", cases, CheckOptions{});
  EXPECT_NE(f32_result.program.source.find("split-K: 3 chunks of 32"), std::string::npos);
  EXPECT_NE(f32_result.program.source.find("split-K: 1 chunk of 64"), std::string::npos);
  const testing::CheckResult tf32_result = check_cases("split_k_tf32", cases, tf32_options());
  expect_tensor_cores(tf32_result);
}

// conv2d_grad_input: the GEMM template (W^T times the gathered dy) or one thread per input
// element; a 1x1 stride-1 convolution's dy is copied by cp.async. Strides (zeros between the
// outputs), dilation, groups, padding and ragged tiles, against the reference.
TEST(CodegenTf32, ConvInputGradientOnEitherKernel) {
  const auto grad_input = [](ir::Shape dy, ir::Shape w, ir::Shape x, ir::AttrMap attrs) {
    attrs["shape"] = Ints(x.begin(), x.end());
    const int64_t terms = w[0] * w[2] * w[3];
    return OpCase{"conv2d_grad_input", {f32(std::move(dy)), f32(std::move(w))}, std::move(attrs), terms};
  };
  const std::vector<OpCase> cases = {
      grad_input({2, 8, 5, 5}, {8, 3, 3, 3}, {2, 3, 7, 7}, {}),
      grad_input({2, 16, 6, 6}, {16, 12, 3, 3}, {2, 12, 6, 6}, {{"pad", Ints{1, 1, 1, 1}}}),
      grad_input({1, 8, 4, 4}, {8, 2, 3, 3}, {1, 8, 9, 9},
                 {{"groups", int64_t{4}}, {"stride", Ints{2, 2}}}),
      grad_input({1, 5, 7, 7}, {5, 3, 3, 3}, {1, 3, 11, 11}, {{"dilation", Ints{2, 2}}}),
      grad_input({2, 20, 8, 8}, {20, 68, 1, 1}, {2, 68, 8, 8}, {}),
      grad_input({2, 12, 4, 4}, {12, 8, 1, 1}, {2, 8, 8, 8}, {{"stride", Ints{2, 2}}}),
      // 8 GEMM tiles against 128 blocks of one thread per element: in f32 the direct loops.
      grad_input({8, 64, 8, 8}, {64, 64, 3, 3}, {8, 64, 8, 8}, {{"pad", Ints{1, 1, 1, 1}}}),
  };
  CheckOptions f32_options;
  const testing::CheckResult f32_result = check_cases("grad_input_f32", cases, f32_options);
  EXPECT_NE(f32_result.program.source.find("input gradient of a 3x3 convolution as a GEMM"),
            std::string::npos);
  EXPECT_NE(f32_result.program.source.find("one thread per input element"), std::string::npos);
  const testing::CheckResult tf32_result = check_cases("grad_input_tf32", cases, tf32_options());
  EXPECT_EQ(tf32_result.program.source.find("one thread per input element"), std::string::npos);
  EXPECT_NE(tf32_result.program.source.find("as a GEMM per group"), std::string::npos);
  expect_tensor_cores(tf32_result);
  // The 1x1 stride-1 gradient copies both W and dy with cp.async.
  EXPECT_NE(tf32_result.program.source.find("A and B by cp.async"), std::string::npos);
}

// f64 GEMMs stay exact on the FMA units whatever --precision says.
TEST(CodegenTf32, F64StaysOnFmaUnits) {
  const TensorType f64{DType::F64, {8, 8}};
  const ir::Graph graph = ir::parse_graph(testing::single_op_ir("matmul", {f64, f64}), "f64.ir");
  const Program program = emit_program(graph, {}, Precision::Tf32);
  EXPECT_EQ(program.source.find("kiln_mma_tf32_m16n8k8(acc"), std::string::npos);
  EXPECT_NE(program.source.find("64x64x16 tiles, 256 threads, 4x4 per thread"), std::string::npos);
}

// The emulated mma.sync itself, against the PTX ISA's fragment layouts transcribed here
// ("Matrix Fragments for mma.m16n8k8", .tf32): a warp of fibers posts fragments of known
// matrices and must get D = A B + C in the C layout. Values are small integers, so every sum
// is exact and the comparison is too.
TEST(CodegenTf32, EmulatedMmaUsesThePtxFragmentLayouts) {
  const char* source = R"(
#ifndef __CUDACC__
#include "kiln_host_prelude.h"
#endif
__device__ __forceinline__ void kiln_mma_tf32_m16n8k8(float* d, const unsigned int* a, const unsigned int* b) {
  kiln_host_mma_tf32_m16n8k8(d, a, b);
}
extern "C" __global__ void mma_tile(const float* A, const float* B, const float* C, float* D) {
  const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  unsigned int a[4] = {__float_as_uint(A[g * 8 + t]), __float_as_uint(A[(g + 8) * 8 + t]),
                       __float_as_uint(A[g * 8 + t + 4]), __float_as_uint(A[(g + 8) * 8 + t + 4])};
  unsigned int b[2] = {__float_as_uint(B[t * 8 + g]), __float_as_uint(B[(t + 4) * 8 + g])};
  float d[4] = {C[g * 8 + 2 * t], C[g * 8 + 2 * t + 1], C[(g + 8) * 8 + 2 * t], C[(g + 8) * 8 + 2 * t + 1]};
  kiln_mma_tf32_m16n8k8(d, a, b);
  D[g * 8 + 2 * t] = d[0];
  D[g * 8 + 2 * t + 1] = d[1];
  D[(g + 8) * 8 + 2 * t] = d[2];
  D[(g + 8) * 8 + 2 * t + 1] = d[3];
}
extern "C" void kiln_host_entry_mma_tile(void* const* args) {
  mma_tile(static_cast<const float*>(args[0]), static_cast<const float*>(args[1]),
           static_cast<const float*>(args[2]), static_cast<float*>(args[3]));
}
)";
  const runtime::host::HostModule module =
      runtime::host::HostModule::compile(source, "mma_tile", &testing::test_cache());
  std::vector<float> a(16 * 8), b(8 * 8), c(16 * 8), d(16 * 8, -1.0f);
  for (int i = 0; i < 16 * 8; ++i) a[i] = static_cast<float>(i % 7 - 3);
  for (int i = 0; i < 8 * 8; ++i) b[i] = static_cast<float>(i % 5 - 2);
  for (int i = 0; i < 16 * 8; ++i) c[i] = static_cast<float>(i % 3);
  void* args[] = {a.data(), b.data(), c.data(), d.data()};
  runtime::host::HostOptions options;
  options.strict = true;
  module.launch("mma_tile", args, Dim3{1, 1, 1}, Dim3{32, 1, 1}, 0, true, options);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) {
      float want = c[i * 8 + j];
      for (int k = 0; k < 8; ++k) want += a[i * 8 + k] * b[k * 8 + j];
      EXPECT_EQ(d[i * 8 + j], want) << "D[" << i << "][" << j << "]";
    }
}

// The emulated ldmatrix.x4, against the PTX ISA's layout ("Warp-level matrix load
// instruction: ldmatrix"): lanes 8j .. 8j + 7 give the rows of matrix j (16 bytes each), and
// lane i must receive word i % 4 of row i / 4 of every matrix j. The lanes point at rows in a
// scrambled order, so a lane-order mistake cannot pass; a misaligned row is an error.
TEST(CodegenTf32, EmulatedLdmatrixUsesThePtxLayout) {
  const char* source = R"(
#ifndef __CUDACC__
#include "kiln_host_prelude.h"
#endif
__device__ __forceinline__ void kiln_ldmatrix_x4(unsigned int* d, const void* row) {
  kiln_host_ldmatrix_x4(d, row);
}
extern "C" __global__ void load_rows(const unsigned int* rows, const int* order, unsigned int* out) {
  const int lane = threadIdx.x;
  unsigned int d[4];
  kiln_ldmatrix_x4(d, rows + order[lane]);
  for (int j = 0; j < 4; ++j) out[lane * 4 + j] = d[j];
}
extern "C" void kiln_host_entry_load_rows(void* const* args) {
  load_rows(static_cast<const unsigned int*>(args[0]), static_cast<const int*>(args[1]),
            static_cast<unsigned int*>(args[2]));
}
)";
  const runtime::host::HostModule module =
      runtime::host::HostModule::compile(source, "load_rows", &testing::test_cache());
  alignas(16) unsigned int rows[32 * 4];
  for (unsigned int i = 0; i < 32 * 4; ++i) rows[i] = 1000 + i;
  std::vector<int> order(32);
  for (int lane = 0; lane < 32; ++lane) order[lane] = (lane * 7 + 3) % 32 * 4;  // word offsets
  std::vector<unsigned int> out(32 * 4, 0);
  void* args[] = {rows, order.data(), out.data()};
  runtime::host::HostOptions options;
  options.strict = true;
  module.launch("load_rows", args, Dim3{1, 1, 1}, Dim3{32, 1, 1}, 0, true, options);
  for (int lane = 0; lane < 32; ++lane)
    for (int j = 0; j < 4; ++j)
      EXPECT_EQ(out[lane * 4 + j], rows[order[8 * j + lane / 4] + lane % 4]) << "lane " << lane << ", d[" << j << "]";

  order[5] += 1;  // 4 bytes past a row: not 16-byte aligned
  try {
    module.launch("load_rows", args, Dim3{1, 1, 1}, Dim3{32, 1, 1}, 0, true, options);
    ADD_FAILURE() << "a misaligned ldmatrix row was accepted";
  } catch (const std::exception& error) {
    EXPECT_NE(std::string(error.what()).find("lane 5's row address"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace kiln::codegen
