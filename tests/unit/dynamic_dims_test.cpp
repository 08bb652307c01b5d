// Bounded dynamic dims (ir/dynamic_dims.h, ir/dynamic_binding.h): the analysis that proves
// padding harmless, its refusals, and the padding and slicing of run-time tensors. The
// end-to-end runs (reference, host backend, packages, ONNX exports) are lit and zoo tests.
#include <gtest/gtest.h>

#include "ir/diagnostic.h"
#include "ir/dynamic_binding.h"
#include "ir/dynamic_dims.h"
#include "ir/eval/interpreter.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"

namespace kiln::ir {
namespace {

Graph parse(const std::string& text) { return parse_graph(text, "dynamic_dims_test.ir"); }

Tensor iota(TensorType type) {
  std::vector<double> values(static_cast<size_t>(num_elements(type.shape)));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<double>(i);
  return Tensor::from_doubles(type, values);
}

// The parse and verification errors of `text`: the verifier runs the dynamic-dim analysis.
std::string error_of(const std::string& text) {
  try {
    verify(parse(text));
  } catch (const Error& error) {
    return error.what();
  }
  return "no error";
}

TEST(DynamicDims, InputDimsPrintAndParseBack) {
  const Graph graph = parse(R"(graph @g(%x: f32[batch<=4,8], %y: f32[batch<=4,8]) -> (f32[4,8]) {
  %s = add(%x, %y) : f32[4,8]
  return %s
})");
  ASSERT_EQ(graph.symbols.size(), 1u);
  EXPECT_EQ(graph.symbols[0], (DimSymbol{"batch", 4}));
  EXPECT_EQ(graph.inputs[1]->dynamic_dims, (DimMap{{0, 1, 1}, {}}));
  const std::string printed = print_graph(graph);
  EXPECT_NE(printed.find("%x: f32[batch<=4,8], %y: f32[batch<=4,8]"), std::string::npos) << printed;
  EXPECT_EQ(print_graph(parse(printed)), printed);
}

TEST(DynamicDims, ABoundMustAgreeEverywhere) {
  EXPECT_NE(error_of("graph @g(%x: f32[b<=4,8], %y: f32[b<=2,8]) -> (f32[4,8]) {\n  return %x\n}")
                .find("dynamic dim 'b' has bound 4 elsewhere, 2 here"),
            std::string::npos);
}

TEST(DynamicDims, ReshapesKeepTheSymbolBetweenFactors) {
  // [b, 16, 8] -> [16, 4b, 8]-like merges, as nn.MultiheadAttention exports them: the symbol
  // lands in the middle of merged dims.
  const Graph graph = parse(R"(graph @g(%x: f32[batch<=4,12,32]) -> (f32[12,16,8], f32[48,32], f32[12,4,32]) {
  %t = transpose(%x) {perm = [1, 0, 2]} : f32[12,4,32]
  %heads = reshape(%t) {shape = [12, 16, 8]} : f32[12,16,8]
  %rows = reshape(%heads) {shape = [48, 32]} : f32[48,32]
  %back = reshape(%rows) {shape = [12, 4, 32]} : f32[12,4,32]
  return %heads, %rows, %back
})");
  const std::vector<DimMap> outputs = output_dynamic_dims(graph);
  EXPECT_EQ(outputs[0], (DimMap{{}, {0, 1, 4}, {}}));   // batch × 4 heads
  EXPECT_EQ(outputs[1], (DimMap{{0, 12, 1}, {}}));      // 12 blocks of batch rows
  EXPECT_EQ(outputs[2], (DimMap{{}, {0, 1, 1}, {}}));
}

TEST(DynamicDims, ResizeFollowsTheSymbolThroughReshapes) {
  Graph graph = parse(R"(graph @g(%x: f32[batch<=4,12,32]) -> (f32[48,32], f32[12,4,32]) {
  %t = transpose(%x) {perm = [1, 0, 2]} : f32[12,4,32]
  %heads = reshape(%t) {shape = [12, 16, 8]} : f32[12,16,8]
  %rows = reshape(%heads) {shape = [48, 32]} : f32[48,32]
  %back = reshape(%rows) {shape = [12, -1, 32]} : f32[12,4,32]
  return %rows, %back
})");
  resize_dynamic_dims(graph, {7});
  verify(graph);
  EXPECT_EQ(graph.inputs[0]->type.shape, (Shape{7, 12, 32}));
  EXPECT_EQ(graph.outputs[0]->type.shape, (Shape{84, 32}));
  EXPECT_EQ(graph.outputs[1]->type.shape, (Shape{12, 7, 32}));
  EXPECT_EQ(graph.symbols[0].bound, 7);
  EXPECT_EQ(graph.find_value("heads")->producer->attrs.at("shape"), (Attribute{std::vector<int64_t>{12, 28, 8}}));
}

TEST(DynamicDims, RefusesWherePaddingWouldReachARealResult) {
  const auto refusal = [](const std::string& body, const std::string& type) {
    return error_of("graph @g(%x: f32[batch<=4,3]) -> (" + type + ") {\n  %y = " + body + " : " + type +
                    "\n  return %y\n}");
  };
  EXPECT_NE(refusal("softmax(%x) {axis = 0}", "f32[4,3]").find("the axis it reduces over"),
            std::string::npos);
  EXPECT_NE(refusal("reduce_sum(%x) {axes = [0]}", "f32[3]").find("is the dynamic dim 'batch'"),
            std::string::npos);
  EXPECT_NE(refusal("reshape(%x) {shape = [3, 4]}", "f32[3,4]")
                .find("it reshapes [4,3] to [3,4], which splits the dynamic dim 'batch'"),
            std::string::npos);
  EXPECT_NE(refusal("slice(%x) {starts = [1], ends = [4], axes = [0]}", "f32[3,3]")
                .find("slices the dynamic dim 'batch'"),
            std::string::npos);
  EXPECT_NE(refusal("matmul(%x, %x) {transpose_a = true}", "f32[3,3]").find("the axis it contracts"),
            std::string::npos);
  // Over the other axis, the same ops are fine.
  EXPECT_EQ(refusal("softmax(%x) {axis = 1}", "f32[4,3]"), "no error");
  EXPECT_EQ(refusal("reduce_sum(%x) {axes = [1]}", "f32[4]"), "no error");
}

TEST(DynamicDims, AttentionOverDynamicKeysOnlyWhenCausal) {
  const std::string head = "graph @g(%q: f32[2,seq<=8,4]) -> (f32[2,8,4]) {\n  %a, %lse = attention(%q, %q, %q) ";
  const std::string tail = " : f32[2,8,4], f32[2,8]\n  return %a\n}";
  EXPECT_NE(error_of(head + "{causal = false}" + tail).find("unless the attention is causal"),
            std::string::npos);
  EXPECT_EQ(error_of(head + "{causal = true}" + tail), "no error");
}

TEST(DynamicDims, ResizeBlockPadsAndSlicesAnyDim) {
  const Tensor x = iota({DType::F32, {2, 3, 2}});
  const Tensor padded = resize_block(x, {2, 4, 2});
  EXPECT_EQ(padded.get(0), 0);
  EXPECT_EQ(padded.get(5), 5);   // [0][2][1]
  EXPECT_EQ(padded.get(6), 0);   // [0][3][0]: padding
  EXPECT_EQ(padded.get(8), 6);   // [1][0][0]
  const Tensor back = resize_block(padded, {2, 3, 2});
  for (int64_t i = 0; i < x.num_elements(); ++i) EXPECT_EQ(back.get(i), x.get(i));
}

TEST(DynamicDims, BindPadsInputsAndSlicesOutputsPerBlock) {
  const std::vector<DimSymbol> symbols = {{"batch", 4}};
  std::vector<Tensor> inputs = {iota({DType::F32, {2, 3}})};
  const DynamicBinding binding =
      bind_dynamic_dims(symbols, {{{0, 1, 1}, {}}}, {{DType::F32, {4, 3}}}, {"x"}, inputs);
  EXPECT_EQ(binding.sizes, std::vector<int64_t>{2});
  EXPECT_TRUE(binding.padded);
  EXPECT_EQ(inputs[0].type().shape, (Shape{4, 3}));
  EXPECT_EQ(inputs[0].get(5), 5);
  EXPECT_EQ(inputs[0].get(6), 0);
  // An output of 3 blocks of batch rows: the first 2 rows of each block are real.
  std::vector<Tensor> outputs = {iota({DType::F32, {12}})};
  slice_outputs({{{0, 3, 1}}}, binding, outputs);
  EXPECT_EQ(outputs[0].type().shape, (Shape{6}));
  const double want[] = {0, 1, 4, 5, 8, 9};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(outputs[0].get(i), want[i]);
}

TEST(DynamicDims, BindNamesWhatIsWrong) {
  const std::vector<DimSymbol> symbols = {{"batch", 4}};
  const std::vector<DimMap> dims = {{{0, 1, 1}}, {{0, 1, 1}}};
  const std::vector<TensorType> types = {{DType::F32, {4}}, {DType::F32, {4}}};
  const auto bind = [&](int64_t a, int64_t b) -> std::string {
    std::vector<Tensor> inputs = {Tensor({DType::F32, {a}}), Tensor({DType::F32, {b}})};
    try {
      bind_dynamic_dims(symbols, dims, types, {"x", "y"}, inputs);
    } catch (const Error& error) {
      return error.what();
    }
    return "no error";
  };
  EXPECT_EQ(bind(3, 3), "no error");
  EXPECT_NE(bind(5, 5).find("input 'x': expected f32[batch<=4], got f32[5]: dim 0 is the dynamic "
                            "dim 'batch', which must be between 1 and its bound 4"),
            std::string::npos);
  EXPECT_NE(bind(2, 3).find("input 'y': dim 0 gives the dynamic dim 'batch' size 3, but input 'x' "
                            "gave it 2"),
            std::string::npos);
}

TEST(DynamicDims, ReferenceRunAtASmallerBatchMatchesTheStaticGraph) {
  // Each row of the result depends on its own row only, so rows 0 and 1 of a batch of 2
  // padded to 4 equal those of the same graph run at 4.
  const Graph graph = parse(R"(graph @g(%x: f32[batch<=4,3]) -> (f32[4,3]) {
  %e = exp(%x) : f32[4,3]
  %s = softmax(%e) {axis = 1} : f32[4,3]
  return %s
})");
  std::vector<Tensor> inputs = {iota({DType::F32, {2, 3}})};
  const DynamicBinding binding =
      bind_dynamic_dims(graph.symbols, {graph.inputs[0]->dynamic_dims}, {graph.inputs[0]->type}, {"x"}, inputs);
  std::vector<Tensor> outputs = eval::run_reference(graph, {{"x", inputs[0]}});
  slice_outputs(output_dynamic_dims(graph), binding, outputs);
  ASSERT_EQ(outputs[0].type().shape, (Shape{2, 3}));
  const std::vector<Tensor> full = eval::run_reference(graph, {{"x", iota({DType::F32, {4, 3}})}});
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(outputs[0].get(i), full[0].get(i));
}

}  // namespace
}  // namespace kiln::ir
