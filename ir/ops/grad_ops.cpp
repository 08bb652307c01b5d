// Backward ops: what gradient rules (ir/gradients/) build where no forward op expresses the
// gradient in one node. Each takes the upstream gradient `dy` first, then what it saved from
// the forward pass (the input x, or the result y where the derivative is cheaper from it).
// They are ordinary ops: inferred, interpreted (ir/eval/kernels_grad.cpp), costed,
// fused and memory-planned like the forward ones.
#include <algorithm>
#include <limits>
#include <string>

#include "ir/ops/op_helpers.h"
#include "ir/ops/type_rules.h"

namespace kiln::ir::type_rules {
namespace {

using ops::require_axis;
using ops::require_float;
using ops::require_rank;
using ops::require_same_dtype;
using Ints = std::vector<int64_t>;

// dy and the saved tensor have the same type, which is the result's.
}  // namespace

Types infer_like_dy(const InferContext& ctx) {
  require_float(ctx, 0);
  require_same_dtype(ctx, 0, 1);
  if (ctx.inputs[1].shape != ctx.inputs[0].shape)
    throw OpError{"saved operand " + ctx.inputs[1].to_string() + " must have the shape of dy " +
                      ctx.inputs[0].to_string(),
                  1};
  return {ctx.inputs[0]};
}

Types infer_broadcast_to(const InferContext& ctx) {
  const Ints& shape = ctx.get_ints("shape");
  for (int64_t dim : shape)
    if (dim < 1) throw OpError{"attribute 'shape' has a dim < 1: " + ops::ints_to_string(shape), -1, "shape"};
  std::optional<Shape> out = broadcast_shapes(ctx.inputs[0].shape, shape);
  if (!out || *out != shape)
    throw OpError{ctx.inputs[0].to_string() + " does not broadcast to " + shape_to_string(shape),
                  -1, "shape"};
  return {ops::checked_result(ctx.inputs[0].dtype, shape)};
}

namespace {

// maximum_share / minimum_share: float a and b of one dtype, broadcast together.
}  // namespace

Types infer_share(const InferContext& ctx) {
  require_float(ctx, 0);
  require_same_dtype(ctx, 0, 1);
  std::optional<Shape> out = broadcast_shapes(ctx.inputs[0].shape, ctx.inputs[1].shape);
  if (!out)
    throw OpError{"shapes " + shape_to_string(ctx.inputs[0].shape) + " and " +
                      shape_to_string(ctx.inputs[1].shape) + " cannot be broadcast together",
                  1};
  return {ops::checked_result(ctx.inputs[0].dtype, *out)};
}

namespace {

// slice_grad: 'shape' is the forward slice's input; slicing it with the forward's attributes
// (normalized by the forward's inference) must give dy's shape.
}  // namespace

Types infer_slice_grad(const InferContext& ctx) {
  const Shape& shape = ctx.get_ints("shape");
  const Ints& starts = ctx.get_ints("starts");
  const Ints& ends = ctx.get_ints("ends");
  const Ints& axes = ctx.get_ints("axes");
  const Ints& steps = ctx.get_ints("steps");
  const int rank = static_cast<int>(shape.size());
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size() || ctx.inputs[0].rank() != rank)
    throw OpError{"starts, ends, axes and steps must have one value per sliced axis, and dy "
                  "the rank of 'shape'",
                  -1, "starts"};
  Shape sliced = shape;
  const std::vector<int> normalized = ops::require_axes(axes, rank, "axes");  // no repeats
  for (size_t i = 0; i < starts.size(); ++i) {
    const int axis = normalized[i];
    const int64_t dim = shape[axis];
    auto clamp = [dim](int64_t index) { return std::clamp<int64_t>(index < 0 ? index + dim : index, 0, dim); };
    const int64_t start = clamp(starts[i]), end = clamp(ends[i]);
    if (steps[i] < 1 || end <= start)
      throw OpError{"slice selects nothing on axis " + std::to_string(axis), -1, "starts"};
    sliced[axis] = (end - start - 1) / steps[i] + 1;
  }
  if (sliced != ctx.inputs[0].shape)
    throw OpError{"dy " + ctx.inputs[0].to_string() + " is not the slice's result " +
                      shape_to_string(sliced),
                  0};
  return {ops::checked_result(ctx.inputs[0].dtype, shape)};
}

Types infer_gather_elements_grad(const InferContext& ctx) {
  const TensorType& dy = ctx.inputs[0];
  const TensorType& indices = ctx.inputs[1];
  const Shape& shape = ctx.get_ints("shape");
  if (!is_floating(dy.dtype)) throw OpError{"dy must be float, got " + dy.to_string(), 0};
  if (indices.dtype != DType::I32 && indices.dtype != DType::I64)
    throw OpError{"indices must be i32 or i64, got " + indices.to_string(), 1};
  if (indices.shape != dy.shape)
    throw OpError{"indices " + indices.to_string() + " must have dy's shape " + shape_to_string(dy.shape), 1};
  const int rank = dy.rank();
  if (rank == 0 || static_cast<int>(shape.size()) != rank)
    throw OpError{"'shape' " + shape_to_string(shape) + " must have dy's rank " + std::to_string(rank) +
                      " (at least 1)",
                  -1, "shape"};
  const int axis = ops::require_axis(ctx.get_int("axis"), rank, "axis");
  for (int d = 0; d < rank; ++d)
    if (d != axis && dy.shape[d] > shape[d])
      throw OpError{"dy " + dy.to_string() + " is larger than 'shape' " + shape_to_string(shape) +
                        " in dim " + std::to_string(d) + " (only the axis may differ freely)",
                    0};
  return {ops::checked_result(dy.dtype, shape)};
}

Types infer_softmax_like_grad(const InferContext& ctx) {
  std::vector<TensorType> out = infer_like_dy(ctx);
  require_axis(ctx.get_int("axis"), ctx.inputs[0].rank(), "axis");
  return out;
}

Types infer_softmax_cross_entropy_grad(const InferContext& ctx) {
  require_float(ctx, 0);
  require_rank(ctx, 0, 0, "dy");
  require_rank(ctx, 1, 2, "logits");
  require_same_dtype(ctx, 0, 1);
  require_rank(ctx, 2, 1, "labels");
  if (!is_integer(ctx.inputs[2].dtype) || ctx.inputs[2].shape[0] != ctx.inputs[1].shape[0])
    throw OpError{"labels must be i32 or i64 with one per row of logits " +
                      ctx.inputs[1].to_string() + ", got " + ctx.inputs[2].to_string(),
                  2};
  return {ctx.inputs[1]};
}

}  // namespace kiln::ir::type_rules
