#include "ir/ops/op_helpers.h"

#include <algorithm>

#include "ir/attribute.h"  // float_to_string

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

void require_float_operands(const InferContext& ctx) {
  require_float(ctx, 0);
  for (int i = 1; i < static_cast<int>(ctx.inputs.size()); ++i) require_same_dtype(ctx, 0, i);
}

void require_epsilon(const InferContext& ctx) {
  const double epsilon = ctx.get_float("epsilon");
  if (!(epsilon >= 0.0))  // also rejects NaN
    throw OpError{"attribute 'epsilon' must be >= 0, got " + float_to_string(epsilon), -1,
                  "epsilon"};
}

std::string str(int64_t value) { return std::to_string(value); }

std::string operand_name(const OpDef& def, int input) {
  if (def.input_names.empty()) return "operand " + std::to_string(input);
  const size_t i = std::min<size_t>(input, def.input_names.size() - 1);
  return "operand " + std::to_string(input) + " ('" + def.input_names[i] + "')";
}

std::string ints_to_string(const std::vector<int64_t>& values) {
  return attribute_to_string(Attribute{values});
}

int require_axis(int64_t axis, int rank, const std::string& attr) {
  std::optional<int> normalized = normalize_axis(axis, rank);
  if (!normalized)
    throw OpError{"axis " + std::to_string(axis) + " is out of range for rank " +
                      std::to_string(rank),
                  -1, attr};
  return *normalized;
}

std::vector<int> require_axes(const std::vector<int64_t>& axes, int rank,
                              const std::string& attr) {
  std::vector<int> normalized;
  std::vector<bool> seen(rank, false);
  for (int64_t axis : axes) {
    const int a = require_axis(axis, rank, attr);
    if (seen[a])
      throw OpError{"attribute '" + attr + "' names axis " + std::to_string(a) + " twice, got " +
                        ints_to_string(axes),
                    -1, attr};
    seen[a] = true;
    normalized.push_back(a);
  }
  return normalized;
}

TensorType checked_result(DType dtype, Shape shape) {
  if (!checked_num_elements(shape))
    throw OpError{"result shape " + shape_to_string(shape) + " has more than 2^48 elements"};
  return TensorType{dtype, std::move(shape)};
}

}  // namespace kiln::ir::ops
