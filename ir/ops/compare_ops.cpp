// Type rules of the comparisons, logic ops, where, the float predicates (is_nan, is_inf), the
// arg reductions (argmax, argmin) and gather_elements.
#include <string>

#include "ir/ops/op_helpers.h"
#include "ir/ops/type_rules.h"

namespace kiln::ir::type_rules {
namespace {

using ops::require_axis;
using ops::require_float;
using ops::require_numeric;
using ops::require_same_dtype;

// The NumPy broadcast of every operand's shape, or an OpError at the first that does not fit.
Shape broadcast_all(const InferContext& ctx) {
  Shape out = ctx.inputs[0].shape;
  for (size_t i = 1; i < ctx.inputs.size(); ++i) {
    std::optional<Shape> next = broadcast_shapes(out, ctx.inputs[i].shape);
    if (!next)
      throw OpError{"shapes " + shape_to_string(out) + " and " +
                        shape_to_string(ctx.inputs[i].shape) + " cannot be broadcast together",
                    static_cast<int>(i)};
    out = *next;
  }
  return out;
}

void require_bool(const InferContext& ctx, int input) {
  if (ctx.inputs[input].dtype != DType::Bool)
    throw OpError{"operand " + std::to_string(input) + " must be a bool tensor, got " +
                      ctx.inputs[input].to_string(),
                  input};
}

}  // namespace

Types infer_compare(const InferContext& ctx) {
  require_same_dtype(ctx, 0, 1);
  return {TensorType{DType::Bool, broadcast_all(ctx)}};
}

Types infer_logical(const InferContext& ctx) {
  for (int i = 0; i < static_cast<int>(ctx.inputs.size()); ++i) require_bool(ctx, i);
  return {TensorType{DType::Bool, broadcast_all(ctx)}};
}

Types infer_where(const InferContext& ctx) {
  require_bool(ctx, 0);
  require_same_dtype(ctx, 1, 2);
  return {TensorType{ctx.inputs[1].dtype, broadcast_all(ctx)}};
}

Types infer_float_predicate(const InferContext& ctx) {
  require_float(ctx, 0);
  return {TensorType{DType::Bool, ctx.inputs[0].shape}};
}

Types infer_arg_reduce(const InferContext& ctx) {
  require_numeric(ctx, 0);
  const TensorType& x = ctx.inputs[0];
  if (x.rank() == 0) throw OpError{"x must have at least one dim, got " + x.to_string(), 0};
  const int axis = require_axis(ctx.get_int("axis"), x.rank(), "axis");
  Shape out;
  for (int d = 0; d < x.rank(); ++d) {
    if (d != axis) out.push_back(x.shape[d]);
    else if (ctx.get_bool("keepdims")) out.push_back(1);
  }
  return {TensorType{DType::I64, std::move(out)}};
}

namespace {

// gather and gather_elements: integer indices into an x of at least one dim.
void require_gather_operands(const InferContext& ctx) {
  const TensorType& x = ctx.inputs[0];
  const TensorType& indices = ctx.inputs[1];
  if (indices.dtype != DType::I32 && indices.dtype != DType::I64)
    throw OpError{"indices must be i32 or i64, got " + indices.to_string(), 1};
  if (x.rank() == 0) throw OpError{"x must have at least one dim, got " + x.to_string(), 0};
}

}  // namespace

Types infer_gather(const InferContext& ctx) {
  require_gather_operands(ctx);
  const TensorType& x = ctx.inputs[0];
  const TensorType& indices = ctx.inputs[1];
  const int axis = require_axis(ctx.get_int("axis"), x.rank(), "axis");
  Shape shape(x.shape.begin(), x.shape.begin() + axis);
  shape.insert(shape.end(), indices.shape.begin(), indices.shape.end());
  shape.insert(shape.end(), x.shape.begin() + axis + 1, x.shape.end());
  return {ops::checked_result(x.dtype, shape)};
}

Types infer_gather_elements(const InferContext& ctx) {
  require_gather_operands(ctx);
  const TensorType& x = ctx.inputs[0];
  const TensorType& indices = ctx.inputs[1];
  if (indices.rank() != x.rank())
    throw OpError{"indices must have x's rank " + std::to_string(x.rank()) + ", got " +
                      indices.to_string(),
                  1};
  const int axis = require_axis(ctx.get_int("axis"), x.rank(), "axis");
  for (int d = 0; d < x.rank(); ++d)
    if (d != axis && indices.shape[d] > x.shape[d])
      throw OpError{"indices " + indices.to_string() + " are larger than x " + x.to_string() +
                        " in dim " + std::to_string(d) + " (only the axis may differ freely)",
                    1};
  return {TensorType{x.dtype, indices.shape}};
}

}  // namespace kiln::ir::type_rules
