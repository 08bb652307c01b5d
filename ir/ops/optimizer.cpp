// Optimizer updates: one training step of SGD, Adam or AdamW for one parameter.
//
// The ops are pure, like every other op: they take the parameter, its gradient and its state
// and return the updated tensors, so memory planning (not the op) decides whether an update
// writes in place. The semantics are torch.optim's (docs/ops.md has the formulas). Two choices:
//   - sgd_update has no notion of a first step. PyTorch sets the momentum buffer to the
//     gradient on step 1; here the caller starts the buffer at zeros and every step computes
//     buf = momentum * buf + (1 - dampening) * grad, which is the same thing when dampening is
//     0 (PyTorch's default) and differs only on step 1 otherwise.
//   - adam_update/adamw_update read the 1-based step count from a one-element tensor at run
//     time, so the bias corrections 1 - beta^step need no recompilation per step.
// They never fuse with other ops (kind opaque); codegen batches all the updates of a step into
// one multi-tensor kernel instead (ir/kernel_region.h, kind "multi_update").
#include <limits>
#include <string>

#include "ir/ops/op_helpers.h"
#include "ir/ops/type_rules.h"

namespace kiln::ir::type_rules {
namespace {

using ops::checked_result;
using ops::require_float;

void require_same_type(const InferContext& ctx, int input, const char* role) {
  if (ctx.inputs[input] != ctx.inputs[0])
    throw OpError{std::string(role) + " " + ctx.inputs[input].to_string() +
                      " must have the same type as param " + ctx.inputs[0].to_string(),
                  input};
}

constexpr double kNoLimit = std::numeric_limits<double>::infinity();

// Attribute `name` must lie in [low, high] (high exclusive when `open_high`); NaN never does.
void require_range(const InferContext& ctx, const std::string& name, double low, double high,
                   bool open_high = false) {
  const double value = ctx.get_float(name);
  const bool inside = value >= low && (open_high ? value < high : value <= high);
  if (inside) return;
  const std::string range = high == kNoLimit ? ">= " + float_to_string(low)
                                             : "in [" + float_to_string(low) + ", " +
                                                   float_to_string(high) + (open_high ? ")" : "]");
  throw OpError{"attribute '" + name + "' must be " + range + ", got " + float_to_string(value),
                -1, name};
}

}  // namespace

Types infer_sgd(const InferContext& ctx) {
  require_float(ctx, 0);
  require_same_type(ctx, 1, "grad");
  require_range(ctx, "lr", 0, kNoLimit);
  require_range(ctx, "momentum", 0, kNoLimit);
  require_range(ctx, "weight_decay", 0, kNoLimit);
  require_range(ctx, "dampening", 0, 1);
  const double momentum = ctx.get_float("momentum");
  const bool has_buffer = ctx.inputs.size() == 3;
  // Without momentum PyTorch keeps no buffer; with it, the buffer is the state to carry.
  if (momentum != 0 && !has_buffer)
    throw OpError{"momentum " + float_to_string(momentum) +
                      " needs a momentum_buffer operand (zeros before the first step)",
                  -1, "momentum"};
  if (momentum == 0 && has_buffer)
    throw OpError{"momentum_buffer is unused when momentum is 0", 2};
  if (has_buffer) require_same_type(ctx, 2, "momentum_buffer");
  if (ctx.get_bool("nesterov") && (momentum == 0 || ctx.get_float("dampening") != 0))
    throw OpError{"nesterov momentum requires momentum > 0 and dampening 0 (as in torch.optim.SGD)",
                  -1, "nesterov"};
  std::vector<TensorType> results{checked_result(ctx.inputs[0].dtype, ctx.inputs[0].shape)};
  if (has_buffer) results.push_back(ctx.inputs[0]);
  return results;
}

Types infer_adam(const InferContext& ctx) {
  require_float(ctx, 0);
  require_same_type(ctx, 1, "grad");
  require_same_type(ctx, 2, "m");
  require_same_type(ctx, 3, "v");
  const TensorType& step = ctx.inputs[4];
  if (step.rank() > 1 || num_elements(step.shape) != 1 ||
      !(step.dtype == DType::I32 || step.dtype == DType::I64 || step.dtype == DType::F32))
    throw OpError{"step must be one i32, i64 or f32 element (shape [1] or []), got " +
                      step.to_string(),
                  4};
  require_range(ctx, "lr", 0, kNoLimit);
  require_range(ctx, "beta1", 0, 1, /*open_high=*/true);
  require_range(ctx, "beta2", 0, 1, /*open_high=*/true);
  require_range(ctx, "eps", 0, kNoLimit);
  require_range(ctx, "weight_decay", 0, kNoLimit);
  const TensorType& param = ctx.inputs[0];
  return {checked_result(param.dtype, param.shape), param, param};
}

}  // namespace kiln::ir::type_rules
