// Backward ops of the window ops (conv2d, max_pool2d, avg_pool2d): what their gradient rules
// (ir/gradients/nn_grads.cpp) build. Each takes the upstream gradient dy first and carries the
// forward's attributes unchanged, plus 'shape' (the forward operand the result is the gradient
// of) where no operand has that shape.
//
// Inference re-runs the forward op's own inference on the reconstructed forward operands and
// requires dy to have the forward result's shape: one definition of the window arithmetic
// (ir/ops/nn.cpp), and every forward error (bad stride, groups, padding) reported the same way.
#include <string>

#include "ir/ops/op_helpers.h"
#include "ir/ops/type_rules.h"

namespace kiln::ir::type_rules {
namespace {

using ops::require_float;
using ops::require_rank;
using ops::require_same_dtype;
using Ints = std::vector<int64_t>;

// The forward op `op` applied to `inputs` with the attrs of ctx named in `names`; dy (operand 0)
// must have its result's shape and dtype.
void require_forward_matches(const InferContext& ctx, const char* op,
                             const std::vector<TensorType>& inputs,
                             const std::vector<const char*>& names) {
  AttrMap attrs;
  for (const char* name : names) attrs[name] = ctx.attrs.at(name);
  const OpDef* def = OpRegistry::instance().find(op);
  TensorType y;
  try {
    y = infer_op(*def, inputs, attrs).at(0);
  } catch (const OpError& error) {
    // The forward's operand numbers are not ours: point at the attribute, or at nothing.
    throw OpError{std::string("as the forward ") + op + ": " + error.message, -1, error.attr};
  }
  if (ctx.inputs[0].shape != y.shape)
    throw OpError{"dy " + ctx.inputs[0].to_string() + " must have the shape of the forward " +
                      op + " result " + y.to_string(),
                  0};
}

// 'shape' as an NCHW tensor of dy's dtype.
TensorType shape_attr_type(const InferContext& ctx) {
  const Ints& shape = ctx.get_ints("shape");
  if (shape.size() != 4)
    throw OpError{"attribute 'shape' must have 4 values (NCHW), got " +
                      ops::ints_to_string(shape),
                  -1, "shape"};
  for (int64_t dim : shape)
    if (dim < 1)
      throw OpError{"attribute 'shape' has a dim < 1: " + ops::ints_to_string(shape), -1, "shape"};
  return ops::checked_result(ctx.inputs[0].dtype, shape);
}

const std::vector<const char*> kConvAttrs = {"stride", "pad", "dilation", "groups"};

// conv2d_grad_input(dy, weight): dx of the forward input, whose shape is 'shape'.
}  // namespace

Types infer_conv2d_grad_input(const InferContext& ctx) {
  require_rank(ctx, 0, 4, "dy");
  require_float(ctx, 0);
  require_same_dtype(ctx, 0, 1);
  const TensorType x = shape_attr_type(ctx);
  require_forward_matches(ctx, "conv2d", {x, ctx.inputs[1]}, kConvAttrs);
  return {x};
}

namespace {

// conv2d_grad_weight(dy, x): dweight, whose shape is 'shape'.
}  // namespace

Types infer_conv2d_grad_weight(const InferContext& ctx) {
  require_rank(ctx, 0, 4, "dy");
  require_float(ctx, 0);
  require_same_dtype(ctx, 0, 1);
  const TensorType w = shape_attr_type(ctx);
  require_forward_matches(ctx, "conv2d", {ctx.inputs[1], w}, kConvAttrs);
  const int64_t chunk = ctx.get_int("k_chunk");
  if (chunk < 0) throw OpError{"attribute 'k_chunk' must be >= 0, got " + std::to_string(chunk), -1, "k_chunk"};
  if (chunk == 0) return {w};
  // Split-K: one partial weight per chunk of the batch pixels.
  const ir::Shape& dy = ctx.inputs[0].shape;
  const int64_t pixels = dy[0] * dy[2] * dy[3];
  ir::Shape partials{(pixels + chunk - 1) / chunk};
  partials.insert(partials.end(), w.shape.begin(), w.shape.end());
  return {ops::checked_result(accumulation_dtype(w.dtype), partials)};
}

Types infer_max_pool2d_grad(const InferContext& ctx) {
  require_rank(ctx, 0, 4, "dy");
  require_float(ctx, 0);
  require_same_dtype(ctx, 0, 1);
  require_forward_matches(ctx, "max_pool2d", {ctx.inputs[1]},
                          {"kernel", "stride", "pad", "dilation"});
  return {ctx.inputs[1]};
}

Types infer_avg_pool2d_grad(const InferContext& ctx) {
  require_rank(ctx, 0, 4, "dy");
  require_float(ctx, 0);
  const TensorType x = shape_attr_type(ctx);
  require_forward_matches(ctx, "avg_pool2d", {x}, {"kernel", "stride", "pad", "count_include_pad"});
  return {x};
}

}  // namespace kiln::ir::type_rules
