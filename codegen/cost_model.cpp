// FLOPs per op as a table of rules, one line each; bytes from the operand and result types.
// Most rules are a count per element of the result (see cost_model.h for the conventions):
// the FLOPs an op needs follow from its types, since inference already worked out the shapes.
#include "codegen/cost_model.h"

#include <unordered_set>

#include "codegen/kernels/emit_util.h"
#include "ir/memory_plan.h"
#include "ir/op_registry.h"

namespace kiln::codegen {

namespace {

using FlopRule = int64_t (*)(const ir::Node&);

int64_t result_elements(const ir::Node& node) { return ir::num_elements(node.results.at(0)->type.shape); }
int64_t operand_elements(const ir::Node& node, size_t i) { return ir::num_elements(node.inputs.at(i)->type.shape); }
const ir::Shape& operand_shape(const ir::Node& node, size_t i) { return node.inputs.at(i)->type.shape; }
// The optional third operand of conv2d and dense: one add per result element.
int64_t bias_flops(const ir::Node& node) { return node.inputs.size() == 3 ? result_elements(node) : 0; }

template <int kPerElement>
int64_t per_result(const ir::Node& node) { return kPerElement * result_elements(node); }

int64_t no_flops(const ir::Node&) { return 0; }

// Each result element is a dot product over C/groups * R * S weights (weight[1..3]).
int64_t conv2d_flops(const ir::Node& node) {
  const ir::Shape& w = operand_shape(node, 1);
  return 2 * result_elements(node) * w[1] * w[2] * w[3] + bias_flops(node);
}

// x [..., K] @ weight[N, K]^T: a K-long dot product per result element.
int64_t dense_flops(const ir::Node& node) {
  return 2 * result_elements(node) * operand_shape(node, 0).back() + bias_flops(node);
}

int64_t matmul_flops(const ir::Node& node) {
  const ir::Shape& a = operand_shape(node, 0);
  const int64_t k = attr<bool>(node, "transpose_a") ? a[a.size() - 2] : a.back();
  return 2 * result_elements(node) * k;
}

// A comparison (max) or an add (avg, whose divide takes the place of the first add) per
// element of the window.
int64_t pool_flops(const ir::Node& node) {
  const std::vector<int64_t>& kernel = attr<std::vector<int64_t>>(node, "kernel");
  return result_elements(node) * kernel[0] * kernel[1];
}

// The window backward ops do the forward's multiply-adds (conv2d) or taps (pools) per dy
// element, with the weight shape read from the weight operand or the dweight result.
int64_t conv2d_grad_flops(const ir::Node& node) {
  const ir::Shape& w = node.op == "conv2d_grad_input" ? operand_shape(node, 1)
                                                      : node.results.at(0)->type.shape;
  return 2 * operand_elements(node, 0) * w[1] * w[2] * w[3];
}
int64_t pool_grad_flops(const ir::Node& node) {
  const std::vector<int64_t>& kernel = attr<std::vector<int64_t>>(node, "kernel");
  return operand_elements(node, 0) * kernel[0] * kernel[1];
}

// Reductions: one add or comparison per input element; a mean adds a divide per result.
int64_t reduce_flops(const ir::Node& node) { return operand_elements(node, 0); }
int64_t mean_flops(const ir::Node& node) { return operand_elements(node, 0) + result_elements(node); }

// Inference: (x - mean) * inv_std * scale + bias with inv_std per channel, 4 per element.
// Training adds the batch statistics: a sum, and the deviation's subtract and multiply-add.
int64_t batch_norm_flops(const ir::Node& node) {
  return (attr<bool>(node, "training") ? 7 : 4) * result_elements(node);
}

// Inference dropout is a copy; training multiplies by the mask (the random draw is not counted).
int64_t dropout_flops(const ir::Node& node) {
  return attr<bool>(node, "training") ? result_elements(node) : 0;
}

// log_softmax of each row (5 per logit), then one pick and add per row for the batch mean.
int64_t softmax_cross_entropy_flops(const ir::Node& node) {
  return 5 * operand_elements(node, 0) + 2 * operand_shape(node, 0)[0];
}

// A subtract, a square and an add per element, one divide for the mean.
int64_t mse_loss_flops(const ir::Node& node) { return 3 * operand_elements(node, 0) + 1; }

// Per parameter element: p - lr * d (2), weight decay d += wd * p (2), momentum
// buf = momentum * buf + (1 - dampening) * d (3) and Nesterov's d + momentum * buf (2).
int64_t sgd_update_flops(const ir::Node& node) {
  int64_t per_element = 2;
  if (attr<double>(node, "weight_decay") != 0) per_element += 2;
  if (node.inputs.size() == 3) per_element += attr<bool>(node, "nesterov") ? 5 : 3;
  return per_element * result_elements(node);
}

// Per parameter element: the two moments (3 and 4), sqrt(v) * c + eps (3), the step
// p - step_size * m / denom (3), weight decay (2); the bias corrections are per launch.
int64_t adam_update_flops(const ir::Node& node) {
  const int64_t decay = attr<double>(node, "weight_decay") != 0 ? 2 : 0;
  return (13 + decay) * result_elements(node);
}

int64_t node_flops(const ir::Node& node);

int64_t kernel_flops(const ir::Node& node) {
  int64_t flops = 0;
  if (!node.is_kernel()) return flops;
  for (const auto& inner : node.body->nodes()) flops += node_flops(*inner);
  return flops;
}

struct Rule {
  std::string_view op;
  FlopRule flops;
};

constexpr Rule kRules[] = {
    // Binary arithmetic with broadcasting, unary math and activations: 1 per result element.
    {"add", per_result<1>}, {"sub", per_result<1>}, {"mul", per_result<1>},
    {"div", per_result<1>}, {"maximum", per_result<1>}, {"minimum", per_result<1>},
    {"relu", per_result<1>}, {"leaky_relu", per_result<1>}, {"sigmoid", per_result<1>},
    {"tanh", per_result<1>}, {"gelu", per_result<1>}, {"exp", per_result<1>},
    {"log", per_result<1>}, {"sqrt", per_result<1>}, {"rsqrt", per_result<1>},
    {"neg", per_result<1>}, {"abs", per_result<1>}, {"pow", per_result<1>},
    {"clip", per_result<1>}, {"bias_add", per_result<1>},
    // A conversion or a copy: data movement only.
    {"cast", no_flops}, {"dropout", dropout_flops},
    {"reshape", no_flops}, {"flatten", no_flops}, {"transpose", no_flops},
    {"concat", no_flops}, {"slice", no_flops},
    // Products: a multiply-add (2) per weight and result element.
    {"conv2d", conv2d_flops}, {"dense", dense_flops}, {"matmul", matmul_flops},
    // Windows and reductions: one operation per element read.
    {"max_pool2d", pool_flops}, {"avg_pool2d", pool_flops}, {"global_avg_pool", mean_flops},
    {"reduce_sum", reduce_flops}, {"reduce_max", reduce_flops}, {"reduce_mean", mean_flops},
    {"batch_norm", batch_norm_flops},
    // Mean (1), variance (subtract, square, add: 3), normalize, scale, shift (4).
    {"layer_norm", per_result<8>},
    // Row max, subtract, exp, row sum, divide (softmax) or subtract the log (log_softmax).
    {"softmax", per_result<5>}, {"log_softmax", per_result<5>},
    {"softmax_cross_entropy", softmax_cross_entropy_flops},
    {"mse_loss", mse_loss_flops},
    // Optimizer updates: a fixed count per parameter element.
    {"sgd_update", sgd_update_flops}, {"adam_update", adam_update_flops},
    {"adamw_update", adam_update_flops},
    // Backward ops (ir/ops/grad_ops.cpp). Elementwise derivatives: a few operations per
    // element (gelu's is the costliest: an erf or tanh and a handful of multiply-adds).
    {"broadcast_to", no_flops}, {"slice_grad", no_flops}, {"scale", per_result<1>},
    {"relu_grad", per_result<1>}, {"leaky_relu_grad", per_result<1>},
    {"sigmoid_grad", per_result<3>}, {"tanh_grad", per_result<3>}, {"gelu_grad", per_result<8>},
    {"abs_grad", per_result<1>}, {"clip_grad", per_result<2>},
    // Two comparisons per element.
    {"maximum_share", per_result<2>}, {"minimum_share", per_result<2>},
    // A row sum of dy (times y for softmax), then a multiply-subtract per element.
    {"softmax_grad", per_result<4>}, {"log_softmax_grad", per_result<4>},
    // The forward softmax of each row again (5), then subtract the one-hot and scale (2).
    {"softmax_cross_entropy_grad", per_result<7>},
    // Normalization in training (per element of x). batch_norm_train: as batch_norm training.
    // Backward: the statistics again where not saved (layer_norm_grad: 4), xhat (2), the two
    // sums (3), dx (4) and layer_norm_grad's dy * xhat (1).
    {"conv2d_grad_input", conv2d_grad_flops}, {"conv2d_grad_weight", conv2d_grad_flops},
    {"max_pool2d_grad", pool_grad_flops}, {"avg_pool2d_grad", pool_grad_flops},
    {"batch_norm_train", per_result<7>}, {"batch_norm_train_grad", per_result<9>},
    {"layer_norm_grad", per_result<14>},
    // A fused kernel: the sum over the nodes of its body.
    {"kernel", kernel_flops},
};

const Rule* find_rule(std::string_view op) {
  for (const Rule& rule : kRules)
    if (rule.op == op) return &rule;
  return nullptr;
}

// An op added without a rule still gets a figure: nothing for pure data movement, a pass over
// the input for a reduction, one operation per result element for the rest.
int64_t fallback_flops(const ir::Node& node) {
  if (node.def == nullptr || node.results.empty()) return 0;
  switch (node.def->kind) {
    case ir::OpKind::Injective: return 0;
    case ir::OpKind::Reduce: return node.inputs.empty() ? 0 : operand_elements(node, 0);
    default: return result_elements(node);
  }
}

int64_t node_flops(const ir::Node& node) {
  if (node.is_kernel()) return kernel_flops(node);
  const Rule* rule = find_rule(node.op);
  return rule ? rule->flops(node) : fallback_flops(node);
}

}  // namespace

bool has_cost_rule(std::string_view op) { return find_rule(op) != nullptr; }

NodeCost node_cost(const ir::Node& node) {
  NodeCost cost;
  cost.flops = node_flops(node);
  // A value passed twice (mul(%x, %x)) is read from DRAM once.
  std::unordered_set<const ir::Value*> seen;
  for (const ir::Value* input : node.inputs)
    if (seen.insert(input).second) cost.bytes_read += ir::tensor_bytes(input->type);
  for (const ir::Value* result : node.results) cost.bytes_written += ir::tensor_bytes(result->type);
  return cost;
}

int64_t unfused_bytes(const ir::Node& node) {
  if (!node.is_kernel()) return node_cost(node).bytes();
  int64_t bytes = 0;
  for (const auto& inner : node.body->nodes()) bytes += unfused_bytes(*inner);
  return bytes;
}

}  // namespace kiln::codegen
