// Codegen of the neural-network kernels (codegen/kernels/nn.cpp, gemm.cpp, pool_norm.cpp): the
// emitted kernels' names, signatures, launch shapes and notes. GPU compilation and results on
// the host backend are checked in codegen_nn_host_test.cpp.
#include <gtest/gtest.h>

#include "codegen/kernel_emitter.h"
#include "ir/op_registry.h"
#include "codegen_nn_util.h"
#include "ir/diagnostic.h"

namespace kiln::codegen {
namespace {

using ir::DType;
using ir::TensorType;
using testing::emit_ir;
using testing::single_op_ir;

TensorType f32(ir::Shape shape) { return TensorType{DType::F32, std::move(shape)}; }

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The seed CNN's second convolution, written out as a reader would.
constexpr const char* kSeedConv2 = R"(graph @seed_conv2(%x: f32[1,32,13,13],
    %weight: f32[64,32,3,3], %bias: f32[64]) -> (f32[1,64,11,11]) {
  %y = conv2d(%x, %weight, %bias) : f32[1,64,11,11] loc("conv2")
  return %y
}
)";

TEST(CodegenNn, EveryNnOpHasAnEmitter) {
  using ir::OpId;
  for (const OpId op : {OpId::Matmul, OpId::Dense, OpId::Conv2d, OpId::MaxPool2d, OpId::AvgPool2d,
                        OpId::GlobalAvgPool, OpId::BiasAdd, OpId::BatchNorm})
    EXPECT_NE(find_kernel_emitter(op), nullptr) << op;
}

// find_kernel_emitter's family switch (codegen/kernel_emitter.cpp) places every op; the
// family's table must then hold it.
TEST(CodegenNn, EveryOpOfTheTableHasAnEmitter) {
  for (const ir::OpDef& def : ir::OpRegistry::instance().all())
    EXPECT_NE(find_kernel_emitter(def.id), nullptr) << "no CUDA emitter for " << def.name;
}

TEST(CodegenNn, ConvIsAnImplicitGemmWithTheRegistryParameterNames) {
  const Program program = emit_ir(kSeedConv2, "seed_conv2");
  ASSERT_EQ(program.kernels.size(), 1u);
  const Kernel& kernel = program.kernels[0];
  EXPECT_EQ(kernel.name, "conv2d_0");
  EXPECT_EQ(kernel.source_nodes, std::vector<std::string>{"conv2"});
  // 64 output channels = one row tile; 121 pixels = two column tiles; one group.
  EXPECT_EQ(kernel.grid, (Dim3{2, 1, 1}));
  EXPECT_EQ(kernel.block, (Dim3{256, 1, 1}));
  EXPECT_EQ(kernel.dynamic_shared_bytes, 2u * 16 * 66 * 4);
  EXPECT_TRUE(kernel.uses_barriers);
  const std::string& source = program.source;
  // The weight (K = 288 contiguous) is staged as float4s: at least 4 blocks per SM
  // (codegen/kernels/gemm.cpp: ptxas otherwise aims some such kernels at 32 registers).
  EXPECT_TRUE(contains(source, "extern \"C\" __global__ void __launch_bounds__(256, 4) conv2d_0(\n"
                               "    const float* __restrict__ x,\n"
                               "    const float* __restrict__ weight,\n"
                               "    const float* __restrict__ bias,\n"
                               "    float* __restrict__ out) {"))
      << source;
  EXPECT_TRUE(contains(source, "// implicit GEMM per group"));
  EXPECT_TRUE(contains(source, "(M = O/groups = 64, N = N*OH*OW = 121, K = C/groups*KH*KW = 288)"));
  EXPECT_TRUE(contains(source, "64x64x16 tiles, 256 threads, 4x4 per thread, A by float4 loads"));
  EXPECT_TRUE(contains(source, "value += bias[channel];"));
  // Unpadded: no tap can fall outside the input, so no tap check is emitted.
  EXPECT_FALSE(contains(source, "in_h >= 0"));
  EXPECT_TRUE(contains(source, "kiln_host_entry_conv2d_0"));
}

TEST(CodegenNn, ConvGroupsGoToGridZAndPaddingIsChecked) {
  const Program program = emit_ir(
      single_op_ir("conv2d", {f32({2, 8, 9, 9}), f32({6, 4, 3, 3})},
                   {{"groups", int64_t{2}}, {"pad", std::vector<int64_t>{1, 0, 2, 1}}}),
      "conv_groups");
  const Kernel& kernel = program.kernels.at(0);
  EXPECT_EQ(kernel.grid.z, 2u);
  EXPECT_TRUE(contains(program.source, "if (in_h >= 0 && in_h < kH && in_w >= 0 && in_w < kW) {"));
  EXPECT_FALSE(contains(program.source, "value += "));  // no bias operand
}

TEST(CodegenNn, MatmulSpecializesBoundsChecksToTheShape) {
  // Multiples of the tiles: no bounds checks at all.
  const Program even = emit_ir(single_op_ir("matmul", {f32({128, 32}), f32({32, 64})}), "mm_even");
  EXPECT_FALSE(contains(even.source, "row < kM"));
  EXPECT_FALSE(contains(even.source, "col < kN"));
  EXPECT_FALSE(contains(even.source, "k < kK"));
  EXPECT_EQ(even.kernels[0].grid, (Dim3{1, 2, 1}));
  EXPECT_TRUE(contains(even.source, "// tiled GEMM, 64x64x16 tiles, 256 threads, 4x4 per thread"));
  // Ragged in every dimension.
  const Program ragged =
      emit_ir(single_op_ir("matmul", {f32({7, 33}), f32({33, 129})}), "mm_ragged");
  EXPECT_TRUE(contains(ragged.source, "if (row < kM && k < kK) {"));
  EXPECT_TRUE(contains(ragged.source, "if (col < kN && k < kK) {"));
  EXPECT_TRUE(contains(ragged.source, "if (row < kM && col < kN) {"));
  EXPECT_EQ(ragged.kernels[0].grid, (Dim3{3, 1, 1}));
}

TEST(CodegenNn, MatmulBatchesBroadcastThroughGridZ) {
  const Program program = emit_ir(
      single_op_ir("matmul", {f32({2, 1, 5, 7}), f32({3, 9, 7})}, {{"transpose_b", true}}),
      "mm_broadcast");
  const Kernel& kernel = program.kernels.at(0);
  EXPECT_EQ(kernel.grid.z, 6u);
  EXPECT_TRUE(contains(program.source,
                       "// Batch offsets: out batch dims [2,3] broadcast from a [2,1] and b [3]."));
  EXPECT_TRUE(contains(program.source, "b transposed"));
  // b shared by every batch and a row-major: one GEMM over all rows.
  const Program folded = emit_ir(single_op_ir("matmul", {f32({4, 5, 7}), f32({7, 3})}), "mm_fold");
  EXPECT_EQ(folded.kernels.at(0).grid, (Dim3{1, 1, 1}));
  EXPECT_TRUE(contains(folded.source, "batch folded into rows"));
}

TEST(CodegenNn, DenseAddsBiasInTheEpilogue) {
  const Program program =
      emit_ir(single_op_ir("dense", {f32({3, 5, 16}), f32({10, 16}), f32({10})}), "dense");
  EXPECT_TRUE(contains(program.source, "x * weight^T as tiled GEMM + bias in the epilogue"));
  EXPECT_TRUE(contains(program.source, "const int channel = static_cast<int>(col);"));
  EXPECT_TRUE(contains(program.source, "value += bias[channel];"));
  EXPECT_EQ(program.kernels.at(0).grid, (Dim3{1, 1, 1}));  // 15 rows, 10 features
}

TEST(CodegenNn, HalfOperandsConvertAtTheEdges) {
  const Program program = emit_ir(
      single_op_ir("matmul", {TensorType{DType::F16, {8, 8}}, TensorType{DType::F16, {8, 8}}}),
      "mm_half");
  EXPECT_TRUE(contains(program.source, "kiln_half_to_float(a[a_base + row * kK + k])"));
  EXPECT_TRUE(contains(program.source, "out[out_index] = kiln_float_to_half(value);"));
}

TEST(CodegenNn, PoolingAndNormalizationKernels) {
  struct Case {
    std::string ir;
    std::string note;
    bool barriers;
  };
  const std::vector<Case> cases = {
      {single_op_ir("max_pool2d", {f32({1, 2, 5, 5})}, {{"kernel", std::vector<int64_t>{3, 3}}}),
       "// max pooling 3x3, one thread per output", false},
      {single_op_ir("avg_pool2d", {f32({1, 2, 5, 5})},
                    {{"kernel", std::vector<int64_t>{2, 2}}, {"count_include_pad", false}}),
       "// average pooling 2x2, one thread per output, padding not counted", false},
      {single_op_ir("global_avg_pool", {f32({2, 3, 4, 4})}),
       "// one warp per (n, c) plane, strided lane sums and a shuffle-tree sum", true},
      {single_op_ir("bias_add", {f32({2, 3, 4}), f32({3})}),
       "// elementwise, bias broadcast along axis 1", false},
      {single_op_ir("batch_norm", {f32({2, 3, 4}), f32({3}), f32({3}), f32({3}), f32({3})}),
       "// inference: running statistics folded into a per-channel scale and shift", false},
      {single_op_ir("batch_norm", {f32({2, 3, 4}), f32({3}), f32({3}), f32({3}), f32({3})},
                    {{"training", true}}),
       "// training: one block per channel", true},
  };
  for (const Case& c : cases) {
    const Program program = emit_ir(c.ir, "case");
    EXPECT_TRUE(contains(program.source, c.note)) << program.source;
    EXPECT_EQ(program.kernels.at(0).uses_barriers, c.barriers) << c.note;
    EXPECT_LE(program.kernels.at(0).dynamic_shared_bytes, 48u * 1024);
  }
}

TEST(CodegenNn, BatchNormTrainingIsOneBlockPerChannel) {
  const Program program = emit_ir(
      single_op_ir("batch_norm", {f32({4, 5, 3, 3}), f32({5}), f32({5}), f32({5}), f32({5})},
                   {{"training", true}}),
      "bn_train");
  const Kernel& kernel = program.kernels.at(0);
  EXPECT_EQ(kernel.grid, (Dim3{5, 1, 1}));
  EXPECT_EQ(kernel.dynamic_shared_bytes, 8u * 4);  // one partial sum per warp
  // The five operands in registry order.
  EXPECT_TRUE(contains(program.source,
                       "const float* __restrict__ x,\n"
                       "    const float* __restrict__ scale,\n"
                       "    const float* __restrict__ bias,\n"
                       "    const float* __restrict__ mean,\n"
                       "    const float* __restrict__ var,\n"));
}

// CUDA grids have at most 65535 blocks in y and z.
TEST(CodegenNn, GemmsTooBigForTheGridAreAnError) {
  // Transposed a cannot fold its batch into rows: 70000 problems in grid z.
  const std::string text = single_op_ir("matmul", {f32({70000, 1, 2}), f32({1, 1, 1})},
                                        {{"transpose_a", true}});
  try {
    emit_ir(text, "too_big");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_TRUE(contains(error.what(), "matmul")) << error.what();
    EXPECT_TRUE(contains(error.what(), "does not fit a CUDA grid")) << error.what();
  }
}

// Tensors of 2^31 elements or more switch offsets to 64 bits; the kernels still compile for both
// GPUs without spills (they are far too big to run on the host in a test).
TEST(CodegenNn, LargeTensorsUseWideIndices) {
  using testing::OpCase;
  const TensorType big = f32({1, 64, 8192, 4096});  // 2^31 elements
  const TensorType c64 = f32({64});
  const std::vector<OpCase> cases = {
      {"matmul", {f32({65536, 32768}), f32({32768, 3})}},
      {"conv2d", {big, f32({8, 64, 3, 3}), f32({8})}, {{"pad", std::vector<int64_t>{1, 1, 1, 1}}}},
      {"max_pool2d", {big}, {{"kernel", std::vector<int64_t>{2, 2}}}},
      {"global_avg_pool", {big}},
      {"bias_add", {big, c64}},
      {"batch_norm", {big, c64, c64, c64, c64}, {{"training", true}}},
  };
  const ir::Graph graph = ir::parse_graph(testing::cases_ir("wide", cases), "wide.ir");
  const Program program = emit_program(graph);
  for (const Kernel& kernel : program.kernels)
    EXPECT_TRUE(contains(testing::kernel_text(program, kernel.name), "using index_t = long long;"))
        << kernel.name;
  runtime::NvrtcOptions options;
  options.cache = &testing::test_cache();
  const runtime::CudaBinary binary =
      runtime::compile_with_nvrtc(program.source, "wide.cu", options);
  EXPECT_EQ(binary.resources.size(), 2 * program.kernels.size());
  for (const runtime::KernelResources& r : binary.resources) {
    EXPECT_EQ(r.spill_store_bytes + r.spill_load_bytes, 0) << r.kernel << " on " << r.arch;
    EXPECT_EQ(r.stack_frame_bytes, 0) << r.kernel << " on " << r.arch;
  }
}

}  // namespace
}  // namespace kiln::codegen
