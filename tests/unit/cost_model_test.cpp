// The per-op cost model (codegen/cost_model.h): FLOP rules by hand for each family, bytes with
// each distinct operand once, fused kernels, the roofline, and that every registered op has a
// rule of its own and codegen copies the figures into the kernel table.
#include <gtest/gtest.h>

#include <algorithm>

#include "codegen/cost_model.h"
#include "codegen/emit.h"
#include "ir/op_registry.h"
#include "ir/parser.h"

namespace kiln::codegen {
namespace {

// The graph of `text`; node(graph, i) is its i-th node.
ir::Graph parse(std::string_view text) { return ir::parse_graph(text, "cost_model_test.ir"); }
const ir::Node& node(const ir::Graph& graph, size_t i) { return *graph.nodes().at(i); }

TEST(CostModel, Conv2dIsTwoFlopsPerMultiplyAddPlusBias) {
  const ir::Graph g = parse(R"(graph @g(%x: f32[2,4,8,8], %w: f32[6,2,3,3], %b: f32[6]) -> (f32[2,6,6,6], f32[2,6,6,6]) {
  %c = conv2d(%x, %w, %b) {groups = 2} : f32[2,6,6,6]
  %d = conv2d(%x, %w) {groups = 2} : f32[2,6,6,6]
  return %c, %d
})");
  const int64_t out = 2 * 6 * 6 * 6;
  // Each output element is a dot product over C/groups * R * S = 2 * 3 * 3 weights.
  EXPECT_EQ(node_cost(node(g, 0)).flops, 2 * out * 2 * 3 * 3 + out);
  EXPECT_EQ(node_cost(node(g, 1)).flops, 2 * out * 2 * 3 * 3);
  const NodeCost cost = node_cost(node(g, 0));
  EXPECT_EQ(cost.bytes_read, (2 * 4 * 8 * 8 + 6 * 2 * 3 * 3 + 6) * 4);
  EXPECT_EQ(cost.bytes_written, out * 4);
}

TEST(CostModel, DenseAndMatmulAreTwoMNK) {
  const ir::Graph g = parse(R"(graph @g(%x: f32[4,784], %w: f32[128,784], %b: f32[128], %a: f32[3,8,5], %m: f32[3,8,7]) -> (f32[4,128], f32[3,5,7]) {
  %y = dense(%x, %w, %b) : f32[4,128]
  %p = matmul(%a, %m) {transpose_a = true} : f32[3,5,7]
  return %y, %p
})");
  EXPECT_EQ(node_cost(node(g, 0)).flops, 2 * 4 * 128 * 784 + 4 * 128);
  // a^T is [3,5,8]: K = 8, read from the second-last dim of a as written.
  EXPECT_EQ(node_cost(node(g, 1)).flops, 2 * 3 * 5 * 7 * 8);
}

TEST(CostModel, ElementwiseIsOnePerResultElementTranscendentalsIncluded) {
  const ir::Graph g = parse(R"(graph @g(%x: f32[4,8], %v: f32[8]) -> (f32[4,8], f32[4,8], f32[4,8], f32[4,8]) {
  %s = add(%x, %v) : f32[4,8]
  %e = exp(%x) : f32[4,8]
  %q = gelu(%x) {approximate = "tanh"} : f32[4,8]
  %m = mul(%x, %x) : f32[4,8]
  return %s, %e, %q, %m
})");
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(node_cost(node(g, i)).flops, 32) << node(g, i).op;
  // A broadcast operand is read once at its own size.
  EXPECT_EQ(node_cost(node(g, 0)).bytes_read, (32 + 8) * 4);
  // An operand passed twice is read once.
  EXPECT_EQ(node_cost(node(g, 3)).bytes_read, 32 * 4);
}

TEST(CostModel, DataMovementHasNoFlopsButBytesAtEachDtype) {
  const ir::Graph g = parse(R"(graph @g(%x: f32[2,3,4]) -> (f32[4,3,2], f16[2,3,4], f32[6,4], f32[2,3,4]) {
  %t = transpose(%x) : f32[4,3,2]
  %h = cast(%x) {to = "f16"} : f16[2,3,4]
  %r = reshape(%x) {shape = [6,4]} : f32[6,4]
  %d = dropout(%x) {rate = 0.5} : f32[2,3,4]
  return %t, %h, %r, %d
})");
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(node_cost(node(g, i)).flops, 0) << node(g, i).op;
  EXPECT_EQ(node_cost(node(g, 1)).bytes_read, 24 * 4);
  EXPECT_EQ(node_cost(node(g, 1)).bytes_written, 24 * 2);
}

TEST(CostModel, ReductionsNormalizationsAndPools) {
  const ir::Graph g = parse(R"(graph @g(%x: f32[2,3,4,4], %s: f32[4], %b: f32[4]) -> (f32[2,3], f32[2,3,4,4], f32[2,3,4,4], f32[2,3,2,2], f32[2,3,1,1], f32[2,3,4,4]) {
  %m = reduce_mean(%x) {axes = [2,3]} : f32[2,3]
  %p = softmax(%x) : f32[2,3,4,4]
  %l = layer_norm(%x, %s, %b) : f32[2,3,4,4]
  %k = max_pool2d(%x) {kernel = [2,2]} : f32[2,3,2,2]
  %a = global_avg_pool(%x) : f32[2,3,1,1]
  %o = log_softmax(%x) {axis = 1} : f32[2,3,4,4]
  return %m, %p, %l, %k, %a, %o
})");
  const int64_t in = 2 * 3 * 4 * 4;
  EXPECT_EQ(node_cost(node(g, 0)).flops, in + 6);  // an add per input, a divide per result
  EXPECT_EQ(node_cost(node(g, 1)).flops, 5 * in);
  EXPECT_EQ(node_cost(node(g, 2)).flops, 8 * in);
  EXPECT_EQ(node_cost(node(g, 3)).flops, 2 * 3 * 2 * 2 * 4);  // the window per result
  EXPECT_EQ(node_cost(node(g, 4)).flops, in + 6);
  EXPECT_EQ(node_cost(node(g, 5)).flops, 5 * in);
}

TEST(CostModel, FusedKernelSumsBodyFlopsAndMovesOnlyItsOwnOperands) {
  const ir::Graph g = parse(R"(graph @g(%x: f32[1,3,8,8], %w: f32[4,3,3,3], %b: f32[4]) -> (f32[1,4,6,6]) {
  %r = kernel @conv2d_bias_relu_0(%x, %w, %b) {kind = "epilogue"} : f32[1,4,6,6] {
    %c = conv2d(%x, %w) : f32[1,4,6,6] loc("conv")
    %cb = bias_add(%c, %b) : f32[1,4,6,6] loc("conv_bias")
    %r = relu(%cb) : f32[1,4,6,6] loc("act")
    return %r
  }
  return %r
})");
  const ir::Node& kernel = node(g, 0);
  ASSERT_TRUE(kernel.is_kernel());
  const int64_t out = 4 * 6 * 6;
  const NodeCost cost = node_cost(kernel);
  EXPECT_EQ(cost.flops, 2 * out * 3 * 3 * 3 + out + out);
  const int64_t operands = (3 * 8 * 8 + 4 * 3 * 3 * 3 + 4) * 4;
  EXPECT_EQ(cost.bytes_read, operands);
  EXPECT_EQ(cost.bytes_written, out * 4);
  // Unfused, the operands are read as before and five tensors of the result's size move:
  // conv writes %c, bias_add reads it and writes %cb, relu reads %cb and writes %r.
  EXPECT_EQ(unfused_bytes(kernel), operands + 5 * out * 4);
  EXPECT_GT(unfused_bytes(kernel), cost.bytes());
}


TEST(CostModel, RooflinePicksTheSlowerRoof) {
  // 1 MB at 3.35 TB/s takes longer than 1 MFLOP at 66.9 TFLOP/s.
  EXPECT_EQ(kH100.bound(1'000'000, 1'000'000), "memory");
  EXPECT_DOUBLE_EQ(kH100.seconds(1'000'000, 1'000'000), 1e6 / 3.35e12);
  // A large GEMM is compute bound.
  EXPECT_EQ(kH100.bound(2LL * 4096 * 4096 * 4096, 3LL * 4096 * 4096 * 4), "compute");
}

TEST(CostModel, CodegenFillsTheKernelTable) {
  const ir::Graph g = parse(R"(graph @g(%x: f32[4,16], %w: f32[8,16]) -> (f32[4,8]) {
  %y = dense(%x, %w) : f32[4,8]
  %r = relu(%y) : f32[4,8]
  return %r
})");
  const Program program = emit_program(g);
  ASSERT_EQ(program.kernels.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const NodeCost cost = node_cost(node(g, i));
    const Kernel& kernel = program.kernels[i];
    EXPECT_EQ(kernel.flops, cost.flops);
    EXPECT_EQ(kernel.bytes_read, cost.bytes_read);
    EXPECT_EQ(kernel.bytes_written, cost.bytes_written);
    // One node per kernel: nothing saved by fusion.
    EXPECT_EQ(kernel.unfused_bytes, cost.bytes());
  }
  EXPECT_EQ(program.kernels[0].flops, 2 * 4 * 8 * 16);
}

// A GEMM kernel's efficiency: the template's ceiling times its tiles' useful share (ragged
// rows, padded k) times its waves' (blocks over 132 SMs x blocks per SM).
TEST(CostModel, GemmsRunAtTheirTilesWavesAndTemplatesEfficiency) {
  Kernel kernel;
  kernel.flops = 2 * 100 * 64 * 20;
  kernel.bytes_read = 4;
  kernel.gemm = GemmGeometry{100, 64, 20, 1, 64, 64, 16, false};
  kernel.grid = Dim3{1, 2, 1};
  const double tiles = (100.0 * 64) / (128 * 64);
  const double depth = 20.0 / 32;
  const double waves = 2.0 / (132 * 3);
  KernelTime time = model_kernel_time(kernel, 3);
  EXPECT_EQ(time.unit, "f32 FMA");
  EXPECT_DOUBLE_EQ(time.efficiency, kFmaTemplate * tiles * depth * waves);
  EXPECT_EQ(time.bound, "compute");
  EXPECT_DOUBLE_EQ(time.seconds, kernel.flops / (kH100.flops_per_second * time.efficiency));

  // On tensor cores, with cp.async: the TF32 peak and that template's ceiling. 264 blocks fill
  // two whole waves of one block per SM.
  kernel.tensor_cores = true;
  kernel.gemm = GemmGeometry{128 * 264, 128, 64, 1, 128, 128, 16, true};
  kernel.grid = Dim3{1, 264, 1};
  kernel.flops = 2LL * 128 * 264 * 128 * 64;
  time = model_kernel_time(kernel, 1);
  EXPECT_EQ(time.unit, "TF32 tensor-core");
  EXPECT_DOUBLE_EQ(time.efficiency, kTensorCoreTemplate);
  EXPECT_DOUBLE_EQ(time.seconds, kernel.flops / (kH100.tf32_flops_per_second * kTensorCoreTemplate));
  // bf16 and f16 operands: twice the TF32 peak.
  for (Precision format : {Precision::Bf16, Precision::F16}) {
    kernel.tensor_core_inputs = format;
    time = model_kernel_time(kernel, 1);
    EXPECT_EQ(time.unit, std::string(precision_name(format)) + " tensor-core");
    EXPECT_DOUBLE_EQ(time.seconds, kernel.flops / (kH100.half_flops_per_second * kTensorCoreTemplate));
  }
  EXPECT_DOUBLE_EQ(kH100.half_flops_per_second, 2 * kH100.tf32_flops_per_second);
  kernel.tensor_core_inputs = Precision::Tf32;
  // Staged through registers: the lower ceiling.
  kernel.gemm.async_copies = false;
  EXPECT_DOUBLE_EQ(model_kernel_time(kernel, 1).efficiency, kTensorCoreStaged);

  // A library call: the library's efficiency at its own math's peak; other kernels: the FMA
  // peak as it is.
  LibraryCall call;
  call.math = Precision::Tf32;
  kernel.library = call;
  EXPECT_DOUBLE_EQ(model_kernel_time(kernel, 1).efficiency, kLibrary);
  EXPECT_EQ(model_kernel_time(kernel, 1).unit, "TF32 tensor-core");
  // cuBLASLt's bf16 math runs at the bf16 peak; cuDNN's bf16 is its TF32 math (cudnn_conv.h).
  call.math = Precision::Bf16;
  call.op = MatmulCall{};
  kernel.library = call;
  EXPECT_EQ(model_kernel_time(kernel, 1).unit, "bf16 tensor-core");
  call.op = ConvCall{};
  kernel.library = call;
  EXPECT_EQ(model_kernel_time(kernel, 1).unit, "TF32 tensor-core");
  // The backward convolutions' direct loops: 6 % of the FMA peak, times their waves.
  Kernel grad;
  grad.source_ops = {"conv2d_grad_weight"};
  grad.flops = 1'000'000'000;
  grad.grid = Dim3{66, 1, 1};
  EXPECT_DOUBLE_EQ(model_kernel_time(grad, 4).efficiency, kDirectLoop * 66 / (132 * 4));
  Kernel map;
  map.flops = 1000;
  map.bytes_read = 8000;
  EXPECT_DOUBLE_EQ(model_kernel_time(map, 0).efficiency, 1.0);
  EXPECT_EQ(model_kernel_time(map, 0).bound, "memory");
}

// A cuDNN convolution on tensor cores reports, beside its time, what cuDNN's NCHW <-> NHWC
// transforms would add at most: every byte it moves twice more at the DRAM peak. FMA math and
// cuBLASLt need none.
TEST(CostModel, CudnnTensorCoreConvolutionsBoundTheirLayoutTransforms) {
  Kernel kernel;
  kernel.flops = 2'000'000'000;
  kernel.bytes_read = 30'000'000;
  kernel.bytes_written = 10'000'000;
  LibraryCall call;
  call.op = ConvCall{};
  call.math = Precision::Tf32;
  kernel.library = call;
  const KernelTime time = model_kernel_time(kernel, 1);
  EXPECT_DOUBLE_EQ(time.layout_transform_seconds, 2 * 40'000'000 / kH100.dram_bytes_per_second);
  EXPECT_DOUBLE_EQ(time.seconds, std::max(time.compute_seconds, time.memory_seconds));
  call.math = Precision::F32;
  kernel.library = call;
  EXPECT_EQ(model_kernel_time(kernel, 1).layout_transform_seconds, 0);
  // NHWC tensors (the layout-nhwc pass) are what the tensor-core algorithms read: no transform.
  call.math = Precision::Tf32;
  ConvCall nhwc;
  nhwc.nhwc = true;
  call.op = nhwc;
  kernel.library = call;
  EXPECT_EQ(model_kernel_time(kernel, 1).layout_transform_seconds, 0);
  call.op = MatmulCall{};
  kernel.library = call;
  EXPECT_EQ(model_kernel_time(kernel, 1).layout_transform_seconds, 0);
  Kernel generated;
  generated.flops = kernel.flops;
  generated.bytes_read = kernel.bytes_read;
  generated.tensor_cores = true;
  generated.gemm = GemmGeometry{1024, 1024, 1024, 1, 128, 128, 16, true};
  generated.grid = Dim3{8, 8, 1};
  EXPECT_EQ(model_kernel_time(generated, 1).layout_transform_seconds, 0);
}

}  // namespace
}  // namespace kiln::codegen
