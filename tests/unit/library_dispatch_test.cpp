// --library: the flag, and which nodes a vendor library computes exactly (codegen/
// library_dispatch.h). Plain conv2d/dense/matmul nodes and fused epilogue kernels, written as
// textual IR; every refusal is checked for its reason.
#include <gtest/gtest.h>

#include "codegen/library_dispatch.h"
#include "ir/diagnostic.h"
#include "ir/parser.h"

namespace kiln::codegen {
namespace {

const LibrarySelection kBoth{true, true};

ir::Graph parse(const std::string& text) { return ir::parse_graph(text, "library.ir"); }

// The library call for the graph's first node, which must exist.
LibraryCall select_first(const std::string& text, LibrarySelection selection = kBoth) {
  ir::Graph graph = parse(text);
  std::string why;
  std::optional<LibraryCall> call = select_library_call(*graph.nodes().front(), selection, Precision::F32, &why);
  EXPECT_TRUE(call.has_value()) << why;
  return call.value_or(LibraryCall{});
}

// Why the graph's first node has no library call ("" when it has one: the test then fails).
std::string refusal(const std::string& text, LibrarySelection selection = kBoth) {
  ir::Graph graph = parse(text);
  std::string why;
  std::optional<LibraryCall> call = select_library_call(*graph.nodes().front(), selection, Precision::F32, &why);
  EXPECT_FALSE(call.has_value()) << call->descriptor;
  EXPECT_FALSE(why.empty());
  return why;
}

std::string flag_error(std::string_view text) {
  try {
    parse_library_flag(text);
  } catch (const Error& error) {
    return error.diagnostic().message;
  }
  return "no error";
}

// ---- the flag ---------------------------------------------------------------------------------

TEST(LibraryFlag, AcceptsAutoNoneAndLists) {
  EXPECT_EQ(parse_library_flag("auto"), (LibrarySelection{true, true}));
  EXPECT_EQ(parse_library_flag("none"), (LibrarySelection{false, false}));
  EXPECT_EQ(parse_library_flag("cublas"), (LibrarySelection{true, false}));
  EXPECT_EQ(parse_library_flag("cublaslt"), (LibrarySelection{true, false}));
  EXPECT_EQ(parse_library_flag("cudnn"), (LibrarySelection{false, true}));
  EXPECT_EQ(parse_library_flag("cublas,cudnn"), (LibrarySelection{true, true}));
  EXPECT_EQ(parse_library_flag("cudnn,cublas"), (LibrarySelection{true, true}));
}

TEST(LibraryFlag, NamesTheBadItem) {
  EXPECT_EQ(flag_error("cudart"),
            "--library: unknown library 'cudart'; expected auto, none, or a comma-separated list "
            "of cublas and cudnn");
  EXPECT_NE(flag_error("cublas,CUDNN").find("unknown library 'CUDNN'"), std::string::npos);
  EXPECT_NE(flag_error("").find("empty item in ''"), std::string::npos);
  EXPECT_NE(flag_error("cublas,").find("empty item in 'cublas,'"), std::string::npos);
  EXPECT_NE(flag_error("auto,cudnn").find("'auto' cannot be combined"), std::string::npos);
  EXPECT_NE(flag_error("cudnn,none").find("'none' cannot be combined"), std::string::npos);
}

TEST(LibraryFlag, TextRoundTrips) {
  for (const char* text : {"none", "cublas", "cudnn", "cublas,cudnn"})
    EXPECT_EQ(library_flag_text(parse_library_flag(text)), text);
}

// ---- plain nodes ------------------------------------------------------------------------------

constexpr const char* kConvBias = R"(graph @g(%x: f32[1,1,28,28], %w: f32[32,1,3,3], %b: f32[32]) -> (f32[1,32,26,26]) {
  %y = conv2d(%x, %w, %b) : f32[1,32,26,26]
  return %y
})";

TEST(LibraryDispatch, ConvWithBiasIsCudnnsFusedRoutine) {
  const LibraryCall call = select_first(kConvBias);
  EXPECT_EQ(call.library, "cudnn");
  EXPECT_EQ(call.routine, "cudnnConvolutionBiasActivationForward");
  EXPECT_EQ(call.descriptor, "conv f32 1x1x28x28 * 32x1x3x3 pad 0,0 stride 1,1 + bias");
  ASSERT_NE(call.conv(), nullptr);
  EXPECT_EQ(*call.conv(), (ConvCall{1, 1, 28, 28, 32, 3, 3, 1, 0, 0, 1, 1, 1, 1, 26, 26}));
  EXPECT_TRUE(call.bias);
  EXPECT_FALSE(call.residual);
  EXPECT_EQ(call.activation, LibraryActivation::None);
  EXPECT_EQ(call.x_arg, 0);
  EXPECT_EQ(call.weight_arg, 1);
  EXPECT_EQ(call.bias_arg, 2);
  EXPECT_EQ(call.out_arg, 3);
  EXPECT_EQ(call.workspace_bytes, 1 << 20);  // the floor: the tensors are small
}

TEST(LibraryDispatch, ConvWithoutBiasIsPlainConvolutionForward) {
  const LibraryCall call = select_first(R"(graph @g(%x: f32[2,8,16,16], %w: f32[16,4,3,3]) -> (f32[2,16,8,8]) {
  %y = conv2d(%x, %w) {stride = [2,2], pad = [1,1,1,1], groups = 2} : f32[2,16,8,8]
  return %y
})");
  EXPECT_EQ(call.routine, "cudnnConvolutionForward");
  EXPECT_EQ(call.descriptor, "conv f32 2x8x16x16 * 16x4x3x3 pad 1,1 stride 2,2 groups 2");
  EXPECT_EQ(call.conv()->groups, 2);
  EXPECT_FALSE(call.bias);
  EXPECT_EQ(call.out_arg, 2);
}

TEST(LibraryDispatch, ConvRefusals) {
  EXPECT_EQ(refusal(kConvBias, LibrarySelection{true, false}),
            "conv2d: cuDNN not selected (--library)");
  EXPECT_EQ(refusal(R"(graph @g(%x: f64[1,1,8,8], %w: f64[4,1,3,3]) -> (f64[1,4,6,6]) {
  %y = conv2d(%x, %w) : f64[1,4,6,6]
  return %y
})"),
            "conv2d: f64 tensors (the library calls take f32, bf16 or f16)");
  EXPECT_EQ(refusal(R"(graph @g(%x: f32[1,1,8,8], %w: f32[4,1,3,3]) -> (f32[1,4,7,7]) {
  %y = conv2d(%x, %w) {pad = [0,0,1,1]} : f32[1,4,7,7]
  return %y
})"),
            "conv2d pad [0,0,1,1]: cuDNN pads both sides alike");
}

// autocast's 16-bit activations and folded weights: the calls read and write them as stored,
// so the tensor cores take them as the generated kernel's do, and sum in f32.
TEST(LibraryDispatch, SixteenBitTensorsAreCallsOnTheirType) {
  ir::Graph conv = parse(R"(graph @g(%x: bf16[2,8,10,10], %w: bf16[16,8,3,3], %b: bf16[16]) -> (bf16[2,16,8,8]) {
  %out = kernel @fused_0(%x, %w, %b) {kind = "epilogue"} : bf16[2,16,8,8] {
    %c = conv2d(%x, %w) : bf16[2,16,8,8]
    %cb = bias_add(%c, %b) : bf16[2,16,8,8]
    %out = relu(%cb) : bf16[2,16,8,8]
    return %out
  }
  return %out
})");
  std::string why;
  std::optional<LibraryCall> call =
      select_library_call(*conv.nodes().front(), kBoth, Precision::Bf16, &why);
  ASSERT_TRUE(call.has_value()) << why;
  EXPECT_EQ(call->routine, "cudnnConvolutionBiasActivationForward");
  EXPECT_EQ(call->dtype, ir::DType::BF16);
  EXPECT_EQ(call->math, Precision::Bf16);
  // The dtype says what the tensor cores read: no "(bf16 math)".
  EXPECT_EQ(call->descriptor, "conv bf16 2x8x10x10 * 16x8x3x3 pad 0,0 stride 1,1 + bias + relu");

  ir::Graph dense = parse(R"(graph @g(%x: f16[8,64], %w: f16[10,64], %b: f16[10]) -> (f16[8,10]) {
  %y = dense(%x, %w, %b) : f16[8,10]
  return %y
})");
  call = select_library_call(*dense.nodes().front(), kBoth, Precision::F16, &why);
  ASSERT_TRUE(call.has_value()) << why;
  EXPECT_EQ(call->routine, "cublasLtMatmul");
  EXPECT_EQ(call->dtype, ir::DType::F16);
  EXPECT_EQ(call->descriptor, "dense f16 8x64 * (10x64)^T + bias");

  ir::Graph grad = parse(R"(graph @g(%dy: bf16[2,16,8,8], %x: bf16[2,8,16,16]) -> (bf16[16,4,3,3]) {
  %dw = conv2d_grad_weight(%dy, %x) {shape = [16,4,3,3], stride = [2,2], pad = [1,1,1,1], groups = 2} : bf16[16,4,3,3]
  return %dw
})");
  call = select_library_call(*grad.nodes().front(), kBoth, Precision::Bf16, &why);
  ASSERT_TRUE(call.has_value()) << why;
  EXPECT_EQ(call->dtype, ir::DType::BF16);
  EXPECT_EQ(call->descriptor, "conv backward filter bf16 2x8x16x16 * 16x4x3x3 pad 1,1 stride 2,2 groups 2");
}

// A kernel that reads or writes tensors of two dtypes casts between them inside, which no
// library routine does.
TEST(LibraryDispatch, CastsStayOnTheGeneratedKernel) {
  // A bf16 GEMM whose result autocast widens to add an f32 residual.
  EXPECT_EQ(refusal(R"(graph @g(%x: bf16[8,64], %w: bf16[10,64], %r: f32[8,10]) -> (f32[8,10]) {
  %out = kernel @fused_0(%x, %w, %r) {kind = "epilogue"} : f32[8,10] {
    %d = dense(%x, %w) : bf16[8,10]
    %df = cast(%d) {to = "f32"} : f32[8,10]
    %out = add(%df, %r) : f32[8,10]
    return %out
  }
  return %out
})"),
            "cast after dense: the library stores its result in its operands' dtype");
  // An f32 input autocast rounds as the kernel loads it: the library has no such load.
  EXPECT_EQ(refusal(R"(graph @g(%x: f32[8,64], %w: bf16[10,64]) -> (bf16[8,10]) {
  %out = kernel @fused_0(%x, %w) {kind = "epilogue"} : bf16[8,10] {
    %xc = cast(%x) {to = "bf16"} : bf16[8,64]
    %out = dense(%xc, %w) : bf16[8,10]
    return %out
  }
  return %out
})"),
            "it casts an operand to bf16 as it loads it; the library calls read tensors as stored");
}

// conv2d's gradients on cuDNN's backward routines, described by the forward convolution.
constexpr const char* kGradInput = R"(graph @g(%dy: f32[2,16,8,8], %w: f32[16,4,3,3]) -> (f32[2,8,16,16]) {
  %dx = conv2d_grad_input(%dy, %w) {shape = [2,8,16,16], stride = [2,2], pad = [1,1,1,1], groups = 2} : f32[2,8,16,16]
  return %dx
})";
constexpr const char* kGradWeight = R"(graph @g(%dy: f32[2,16,8,8], %x: f32[2,8,16,16]) -> (f32[16,4,3,3]) {
  %dw = conv2d_grad_weight(%dy, %x) {shape = [16,4,3,3], stride = [2,2], pad = [1,1,1,1], groups = 2} : f32[16,4,3,3]
  return %dw
})";

TEST(LibraryDispatch, ConvGradientsAreCudnnsBackwardRoutines) {
  const ConvCall forward{2, 8, 16, 16, 16, 3, 3, 2, 1, 1, 2, 2, 1, 1, 8, 8};
  const LibraryCall data = select_first(kGradInput);
  EXPECT_EQ(data.library, "cudnn");
  EXPECT_EQ(data.routine, "cudnnConvolutionBackwardData");
  EXPECT_EQ(data.descriptor, "conv backward data f32 2x8x16x16 * 16x4x3x3 pad 1,1 stride 2,2 groups 2");
  ConvCall expected = forward;
  expected.direction = ConvDirection::BackwardData;
  EXPECT_EQ(*data.conv(), expected);
  EXPECT_EQ(data.dy_arg, 0);
  EXPECT_EQ(data.weight_arg, 1);
  EXPECT_EQ(data.x_arg, -1);
  EXPECT_EQ(data.out_arg, 2);

  const LibraryCall filter = select_first(kGradWeight);
  EXPECT_EQ(filter.routine, "cudnnConvolutionBackwardFilter");
  EXPECT_EQ(filter.descriptor, "conv backward filter f32 2x8x16x16 * 16x4x3x3 pad 1,1 stride 2,2 groups 2");
  expected.direction = ConvDirection::BackwardFilter;
  EXPECT_EQ(*filter.conv(), expected);
  EXPECT_EQ(filter.dy_arg, 0);
  EXPECT_EQ(filter.x_arg, 1);
  EXPECT_EQ(filter.weight_arg, -1);
  EXPECT_EQ(filter.out_arg, 2);
}

TEST(LibraryDispatch, ConvGradientRefusals) {
  EXPECT_EQ(refusal(kGradInput, LibrarySelection{true, false}),
            "conv2d_grad_input: cuDNN not selected (--library)");
  EXPECT_EQ(refusal(R"(graph @g(%dy: f32[1,4,7,7], %x: f32[1,1,8,8]) -> (f32[4,1,3,3]) {
  %dw = conv2d_grad_weight(%dy, %x) {shape = [4,1,3,3], pad = [0,0,1,1]} : f32[4,1,3,3]
  return %dw
})"),
            "conv2d_grad_weight pad [0,0,1,1]: cuDNN pads both sides alike");
  // Split-K partial weights (passes/split_k.cpp) stay on the generated kernel.
  EXPECT_EQ(refusal(R"(graph @g(%dy: f32[2,4,6,6], %x: f32[2,1,8,8]) -> (f32[2,4,1,3,3]) {
  %dw = conv2d_grad_weight(%dy, %x) {shape = [4,1,3,3], k_chunk = 36} : f32[2,4,1,3,3]
  return %dw
})"),
            "conv2d_grad_weight with k_chunk: split-K partial weights are the generated kernel's");
}

constexpr const char* kDense = R"(graph @g(%x: f32[2,8,64], %w: f32[10,64], %b: f32[10]) -> (f32[2,8,10]) {
  %y = dense(%x, %w, %b) : f32[2,8,10]
  return %y
})";

TEST(LibraryDispatch, DenseIsOneMatmulWithTheBiasEpilogue) {
  const LibraryCall call = select_first(kDense);
  EXPECT_EQ(call.library, "cublasLt");
  EXPECT_EQ(call.routine, "cublasLtMatmul");
  EXPECT_EQ(call.descriptor, "dense f32 16x64 * (10x64)^T + bias");
  ASSERT_NE(call.matmul(), nullptr);
  // The leading dims of x are rows of one matrix; the weight is [N, K], so b is transposed.
  EXPECT_EQ(*call.matmul(), (MatmulCall{1, 16, 10, 64, false, true, 0, 0}));
  EXPECT_TRUE(call.bias);
  EXPECT_EQ(call.bias_arg, 2);
  EXPECT_EQ(call.out_arg, 3);
  EXPECT_EQ(call.workspace_bytes, 4 << 20);
  EXPECT_EQ(refusal(kDense, LibrarySelection{false, true}),
            "dense: cuBLASLt not selected (--library)");
}

TEST(LibraryDispatch, BatchedMatmulUsesStridedBatches) {
  LibraryCall call = select_first(R"(graph @g(%a: f32[4,8,16], %b: f32[4,16,32]) -> (f32[4,8,32]) {
  %y = matmul(%a, %b) : f32[4,8,32]
  return %y
})");
  EXPECT_EQ(*call.matmul(), (MatmulCall{4, 8, 32, 16, false, false, 8 * 16, 16 * 32}));
  EXPECT_EQ(call.descriptor, "matmul f32 4 x 8x16 * 16x32");

  // One b for every batch: a stride of 0.
  call = select_first(R"(graph @g(%a: f32[8,16], %b: f32[4,16,32]) -> (f32[4,8,32]) {
  %y = matmul(%a, %b) {transpose_a = false} : f32[4,8,32]
  return %y
})");
  EXPECT_EQ(*call.matmul(), (MatmulCall{4, 8, 32, 16, false, false, 0, 16 * 32}));
  EXPECT_EQ(call.descriptor, "matmul f32 4 x (a shared) 8x16 * 16x32");

  // One b and an untransposed a: the batches of a are rows of one matrix.
  call = select_first(R"(graph @g(%a: f32[2,3,8,16], %b: f32[32,16]) -> (f32[2,3,8,32]) {
  %y = matmul(%a, %b) {transpose_b = true} : f32[2,3,8,32]
  return %y
})");
  EXPECT_EQ(*call.matmul(), (MatmulCall{1, 48, 32, 16, false, true, 0, 0}));

  call = select_first(R"(graph @g(%a: f32[3,16,8], %b: f32[3,16,32]) -> (f32[3,8,32]) {
  %y = matmul(%a, %b) {transpose_a = true} : f32[3,8,32]
  return %y
})");
  EXPECT_EQ(*call.matmul(), (MatmulCall{3, 8, 32, 16, true, false, 128, 512}));
  EXPECT_EQ(call.descriptor, "matmul f32 3 x (16x8)^T * 16x32");
}

TEST(LibraryDispatch, PartialBatchBroadcastIsRefused) {
  EXPECT_NE(refusal(R"(graph @g(%a: f32[2,1,8,16], %b: f32[1,3,16,32]) -> (f32[2,3,8,32]) {
  %y = matmul(%a, %b) : f32[2,3,8,32]
  return %y
})").find("partial batch broadcast"),
            std::string::npos);
}

TEST(LibraryDispatch, OtherOpsHaveNoRoutine) {
  EXPECT_EQ(refusal(R"(graph @g(%x: f32[4]) -> (f32[4]) {
  %y = relu(%x) : f32[4]
  return %y
})"),
            "relu: no library routine");
}

// ---- fused epilogue kernels -------------------------------------------------------------------

// A kernel over x [1,3,8,8], w [4,3,3,3], b [4], r [1,4,6,6] whose body is `body` (ending in
// `return %out`).
std::string conv_kernel(const std::string& body, const std::string& kind = "epilogue") {
  return R"(graph @g(%x: f32[1,3,8,8], %w: f32[4,3,3,3], %b: f32[4], %r: f32[1,4,6,6]) -> (f32[1,4,6,6]) {
  %out = kernel @fused_0(%x, %w, %b, %r) {kind = ")" + kind + R"("} : f32[1,4,6,6] {
    %c = conv2d(%x, %w) : f32[1,4,6,6]
)" + body + R"(
    return %out
  }
  return %out
})";
}

TEST(LibraryDispatch, FusedConvBiasResidualRelu) {
  const LibraryCall call = select_first(conv_kernel(R"(
    %cb = bias_add(%c, %b) : f32[1,4,6,6]
    %s = add(%r, %cb) : f32[1,4,6,6]
    %out = relu(%s) : f32[1,4,6,6])"));
  EXPECT_EQ(call.routine, "cudnnConvolutionBiasActivationForward");
  EXPECT_EQ(call.descriptor,
            "conv f32 1x3x8x8 * 4x3x3x3 pad 0,0 stride 1,1 + bias + residual + relu");
  EXPECT_EQ(call.activation, LibraryActivation::Relu);
  EXPECT_EQ(call.x_arg, 0);
  EXPECT_EQ(call.weight_arg, 1);
  EXPECT_EQ(call.bias_arg, 2);
  EXPECT_EQ(call.residual_arg, 3);
  EXPECT_EQ(call.out_arg, 4);
}

TEST(LibraryDispatch, FusedConvAcceptsAPerChannelAddAndClipToZeroAsBiasAndRelu) {
  const LibraryCall call = select_first(R"(graph @g(%x: f32[1,3,8,8], %w: f32[4,3,3,3], %b: f32[4,1,1]) -> (f32[1,144]) {
  %out = kernel @fused_0(%x, %w, %b) {kind = "epilogue"} : f32[1,144] {
    %c = conv2d(%x, %w) : f32[1,4,6,6]
    %cb = add(%c, %b) : f32[1,4,6,6]
    %a = clip(%cb) {min = 0.0} : f32[1,4,6,6]
    %out = flatten(%a) : f32[1,144]
    return %out
  }
  return %out
})");
  EXPECT_TRUE(call.bias);
  EXPECT_EQ(call.bias_arg, 2);
  EXPECT_EQ(call.activation, LibraryActivation::Relu);
  EXPECT_EQ(call.out_arg, 3);
}

TEST(LibraryDispatch, FusedConvRefusals) {
  EXPECT_EQ(refusal(conv_kernel("    %out = relu(%c) : f32[1,4,6,6]")),
            "conv2d without bias: cuDNN's fused routine takes a bias");
  EXPECT_EQ(refusal(conv_kernel(R"(
    %cb = bias_add(%c, %b) : f32[1,4,6,6]
    %out = gelu(%cb) {approximate = "tanh"} : f32[1,4,6,6])")),
            "gelu after conv2d: cuDNN's fused routine applies relu or nothing");
  EXPECT_EQ(refusal(conv_kernel(R"(
    %cb = bias_add(%c, %b) : f32[1,4,6,6]
    %a = relu(%cb) : f32[1,4,6,6]
    %out = add(%a, %r) : f32[1,4,6,6])")),
            "add after relu: the library applies its activation last");
  EXPECT_EQ(refusal(conv_kernel(R"(
    %cb = bias_add(%c, %b) : f32[1,4,6,6]
    %out = sigmoid(%cb) : f32[1,4,6,6])")),
            "sigmoid after conv2d: no library epilogue computes it");
  EXPECT_EQ(refusal(conv_kernel(R"(
    %cb = bias_add(%c, %b) : f32[1,4,6,6]
    %out = clip(%cb) {min = 0.0, max = 6.0} : f32[1,4,6,6])")),
            "clip after conv2d: only clip to [0, inf) (relu) has a library epilogue");
  EXPECT_EQ(refusal(conv_kernel(R"(
    %cb = bias_add(%c, %b) : f32[1,4,6,6]
    %out = add(%cb, %cb) : f32[1,4,6,6])")),
            "add after conv2d: must read the running value once");
  EXPECT_EQ(refusal(conv_kernel("    %out = relu(%c) : f32[1,4,6,6]", "loop")),
            "a loop kernel: only epilogue kernels map to libraries");
}

// A kernel over x [8,64], w [10,64], b [10], r [8,10].
std::string dense_kernel(const std::string& body) {
  return R"(graph @g(%x: f32[8,64], %w: f32[10,64], %b: f32[10], %r: f32[8,10]) -> (f32[8,10]) {
  %out = kernel @fused_0(%x, %w, %b, %r) {kind = "epilogue"} : f32[8,10] {
    %d = dense(%x, %w) : f32[8,10]
)" + body + R"(
    return %out
  }
  return %out
})";
}

TEST(LibraryDispatch, FusedDenseBiasGeluTanh) {
  const LibraryCall call = select_first(dense_kernel(R"(
    %db = bias_add(%d, %b) {axis = -1} : f32[8,10]
    %out = gelu(%db) {approximate = "tanh"} : f32[8,10])"));
  EXPECT_EQ(call.descriptor, "dense f32 8x64 * (10x64)^T + bias + gelu_tanh");
  EXPECT_EQ(call.activation, LibraryActivation::GeluTanh);
  EXPECT_EQ(call.bias_arg, 2);
  EXPECT_EQ(call.out_arg, 4);
}

TEST(LibraryDispatch, FusedDenseResidualAndBroadcastBiasInEitherOrder) {
  const LibraryCall call = select_first(dense_kernel(R"(
    %dr = add(%d, %r) : f32[8,10]
    %db = add(%b, %dr) : f32[8,10]
    %out = relu(%db) : f32[8,10])"));
  EXPECT_EQ(call.descriptor, "dense f32 8x64 * (10x64)^T + bias + residual + relu");
  EXPECT_EQ(call.bias_arg, 2);
  EXPECT_EQ(call.residual_arg, 3);
}

TEST(LibraryDispatch, FusedDenseRefusals) {
  EXPECT_EQ(refusal(dense_kernel("    %out = gelu(%d) : f32[8,10]")),
            "gelu after dense: this gelu is exact (erf); cuBLASLt's GELU epilogue is the tanh "
            "approximation");
  EXPECT_EQ(refusal(dense_kernel("    %out = leaky_relu(%d) {alpha = 0.1} : f32[8,10]")),
            "leaky_relu after dense: no library epilogue computes it");
  EXPECT_EQ(refusal(dense_kernel(R"(
    %db = bias_add(%d, %b) {axis = 1} : f32[8,10]
    %out = bias_add(%db, %b) {axis = 1} : f32[8,10])")),
            "bias_add after dense: a second bias");
}

}  // namespace
}  // namespace kiln::codegen
