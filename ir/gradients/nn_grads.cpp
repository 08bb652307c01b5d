// Gradient rules of the neural-network ops and losses (ir/ops/nn.cpp, ir/ops/loss.cpp).
//
// Products differentiate into products (dense and matmul into matmuls with a transposed
// operand, as in any autograd); softmax and the losses into their backward ops, which read the
// forward result (softmax, log_softmax) or recompute from the logits (cross entropy: the
// softmax of the logits is not a forward value).
// conv2d and the pools differentiate into the window backward ops of ir/ops/nn_grad_ops.cpp,
// which carry the forward's attributes.
#include <cmath>
#include <memory>

#include "ir/diagnostic.h"
#include "ir/gradients/gradients.h"
#include "ir/image_layout.h"

namespace kiln::ir::gradients {
namespace {

using Grads = std::vector<Value*>;
using Ints = std::vector<int64_t>;

bool bool_attr(const Node& node, const char* name) { return std::get<bool>(node.attrs.at(name)); }

// All axes of a rank-`rank` tensor except `keep`.
Ints axes_except(int rank, int keep) {
  Ints axes;
  for (int d = 0; d < rank; ++d)
    if (d != keep) axes.push_back(d);
  return axes;
}

// The window backward ops read NCHW only; NHWC is written for inference by the layout-nhwc pass.
void require_nchw(const Node& n) {
  if (image_layout(n) == ImageLayout::Nhwc)
    throw Error(n.loc.render(), n.describe() + ": layout=nhwc has no gradient rule; train in NCHW (the "
                                               "layout-nhwc pass rewrites inference graphs only)");
}

// dense: y = x W^T + b over x [..., K], W [N, K]. With the leading dims flattened to M rows:
// dx = dy W, dW = dy^T x, db = column sums of dy.
Grads dense_rule(GradBuilder& b, const Node& n, const Grads& dy) {
  if (std::get<int64_t>(n.attrs.at("k_chunk")) > 0)
    throw Error(n.loc.render(), n.describe() + ": a split-K dense (k_chunk) has no gradient rule; "
                                               "split after autodiff, as the training pipeline does");
  const Shape& x_shape = n.inputs[0]->type.shape;
  const Shape& w_shape = n.inputs[1]->type.shape;
  const int64_t rows = num_elements(x_shape) / x_shape.back();
  Value* dy2 = b.reshape(dy[0], {rows, w_shape[0]});
  Value* x2 = b.reshape(n.inputs[0], {rows, w_shape[1]});
  Grads grads = {b.reshape(b.op(OpId::Matmul, {dy2, n.inputs[1]}), x_shape),
                 b.op(OpId::Matmul, {dy2, x2}, {{"transpose_a", true}})};
  if (n.inputs.size() == 3) grads.push_back(b.op(OpId::ReduceSum, {dy2}, {{"axes", Ints{0}}}));
  return grads;
}

// matmul: Y = A B with A = a or a^T, B = b or b^T. dA = dY B^T and dB = A^T dY, each written
// as one matmul on the stored operands (transposing the product where the operand is stored
// transposed), then summed over the batch dims that broadcasting added.
Grads matmul_rule(GradBuilder& b, const Node& n, const Grads& dy) {
  if (std::get<int64_t>(n.attrs.at("k_chunk")) > 0)
    throw Error(n.loc.render(), n.describe() + ": a split-K matmul (k_chunk) has no gradient rule; "
                                               "split after autodiff, as the training pipeline does");
  Value* a = n.inputs[0];
  Value* bv = n.inputs[1];
  const bool ta = bool_attr(n, "transpose_a");
  const bool tb = bool_attr(n, "transpose_b");
  auto mm = [&](Value* lhs, Value* rhs, bool tl, bool tr) {
    return b.op(OpId::Matmul, {lhs, rhs}, {{"transpose_a", tl}, {"transpose_b", tr}});
  };
  Value* da = ta ? mm(bv, dy[0], tb, true) : mm(dy[0], bv, false, !tb);
  Value* db = tb ? mm(dy[0], a, true, ta) : mm(a, dy[0], !ta, false);
  return {b.sum_to(da, a->type.shape), b.sum_to(db, bv->type.shape)};
}

Grads softmax_like_rule(OpId backward, GradBuilder& b, const Node& n, const Grads& dy) {
  return {b.op(backward, {dy[0], n.results[0]}, {{"axis", n.attrs.at("axis")}})};
}

// The forward node's attributes named in `names`, plus 'shape' = `shape`: what the window
// backward ops (ir/ops/nn_grad_ops.cpp) take.
AttrMap window_attrs(const Node& n, std::initializer_list<const char*> names, const Shape* shape) {
  AttrMap attrs;
  for (const char* name : names) attrs[name] = n.attrs.at(name);
  if (shape) attrs["shape"] = Ints(shape->begin(), shape->end());
  return attrs;
}

// conv2d: dx is the transposed convolution of dy with the weight, dweight the correlation of
// dy with x summed over the batch, dbias the sum of dy over N, H and W.
Grads conv2d_rule(GradBuilder& b, const Node& n, const Grads& dy) {
  const auto names = {"stride", "pad", "dilation", "groups"};
  require_nchw(n);
  if (std::get<int64_t>(n.attrs.at("k_chunk")) > 0)
    throw Error(n.loc.render(), n.describe() + ": a split-K convolution (k_chunk) has no gradient "
                                               "rule; split after autodiff, as the training pipeline does");
  Value* x = n.inputs[0];
  Value* w = n.inputs[1];
  Grads grads = {b.op(OpId::Conv2dGradInput, {dy[0], w}, window_attrs(n, names, &x->type.shape)),
                 b.op(OpId::Conv2dGradWeight, {dy[0], x}, window_attrs(n, names, &w->type.shape))};
  if (n.inputs.size() == 3) grads.push_back(b.op(OpId::ReduceSum, {dy[0]}, {{"axes", Ints{0, 2, 3}}}));
  return grads;
}

// A constant of the backward graph: a parameter with inline data.
Value* constant(GradBuilder& b, const std::string& base, TensorType type,
                std::vector<double> values) {
  Graph& graph = b.graph();
  Value* value = graph.add_parameter(graph.unique_name(base), type, InlineData{values});
  value->data = std::make_shared<const Tensor>(Tensor::from_doubles(type, values));
  return value;
}

// The gradient of attention's additive (float) mask: the score gradient
// ds = p * (dy v^T - rowsum(dy * out)), p = exp(s - lse), summed to the mask's shape. It is an
// S x S tensor by nature, so it is built from ordinary ops rather than the fused kernel; when
// the mask is a constant (causal, padding) nothing reads it and dce removes it.
Value* additive_mask_grad(GradBuilder& b, const Node& n, Value* dy) {
  Value* q = n.inputs[0];
  Value* mask = n.inputs[3];
  const Shape& qs = q->type.shape;
  double scale = std::get<double>(n.attrs.at("scale"));
  if (scale == 0.0) scale = 1.0 / std::sqrt(static_cast<double>(qs.back()));
  Value* s = b.op(OpId::Add, {b.scale(b.op(OpId::Matmul, {q, n.inputs[1]},
                                           {{"transpose_b", true}}), scale), mask});
  const Shape& scores = s->type.shape;
  const int64_t queries = scores[scores.size() - 2], keys = scores.back();
  if (std::get<bool>(n.attrs.at("causal"))) {
    std::vector<double> lower(static_cast<size_t>(queries * keys));
    for (int64_t i = 0; i < queries; ++i)
      for (int64_t j = 0; j <= std::min(i, keys - 1); ++j) lower[i * keys + j] = 1.0;
    Value* visible = constant(b, "grad.causal", {DType::Bool, {queries, keys}}, lower);
    Value* hidden = b.broadcast_to(
        constant(b, "grad.minus_inf", {s->type.dtype, {}}, {-INFINITY}), scores);
    s = b.op(OpId::Where, {visible, s, hidden});
  }
  Shape row = scores;
  row.back() = 1;
  Value* lse = b.reshape(n.results[1], row);
  if (s->type.dtype != DType::F32)
    lse = b.op(OpId::Cast, {lse}, {{"to", std::string(dtype_name(s->type.dtype))}});
  Value* p = b.op(OpId::Exp, {b.op(OpId::Sub, {s, lse})});
  const int last = static_cast<int>(scores.size()) - 1;
  Value* delta = b.op(OpId::ReduceSum, {b.op(OpId::Mul, {dy, n.results[0]})},
                      {{"axes", std::vector<int64_t>{last}}, {"keepdims", true}});
  Value* dp = b.op(OpId::Matmul, {dy, n.inputs[2]}, {{"transpose_b", true}});
  Value* ds = b.op(OpId::Mul, {p, b.op(OpId::Sub, {dp, delta})});
  return b.sum_to(ds, mask->type.shape);
}

// attention: attention_grad recomputes the probabilities from the saved logsumexp (result 1)
// and returns dq, dk, dv in one kernel. A bool mask has no gradient; an additive one gets
// additive_mask_grad's. A loss that reads the logsumexp result itself is refused rather than
// given a gradient that ignores it.
Grads attention_rule(GradBuilder& b, const Node& n, const Grads& dy) {
  if (dy[1] != nullptr || dy[0] == nullptr)
    throw Error(n.loc.render(), n.describe() + ": the loss depends on attention's logsumexp "
                                               "result, which has no gradient rule; only its "
                                               "output (result 0) is differentiable");
  std::vector<Value*> inputs = {dy[0], n.inputs[0], n.inputs[1], n.inputs[2], n.results[0],
                                n.results[1]};
  if (n.inputs.size() > 3) inputs.push_back(n.inputs[3]);
  Grads grads = b.op_results(OpId::AttentionGrad, inputs,
                             {{"scale", n.attrs.at("scale")}, {"causal", n.attrs.at("causal")}});
  if (n.inputs.size() > 3)
    grads.push_back(n.inputs[3]->type.dtype == DType::Bool ? nullptr
                                                           : additive_mask_grad(b, n, dy[0]));
  return grads;
}

}  // namespace

void add_nn_rules(OpRegistry& registry) {
  set_rule(registry, OpId::Attention,
           "(dq, dk, dv) = attention_grad(dy, q, k, v, out, lse); an additive mask: "
           "unbroadcast(p * (dy v^T - rowsum(dy * out))), p = exp(s - lse)", attention_rule);
  set_rule(registry, OpId::BiasAdd,
           "dx = dy, dbias = reduce_sum(dy) over every axis but axis",
           [](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    const int rank = n.inputs[0]->type.rank();
    const int axis = *normalize_axis(std::get<int64_t>(n.attrs.at("axis")), rank);
    Ints axes = axes_except(rank, axis);
    return {dy[0], axes.empty() ? dy[0] : b.op(OpId::ReduceSum, {dy[0]}, {{"axes", axes}})};
  });
  set_rule(registry, OpId::Dense,
           "dx = dy @ weight, dweight = dy^T @ x (leading dims as rows), dbias = column sums of dy",
           dense_rule);
  set_rule(registry, OpId::Matmul,
           "da = dy @ b^T, db = a^T @ dy (transposes and broadcast batch dims undone)",
           matmul_rule);
  set_rule(registry, OpId::Softmax,
           "softmax_grad(dy, y)", [](GradBuilder& b, const Node& n, const Grads& dy) {
    return softmax_like_rule(OpId::SoftmaxGrad, b, n, dy);
  });
  set_rule(registry, OpId::LogSoftmax,
           "log_softmax_grad(dy, y)", [](GradBuilder& b, const Node& n, const Grads& dy) {
    return softmax_like_rule(OpId::LogSoftmaxGrad, b, n, dy);
  });
  set_rule(registry, OpId::Conv2d,
           "dx = conv2d_grad_input(dy, weight), dweight = conv2d_grad_weight(dy, x), dbias = "
           "reduce_sum(dy, axes=[0,2,3])",
           conv2d_rule);
  set_rule(registry, OpId::MaxPool2d,
           "max_pool2d_grad(dy, x)", [](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    require_nchw(n);
    return {b.op(OpId::MaxPool2dGrad, {dy[0], n.inputs[0]},
                 window_attrs(n, {"kernel", "stride", "pad", "dilation"}, nullptr))};
  });
  set_rule(registry, OpId::AvgPool2d,
           "avg_pool2d_grad(dy)", [](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    require_nchw(n);
    return {b.op(OpId::AvgPool2dGrad, {dy[0]},
                 window_attrs(n, {"kernel", "stride", "pad", "count_include_pad"},
                              &n.inputs[0]->type.shape))};
  });
  set_rule(registry, OpId::GlobalAvgPool,
           "broadcast_to(dy, x.shape) / (H * W)",
           [](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    const Shape& x = n.inputs[0]->type.shape;
    return {b.scale(b.broadcast_to(dy[0], x), 1.0 / static_cast<double>(x[2] * x[3]))};
  });

  set_rule(registry, OpId::SoftmaxCrossEntropy,
           "dlogits = softmax_cross_entropy_grad(dy, logits, labels); none for labels",
           [](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
             return {b.op(OpId::SoftmaxCrossEntropyGrad, {dy[0], n.inputs[0], n.inputs[1]}),
                     nullptr};
           });
  // mean((p - t)^2): dp = 2 (p - t) dy / count, dt = -dp.
  set_rule(registry, OpId::MseLoss,
           "dprediction = 2 * (prediction - target) * dy / count, dtarget = -dprediction",
           [](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    const double count = static_cast<double>(num_elements(n.inputs[0]->type.shape));
    Value* diff = b.op(OpId::Sub, {n.inputs[0], n.inputs[1]});
    Value* dp = b.scale(b.op(OpId::Mul, {diff, dy[0]}), 2.0 / count);
    return {dp, b.op(OpId::Neg, {dp})};
  });
}

}  // namespace kiln::ir::gradients
