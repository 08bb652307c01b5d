// Gradient rules of the shape ops and reductions (ir/ops/shape_ops.cpp, ir/ops/reduce.cpp).
//
// Shape ops only move elements, so their gradients move dy back: reshape undoes reshape, the
// inverse permutation undoes transpose, slices of dy undo concat, and a zero-padded scatter
// (slice_grad) undoes slice, an adding scatter (gather_elements_grad) undoes gather_elements,
// and summing over the broadcast dims undoes broadcast_to. Sum and
// mean spread dy evenly over the elements they reduced; max sends it to the maxima.
#include "ir/gradients/gradients.h"

namespace kiln::ir::gradients {
namespace {

using Grads = std::vector<Value*>;
using Ints = std::vector<int64_t>;

const Ints& ints_attr(const Node& node, const char* name) {
  return std::get<Ints>(node.attrs.at(name));
}

// x's shape with the reduced axes kept as 1, and how many elements each result element sums.
std::pair<Shape, int64_t> keepdims_shape(const Node& node) {
  Shape shape = node.inputs[0]->type.shape;
  const Ints& axes = ints_attr(node, "axes");
  int64_t count = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    bool reduced = axes.empty();
    for (int64_t axis : axes) reduced |= *normalize_axis(axis, static_cast<int>(shape.size())) == static_cast<int>(d);
    if (!reduced) continue;
    count *= shape[d];
    shape[d] = 1;
  }
  return {shape, count};
}

Grads reshape_back(GradBuilder& b, const Node& n, const Grads& dy) {
  return {b.reshape(dy[0], n.inputs[0]->type.shape)};
}

}  // namespace

void add_shape_reduce_rules(OpRegistry& registry) {
  set_rule(registry, OpId::Reshape,
           "dy reshaped to x.shape", reshape_back);
  set_rule(registry, OpId::Flatten,
           "dy reshaped to x.shape", reshape_back);
  set_rule(registry, OpId::Transpose,
           "transpose(dy) by the inverse permutation",
           [](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    const int rank = n.inputs[0]->type.rank();
    Ints perm = ints_attr(n, "perm");
    if (perm.empty())
      for (int d = rank - 1; d >= 0; --d) perm.push_back(d);
    Ints inverse(rank);
    for (int d = 0; d < rank; ++d) inverse[perm[d]] = d;
    return {b.op(OpId::Transpose, {dy[0]}, {{"perm", inverse}})};
  });
  set_rule(registry, OpId::Concat,
           "slices of dy along axis, one per operand",
           [](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    const int rank = n.inputs[0]->type.rank();
    const int64_t axis = *normalize_axis(std::get<int64_t>(n.attrs.at("axis")), rank);
    Grads grads;
    int64_t offset = 0;
    for (const Value* input : n.inputs) {
      const int64_t size = input->type.shape[axis];
      grads.push_back(n.inputs.size() == 1
                          ? dy[0]
                          : b.op(OpId::Slice, {dy[0]},
                                 {{"starts", Ints{offset}}, {"ends", Ints{offset + size}},
                                  {"axes", Ints{axis}}}));
      offset += size;
    }
    return grads;
  });
  // slice_grad scatters dy back into zeros of x's shape; axes and steps are spelled out.
  set_rule(registry, OpId::Slice,
           "slice_grad(dy) into zeros of x.shape",
           [](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    const Ints& starts = ints_attr(n, "starts");
    Ints axes = ints_attr(n, "axes"), steps = ints_attr(n, "steps");
    for (size_t i = axes.size(); i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
    steps.resize(starts.size(), 1);
    return {b.op(OpId::SliceGrad, {dy[0]},
                 {{"shape", Ints(n.inputs[0]->type.shape)}, {"starts", starts},
                  {"ends", ints_attr(n, "ends")}, {"axes", axes}, {"steps", steps}})};
  });
  // gather_elements (an embedding lookup, as ONNX Gather imports) reads x at the indices: its
  // adjoint adds dy back there. The indices get no gradient.
  set_rule(registry, OpId::GatherElements,
           "gather_elements_grad(dy, indices) into zeros of x.shape (float x only)",
           [](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    if (!is_floating(n.inputs[0]->type.dtype)) return {nullptr, nullptr};
    return {b.op(OpId::GatherElementsGrad, {dy[0], n.inputs[1]},
                 {{"axis", std::get<int64_t>(n.attrs.at("axis"))},
                  {"shape", Ints(n.inputs[0]->type.shape)}}),
            nullptr};
  });
  // gather's adjoint adds each dy slice back at its index: with x as [outer, dim, inner] and dy
  // as [outer, n, inner] (n indices), that is gather_elements_grad along the middle axis, the
  // indices broadcast over outer and inner. Autodiff runs on a graph of fixed shapes, so the
  // views are concrete.
  set_rule(registry, OpId::Gather,
           "gather_elements_grad(dy, indices) on [outer, dim, inner] views (float x only)",
           [](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    const TensorType& x = n.inputs[0]->type;
    if (!is_floating(x.dtype)) return {nullptr, nullptr};
    const int64_t rank = x.rank();
    const int64_t axis_attr = std::get<int64_t>(n.attrs.at("axis"));
    const size_t axis = static_cast<size_t>(axis_attr < 0 ? axis_attr + rank : axis_attr);
    const int64_t outer = num_elements(x.shape, 0, axis);
    const int64_t inner = num_elements(x.shape, axis + 1, x.shape.size());
    const int64_t count = num_elements(n.inputs[1]->type.shape);
    Value* index = b.reshape(n.inputs[1], {1, count, 1});
    index = b.op(OpId::BroadcastTo, {index}, {{"shape", Ints{outer, count, inner}}});
    Value* grad = b.op(OpId::GatherElementsGrad, {b.reshape(dy[0], {outer, count, inner}), index},
                       {{"axis", int64_t{1}}, {"shape", Ints{outer, x.shape[axis], inner}}});
    return {b.reshape(grad, x.shape), nullptr};
  });
  // broadcast_to's adjoint sums dy back over the broadcast dims.
  set_rule(registry, OpId::BroadcastTo,
           "unbroadcast(dy) to x.shape",
           [](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    return {b.sum_to(dy[0], n.inputs[0]->type.shape)};
  });
  // dy goes to the positions of each maximum, split evenly among ties as torch.amax's backward.
  // maximum_share(x, max) is 1/2 at a tie with the maximum and 0 elsewhere (x < max); divided
  // by its sum over the reduced axes (1/2 per maximum: exact, a power of two) it gives 1/count.
  set_rule(registry, OpId::ReduceMax,
           "dy to the positions of each maximum, split evenly among ties (float x only)",
           [](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    if (!is_floating(n.inputs[0]->type.dtype)) return {nullptr};
    const Shape keep = keepdims_shape(n).first;
    Value* share = b.op(OpId::MaximumShare, {n.inputs[0], b.reshape(n.results[0], keep)});
    Value* count = b.op(OpId::ReduceSum, {share}, {{"axes", ints_attr(n, "axes")}, {"keepdims", true}});
    return {b.op(OpId::Mul, {share, b.op(OpId::Div, {b.reshape(dy[0], keep), count})})};
  });
  set_rule(registry, OpId::ReduceSum,
           "dy broadcast back over the reduced axes",
           [](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    return {b.expand_reduced(dy[0], keepdims_shape(n).first, n.inputs[0]->type.shape)};
  });
  set_rule(registry, OpId::ReduceMean,
           "dy broadcast back over the reduced axes, divided by the count reduced",
           [](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    auto [keep, count] = keepdims_shape(n);
    Value* spread = b.expand_reduced(dy[0], keep, n.inputs[0]->type.shape);
    return {b.scale(spread, 1.0 / static_cast<double>(count))};
  });
}

}  // namespace kiln::ir::gradients
