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
// Each update may also take lr_scale and grad_scale (ir/optimizer_operands.h), which
// lr_schedule and grad_norm_clip compute from the step count and the gradients; a grad_scale
// of 0 (loss_scale_update's verdict on a step with an inf or NaN gradient) skips the update.
#include <limits>
#include <string>

#include "ir/ops/op_helpers.h"
#include "ir/optimizer_operands.h"
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

// A one-element i32, i64 or f32 operand: a step count.
void require_step(const InferContext& ctx, int input) {
  const TensorType& step = ctx.inputs[input];
  if (step.rank() > 1 || num_elements(step.shape) != 1 ||
      !(step.dtype == DType::I32 || step.dtype == DType::I64 || step.dtype == DType::F32))
    throw OpError{"step must be one i32, i64 or f32 element (shape [1] or []), got " +
                      step.to_string(),
                  input};
}

// The optional lr_scale and grad_scale operands: f32[1] each, at most two.
// `hint` ends the message about a wrong lr_scale.
void require_scales(const InferContext& ctx, const UpdateOperands& operands,
                    const std::string& hint = "") {
  if (operands.extra > 2)
    throw OpError{"takes at most two operands after its state (lr_scale, grad_scale), got " +
                      std::to_string(operands.extra),
                  operands.fixed + 2};
  for (int input : {operands.lr_scale, operands.grad_scale}) {
    if (input < 0) continue;
    const TensorType& scale = ctx.inputs[input];
    if (scale.dtype != DType::F32 || scale.shape != Shape{1})
      throw OpError{std::string(input == operands.lr_scale ? "lr_scale" : "grad_scale") +
                        " must be f32[1], got " + scale.to_string() +
                        (input == operands.lr_scale ? hint : ""),
                    input};
  }
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
  // Without momentum PyTorch keeps no buffer; with it, the buffer is the state to carry.
  const bool has_buffer = momentum != 0;
  const UpdateOperands operands = update_operands(OpId::SgdUpdate, has_buffer, ctx.inputs.size());
  if (operands.extra < 0)
    throw OpError{"momentum " + float_to_string(momentum) +
                      " needs a momentum_buffer operand (zeros before the first step)",
                  -1, "momentum"};
  if (has_buffer) require_same_type(ctx, 2, "momentum_buffer");
  // A buffer given with momentum 0 lands in lr_scale's place: the message says why.
  require_scales(ctx, operands,
                 has_buffer ? "" : " (a momentum_buffer operand is taken only when momentum != 0)");
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
  require_step(ctx, 4);
  require_scales(ctx, update_operands(OpId::AdamUpdate, false, ctx.inputs.size()));
  require_range(ctx, "lr", 0, kNoLimit);
  require_range(ctx, "beta1", 0, 1, /*open_high=*/true);
  require_range(ctx, "beta2", 0, 1, /*open_high=*/true);
  require_range(ctx, "eps", 0, kNoLimit);
  require_range(ctx, "weight_decay", 0, kNoLimit);
  const TensorType& param = ctx.inputs[0];
  return {checked_result(param.dtype, param.shape), param, param};
}

Types infer_lr_schedule(const InferContext& ctx) {
  require_step(ctx, 0);
  const int64_t warmup = ctx.get_int("warmup_steps");
  const int64_t total = ctx.get_int("total_steps");
  if (warmup < 0)
    throw OpError{"attribute 'warmup_steps' must be >= 0, got " + std::to_string(warmup), -1,
                  "warmup_steps"};
  if (ctx.get_string("decay") != "constant" && total <= warmup)
    throw OpError{"attribute 'total_steps' (" + std::to_string(total) +
                      ") must be larger than warmup_steps (" + std::to_string(warmup) +
                      ") for a decaying schedule",
                  -1, "total_steps"};
  require_range(ctx, "min_scale", 0, 1);
  return {TensorType{DType::F32, {1}}};
}

Types infer_grad_norm_clip(const InferContext& ctx) {
  for (size_t i = 0; i < ctx.inputs.size(); ++i) require_float(ctx, static_cast<int>(i));
  const double max_norm = ctx.get_float("max_norm");
  if (!(max_norm > 0) || max_norm == kNoLimit)
    throw OpError{"attribute 'max_norm' must be a finite number > 0, got " +
                      float_to_string(max_norm),
                  -1, "max_norm"};
  const TensorType scalar{DType::F32, {1}};
  if (ctx.get_bool("unscale") && (ctx.inputs[0] != scalar || ctx.inputs.size() < 2))
    throw OpError{"with unscale, operand 0 is the unscale factor (f32[1], got " +
                      ctx.inputs[0].to_string() + ") and at least one gradient follows it",
                  0, "unscale"};
  return {scalar, scalar};
}

Types infer_loss_scale_update(const InferContext& ctx) {
  const TensorType& scale = ctx.inputs[0];
  if (scale.dtype != DType::F32 || scale.rank() > 1 || num_elements(scale.shape) != 1)
    throw OpError{"scale must be one f32 element (shape [1] or []), got " + scale.to_string(), 0};
  const TensorType counter{DType::I32, {1}};
  for (int i : {1, 2})
    if (ctx.inputs[i] != counter)
      throw OpError{std::string(i == 1 ? "good_steps" : "skipped") + " must be i32[1], got " +
                        ctx.inputs[i].to_string(),
                    i};
  for (size_t i = 3; i < ctx.inputs.size(); ++i) require_float(ctx, static_cast<int>(i));
  require_range(ctx, "growth_factor", 1, kNoLimit);
  const double backoff = ctx.get_float("backoff_factor");
  if (!(backoff > 0 && backoff < 1))
    throw OpError{"attribute 'backoff_factor' must be in (0, 1), got " + float_to_string(backoff),
                  -1, "backoff_factor"};
  if (ctx.get_int("growth_interval") < 1)
    throw OpError{"attribute 'growth_interval' must be >= 1, got " +
                      std::to_string(ctx.get_int("growth_interval")),
                  -1, "growth_interval"};
  const TensorType factor{DType::F32, {1}};
  return {factor, factor, counter, counter};
}

Types infer_prune_mask(const InferContext& ctx) {
  require_float(ctx, 0);
  require_same_type(ctx, 1, "mask");
  require_step(ctx, 2);
  require_range(ctx, "sparsity", 0, 1, /*open_high=*/true);
  const int64_t start = ctx.get_int("start"), end = ctx.get_int("end");
  if (start < 1 || end < start)
    throw OpError{"attributes 'start' (" + std::to_string(start) + ") and 'end' (" +
                      std::to_string(end) + ") must satisfy 1 <= start <= end",
                  -1, start < 1 ? "start" : "end"};
  if (ctx.get_int("frequency") < 1)
    throw OpError{"attribute 'frequency' must be >= 1, got " +
                      std::to_string(ctx.get_int("frequency")),
                  -1, "frequency"};
  const TensorType& w = ctx.inputs[0];
  if (ctx.get_string("pattern") == "2:4") {
    const int64_t row = w.rank() < 2 ? 0 : num_elements(w.shape) / w.shape[0];
    if (row == 0 || row % 4 != 0)
      throw OpError{"pattern 2:4 needs rows (w viewed [dim 0, the rest]) a multiple of 4 long; " +
                        w.to_string() + " has rows of " + std::to_string(row),
                    0, "pattern"};
  }
  return {w};
}

Types infer_all_reduce(const InferContext& ctx) {
  Types results;
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    require_float(ctx, static_cast<int>(i));
    results.push_back(ctx.inputs[i]);
  }
  if (ctx.get_int("bucket") < 0)
    throw OpError{"attribute 'bucket' must be >= 0, got " + std::to_string(ctx.get_int("bucket")),
                  -1, "bucket"};
  return results;
}

Types infer_broadcast(const InferContext& ctx) {
  if (ctx.get_int("root") < 0)
    throw OpError{"attribute 'root' must be >= 0, got " + std::to_string(ctx.get_int("root")), -1,
                  "root"};
  return Types(ctx.inputs.begin(), ctx.inputs.end());
}

}  // namespace kiln::ir::type_rules
