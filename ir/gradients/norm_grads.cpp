// Gradient rules of layer_norm, rms_norm and batch_norm_train (ir/ops/nn.cpp,
// ir/ops/norm_train_ops.cpp).
//
// Both differentiate into their backward ops, which recompute xhat = (x - mean) * inv_std from
// x (layer_norm: its own row statistics; batch_norm_train: the statistics it returned) and
// apply the usual formula (Ioffe & Szegedy 2015, section 3; PyTorch's native_*_norm_backward):
//   dx = inv_std * (g - mean(g) - xhat * mean(g * xhat)),   g = dy * scale,
// with the means over what was normalized together. The parameter gradients are sums over the
// other dims: dscale = sum(dy * xhat), dbias = sum(dy). rms_norm normalizes without centring
// (mean taken as 0), so its dx drops the -mean(g) term: inv_rms * (g - xhat * mean(g * xhat)).
#include "ir/gradients/gradients.h"

namespace kiln::ir::gradients {
namespace {

using Grads = std::vector<Value*>;
using Ints = std::vector<int64_t>;

// layer_norm over dims axis..: layer_norm_grad gives dx and dy * xhat; summing those and dy
// over the leading (row) dims gives dscale and dbias. rms_norm: rms_norm_grad, and no bias.
Grads layer_norm_rule(GradBuilder& b, const Node& n, const Grads& dy) {
  Value* x = n.inputs[0];
  const int axis = *normalize_axis(std::get<int64_t>(n.attrs.at("axis")), x->type.rank());
  const bool centred = n.op == OpId::LayerNorm;
  const std::vector<Value*> backward = b.op_results(
      centred ? OpId::LayerNormGrad : OpId::RmsNormGrad, {dy[0], x, n.inputs[1]},
      {{"axis", int64_t{axis}}, {"epsilon", n.attrs.at("epsilon")}});
  Ints rows;
  for (int d = 0; d < axis; ++d) rows.push_back(d);
  auto sum_rows = [&](Value* v) {
    return rows.empty() ? v : b.op(OpId::ReduceSum, {v}, {{"axes", rows}});
  };
  if (!centred) return {backward[0], sum_rows(backward[1])};
  return {backward[0], sum_rows(backward[1]), sum_rows(dy[0])};
}

// batch_norm_train: results y, batch_mean, batch_var. The loss normally reads y only (the
// statistics feed the running averages, which are not differentiated, as in PyTorch); should it
// read the statistics too, their gradients flow into x through
//   d mean / dx = 1 / M,   d var / dx = 2 (x - mean) / M   (M values per channel).
// Running statistics are not operands of batch_norm_train, so they never get a gradient.
Grads batch_norm_train_rule(GradBuilder& b, const Node& n, const Grads& dy) {
  Value* x = n.inputs[0];
  Value* mean = n.results[1];
  const Shape& xs = x->type.shape;
  const double count = static_cast<double>(num_elements(xs) / xs[1]);
  Grads grads = {nullptr, nullptr, nullptr};
  if (dy[0] != nullptr) {
    const std::vector<Value*> backward =
        b.op_results(OpId::BatchNormTrainGrad, {dy[0], x, n.inputs[1], mean, n.results[2]},
                     {{"epsilon", n.attrs.at("epsilon")}});
    grads = backward;
  }
  // [C] -> [1, C, 1, ...] -> the shape of x.
  Shape keep(xs.size(), 1);
  keep[1] = xs[1];
  auto per_element = [&](Value* channel) { return b.expand_reduced(channel, keep, xs); };
  auto add_to_dx = [&](Value* term) {
    grads[0] = grads[0] == nullptr ? term : b.op(OpId::Add, {grads[0], term});
  };
  if (dy[1] != nullptr) add_to_dx(b.scale(per_element(dy[1]), 1.0 / count));
  if (dy[2] != nullptr) {
    Value* centred = b.op(OpId::Sub, {x, per_element(mean)});
    add_to_dx(b.scale(b.op(OpId::Mul, {per_element(dy[2]), centred}), 2.0 / count));
  }
  return grads;
}

}  // namespace

void add_norm_rules(OpRegistry& registry) {
  set_rule(registry, OpId::LayerNorm,
           "(dx, dy * xhat) = layer_norm_grad(dy, x, scale); dscale = dy * xhat and dbias = dy, "
           "each summed over the rows",
           layer_norm_rule);
  set_rule(registry, OpId::RmsNorm,
           "(dx, dy * xhat) = rms_norm_grad(dy, x, scale); dscale = dy * xhat summed over the rows",
           layer_norm_rule);
  set_rule(registry, OpId::BatchNormTrain,
           "batch_norm_train_grad(dy, x, scale, batch_mean, batch_var) for dy of y; the gradients "
           "of batch_mean and batch_var (where used) added to dx",
           batch_norm_train_rule);
}

}  // namespace kiln::ir::gradients
