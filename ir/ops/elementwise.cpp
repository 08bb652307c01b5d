// Type rules of the elementwise and broadcasting ops: arithmetic, activations, unary math,
// clip, cast, dropout.
#include <limits>

#include "ir/ops/op_helpers.h"
#include "ir/ops/type_rules.h"

namespace kiln::ir::type_rules {
namespace {

using ops::require_float;
using ops::require_numeric;
using ops::require_same_dtype;

}  // namespace

Types infer_binary(const InferContext& ctx) {
  require_numeric(ctx, 0);
  require_numeric(ctx, 1);
  require_same_dtype(ctx, 0, 1);
  const Shape& a = ctx.inputs[0].shape;
  const Shape& b = ctx.inputs[1].shape;
  std::optional<Shape> out = broadcast_shapes(a, b);
  if (!out)
    throw OpError{"shapes " + shape_to_string(a) + " and " + shape_to_string(b) +
                      " cannot be broadcast together",
                  1};
  return {TensorType{ctx.inputs[0].dtype, *out}};
}

Types infer_float_binary(const InferContext& ctx) {
  require_float(ctx, 0);
  require_float(ctx, 1);
  require_same_dtype(ctx, 0, 1);
  return infer_binary(ctx);
}

Types infer_unsigned_binary(const InferContext& ctx) {
  for (int input : {0, 1})
    if (!is_unsigned(ctx.inputs[input].dtype))
      throw OpError{"operand " + std::to_string(input) + " must be an unsigned integer (u8, u16, u32, u64), got " +
                        ctx.inputs[input].to_string(),
                    input};
  require_same_dtype(ctx, 0, 1);
  return infer_binary(ctx);
}

Types infer_float_unary(const InferContext& ctx) {
  require_float(ctx, 0);
  return {ctx.inputs[0]};
}

Types infer_numeric_unary(const InferContext& ctx) {
  require_numeric(ctx, 0);
  return {ctx.inputs[0]};
}

Types infer_clip(const InferContext& ctx) {
  if (ctx.get_float("min") > ctx.get_float("max"))
    throw OpError{"attribute 'min' (" + float_to_string(ctx.get_float("min")) +
                      ") is greater than 'max' (" + float_to_string(ctx.get_float("max")) + ")",
                  -1, "min"};
  return infer_numeric_unary(ctx);
}

Types infer_cast(const InferContext& ctx) {
  std::optional<DType> to = parse_dtype(ctx.get_string("to"));
  if (!to)
    throw OpError{"attribute 'to' must be a dtype (" + std::string(dtype_names_list()) + "), got \"" +
                      ctx.get_string("to") + "\"",
                  -1, "to"};
  return {TensorType{*to, ctx.inputs[0].shape}};
}

Types infer_dropout(const InferContext& ctx) {
  const double rate = ctx.get_float("rate");
  if (!(rate >= 0.0 && rate < 1.0))
    throw OpError{"attribute 'rate' must be in [0, 1), got " + float_to_string(rate), -1, "rate"};
  const bool training = ctx.get_bool("training");
  if (training && ctx.inputs.size() != 2)
    throw OpError{"dropout in training mode needs a step operand (i32[1] or i64[1]: the step "
                  "counter its random stream reads)"};
  if (!training && ctx.inputs.size() == 2)
    throw OpError{"the step operand is only read in training mode", 1};
  if (training) {
    const TensorType& step = ctx.inputs[1];
    if (num_elements(step.shape) != 1 || step.rank() > 1 ||
        !(step.dtype == DType::I32 || step.dtype == DType::I64))
      throw OpError{"step must be one i32 or i64 element, got " + step.to_string(), 1};
  }
  return infer_float_unary(ctx);
}

}  // namespace kiln::ir::type_rules
