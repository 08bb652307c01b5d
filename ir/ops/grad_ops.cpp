// Backward ops: what gradient rules (ir/gradients/) build where no forward op expresses the
// gradient in one node. Each takes the upstream gradient `dy` first, then what it saved from
// the forward pass (the input x, or the result y where the derivative is cheaper from it).
// They are ordinary ops: inferred, interpreted (runtime/reference/kernels_grad.cpp), costed,
// fused and memory-planned like the forward ones.
#include <algorithm>
#include <limits>
#include <string>

#include "ir/ops/op_helpers.h"

namespace kiln::ir {
namespace {

using ops::require_axis;
using ops::require_float;
using ops::require_rank;
using ops::require_same_dtype;
using Ints = std::vector<int64_t>;

// dy and the saved tensor have the same type, which is the result's.
std::vector<TensorType> infer_like_dy(const InferContext& ctx) {
  require_float(ctx, 0);
  require_same_dtype(ctx, 0, 1);
  if (ctx.inputs[1].shape != ctx.inputs[0].shape)
    throw OpError{"saved operand " + ctx.inputs[1].to_string() + " must have the shape of dy " +
                      ctx.inputs[0].to_string(),
                  1};
  return {ctx.inputs[0]};
}

void add_elementwise_grad(OpRegistry& registry, const char* name, const char* saved,
                          const char* summary, std::vector<AttrSpec> attrs = {},
                          InferFn infer = infer_like_dy) {
  registry.add(OpDef{name, summary, {"dy", saved}, 2, 2, std::move(attrs), OpKind::Elementwise,
                     std::move(infer)});
}

std::vector<TensorType> infer_broadcast_to(const InferContext& ctx) {
  const Ints& shape = ctx.get_ints("shape");
  for (int64_t dim : shape)
    if (dim < 1) throw OpError{"attribute 'shape' has a dim < 1: " + ops::ints_to_string(shape), -1, "shape"};
  std::optional<Shape> out = broadcast_shapes(ctx.inputs[0].shape, shape);
  if (!out || *out != shape)
    throw OpError{ctx.inputs[0].to_string() + " does not broadcast to " + shape_to_string(shape),
                  -1, "shape"};
  return {ops::checked_result(ctx.inputs[0].dtype, shape)};
}

// maximum_share / minimum_share: float a and b of one dtype, broadcast together.
std::vector<TensorType> infer_share(const InferContext& ctx) {
  require_float(ctx, 0);
  require_same_dtype(ctx, 0, 1);
  std::optional<Shape> out = broadcast_shapes(ctx.inputs[0].shape, ctx.inputs[1].shape);
  if (!out)
    throw OpError{"shapes " + shape_to_string(ctx.inputs[0].shape) + " and " +
                      shape_to_string(ctx.inputs[1].shape) + " cannot be broadcast together",
                  1};
  return {ops::checked_result(ctx.inputs[0].dtype, *out)};
}

// slice_grad: 'shape' is the forward slice's input; slicing it with the forward's attributes
// (normalized by the forward's inference) must give dy's shape.
std::vector<TensorType> infer_slice_grad(const InferContext& ctx) {
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

std::vector<TensorType> infer_softmax_like_grad(const InferContext& ctx) {
  std::vector<TensorType> out = infer_like_dy(ctx);
  require_axis(ctx.get_int("axis"), ctx.inputs[0].rank(), "axis");
  return out;
}

std::vector<TensorType> infer_softmax_cross_entropy_grad(const InferContext& ctx) {
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

}  // namespace

void register_grad_ops(OpRegistry& registry) {
  registry.add(OpDef{"broadcast_to", "x broadcast (NumPy rules) to 'shape'", {"x"}, 1, 1,
                     {{"shape", AttrType::Ints, std::nullopt}}, OpKind::Broadcast,
                     infer_broadcast_to});
  registry.add(OpDef{"scale", "x * factor (a compile-time constant)", {"x"}, 1, 1,
                     {{"factor", AttrType::Float, std::nullopt}}, OpKind::Elementwise,
                     [](const InferContext& ctx) {
                       require_float(ctx, 0);
                       return std::vector<TensorType>{ctx.inputs[0]};
                     }});

  add_elementwise_grad(registry, "relu_grad", "x", "dy where x > 0, else 0");
  add_elementwise_grad(registry, "leaky_relu_grad", "x", "dy where x > 0, else alpha * dy",
                       {{"alpha", AttrType::Float, 0.01}});
  add_elementwise_grad(registry, "sigmoid_grad", "y", "dy * y * (1 - y), y = sigmoid(x)");
  add_elementwise_grad(registry, "tanh_grad", "y", "dy * (1 - y^2), y = tanh(x)");
  add_elementwise_grad(registry, "gelu_grad", "x", "dy * gelu'(x) (erf form or tanh approximation)",
                       {{"approximate", AttrType::String, std::string("none")}},
                       [](const InferContext& ctx) {
                         const std::string& form = ctx.get_string("approximate");
                         if (form != "none" && form != "tanh")
                           throw OpError{"attribute 'approximate' must be \"none\" or \"tanh\"",
                                         -1, "approximate"};
                         return infer_like_dy(ctx);
                       });
  add_elementwise_grad(registry, "abs_grad", "x", "dy * sign(x) (0 at x = 0)");
  add_elementwise_grad(registry, "clip_grad", "x", "dy where min <= x <= max, else 0",
                       {{"min", AttrType::Float, -std::numeric_limits<double>::infinity()},
                        {"max", AttrType::Float, std::numeric_limits<double>::infinity()}});

  // The adjoint of slice: dy scattered into zeros of the forward input's shape. The forward's
  // attributes are copied with axes and steps spelled out (one per start).
  registry.add(OpDef{"slice_grad", "zeros of 'shape' with dy written at x[start:end:step]",
                     {"dy"}, 1, 1,
                     {{"shape", AttrType::Ints, std::nullopt},
                      {"starts", AttrType::Ints, std::nullopt},
                      {"ends", AttrType::Ints, std::nullopt},
                      {"axes", AttrType::Ints, std::nullopt},
                      {"steps", AttrType::Ints, std::nullopt}},
                     OpKind::Injective, infer_slice_grad});

  // The gradient of maximum(a, b) / minimum(a, b) with respect to a is dy times this share
  // (with respect to b: the share of (b, a)). Ties split dy evenly and NaN passes it whole to
  // both operands, as torch.maximum's backward does.
  registry.add(OpDef{"maximum_share",
                     "the share of maximum(a, b)'s gradient that flows to a: 1 where a > b, "
                     "1/2 where a == b, 0 where a < b (1 for NaN)",
                     {"a", "b"}, 2, 2, {}, OpKind::Broadcast, infer_share});
  registry.add(OpDef{"minimum_share",
                     "the share of minimum(a, b)'s gradient that flows to a: 1 where a < b, "
                     "1/2 where a == b, 0 where a > b (1 for NaN)",
                     {"a", "b"}, 2, 2, {}, OpKind::Broadcast, infer_share});

  registry.add(OpDef{"softmax_grad", "y * (dy - sum(dy * y)) along axis, y = softmax(x)",
                     {"dy", "y"}, 2, 2, {{"axis", AttrType::Int, int64_t{-1}}}, OpKind::Reduce,
                     infer_softmax_like_grad});
  registry.add(OpDef{"log_softmax_grad", "dy - exp(y) * sum(dy) along axis, y = log_softmax(x)",
                     {"dy", "y"}, 2, 2, {{"axis", AttrType::Int, int64_t{-1}}}, OpKind::Reduce,
                     infer_softmax_like_grad});
  registry.add(OpDef{"softmax_cross_entropy_grad",
                     "dy * (softmax(logits) - onehot(labels)) / N: the loss's logits gradient",
                     {"dy", "logits", "labels"}, 3, 3, {}, OpKind::Opaque,
                     infer_softmax_cross_entropy_grad});
}

}  // namespace kiln::ir
