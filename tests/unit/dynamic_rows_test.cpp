// Kernels of real rows only (codegen/dynamic_rows.h): which kernels skip the padding of a run
// below the bounds, the readers that keep their inputs clean, and host runs below the bounds,
// with the skipped padding poisoned (NaN), against the reference at the real size. The zoo and
// lit tests run whole models the same way.
#include <gtest/gtest.h>

#include <set>

#include "codegen/program.h"
#include "ir/dynamic_binding.h"
#include "tests/unit/codegen_test_util.h"

namespace kiln::codegen::testing {
namespace {

// The source node of each kernel that computes the real rows only.
std::set<std::string> skipping(const std::string& text) {
  std::set<std::string> names;
  for (const Kernel& kernel : emit_program(parse(text)).kernels)
    if (kernel.dynamic_symbol >= 0) names.insert(kernel.source_nodes.at(0));
  return names;
}

TEST(DynamicRows, RowWiseKernelsSkipThePadding) {
  const Program program = emit_program(parse(R"(graph @g(%x: f32[batch<=4,16], %w: f32[8,16], %s: f32[8], %h: f32[8]) -> (f32[4,8]) {
  %d = dense(%x, %w) : f32[4,8] loc("dense")
  %n = layer_norm(%d, %s, %h) : f32[4,8] loc("norm")
  %r = relu(%n) : f32[4,8] loc("relu")
  %p = softmax(%r) : f32[4,8] loc("softmax")
  return %p
})"));
  ASSERT_EQ(program.kernels.size(), 4u);
  for (const Kernel& kernel : program.kernels) {
    EXPECT_EQ(kernel.dynamic_symbol, 0) << kernel.name;
    EXPECT_TRUE(contains(program.source, "const int kiln_dim_size")) << kernel.name;
  }
  EXPECT_EQ(program.kernels[0].dynamic_grid_axis, 1) << "a dense walks its rows along grid y";
  EXPECT_EQ(program.kernels[2].dynamic_grid_axis, 0);
  // 3 of 4 rows: the grid shrinks in proportion, never below one block.
  Kernel dense = program.kernels[0];
  dense.grid = Dim3{2, 8, 1};
  EXPECT_EQ(launch_grid(dense, {{"batch", 4}}, {3}), (Dim3{2, 6, 1}));
  EXPECT_EQ(launch_grid(dense, {{"batch", 4}}, {1}), (Dim3{2, 2, 1}));
  EXPECT_EQ(launch_grid(dense, {{"batch", 4}}, {}), (Dim3{2, 8, 1})) << "no sizes: the bounds";
}

TEST(DynamicRows, AFloatReaderOfEveryRowMayReadSkippedPadding) {
  // The transpose computes every row (its result is not a prefix of the batch), reading the
  // relu's padding: float data, copied, stays in the padding.
  EXPECT_EQ(skipping(R"(graph @g(%x: f32[batch<=4,8]) -> (f32[8,4]) {
  %r = relu(%x) : f32[4,8] loc("relu")
  %t = transpose(%r) : f32[8,4] loc("transpose")
  return %t
})"),
            (std::set<std::string>{"relu"}));
}

TEST(DynamicRows, AnIntegerReaderOfEveryRowKeepsItsInputsClean) {
  // An integer made of garbage could index anything: the transpose of the cast reads every
  // row, so the cast must compute every row, and so must the relu it casts.
  EXPECT_EQ(skipping(R"(graph @g(%x: f32[batch<=4,8]) -> (i32[8,4]) {
  %r = relu(%x) : f32[4,8] loc("relu")
  %c = cast(%r) {to = "i32"} : i32[4,8] loc("cast")
  %t = transpose(%c) : i32[8,4] loc("transpose")
  return %t
})"),
            std::set<std::string>{});
}

TEST(DynamicRows, AnAttentionOverDynamicKeysKeepsItsInputsClean) {
  // Causal attention over a dynamic sequence: a real query's last key tile reaches padded
  // keys with p = 0, and 0 times garbage is NaN. The relu must compute every row.
  EXPECT_EQ(skipping(R"(graph @g(%x: f32[seq<=8,4]) -> (f32[8,4]) {
  %r = relu(%x) : f32[8,4] loc("relu")
  %a, %lse = attention(%r, %r, %r) {causal = true} : f32[8,4], f32[8] loc("attention")
  return %a
})"),
            std::set<std::string>{});
  // Over a dynamic batch the keys of a real batch are real: both skip.
  EXPECT_EQ(skipping(R"(graph @g(%x: f32[batch<=4,2,8,4]) -> (f32[4,2,8,4]) {
  %r = relu(%x) : f32[4,2,8,4] loc("relu")
  %a, %lse = attention(%r, %r, %r) {causal = true} : f32[4,2,8,4], f32[4,2,8] loc("attention")
  return %a
})"),
            (std::set<std::string>{"relu", "attention"}));
}

#if KILN_CODEGEN_TEST_HOST
// Runs `text` on the host backend with dynamic inputs of `rows` real rows (padded by the executable,
// the skipped padding poisoned) and compares with the reference interpreter on the bound-size
// inputs zero-padded, sliced to the real rows.
void check_below_bounds(const std::string& name, const std::string& text, int64_t rows) {
  const ir::Graph graph = parse(text);
  const Program program = emit_program(graph);
  check_nvrtc(program, name);
  int skipped = 0;
  for (const Kernel& kernel : program.kernels) skipped += kernel.dynamic_symbol >= 0;
  EXPECT_GT(skipped, 0) << name << ": no kernel skips the padding";

  const std::vector<ir::Tensor> full = random_inputs(graph, -1.0, 1.0, 3);
  std::vector<ir::Tensor> given, padded;
  std::map<std::string, ir::Tensor> named;
  for (size_t i = 0; i < full.size(); ++i) {
    ir::Shape shape = full[i].shape();
    if (!graph.inputs[i]->dynamic_dims.empty()) shape[0] = rows;  // the dynamic inputs
    given.push_back(ir::resize_block(full[i], shape));
    padded.push_back(ir::resize_block(given.back(), full[i].shape()));
    named[graph.inputs[i]->name] = padded.back();
  }
  const std::vector<ir::Tensor> want = eval::run_reference(graph, named);
  const runtime::host::HostModule module = runtime::host::HostModule::compile(program.source, name, nullptr);
  runtime::host::HostOptions options;
  options.strict = true;
  ASSERT_TRUE(options.poison_padding);
  runtime::host::HostExecutable executable(program, module, {}, options);
  const std::vector<ir::Tensor> got = executable.run(given);
  ASSERT_EQ(got.size(), want.size());
  // On views of the same memory (the Python package's path; dynamic dims copy to pad them).
  const std::vector<ir::Tensor> from_views = executable.run_views(ir::views_of(given));
  ASSERT_EQ(from_views.size(), got.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(from_views[i].bytes(), got[i].bytes()) << name;
  for (size_t i = 0; i < got.size(); ++i) {
    ir::Shape shape = want[i].shape();
    shape[0] = rows;
    expect_close(got[i], ir::resize_block(want[i], shape), kElementwiseF32, name + " output " + std::to_string(i));
  }
}

TEST(HostViews, AStaticProgramRunsOnTheCallersMemory) {
  const ir::Graph graph = parse(R"(graph @g(%x: f32[3,16], %w: f32[8,16]) -> (f32[3,8]) {
  %d = dense(%x, %w) : f32[3,8] loc("dense")
  %r = relu(%d) : f32[3,8] loc("relu")
  return %r
})");
  const Program program = emit_program(graph);
  const std::vector<ir::Tensor> inputs = random_inputs(graph, -1.0, 1.0, 5);
  const runtime::host::HostModule module = runtime::host::HostModule::compile(program.source, "views", nullptr);
  runtime::host::HostExecutable executable(program, module, {}, {});
  const std::vector<ir::Tensor> want = executable.run(inputs);
  const std::vector<ir::Tensor> got = executable.run_views(ir::views_of(inputs));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].bytes(), want[0].bytes());
  std::vector<ir::TensorView> wrong = ir::views_of(inputs);
  wrong[0].type.shape = {16, 3};
  try {
    executable.run_views(wrong);
    ADD_FAILURE() << "a view of another shape ran";
  } catch (const Error& error) {
    EXPECT_EQ(error.diagnostic().message, "input 'x': expected f32[3,16], got f32[16,3]");
  }
}

TEST(DynamicRows, HostRunsBelowTheBoundsMatchTheReference) {
  check_below_bounds("rows_mlp", R"(graph @g(%x: f32[batch<=5,3,16], %w: f32[24,16], %b: f32[24], %s: f32[24], %h: f32[24]) -> (f32[5,3,24], f32[5,24,3]) {
  %rows = reshape(%x) {shape = [15, 16]} : f32[15,16] loc("rows")
  %d = dense(%rows, %w, %b) : f32[15,24] loc("dense")
  %g = gelu(%d) : f32[15,24] loc("gelu")
  %n = layer_norm(%g, %s, %h) : f32[15,24] loc("norm")
  %y = reshape(%n) {shape = [5, 3, 24]} : f32[5,3,24] loc("unrows")
  %t = transpose(%y) {perm = [0, 2, 1]} : f32[5,24,3] loc("transpose")
  return %y, %t
})", 2);
  check_below_bounds("causal_batch", R"(graph @g(%x: f32[batch<=4,2,9,8]) -> (f32[4,2,9,8]) {
  %r = relu(%x) : f32[4,2,9,8] loc("relu")
  %a, %lse = attention(%r, %r, %r) {causal = true} : f32[4,2,9,8], f32[4,2,9] loc("attention")
  return %a
})", 3);
  // The relu before the attention must compute every row (poisoned padding would reach the
  // real queries as NaN otherwise); the tanh after it skips.
  check_below_bounds("causal_sequence", R"(graph @g(%x: f32[seq<=40,8]) -> (f32[40,8]) {
  %r = relu(%x) : f32[40,8] loc("relu")
  %a, %lse = attention(%r, %r, %r) {causal = true} : f32[40,8], f32[40] loc("attention")
  %o = tanh(%a) : f32[40,8] loc("tanh")
  return %o
})", 5);
}
#endif

}  // namespace
}  // namespace kiln::codegen::testing
