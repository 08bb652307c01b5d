// Reference kernels for the optimizer updates (sgd_update, adam_update, adamw_update), written
// after the per-parameter loops of torch.optim.SGD / Adam / AdamW (foreach=False) so each line
// can be checked against PyTorch's source. Everything is in double; each result rounds once.
// lr_scale multiplies lr as torch's LambdaLR does; grad_scale multiplies the gradient before the
// update reads it, as torch.nn.utils.clip_grad_norm_ does in place; a grad_scale of 0 skips the
// update (loss_scale_update found an inf or NaN gradient: torch.amp.GradScaler.step).
#include <algorithm>
#include <cmath>
#include <numbers>

#include "ir/eval/kernel_util.h"
#include "ir/optimizer_operands.h"

namespace kiln::eval {
namespace {

using Inputs = std::vector<const ir::Tensor*>;
using Results = std::vector<ir::Tensor>;

// The learning rate and gradient factor of this step: 1 where the operand is absent.
struct Scales {
  double lr = 1;
  double grad = 1;
};

Scales scales(const Inputs& in, const ir::UpdateOperands& operands) {
  Scales result;
  if (operands.lr_scale >= 0) result.lr = in[operands.lr_scale]->get(0);
  if (operands.grad_scale >= 0) result.grad = in[operands.grad_scale]->get(0);
  return result;
}

// A skipped step: the parameter and its state as they were.
Results unchanged(const Inputs& in, const ir::UpdateOperands& operands) {
  Results results{*in[0]};
  for (int s = 0; s < operands.state_count; ++s) results.push_back(*in[operands.state + s]);
  return results;
}

// torch.optim.SGD, with the momentum buffer carried by the caller (zeros before step 1; see
// ir/ops/optimizer.cpp for why that matches PyTorch when dampening is 0).
Results sgd_update(const ir::Node& node, const Inputs& in) {
  const double momentum = ref::attr_float(node, "momentum");
  const double dampening = ref::attr_float(node, "dampening");
  const double weight_decay = ref::attr_float(node, "weight_decay");
  const bool nesterov = ref::attr_bool(node, "nesterov");
  const bool has_buffer = momentum != 0;
  const Scales scale = scales(in, ir::update_operands(node));
  if (scale.grad == 0) return unchanged(in, ir::update_operands(node));
  const double lr = ref::attr_float(node, "lr") * scale.lr;
  std::vector<double> param = in[0]->to_doubles();
  const std::vector<double> grad = in[1]->to_doubles();
  std::vector<double> buffer = has_buffer ? in[2]->to_doubles() : std::vector<double>();
  for (size_t i = 0; i < param.size(); ++i) {
    double d = grad[i] * scale.grad + weight_decay * param[i];
    if (has_buffer) {
      buffer[i] = momentum * buffer[i] + (1 - dampening) * d;
      d = nesterov ? d + momentum * buffer[i] : buffer[i];
    }
    param[i] -= lr * d;
  }
  Results results{ref::make_result(node, param)};
  if (has_buffer) results.push_back(ref::make_result(node, buffer, 1));
  return results;
}

// torch.optim.Adam (decoupled = false: weight decay joins the gradient) and AdamW (decoupled:
// the parameter decays by lr * weight_decay before the step).
Results adam_update(const ir::Node& node, const Inputs& in, bool decoupled) {
  const Scales scale = scales(in, ir::update_operands(node));
  if (scale.grad == 0) return unchanged(in, ir::update_operands(node));
  const double lr = ref::attr_float(node, "lr") * scale.lr;
  const double beta1 = ref::attr_float(node, "beta1");
  const double beta2 = ref::attr_float(node, "beta2");
  const double eps = ref::attr_float(node, "eps");
  const double weight_decay = ref::attr_float(node, "weight_decay");
  const double step = in[4]->get(0);
  // Step 0 would divide by a zero bias correction; on the GPU it silently makes NaNs.
  if (!(step >= 1)) ref::node_error(node, "step must be >= 1 (steps count from 1), got " +
                                              std::to_string(step));
  std::vector<double> param = in[0]->to_doubles();
  const std::vector<double> grad = in[1]->to_doubles();
  std::vector<double> m = in[2]->to_doubles();
  std::vector<double> v = in[3]->to_doubles();
  const double bias_correction1 = 1 - std::pow(beta1, step);
  const double bias_correction2 = 1 - std::pow(beta2, step);
  const double step_size = lr / bias_correction1;
  for (size_t i = 0; i < param.size(); ++i) {
    double g = grad[i] * scale.grad;
    if (decoupled)
      param[i] *= 1 - lr * weight_decay;
    else
      g += weight_decay * param[i];
    m[i] = beta1 * m[i] + (1 - beta1) * g;
    v[i] = beta2 * v[i] + (1 - beta2) * g * g;
    const double denom = std::sqrt(v[i]) / std::sqrt(bias_correction2) + eps;
    param[i] -= step_size * m[i] / denom;
  }
  return {ref::make_result(node, param), ref::make_result(node, m, 1),
          ref::make_result(node, v, 2)};
}

// The factor of the step as torch.optim.lr_scheduler counts it: k = step - 1 steps already
// taken. A linear warmup, (k + 1) / warmup while k < warmup (LinearLR from 1 / warmup), then
// a decay from 1 at k = warmup to min_scale at k = total_steps, and min_scale after it
// (CosineAnnealingLR or LinearLR, chained by SequentialLR at milestone warmup).
Results lr_schedule(const ir::Node& node, const Inputs& in) {
  const double taken = in[0]->get(0) - 1;
  const auto warmup = static_cast<double>(ref::attr_int(node, "warmup_steps"));
  const auto total = static_cast<double>(ref::attr_int(node, "total_steps"));
  const double min_scale = ref::attr_float(node, "min_scale");
  const std::string& decay = ref::attr<std::string>(node, "decay");
  double factor = 1;
  if (taken < warmup) {
    factor = (taken + 1) / warmup;
  } else if (decay != "constant") {
    const double progress = std::clamp((taken - warmup) / (total - warmup), 0.0, 1.0);
    const double shape = decay == "cosine" ? 0.5 * (1 + std::cos(std::numbers::pi * progress))
                                           : 1 - progress;
    factor = min_scale + (1 - min_scale) * shape;
  }
  return {ref::make_result(node, {factor})};
}

// torch.nn.utils.clip_grad_norm_(max_norm, norm_type=2): the norm of the concatenated
// gradients, and the factor min(1, max_norm / (norm + 1e-6)) that they are multiplied by.
// With unscale, in[0] is loss scaling's factor u: the gradients' norm is u times theirs (what
// torch's GradScaler.unscale_ leaves for the clip), and the factor takes u in.
Results grad_norm_clip(const ir::Node& node, const Inputs& in) {
  const bool unscale = ref::attr_bool(node, "unscale");
  double sum_of_squares = 0;
  for (size_t k = unscale ? 1 : 0; k < in.size(); ++k)
    for (double g : in[k]->to_doubles()) sum_of_squares += g * g;
  const double u = unscale ? in[0]->get(0) : 1.0;
  const double norm = std::sqrt(sum_of_squares) * u;
  double scale = std::min(1.0, ref::attr_float(node, "max_norm") / (norm + 1e-6)) * u;
  if (u == 0) scale = 0;  // a skipped step stays skipped, whatever the norm (NaN, inf * 0)
  return {ref::make_result(node, {scale}), ref::make_result(node, {norm}, 1)};
}

// torch.amp.GradScaler's unscale_ and update: found_inf over every gradient, then the factor
// the updates read and the scaler's next state.
Results loss_scale_update(const ir::Node& node, const Inputs& in) {
  const double scale = in[0]->get(0);
  const auto good_steps = static_cast<int64_t>(in[1]->get(0));
  const auto skipped = static_cast<int64_t>(in[2]->get(0));
  bool finite = true;
  for (size_t k = 3; k < in.size() && finite; ++k)
    for (double g : in[k]->to_doubles()) finite = finite && std::isfinite(g);
  // The scale is f32 state: its arithmetic rounds to f32 as the CUDA kernel's does (powers of
  // two with the default factors, so exact either way).
  auto f32 = [](double x) { return static_cast<double>(static_cast<float>(x)); };
  double factor = 0, next_scale = 0;
  int64_t next_good = 0, next_skipped = skipped;
  if (!finite) {
    next_scale = f32(scale * ref::attr_float(node, "backoff_factor"));
    next_skipped = skipped + 1;
  } else {
    factor = f32(1 / scale);
    next_good = good_steps + 1;
    next_scale = scale;
    if (next_good >= ref::attr_int(node, "growth_interval")) {
      // Never past f32's range to inf, from which no backoff returns (torch keeps it too).
      const double grown = f32(scale * ref::attr_float(node, "growth_factor"));
      if (std::isfinite(grown)) next_scale = grown;
      next_good = 0;
    }
  }
  return {ref::make_result(node, {factor}), ref::make_result(node, {next_scale}, 1),
          ref::make_result(node, {static_cast<double>(next_good)}, 2),
          ref::make_result(node, {static_cast<double>(next_skipped)}, 3)};
}

// Gradual magnitude pruning's mask (ir/ops.def): written from the definition, by sorting.
Results prune_mask(const ir::Node& node, const Inputs& in) {
  const double step = in[2]->get(0);
  const auto start = static_cast<double>(ref::attr_int(node, "start"));
  const auto end = static_cast<double>(ref::attr_int(node, "end"));
  const auto frequency = static_cast<double>(ref::attr_int(node, "frequency"));
  if (step < start || step > end || (std::fmod(step - start, frequency) != 0 && step != end))
    return {*in[1]};
  const std::vector<double> w = in[0]->to_doubles();
  std::vector<double> mask = in[1]->to_doubles();
  const auto n = static_cast<int64_t>(w.size());
  if (ref::attr<std::string>(node, "pattern") == "2:4") {
    for (int64_t group = 0; group < n; group += 4)
      for (int64_t i = group; i < group + 4; ++i) {
        int beaten = 0;  // by larger magnitudes, or equal ones at lower indices
        for (int64_t j = group; j < group + 4; ++j)
          beaten += std::abs(w[j]) > std::abs(w[i]) || (std::abs(w[j]) == std::abs(w[i]) && j < i);
        mask[i] = beaten < 2 ? 1 : 0;
      }
    return {ref::make_result(node, mask)};
  }
  const double progress = end == start ? 1 : (step - start) / (end - start);
  const double remaining = 1 - progress;
  const double sparsity = ref::attr_float(node, "sparsity") * (1 - remaining * remaining * remaining);
  const auto k = static_cast<int64_t>(std::floor(sparsity * static_cast<double>(n)));
  // The largest threshold t with at most k magnitudes <= t (NaNs are never pruned).
  std::vector<double> magnitudes;
  for (double x : w)
    if (!std::isnan(x)) magnitudes.push_back(std::abs(x));
  std::sort(magnitudes.begin(), magnitudes.end());
  double threshold = -1;  // none: prune nothing
  for (size_t i = 0; i < magnitudes.size(); ++i) {
    const auto at_most = std::upper_bound(magnitudes.begin(), magnitudes.end(), magnitudes[i]) -
                         magnitudes.begin();
    if (at_most > k) break;
    threshold = magnitudes[i];
  }
  for (int64_t i = 0; i < n; ++i)
    if (std::abs(w[i]) <= threshold) mask[i] = 0;
  return {ref::make_result(node, mask)};
}

// The evaluator is one process: the mean over one rank, and the root's value, is each input.
Results all_reduce(const ir::Node&, const Inputs& in) {
  Results results;
  for (const ir::Tensor* x : in) results.push_back(*x);
  return results;
}

}  // namespace

void add_optimizer_kernels(KernelTable& table) {
  table[ir::OpId::AllReduce] = all_reduce;
  table[ir::OpId::Broadcast] = all_reduce;
  table[ir::OpId::LrSchedule] = lr_schedule;
  table[ir::OpId::GradNormClip] = grad_norm_clip;
  table[ir::OpId::LossScaleUpdate] = loss_scale_update;
  table[ir::OpId::PruneMask] = prune_mask;
  table[ir::OpId::SgdUpdate] = sgd_update;
  table[ir::OpId::AdamUpdate] = [](const ir::Node& node, const Inputs& in) {
    return adam_update(node, in, /*decoupled=*/false);
  };
  table[ir::OpId::AdamwUpdate] = [](const ir::Node& node, const Inputs& in) {
    return adam_update(node, in, /*decoupled=*/true);
  };
}

}  // namespace kiln::eval
