#include "ir/ops/op_helpers.h"

namespace kiln::ir::ops {

namespace {
std::string type_text(const InferContext& ctx, int input) {
  return ctx.inputs[input].to_string();
}
}  // namespace

void require_float(const InferContext& ctx, int input) {
  if (!is_floating(ctx.inputs[input].dtype))
    throw OpError{"operand " + std::to_string(input) + " must be a float tensor (f32, f16, bf16), got " +
                      type_text(ctx, input),
                  input};
}

void require_numeric(const InferContext& ctx, int input) {
  if (ctx.inputs[input].dtype == DType::Bool)
    throw OpError{"operand " + std::to_string(input) + " must be numeric, got " +
                      type_text(ctx, input),
                  input};
}

void require_rank(const InferContext& ctx, int input, int rank, const char* role) {
  if (ctx.inputs[input].rank() != rank)
    throw OpError{std::string(role) + " must have rank " + std::to_string(rank) + ", got " +
                      type_text(ctx, input),
                  input};
}

void require_same_dtype(const InferContext& ctx, int a, int b) {
  if (ctx.inputs[a].dtype != ctx.inputs[b].dtype)
    throw OpError{"operands must have the same dtype, got " + type_text(ctx, a) + " and " +
                      type_text(ctx, b),
                  b};
}

std::string operand_name(const OpDef& def, int input) {
  if (def.input_names.empty()) return "operand " + std::to_string(input);
  const size_t i = std::min<size_t>(input, def.input_names.size() - 1);
  return "operand " + std::to_string(input) + " ('" + def.input_names[i] + "')";
}

}  // namespace kiln::ir::ops
