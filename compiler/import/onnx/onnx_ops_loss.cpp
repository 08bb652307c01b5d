// ONNX losses → kiln ops: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, decomposed at
// import into gather_elements, where, mul and the reductions, following the reference
// implementations of onnx/backend/test/case/node (negativeloglikelihoodloss.py,
// softmaxcrossentropy.py):
//
//   loss[n, d...] = -input[n, target[n, d...], d...] * w[n, d...]
//   w = weight[target] (1 without weights), 0 where target == ignore_index
//   reduction none: loss; sum: sum(loss); mean: sum(loss) / sum(w) with weights or an
//   ignore_index, else the mean of loss.
//
// SoftmaxCrossEntropyLoss is the same loss of log_softmax(scores) along the class axis (1).
#include <optional>

#include "compiler/import/onnx/onnx_ops.h"

namespace kiln::compiler::onnx_import {

namespace {
using ir::OpId;
using Outputs = std::vector<Operand>;

Operand nll_loss(NodeContext& node, const Operand& input, const Operand& target,
                 const std::optional<Operand>& weight) {
  node.check_attrs({"ignore_index", "reduction"});
  const std::string reduction = node.attr_string("reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean")
    node.fail("reduction must be none, sum or mean, got '" + reduction + "'");
  const ir::TensorType& x = input.type();
  const ir::TensorType& t = target.type();
  if (x.rank() < 2) node.fail("input must be [N, C] or [N, C, d1, ...], got " + x.to_string());
  if (t.dtype != ir::DType::I32 && t.dtype != ir::DType::I64)
    node.fail("target must be int32 or int64, got " + t.to_string());
  ir::Shape expected = {x.shape[0]};
  expected.insert(expected.end(), x.shape.begin() + 2, x.shape.end());
  if (t.shape != expected)
    node.fail("target " + t.to_string() + " must have the input's shape without the class dim, " +
              ir::shape_to_string(expected));
  const ir::DType dtype = x.dtype;

  // Ignored positions read class 0, which exists, and get weight 0.
  std::optional<Operand> ignored;
  Operand classes = target;
  if (node.has_attr("ignore_index")) {
    ignored = node.emit(OpId::Equal, {target, node.scalar(t.dtype, static_cast<double>(node.attr_int("ignore_index", 0)))});
    classes = node.emit(OpId::Where, {*ignored, node.scalar(t.dtype, 0.0), target});
  }
  // input[n, classes[n, d...], d...]: gather along the class axis with a unit dim there.
  ir::Shape with_class_dim = expected;
  with_class_dim.insert(with_class_dim.begin() + 1, 1);
  const Operand picked = node.emit(OpId::GatherElements, {input, node.reshape(classes, with_class_dim)},
                                   {{"axis", int64_t{1}}});
  Operand loss = node.emit(OpId::Neg, {node.reshape(picked, expected)});

  std::optional<Operand> w;
  if (weight) {
    const ir::TensorType& wt = weight->type();
    if (wt.dtype != dtype || wt.shape != ir::Shape{x.shape[1]})
      node.fail("weight must be " + ir::TensorType{dtype, {x.shape[1]}}.to_string() + ", got " + wt.to_string());
    const Operand flat = node.reshape(classes, {ir::num_elements(expected)});
    w = node.reshape(node.emit(OpId::GatherElements, {*weight, flat}, {{"axis", int64_t{0}}}), expected);
    if (ignored) w = node.emit(OpId::Where, {*ignored, node.scalar(dtype, 0.0), *w});
  } else if (ignored) {
    w = node.emit(OpId::Where, {*ignored, node.scalar(dtype, 0.0), node.scalar(dtype, 1.0)});
  }
  if (w) loss = node.emit(OpId::Mul, {loss, *w});

  const ir::AttrMap all = {{"axes", std::vector<int64_t>{}}, {"keepdims", false}};
  if (reduction == "none") return loss;
  if (reduction == "sum") return node.emit(OpId::ReduceSum, {loss}, all);
  if (!w) return node.emit(OpId::ReduceMean, {loss}, all);
  return node.emit(OpId::Div, {node.emit(OpId::ReduceSum, {loss}, all), node.emit(OpId::ReduceSum, {*w}, all)});
}

std::optional<Operand> optional_input(NodeContext& node, int index) {
  if (!node.has_input(index)) return std::nullopt;
  return node.input(index);
}

Outputs negative_log_likelihood_loss(NodeContext& node) {
  return {nll_loss(node, node.input(0), node.input(1), optional_input(node, 2))};
}

Outputs softmax_cross_entropy_loss(NodeContext& node) {
  const Operand& scores = node.input(0);
  if (scores.type().rank() < 2) node.fail("scores must be [N, C] or [N, C, d1, ...], got " + scores.type().to_string());
  const Operand log_prob = node.emit(OpId::LogSoftmax, {scores}, {{"axis", int64_t{1}}});
  Outputs outputs = {nll_loss(node, log_prob, node.input(1), optional_input(node, 2))};
  if (node.num_outputs() > 1) outputs.push_back(log_prob);
  return outputs;
}

constexpr int kLast = kMaxOpset;

const OpRule kRules[] = {
    {"NegativeLogLikelihoodLoss", 12, kLast, negative_log_likelihood_loss},
    {"SoftmaxCrossEntropyLoss", 12, kLast, softmax_cross_entropy_loss},
};
}  // namespace

std::span<const OpRule> loss_rules() { return kRules; }

}  // namespace kiln::compiler::onnx_import
