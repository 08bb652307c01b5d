// Strided views (ir/strided_view.h): NumPy's no-copy reshape rule, groups of dims that merge
// without being contiguous, and, for chains of view ops, the buffer position of every element
// against the reference interpreter running the same ops on 0, 1, 2, ...
#include <gtest/gtest.h>

#include <map>

#include "ir/eval/interpreter.h"
#include "ir/parser.h"
#include "ir/strided_view.h"

namespace kiln::ir {
namespace {

// Where element `flat` (row-major in the value's shape) lies in the buffer.
int64_t position(const StridedView& view, int64_t flat) {
  int64_t at = view.offset;
  for (size_t d = view.shape.size(); d-- > 0;) {
    at += flat % view.shape[d] * view.strides[d];
    flat /= view.shape[d];
  }
  return at;
}

// The chain of view ops of `text` (one input, one output) as a view of its input, checked
// element by element: the reference interpreter runs it on 0, 1, 2, ... and each output value
// is where the view says that element lies.
std::optional<StridedView> checked_view(const std::string& text) {
  const Graph graph = parse_graph(text, "strided_view_test.ir");
  std::vector<const Node*> chain;
  for (const auto& node : graph.nodes()) chain.push_back(node.get());
  const std::optional<StridedView> view = view_through(graph.inputs[0], chain);
  if (!view) return view;
  const TensorType& in = graph.inputs[0]->type;
  std::vector<double> iota(static_cast<size_t>(num_elements(in.shape)));
  for (size_t i = 0; i < iota.size(); ++i) iota[i] = static_cast<double>(i);
  const Tensor out = eval::run_reference(graph, {{graph.inputs[0]->name, Tensor::from_doubles(in, iota)}})[0];
  EXPECT_EQ(view->value_shape(), out.shape());
  for (int64_t i = 0; i < out.num_elements(); ++i)
    EXPECT_EQ(position(*view, i), static_cast<int64_t>(out.get(i))) << "element " << i;
  return view;
}

TEST(StridedView, ContiguousReshapesAreOneStridePerDim) {
  const StridedView view = *reshape_view(contiguous_view({2, 12}), {2, 3, 4});
  EXPECT_EQ(view.strides, (std::vector<int64_t>{12, 4, 1}));
  EXPECT_TRUE(view.groups.empty());
  EXPECT_EQ(reshape_view(contiguous_view({6, 4}), {4, 6})->strides, (std::vector<int64_t>{6, 1}));
}

TEST(StridedView, BatchDimsMergeAsAGroup) {
  // PyTorch's sequence-first head split: [T, B, 3·H·Dh] -> slice -> [T, B·H, Dh] -> [B·H, T, Dh].
  const std::optional<StridedView> view = checked_view(R"(graph @g(%qkv: f32[5,2,72]) -> (f32[8,5,6]) {
  %q = slice(%qkv) {axes = [2], starts = [24], ends = [48]} : f32[5,2,24]
  %heads = reshape(%q) {shape = [5, 8, 6]} : f32[5,8,6]
  %bht = transpose(%heads) {perm = [1, 0, 2]} : f32[8,5,6]
  return %bht
})");
  ASSERT_TRUE(view);
  EXPECT_EQ(view->groups, (std::vector<int>{2, 1, 1}));  // B·H stays (B, H)
  EXPECT_TRUE(view->plain_trailing(2));
  EXPECT_FALSE(view->plain_trailing(3));
  EXPECT_EQ(view->offset, 24);
}

TEST(StridedView, AGroupSplitsBackWhereItsDimsDivide) {
  const std::optional<StridedView> view = checked_view(R"(graph @g(%x: f32[3,4,5]) -> (f32[4,3,5]) {
  %t = transpose(%x) {perm = [1, 0, 2]} : f32[4,3,5]
  %merged = reshape(%t) {shape = [12, 5]} : f32[12,5]
  %split = reshape(%merged) {shape = [4, 3, 5]} : f32[4,3,5]
  return %split
})");
  ASSERT_TRUE(view);
  EXPECT_TRUE(view->groups.empty()) << "back to one stride per dim";
  // 12 = (4, 3) apart splits as (2, 6), 6 being (2, 3) of them; not as (6, 2), whose 6 would
  // take all of the 4 and half of the 3.
  const std::optional<StridedView> two_six = checked_view(R"(graph @g(%x: f32[3,4,5]) -> (f32[2,6,5]) {
  %t = transpose(%x) {perm = [1, 0, 2]} : f32[4,3,5]
  %merged = reshape(%t) {shape = [12, 5]} : f32[12,5]
  %split = reshape(%merged) {shape = [2, 6, 5]} : f32[2,6,5]
  return %split
})");
  ASSERT_TRUE(two_six);
  EXPECT_EQ(two_six->groups, (std::vector<int>{1, 2, 1}));
  EXPECT_FALSE(checked_view(R"(graph @g(%x: f32[3,4,5]) -> (f32[6,2,5]) {
  %t = transpose(%x) {perm = [1, 0, 2]} : f32[4,3,5]
  %merged = reshape(%t) {shape = [12, 5]} : f32[12,5]
  %split = reshape(%merged) {shape = [6, 2, 5]} : f32[6,2,5]
  return %split
})"));
}

TEST(StridedView, ASliceOfAGroupIsRefused) {
  const std::optional<StridedView> view = checked_view(R"(graph @g(%x: f32[2,3,4,6]) -> (f32[2,6,4]) {
  %t = transpose(%x) {perm = [0, 2, 1, 3]} : f32[2,4,3,6]
  %m = reshape(%t) {shape = [8, 18]} : f32[8,18]
  %s = slice(%m) {axes = [1], starts = [6], ends = [12]} : f32[8,6]
  %r = reshape(%s) {shape = [2, 4, 6]} : f32[2,4,6]
  %b = transpose(%r) {perm = [0, 2, 1]} : f32[2,6,4]
  return %b
})");
  // The 18 of (3, 6) apart has no one stride, so the slice of it is refused.
  EXPECT_FALSE(view);
}

}  // namespace
}  // namespace kiln::ir
