// Shape and dtype inference of the nn, shape, reduction and loss ops (docs/ops.md), and the
// exact messages users see when a model gets them wrong.
#include <gtest/gtest.h>

#include "ir/op_registry.h"

namespace kiln::ir {
namespace {

using Ints = std::vector<int64_t>;

TensorType f32(Shape shape) { return TensorType{DType::F32, std::move(shape)}; }
TensorType f16(Shape shape) { return TensorType{DType::F16, std::move(shape)}; }
TensorType i32(Shape shape) { return TensorType{DType::I32, std::move(shape)}; }
TensorType i64(Shape shape) { return TensorType{DType::I64, std::move(shape)}; }
TensorType boolean(Shape shape) { return TensorType{DType::Bool, std::move(shape)}; }

const OpDef& op(const std::string& name) {
  const OpDef* def = OpRegistry::instance().find(name);
  if (def == nullptr) throw std::runtime_error("op '" + name + "' is not registered");
  return *def;
}

// The single result type as text, e.g. "f32[1,4,6,6]".
std::string infer(const std::string& name, std::vector<TensorType> inputs, AttrMap attrs = {}) {
  std::vector<TensorType> results = infer_op(op(name), inputs, attrs);
  if (results.size() != 1) return "<" + std::to_string(results.size()) + " results>";
  return results[0].to_string();
}

// The error inference throws; a sentinel error when it accepts the op.
OpError infer_error(const std::string& name, std::vector<TensorType> inputs,
                    AttrMap attrs = {}) {
  try {
    std::string result = infer(name, inputs, attrs);
    return OpError{"<no error; result " + result + ">", -2, "<none>"};
  } catch (const OpError& error) {
    return error;
  }
}

#define EXPECT_OP_ERROR(error, expected_message, expected_input, expected_attr) \
  do {                                                                          \
    const OpError e_ = (error);                                                 \
    EXPECT_EQ(e_.message, expected_message);                                    \
    EXPECT_EQ(e_.input_index, expected_input);                                  \
    EXPECT_EQ(e_.attr, expected_attr);                                          \
  } while (0)

// ---- registry entries ----

TEST(OpsRegistry, EveryDocumentedOpHasItsKind) {
  const std::vector<std::pair<std::string, OpKind>> expected = {
      {"conv2d", OpKind::OutElementwiseFusable}, {"matmul", OpKind::OutElementwiseFusable},
      {"dense", OpKind::OutElementwiseFusable},  {"bias_add", OpKind::Broadcast},
      {"max_pool2d", OpKind::Opaque},            {"avg_pool2d", OpKind::Opaque},
      {"global_avg_pool", OpKind::Reduce},       {"batch_norm", OpKind::Broadcast},
      {"layer_norm", OpKind::Reduce},            {"softmax", OpKind::Reduce},
      {"log_softmax", OpKind::Reduce},           {"reshape", OpKind::Injective},
      {"flatten", OpKind::Injective},            {"transpose", OpKind::Injective},
      {"concat", OpKind::Injective},             {"slice", OpKind::Injective},
      {"reduce_sum", OpKind::Reduce},            {"reduce_mean", OpKind::Reduce},
      {"reduce_max", OpKind::Reduce},            {"softmax_cross_entropy", OpKind::Opaque},
      {"mse_loss", OpKind::Opaque}};
  for (const auto& [name, kind] : expected) {
    const OpDef* def = OpRegistry::instance().find(name);
    ASSERT_NE(def, nullptr) << name;
    EXPECT_EQ(def->kind, kind) << name;
    EXPECT_FALSE(def->summary.empty()) << name;
    EXPECT_FALSE(def->input_names.empty()) << name;
  }
}

TEST(OpsRegistry, FillsDocumentedDefaults) {
  AttrMap attrs;
  infer_op(op("conv2d"), {f32({1, 3, 8, 8}), f32({4, 3, 3, 3})}, attrs);
  EXPECT_EQ(std::get<Ints>(attrs.at("stride")), (Ints{1, 1}));
  EXPECT_EQ(std::get<Ints>(attrs.at("pad")), (Ints{0, 0, 0, 0}));
  EXPECT_EQ(std::get<Ints>(attrs.at("dilation")), (Ints{1, 1}));
  EXPECT_EQ(std::get<int64_t>(attrs.at("groups")), 1);

  AttrMap pool{{"kernel", Ints{2, 2}}};
  infer_op(op("max_pool2d"), {f32({1, 3, 8, 8})}, pool);
  EXPECT_EQ(std::get<Ints>(pool.at("stride")), Ints{});  // [] stays: it means "= kernel"

  AttrMap bn;
  infer_op(op("batch_norm"),
           {f32({2, 3}), f32({3}), f32({3}), f32({3}), f32({3})}, bn);
  EXPECT_EQ(std::get<double>(bn.at("epsilon")), 1e-5);
  EXPECT_EQ(std::get<double>(bn.at("momentum")), 0.1);
  EXPECT_EQ(std::get<bool>(bn.at("training")), false);
}

// ---- conv2d ----

TEST(OpsConv2d, ResultShape) {
  EXPECT_EQ(infer("conv2d", {f32({1, 3, 8, 8}), f32({4, 3, 3, 3}), f32({4})}), "f32[1,4,6,6]");
  EXPECT_EQ(infer("conv2d", {f16({2, 3, 224, 224}), f16({64, 3, 7, 7})},
                  {{"stride", Ints{2, 2}}, {"pad", Ints{3, 3, 3, 3}}}),
            "f16[2,64,112,112]");
  // Asymmetric padding, dilation, floor rounding: (9 + 1 + 0 - 2*2 - 1) / 2 + 1 = 3.
  EXPECT_EQ(infer("conv2d", {f32({1, 1, 9, 9}), f32({1, 1, 3, 3})},
                  {{"stride", Ints{2, 1}}, {"pad", Ints{1, 0, 0, 0}}, {"dilation", Ints{2, 1}}}),
            "f32[1,1,3,7]");
  // Depthwise: groups = C.
  EXPECT_EQ(infer("conv2d", {f32({1, 8, 5, 5}), f32({16, 1, 3, 3})}, {{"groups", int64_t{8}}}),
            "f32[1,16,3,3]");
}

TEST(OpsConv2d, ChannelErrors) {
  EXPECT_OP_ERROR(infer_error("conv2d", {f32({1, 64, 8, 8}), f32({4, 3, 3, 3})}),
                  "weight has 3 input channels per group, input has 64 channels (groups = 1)", 1,
                  "");
  EXPECT_OP_ERROR(infer_error("conv2d", {f32({1, 64, 8, 8}), f32({4, 32, 3, 3})},
                              {{"groups", int64_t{3}}}),
                  "input has 64 channels, which is not divisible by groups = 3", -1, "groups");
  EXPECT_OP_ERROR(infer_error("conv2d", {f32({1, 64, 8, 8}), f32({6, 16, 3, 3})},
                              {{"groups", int64_t{4}}}),
                  "weight has 6 output channels, which is not divisible by groups = 4", -1,
                  "groups");
  EXPECT_OP_ERROR(infer_error("conv2d", {f32({1, 3, 8, 8}), f32({4, 3, 3, 3})},
                              {{"groups", int64_t{0}}}),
                  "attribute 'groups' must be >= 1, got 0", -1, "groups");
  EXPECT_OP_ERROR(infer_error("conv2d", {f32({1, 3, 8, 8}), f32({4, 3, 3, 3}), f32({5})}),
                  "bias must have shape [4] (one per output channel), got f32[5]", 2, "");
}

// Split-K partials (k_chunk): one per chunk of the C/groups * KH * KW patch terms, no bias.
TEST(OpsConv2d, SplitKPartials) {
  EXPECT_EQ(infer("conv2d", {f32({2, 8, 9, 9}), f32({6, 4, 3, 3})},
                  {{"groups", int64_t{2}}, {"k_chunk", int64_t{16}}}),
            "f32[3,2,6,7,7]");
  EXPECT_EQ(infer("conv2d", {f32({1, 3, 8, 8}), f32({4, 3, 3, 3})}, {{"k_chunk", int64_t{27}}}),
            "f32[1,1,4,6,6]");
  EXPECT_OP_ERROR(infer_error("conv2d", {f32({1, 3, 8, 8}), f32({4, 3, 3, 3}), f32({4})},
                              {{"k_chunk", int64_t{9}}}),
                  "a split-K convolution (k_chunk 9) makes partial sums and takes no bias: add it "
                  "after their sum",
                  2, "");
  EXPECT_OP_ERROR(infer_error("conv2d", {f32({1, 3, 8, 8}), f32({4, 3, 3, 3})},
                              {{"k_chunk", int64_t{-1}}}),
                  "attribute 'k_chunk' must be >= 0, got -1", -1, "k_chunk");
}

TEST(OpsDense, SplitKPartials) {
  EXPECT_EQ(infer("dense", {f32({2, 5, 100}), f32({7, 100})}, {{"k_chunk", int64_t{48}}}), "f32[3,2,5,7]");
  EXPECT_EQ(infer("dense", {f32({1, 64}), f32({10, 64})}, {{"k_chunk", int64_t{64}}}), "f32[1,1,10]");
  EXPECT_OP_ERROR(infer_error("dense", {f32({1, 64}), f32({10, 64}), f32({10})}, {{"k_chunk", int64_t{32}}}),
                  "a split-K dense (k_chunk 32) makes partial sums and takes no bias: add it after their sum",
                  2, "");
  EXPECT_OP_ERROR(infer_error("dense", {f32({1, 64}), f32({10, 64})}, {{"k_chunk", int64_t{-2}}}),
                  "attribute 'k_chunk' must be >= 0, got -2", -1, "k_chunk");
}

TEST(OpsMatmul, SplitKPartials) {
  // The chunk axis stacks in front of the broadcast batch dims; K counts after the transposes.
  EXPECT_EQ(infer("matmul", {f32({2, 1, 5, 100}), f32({3, 100, 7})}, {{"k_chunk", int64_t{48}}}),
            "f32[3,2,3,5,7]");
  EXPECT_EQ(infer("matmul", {f32({100, 5}), f32({7, 100})},
                  {{"transpose_a", true}, {"transpose_b", true}, {"k_chunk", int64_t{100}}}),
            "f32[1,5,7]");
  EXPECT_OP_ERROR(infer_error("matmul", {f32({4, 64}), f32({64, 10})}, {{"k_chunk", int64_t{-3}}}),
                  "attribute 'k_chunk' must be >= 0, got -3", -1, "k_chunk");
}

TEST(OpsConv2d, OperandErrors) {
  EXPECT_OP_ERROR(infer_error("conv2d", {f32({3, 8, 8}), f32({4, 3, 3, 3})}),
                  "input must have rank 4, got f32[3,8,8]", 0, "");
  EXPECT_OP_ERROR(infer_error("conv2d", {f32({1, 3, 8, 8}), f32({4, 3, 3})}),
                  "weight must have rank 4, got f32[4,3,3]", 1, "");
  EXPECT_OP_ERROR(infer_error("conv2d", {i32({1, 3, 8, 8}), i32({4, 3, 3, 3})}),
                  "operand 0 must be a float tensor (f32, f16, bf16), got i32[1,3,8,8]", 0, "");
  EXPECT_OP_ERROR(infer_error("conv2d", {f32({1, 3, 8, 8}), f16({4, 3, 3, 3})}),
                  "operands must have the same dtype, got f32[1,3,8,8] and f16[4,3,3,3]", 1, "");
  EXPECT_OP_ERROR(infer_error("conv2d", {f32({1, 3, 8, 8})}), "expects 2 or 3 inputs, got 1", -1,
                  "");
}

TEST(OpsConv2d, WindowAttributeErrors) {
  const std::vector<TensorType> ok = {f32({1, 3, 8, 8}), f32({4, 3, 3, 3})};
  EXPECT_OP_ERROR(infer_error("conv2d", ok, {{"pad", Ints{1, 1}}}),
                  "attribute 'pad' must have 4 values [top, left, bottom, right], got 2", -1,
                  "pad");
  EXPECT_OP_ERROR(infer_error("conv2d", ok, {{"pad", Ints{0, -1, 0, 0}}}),
                  "attribute 'pad' values must be >= 0, got [0,-1,0,0]", -1, "pad");
  EXPECT_OP_ERROR(infer_error("conv2d", ok, {{"stride", Ints{2}}}),
                  "attribute 'stride' must have 2 values [height, width], got 1", -1, "stride");
  EXPECT_OP_ERROR(infer_error("conv2d", ok, {{"stride", Ints{1, 0}}}),
                  "attribute 'stride' values must be >= 1, got [1,0]", -1, "stride");
  EXPECT_OP_ERROR(infer_error("conv2d", ok, {{"dilation", Ints{0, 1}}}),
                  "attribute 'dilation' values must be >= 1, got [0,1]", -1, "dilation");
  EXPECT_OP_ERROR(infer_error("conv2d", ok, {{"pad", Ints{0, 0, int64_t{1} << 60, 0}}}),
                  "attribute 'pad' values must be at most 2^48, got [0,0,1152921504606846976,0]",
                  -1, "pad");
}

TEST(OpsConv2d, OutputTooSmall) {
  EXPECT_OP_ERROR(infer_error("conv2d", {f32({1, 3, 2, 8}), f32({4, 3, 5, 3})}),
                  "output height would be 0: input height 2 with kernel 5, dilation 1 and "
                  "padding 0+0",
                  0, "");
  EXPECT_OP_ERROR(infer_error("conv2d", {f32({1, 3, 8, 8}), f32({4, 3, 3, 3})},
                              {{"dilation", Ints{1, 5}}, {"pad", Ints{0, 1, 0, 0}}}),
                  "output width would be 0: input width 8 with kernel 3, dilation 5 and "
                  "padding 1+0",
                  0, "");
  // A huge dilation must not overflow dilation * (kernel - 1).
  EXPECT_OP_ERROR(infer_error("conv2d", {f32({1, 3, 8, 8}), f32({4, 3, 3, 3})},
                              {{"dilation", Ints{int64_t{1} << 48, 1}}}),
                  "output height would be 0: input height 8 with kernel 3, dilation "
                  "281474976710656 and padding 0+0",
                  0, "");
}

TEST(OpsConv2d, ResultTooLarge) {
  EXPECT_OP_ERROR(infer_error("conv2d", {f32({1, 1, 1, 1}), f32({1, 1, 1, 1})},
                              {{"pad", Ints{int64_t{1} << 40, int64_t{1} << 40, 0, 0}}}),
                  "result shape [1,1,1099511627777,1099511627777] has more than 2^48 elements",
                  -1, "");
}

// ---- matmul, dense, bias_add ----

TEST(OpsMatmul, ResultShape) {
  EXPECT_EQ(infer("matmul", {f32({2, 3}), f32({3, 5})}), "f32[2,5]");
  EXPECT_EQ(infer("matmul", {f32({7, 1, 2, 3}), f32({4, 3, 5})}), "f32[7,4,2,5]");
  EXPECT_EQ(infer("matmul", {f32({3, 2}), f32({5, 3})},
                  {{"transpose_a", true}, {"transpose_b", true}}),
            "f32[2,5]");
}

TEST(OpsMatmul, Errors) {
  EXPECT_OP_ERROR(infer_error("matmul", {f32({2, 3}), f32({4, 5})}),
                  "inner dims differ: a f32[2,3] has K = 3, b f32[4,5] has K = 4", 1, "");
  EXPECT_OP_ERROR(infer_error("matmul", {f32({2, 3}), f32({3, 5})}, {{"transpose_a", true}}),
                  "inner dims differ: a f32[2,3] (transposed) has K = 2, b f32[3,5] has K = 3",
                  1, "");
  EXPECT_OP_ERROR(infer_error("matmul", {f32({2, 2, 3}), f32({3, 3, 5})}),
                  "batch dims [2] of a and [3] of b cannot be broadcast together", 1, "");
  EXPECT_OP_ERROR(infer_error("matmul", {f32({3}), f32({3, 5})}),
                  "a must have rank >= 2, got f32[3]", 0, "");
  EXPECT_OP_ERROR(infer_error("matmul", {i64({2, 3}), i64({3, 5})}),
                  "operand 0 must be a float tensor (f32, f16, bf16), got i64[2,3]", 0, "");
  EXPECT_OP_ERROR(infer_error("matmul", {f32({2, 3}), f32({3, 5})}, {{"transpose", true}}),
                  "unknown attribute 'transpose'; did you mean 'transpose_a'?", -1, "transpose");
}

TEST(OpsDense, ResultShapeAndErrors) {
  EXPECT_EQ(infer("dense", {f32({8, 16}), f32({10, 16}), f32({10})}), "f32[8,10]");
  EXPECT_EQ(infer("dense", {f32({2, 5, 16}), f32({10, 16})}), "f32[2,5,10]");
  EXPECT_EQ(infer("dense", {f32({16}), f32({10, 16})}), "f32[10]");
  EXPECT_OP_ERROR(infer_error("dense", {f32({8, 15}), f32({10, 16})}),
                  "weight has 16 input features (f32[10,16]), input has 15 (f32[8,15])", 1, "");
  EXPECT_OP_ERROR(infer_error("dense", {f32({8, 16}), f32({10, 16}), f32({1, 10})}),
                  "bias must have shape [10] (one per output feature), got f32[1,10]", 2, "");
  EXPECT_OP_ERROR(infer_error("dense", {f32({8, 16}), f32({16})}),
                  "weight must have rank 2, got f32[16]", 1, "");
  EXPECT_OP_ERROR(infer_error("dense", {f32({}), f32({10, 16})}),
                  "input must have rank >= 1, got f32[]", 0, "");
  EXPECT_OP_ERROR(infer_error("dense", {f32({8, 16}), f32({10, 16}), f16({10})}),
                  "operands must have the same dtype, got f32[8,16] and f16[10]", 2, "");
}

TEST(OpsBiasAdd, ResultShapeAndErrors) {
  EXPECT_EQ(infer("bias_add", {f32({2, 4, 3, 3}), f32({4})}), "f32[2,4,3,3]");
  EXPECT_EQ(infer("bias_add", {f32({2, 5}), f32({5})}, {{"axis", int64_t{-1}}}), "f32[2,5]");
  EXPECT_OP_ERROR(infer_error("bias_add", {f32({2, 4}), f32({3})}),
                  "bias must have shape [4] (the size of axis 1 of input f32[2,4]), got f32[3]", 1,
                  "");
  EXPECT_OP_ERROR(infer_error("bias_add", {f32({2, 4}), f32({4})}, {{"axis", int64_t{2}}}),
                  "axis 2 is out of range for rank 2", -1, "axis");
  EXPECT_OP_ERROR(infer_error("bias_add", {i32({2, 4}), i32({4})}),
                  "operand 0 must be a float tensor (f32, f16, bf16), got i32[2,4]", 0, "");
}

// ---- pooling ----

TEST(OpsPool, ResultShape) {
  // Empty stride means stride = kernel.
  EXPECT_EQ(infer("max_pool2d", {f32({1, 3, 8, 8})}, {{"kernel", Ints{2, 2}}}), "f32[1,3,4,4]");
  EXPECT_EQ(infer("max_pool2d", {f32({1, 3, 7, 7})}, {{"kernel", Ints{2, 2}}}), "f32[1,3,3,3]");
  EXPECT_EQ(infer("max_pool2d", {f32({1, 64, 112, 112})},
                  {{"kernel", Ints{3, 3}}, {"stride", Ints{2, 2}}, {"pad", Ints{1, 1, 1, 1}}}),
            "f32[1,64,56,56]");
  EXPECT_EQ(infer("max_pool2d", {f32({1, 1, 9, 9})},
                  {{"kernel", Ints{3, 3}}, {"stride", Ints{1, 1}}, {"dilation", Ints{2, 1}}}),
            "f32[1,1,5,7]");
  EXPECT_EQ(infer("avg_pool2d", {f16({2, 3, 6, 6})},
                  {{"kernel", Ints{3, 3}}, {"count_include_pad", false}}),
            "f16[2,3,2,2]");
  EXPECT_EQ(infer("global_avg_pool", {f32({2, 512, 7, 7})}), "f32[2,512,1,1]");
}

TEST(OpsPool, Errors) {
  EXPECT_OP_ERROR(infer_error("max_pool2d", {f32({1, 3, 8, 8})}),
                  "missing required attribute 'kernel' (int list)", -1, "kernel");
  EXPECT_OP_ERROR(infer_error("max_pool2d", {f32({1, 3, 8, 8})}, {{"kernel", Ints{3}}}),
                  "attribute 'kernel' must have 2 values [height, width], got 1", -1, "kernel");
  EXPECT_OP_ERROR(infer_error("max_pool2d", {f32({1, 3, 8, 8})}, {{"kernel", Ints{3, 0}}}),
                  "attribute 'kernel' values must be >= 1, got [3,0]", -1, "kernel");
  EXPECT_OP_ERROR(
      infer_error("max_pool2d", {f32({1, 3, 8, 8})},
                  {{"kernel", Ints{3, 3}}, {"stride", Ints{2, 2, 2}}}),
      "attribute 'stride' must have 2 values [height, width], got 3", -1, "stride");
  EXPECT_OP_ERROR(infer_error("max_pool2d", {f32({1, 3, 8, 8})},
                              {{"kernel", Ints{3, 2}}, {"pad", Ints{1, 1, 2, 0}}}),
                  "attribute 'pad' must be at most half the kernel on each side, [1,1,1,1] for "
                  "kernel [3,2], got [1,1,2,0]",
                  -1, "pad");
  EXPECT_OP_ERROR(infer_error("max_pool2d", {f32({1, 3, 2, 8})}, {{"kernel", Ints{3, 3}}}),
                  "output height would be 0: input height 2 with kernel 3, dilation 1 and "
                  "padding 0+0",
                  0, "");
  EXPECT_OP_ERROR(infer_error("avg_pool2d", {f32({1, 3, 8, 2})}, {{"kernel", Ints{3, 3}}}),
                  "output width would be 0: input width 2 with kernel 3 and padding 0+0", 0, "");
  EXPECT_OP_ERROR(infer_error("avg_pool2d", {f32({1, 3, 8, 8})},
                              {{"kernel", Ints{2, 2}}, {"dilation", Ints{1, 1}}}),
                  "unknown attribute 'dilation'", -1, "dilation");
  EXPECT_OP_ERROR(infer_error("avg_pool2d", {f32({3, 8, 8})}, {{"kernel", Ints{2, 2}}}),
                  "input must have rank 4, got f32[3,8,8]", 0, "");
  EXPECT_OP_ERROR(infer_error("global_avg_pool", {f32({2, 512})}),
                  "input must have rank 4, got f32[2,512]", 0, "");
  EXPECT_OP_ERROR(infer_error("global_avg_pool", {i32({2, 512, 7, 7})}),
                  "operand 0 must be a float tensor (f32, f16, bf16), got i32[2,512,7,7]", 0, "");
}

// ---- normalization and softmax ----

TEST(OpsBatchNorm, ResultShapeAndErrors) {
  const TensorType c3 = f32({3});
  EXPECT_EQ(infer("batch_norm", {f32({2, 3, 8, 8}), c3, c3, c3, c3}), "f32[2,3,8,8]");
  EXPECT_EQ(infer("batch_norm", {f32({2, 3}), c3, c3, c3, c3}, {{"training", true}}),
            "f32[2,3]");
  EXPECT_OP_ERROR(infer_error("batch_norm", {f32({2, 3, 8, 8}), c3, c3, f32({4}), c3}),
                  "mean must have shape [3] (one per channel of input f32[2,3,8,8]), got f32[4]",
                  3, "");
  EXPECT_OP_ERROR(infer_error("batch_norm", {f32({3}), c3, c3, c3, c3}),
                  "input must have rank >= 2, got f32[3]", 0, "");
  EXPECT_OP_ERROR(infer_error("batch_norm", {f32({2, 3}), c3, c3, c3, c3},
                              {{"epsilon", -1e-5}}),
                  "attribute 'epsilon' must be >= 0, got -1e-05", -1, "epsilon");
  EXPECT_OP_ERROR(infer_error("batch_norm", {f32({2, 3}), c3, c3, c3, c3},
                              {{"momentum", 1.5}}),
                  "attribute 'momentum' must be in [0, 1], got 1.5", -1, "momentum");
  EXPECT_OP_ERROR(infer_error("batch_norm", {f32({1, 3}), c3, c3, c3, c3}, {{"training", true}}),
                  "training needs more than 1 value per channel, input f32[1,3] has 1", 0, "");
  EXPECT_OP_ERROR(infer_error("batch_norm", {f32({2, 3}), c3, c3, c3, f16({3})}),
                  "operands must have the same dtype, got f32[2,3] and f16[3]", 4, "");
}

TEST(OpsLayerNorm, ResultShapeAndErrors) {
  EXPECT_EQ(infer("layer_norm", {f32({2, 5, 8}), f32({8}), f32({8})}), "f32[2,5,8]");
  EXPECT_EQ(infer("layer_norm", {f32({2, 5, 8}), f32({5, 8}), f32({5, 8})},
                  {{"axis", int64_t{1}}}),
            "f32[2,5,8]");
  EXPECT_OP_ERROR(infer_error("layer_norm", {f32({2, 5, 8}), f32({8}), f32({8})},
                              {{"axis", int64_t{-2}}}),
                  "scale must have shape [5,8] (dims 1.. of input f32[2,5,8]), got f32[8]", 1,
                  "");
  EXPECT_OP_ERROR(infer_error("layer_norm", {f32({2, 8}), f32({8}), f32({2, 8})}),
                  "bias must have shape [8] (dims 1.. of input f32[2,8]), got f32[2,8]", 2, "");
  EXPECT_OP_ERROR(infer_error("layer_norm", {f32({2, 8}), f32({8}), f32({8})},
                              {{"axis", int64_t{-3}}}),
                  "axis -3 is out of range for rank 2", -1, "axis");
}

TEST(OpsSoftmax, ResultShapeAndErrors) {
  EXPECT_EQ(infer("softmax", {f32({2, 10})}), "f32[2,10]");
  EXPECT_EQ(infer("log_softmax", {f16({2, 10, 3})}, {{"axis", int64_t{1}}}), "f16[2,10,3]");
  EXPECT_OP_ERROR(infer_error("softmax", {f32({2, 10})}, {{"axis", int64_t{3}}}),
                  "axis 3 is out of range for rank 2", -1, "axis");
  EXPECT_OP_ERROR(infer_error("softmax", {f32({})}), "axis -1 is out of range for rank 0", -1,
                  "axis");
  EXPECT_OP_ERROR(infer_error("log_softmax", {i32({2, 10})}),
                  "operand 0 must be a float tensor (f32, f16, bf16), got i32[2,10]", 0, "");
}

// ---- shape ops ----

TEST(OpsReshape, ResultShapeAndErrors) {
  EXPECT_EQ(infer("reshape", {f32({2, 3})}, {{"shape", Ints{3, 2}}}), "f32[3,2]");
  EXPECT_EQ(infer("reshape", {boolean({2, 3, 4})}, {{"shape", Ints{-1, 4}}}), "bool[6,4]");
  EXPECT_EQ(infer("reshape", {i64({1})}, {{"shape", Ints{}}}), "i64[]");
  EXPECT_EQ(infer("reshape", {f32({})}, {{"shape", Ints{-1}}}), "f32[1]");
  EXPECT_OP_ERROR(infer_error("reshape", {f32({2, 3})}, {{"shape", Ints{4, 2}}}),
                  "reshape from [2,3] (6 elements) to [4,2] (8 elements)", -1, "shape");
  EXPECT_OP_ERROR(infer_error("reshape", {f32({2, 3})}, {{"shape", Ints{4, -1}}}),
                  "reshape from [2,3] (6 elements) to [4,-1]: 6 is not divisible by 4", -1,
                  "shape");
  EXPECT_OP_ERROR(infer_error("reshape", {f32({2, 3})}, {{"shape", Ints{-1, 2, -1}}}),
                  "attribute 'shape' may contain at most one -1, got [-1,2,-1]", -1, "shape");
  EXPECT_OP_ERROR(infer_error("reshape", {f32({2, 3})}, {{"shape", Ints{6, 0}}}),
                  "attribute 'shape' dims must be >= 1 (or -1 to infer one dim), got [6,0]", -1,
                  "shape");
  EXPECT_OP_ERROR(infer_error("reshape", {f32({2, 3})}, {{"shape", Ints{-2, 3}}}),
                  "attribute 'shape' dims must be >= 1 (or -1 to infer one dim), got [-2,3]", -1,
                  "shape");
  EXPECT_OP_ERROR(infer_error("reshape", {f32({2, 3})},
                              {{"shape", Ints{int64_t{1} << 40, int64_t{1} << 40}}}),
                  "reshape from [2,3] (6 elements) to [1099511627776,1099511627776] (more than "
                  "2^48 elements)",
                  -1, "shape");
  EXPECT_OP_ERROR(infer_error("reshape", {f32({2, 3})}), "missing required attribute 'shape' "
                                                         "(int list)",
                  -1, "shape");
}

TEST(OpsFlatten, ResultShapeAndErrors) {
  EXPECT_EQ(infer("flatten", {f32({2, 3, 4, 5})}), "f32[2,60]");
  EXPECT_EQ(infer("flatten", {f32({2, 3, 4, 5})}, {{"axis", int64_t{0}}}), "f32[1,120]");
  EXPECT_EQ(infer("flatten", {f32({2, 3, 4, 5})}, {{"axis", int64_t{4}}}), "f32[120,1]");
  EXPECT_EQ(infer("flatten", {i32({})}, {{"axis", int64_t{0}}}), "i32[1,1]");
  EXPECT_OP_ERROR(infer_error("flatten", {f32({2, 3})}, {{"axis", int64_t{3}}}),
                  "attribute 'axis' must be in [0, 2] for input f32[2,3], got 3", -1, "axis");
  EXPECT_OP_ERROR(infer_error("flatten", {f32({2, 3})}, {{"axis", int64_t{-1}}}),
                  "attribute 'axis' must be in [0, 2] for input f32[2,3], got -1", -1, "axis");
}

TEST(OpsTranspose, ResultShapeAndErrors) {
  EXPECT_EQ(infer("transpose", {f32({2, 3, 4})}), "f32[4,3,2]");
  EXPECT_EQ(infer("transpose", {f32({1, 2, 3, 4})}, {{"perm", Ints{0, 2, 3, 1}}}),
            "f32[1,3,4,2]");
  EXPECT_EQ(infer("transpose", {f32({})}), "f32[]");
  EXPECT_OP_ERROR(infer_error("transpose", {f32({1, 2, 3, 4})}, {{"perm", Ints{0, 1, 1, 3}}}),
                  "attribute 'perm' must be a permutation of 0..3, got [0,1,1,3]", -1, "perm");
  EXPECT_OP_ERROR(infer_error("transpose", {f32({1, 2, 3})}, {{"perm", Ints{1, 0}}}),
                  "attribute 'perm' must be a permutation of 0..2, got [1,0]", -1, "perm");
  EXPECT_OP_ERROR(infer_error("transpose", {f32({2, 3})}, {{"perm", Ints{-1, 0}}}),
                  "attribute 'perm' must be a permutation of 0..1, got [-1,0]", -1, "perm");
  EXPECT_OP_ERROR(infer_error("transpose", {f32({})}, {{"perm", Ints{0}}}),
                  "attribute 'perm' must be [] for rank 0, got [0]", -1, "perm");
}

TEST(OpsConcat, ResultShapeAndErrors) {
  EXPECT_EQ(infer("concat", {f32({2, 3}), f32({2, 5}), f32({2, 1})}, {{"axis", int64_t{1}}}),
            "f32[2,9]");
  EXPECT_EQ(infer("concat", {i64({4})}, {{"axis", int64_t{-1}}}), "i64[4]");
  EXPECT_OP_ERROR(infer_error("concat", {f32({2, 3}), f32({3, 5})}, {{"axis", int64_t{1}}}),
                  "operand 1 has size 3 in dim 0, operand 0 has 2 (f32[3,5] and f32[2,3]); only "
                  "axis 1 may differ",
                  1, "");
  EXPECT_OP_ERROR(infer_error("concat", {f32({2, 3}), f32({2, 3, 1})}, {{"axis", int64_t{0}}}),
                  "operand 1 has rank 3, operand 0 has rank 2 (f32[2,3,1] and f32[2,3])", 1, "");
  EXPECT_OP_ERROR(infer_error("concat", {f32({2, 3}), f32({2, 3}), i32({2, 3})},
                              {{"axis", int64_t{0}}}),
                  "operands must have the same dtype, got f32[2,3] and i32[2,3]", 2, "");
  EXPECT_OP_ERROR(infer_error("concat", {f32({2, 3})}, {{"axis", int64_t{2}}}),
                  "axis 2 is out of range for rank 2", -1, "axis");
  EXPECT_OP_ERROR(infer_error("concat", {f32({2, 3})}),
                  "missing required attribute 'axis' (int)", -1, "axis");
  EXPECT_OP_ERROR(infer_error("concat", {}, {{"axis", int64_t{0}}}),
                  "expects at least 1 inputs, got 0", -1, "");
  const TensorType big = f32({int64_t{1} << 47, 2});
  EXPECT_OP_ERROR(infer_error("concat", {big, big, big}, {{"axis", int64_t{0}}}),
                  "concatenated size along axis 0 exceeds 2^48", 2, "");
  EXPECT_OP_ERROR(infer_error("concat", {big, big}, {{"axis", int64_t{0}}}),
                  "result shape [281474976710656,2] has more than 2^48 elements", -1, "");
}

TEST(OpsSlice, ResultShape) {
  EXPECT_EQ(infer("slice", {f32({10, 8})}, {{"starts", Ints{2}}, {"ends", Ints{7}}}),
            "f32[5,8]");
  EXPECT_EQ(infer("slice", {f32({10, 8})},
                  {{"starts", Ints{1}}, {"ends", Ints{8}}, {"axes", Ints{-1}}, {"steps", Ints{3}}}),
            "f32[10,3]");  // 1, 4, 7
  // ONNX clamping: negative indices count from the end; huge ends mean "to the end".
  EXPECT_EQ(infer("slice", {f32({10, 8})},
                  {{"starts", Ints{-3, 0}},
                   {"ends", Ints{INT64_MAX, -1}}}),
            "f32[3,7]");
  EXPECT_EQ(infer("slice", {f32({10})}, {{"starts", Ints{INT64_MIN}}, {"ends", Ints{2}}}),
            "f32[2]");
  EXPECT_EQ(infer("slice", {boolean({4})}, {{"starts", Ints{}}, {"ends", Ints{}}}), "bool[4]");
}

TEST(OpsSlice, Errors) {
  const std::vector<TensorType> x = {f32({10, 4})};
  EXPECT_OP_ERROR(infer_error("slice", x, {{"starts", Ints{5}}, {"ends", Ints{3}}}),
                  "slice selects nothing on axis 0 (size 10): start 5, end 3, step 1", -1,
                  "starts");
  EXPECT_OP_ERROR(infer_error("slice", x,
                              {{"starts", Ints{20}}, {"ends", Ints{30}}, {"axes", Ints{1}}}),
                  "slice selects nothing on axis 1 (size 4): start 20, end 30, step 1", -1,
                  "starts");
  EXPECT_OP_ERROR(infer_error("slice", x, {{"starts", Ints{0, 0}}, {"ends", Ints{1}}}),
                  "attributes 'starts' and 'ends' must have the same length, got 2 and 1", -1,
                  "ends");
  EXPECT_OP_ERROR(infer_error("slice", x,
                              {{"starts", Ints{0}}, {"ends", Ints{1}}, {"axes", Ints{0, 1}}}),
                  "attribute 'axes' must have one value per start (1), got [0,1]", -1, "axes");
  EXPECT_OP_ERROR(infer_error("slice", x,
                              {{"starts", Ints{0}}, {"ends", Ints{1}}, {"steps", Ints{0}}}),
                  "attribute 'steps' values must be >= 1, got [0]", -1, "steps");
  EXPECT_OP_ERROR(infer_error("slice", x,
                              {{"starts", Ints{0, 0}}, {"ends", Ints{1, 1}},
                               {"axes", Ints{1, -1}}}),
                  "attribute 'axes' names axis 1 twice, got [1,-1]", -1, "axes");
  EXPECT_OP_ERROR(infer_error("slice", x,
                              {{"starts", Ints{0}}, {"ends", Ints{1}}, {"axes", Ints{2}}}),
                  "axis 2 is out of range for rank 2", -1, "axes");
  EXPECT_OP_ERROR(infer_error("slice", x, {{"starts", Ints{0, 0, 0}}, {"ends", Ints{1, 1, 1}}}),
                  "attribute 'starts' has 3 values, input f32[10,4] has rank 2", -1, "starts");
}

// ---- reductions ----

TEST(OpsReduce, ResultShape) {
  EXPECT_EQ(infer("reduce_sum", {f32({2, 3, 4})}), "f32[]");
  EXPECT_EQ(infer("reduce_sum", {i32({2, 3, 4})}, {{"axes", Ints{1}}}), "i32[2,4]");
  EXPECT_EQ(infer("reduce_max", {i64({2, 3, 4})}, {{"axes", Ints{0, -1}}, {"keepdims", true}}),
            "i64[1,3,1]");
  EXPECT_EQ(infer("reduce_mean", {f16({2, 3})}, {{"keepdims", true}}), "f16[1,1]");
  EXPECT_EQ(infer("reduce_sum", {f32({})}), "f32[]");
}

TEST(OpsReduce, Errors) {
  EXPECT_OP_ERROR(infer_error("reduce_mean", {i32({2, 3})}),
                  "operand 0 must be a float tensor (f32, f16, bf16), got i32[2,3]", 0, "");
  EXPECT_OP_ERROR(infer_error("reduce_sum", {boolean({2, 3})}),
                  "operand 0 must be numeric, got bool[2,3]", 0, "");
  EXPECT_OP_ERROR(infer_error("reduce_max", {f32({2, 3})}, {{"axes", Ints{2}}}),
                  "axis 2 is out of range for rank 2", -1, "axes");
  EXPECT_OP_ERROR(infer_error("reduce_sum", {f32({2, 3})}, {{"axes", Ints{0, -2}}}),
                  "attribute 'axes' names axis 0 twice, got [0,-2]", -1, "axes");
  EXPECT_OP_ERROR(infer_error("reduce_sum", {f32({2, 3})}, {{"axis", Ints{0}}}),
                  "unknown attribute 'axis'; did you mean 'axes'?", -1, "axis");
}

// ---- losses ----

TEST(OpsLoss, SoftmaxCrossEntropy) {
  EXPECT_EQ(infer("softmax_cross_entropy", {f32({4, 10}), i64({4})}), "f32[]");
  EXPECT_EQ(infer("softmax_cross_entropy", {f16({4, 10}), i32({4})}), "f16[]");
  EXPECT_OP_ERROR(infer_error("softmax_cross_entropy", {f32({4, 10}), f32({4})}),
                  "labels must be i32 or i64 class indices, got f32[4]", 1, "");
  EXPECT_OP_ERROR(infer_error("softmax_cross_entropy", {f32({4, 10}), i64({3})}),
                  "labels has 3 elements, logits f32[4,10] has batch size 4", 1, "");
  EXPECT_OP_ERROR(infer_error("softmax_cross_entropy", {f32({4, 10}), i64({4, 1})}),
                  "labels must have rank 1, got i64[4,1]", 1, "");
  EXPECT_OP_ERROR(infer_error("softmax_cross_entropy", {f32({10}), i64({1})}),
                  "logits must have rank 2, got f32[10]", 0, "");
  EXPECT_OP_ERROR(infer_error("softmax_cross_entropy", {i32({4, 10}), i64({4})}),
                  "operand 0 must be a float tensor (f32, f16, bf16), got i32[4,10]", 0, "");
}

TEST(OpsLoss, MseLoss) {
  EXPECT_EQ(infer("mse_loss", {f32({8, 3}), f32({8, 3})}), "f32[]");
  EXPECT_EQ(infer("mse_loss", {f16({}), f16({})}), "f16[]");
  EXPECT_OP_ERROR(infer_error("mse_loss", {f32({8, 3}), f32({3})}),
                  "target f32[3] must have the same type as prediction f32[8,3]", 1, "");
  EXPECT_OP_ERROR(infer_error("mse_loss", {f32({8}), f16({8})}),
                  "target f16[8] must have the same type as prediction f32[8]", 1, "");
  EXPECT_OP_ERROR(infer_error("mse_loss", {i32({8}), i32({8})}),
                  "operand 0 must be a float tensor (f32, f16, bf16), got i32[8]", 0, "");
}

}  // namespace
}  // namespace kiln::ir
