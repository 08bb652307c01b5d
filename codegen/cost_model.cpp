// FLOPs per op as a table of rules, one line each; bytes from the operand and result types.
// Most rules are a count per element of the result (see cost_model.h for the conventions):
// the FLOPs an op needs follow from its types, since inference already worked out the shapes.
#include "codegen/cost_model.h"

#include <algorithm>
#include <unordered_set>

#include "codegen/kernels/emit_util.h"
#include "ir/memory_plan.h"
#include "ir/op_registry.h"
#include "ir/optimizer_operands.h"

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
  const ir::Shape& y = node.results.at(0)->type.shape;
  // Split-K partials [S, N, O, OH, OW]: the S chunks share one patch between them.
  const int64_t results = y.size() == 5 ? ir::num_elements(y, 1, 5) : result_elements(node);
  return 2 * results * w[1] * w[2] * w[3] + bias_flops(node);
}

// x [..., K] @ weight[N, K]^T: a K-long dot product per result element.
int64_t dense_flops(const ir::Node& node) {
  // Split-K partials [S, ..., N]: the S chunks share one K between them.
  const int64_t chunks = attr<int64_t>(node, "k_chunk") > 0 ? node.results.at(0)->type.shape[0] : 1;
  return 2 * (result_elements(node) / chunks) * operand_shape(node, 0).back() + bias_flops(node);
}

int64_t matmul_flops(const ir::Node& node) {
  const ir::Shape& a = operand_shape(node, 0);
  const int64_t k = attr<bool>(node, "transpose_a") ? a[a.size() - 2] : a.back();
  // Split-K partials [S, ..., M, N]: the S chunks share one K between them.
  const int64_t chunks = attr<int64_t>(node, "k_chunk") > 0 ? node.results.at(0)->type.shape[0] : 1;
  return 2 * (result_elements(node) / chunks) * k;
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
  // The weight is the last 4 dims of dweight (split-K stacks partial weights before them).
  const ir::Shape& w = node.op == ir::OpId::Conv2dGradInput ? operand_shape(node, 1)
                                                      : node.results.at(0)->type.shape;
  const size_t r = w.size();
  return 2 * operand_elements(node, 0) * w[r - 3] * w[r - 2] * w[r - 1];
}
// attention per (batch, query, key): the q.k product (2 D), the softmax (5) and p v (2 Dv).
// attention_grad: the score again (2 D + 1), dy.v (2 Dv), ds (2), dv (2 Dv), dq and dk (4 D).
struct AttentionSizes {
  int64_t scores, depth, value_depth;
};
AttentionSizes attention_sizes(const ir::Node& node, size_t first) {
  const ir::Shape& q = operand_shape(node, first);
  const ir::Shape& v = operand_shape(node, first + 2);
  return {ir::num_elements(q, 0, q.size() - 1) * v[v.size() - 2], q.back(), v.back()};
}
int64_t attention_flops(const ir::Node& node) {
  const AttentionSizes a = attention_sizes(node, 0);
  return a.scores * (2 * a.depth + 5 + 2 * a.value_depth);
}
int64_t attention_grad_flops(const ir::Node& node) {
  const AttentionSizes a = attention_sizes(node, 1);
  return a.scores * (6 * a.depth + 4 * a.value_depth + 3);
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

// Per element of x: a chunk's sum, then subtract and multiply-add for its squared deviations
// (chunk_stats: 4); xhat (2) and the two sums (3) (chunk_sums: 5, dy is operand 0 there).
int64_t chunk_stats_flops(const ir::Node& node) { return 4 * operand_elements(node, 0); }
int64_t chunk_sums_flops(const ir::Node& node) { return 5 * operand_elements(node, 0); }

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

// Whether an update multiplies its gradient by a grad_scale operand (one more flop per element).
bool has_grad_scale(const ir::Node& node) { return ir::update_operands(node).grad_scale >= 0; }

// Per parameter element: p - lr * d (2), weight decay d += wd * p (2), momentum
// buf = momentum * buf + (1 - dampening) * d (3) and Nesterov's d + momentum * buf (2).
int64_t sgd_update_flops(const ir::Node& node) {
  int64_t per_element = 2;
  if (attr<double>(node, "weight_decay") != 0) per_element += 2;
  if (attr<double>(node, "momentum") != 0) per_element += attr<bool>(node, "nesterov") ? 5 : 3;
  if (has_grad_scale(node)) per_element += 1;
  return per_element * result_elements(node);
}

// Per parameter element: the two moments (3 and 4), sqrt(v) * c + eps (3), the step
// p - step_size * m / denom (3), weight decay (2); the bias corrections are per launch.
int64_t adam_update_flops(const ir::Node& node) {
  const int64_t decay = attr<double>(node, "weight_decay") != 0 ? 2 : 0;
  return (13 + decay + (has_grad_scale(node) ? 1 : 0)) * result_elements(node);
}

int64_t lr_schedule_flops(const ir::Node&) { return 10; }

// A square and an add per gradient element; the square root and the clip factor once.
int64_t grad_norm_clip_flops(const ir::Node& node) {
  int64_t elements = 0;
  for (const ir::Value* grad : node.inputs) elements += ir::num_elements(grad->type.shape);  // u: 1
  return 2 * elements + 3;
}

// One finiteness test per gradient element; the scaler's arithmetic once.
int64_t loss_scale_update_flops(const ir::Node& node) {
  int64_t elements = 0;
  for (size_t k = 3; k < node.inputs.size(); ++k)
    elements += ir::num_elements(node.inputs[k]->type.shape);
  return elements + 4;
}

// A pruning step: 31 counting passes over w and one that writes the mask.
int64_t prune_mask_flops(const ir::Node& node) {
  return 32 * ir::num_elements(node.inputs[0]->type.shape);
}

int64_t node_flops(const ir::Node& node);

int64_t kernel_flops(const ir::Node& node) {
  int64_t flops = 0;
  if (!node.is_kernel()) return flops;
  for (const auto& inner : node.body->nodes()) flops += node_flops(*inner);
  return flops;
}

// An activation's derivative: a few operations per element; gelu's is the costliest (an erf or
// tanh and a handful of multiply-adds).
int64_t activation_grad_flops(const ir::Node& node) {
  switch (node.op) {
    case ir::OpId::ReluGrad:
    case ir::OpId::LeakyReluGrad: return per_result<1>(node);
    case ir::OpId::SigmoidGrad:
    case ir::OpId::TanhGrad: return per_result<3>(node);
    case ir::OpId::GeluGrad: return per_result<8>(node);
    default: return per_result<4>(node);
  }
}

// The FLOP rule of every op. No default: an op added to ir/ops.def without a rule here is a
// -Wswitch warning (an error in CI's -Werror build).
FlopRule flop_rule(ir::OpId op) {
  using ir::OpId;
  switch (op) {
    // Activations and unary math (rows of scalar expressions): 1 per result element.
#define KILN_OP(...)
#define KILN_ACTIVATION(Id, ...) case OpId::Id:
#define KILN_MATH(Id, ...) case OpId::Id:
#include "ir/ops.def"
    // Binary arithmetic with broadcasting, unary math: 1 per result element.
    case OpId::Add:
    case OpId::Sub:
    case OpId::Mul:
    case OpId::Div:
    case OpId::Maximum:
    case OpId::Minimum:
    case OpId::Neg:
    case OpId::Abs:
    case OpId::Clip:
    case OpId::BiasAdd:
    case OpId::Scale:
    case OpId::AbsGrad:
    // Comparisons, logic, selections and the float predicates: one operation per element.
    case OpId::Equal:
    case OpId::Less:
    case OpId::LessEqual:
    case OpId::Greater:
    case OpId::GreaterEqual:
    case OpId::LogicalAnd:
    case OpId::LogicalOr:
    case OpId::LogicalXor:
    case OpId::LogicalNot:
    case OpId::Where:
    case OpId::IsNan:
    case OpId::IsInf: return per_result<1>;
    // pow (exp and log) and the remainder with its sign fix-up: a few operations per element.
    case OpId::Power: return per_result<4>;
    case OpId::Mod: return per_result<3>;
    case OpId::BitShift: return per_result<2>;
    // One comparison per element of x.
    case OpId::Argmax:
    case OpId::Argmin: return reduce_flops;
#define KILN_OP(...)
#define KILN_ACTIVATION(Id, ...) case OpId::Id##Grad:
#include "ir/ops.def"
      return activation_grad_flops;
    // A conversion or a copy: data movement only.
    case OpId::Cast:
    case OpId::Reshape:
    case OpId::Flatten:
    case OpId::Transpose:
    case OpId::Concat:
    case OpId::Slice:
    case OpId::BroadcastTo:
    case OpId::SliceGrad:
    case OpId::Gather:
    case OpId::GatherElements: return no_flops;
    case OpId::Dropout: return dropout_flops;
    // Products: a multiply-add (2) per weight and result element.
    case OpId::Conv2d: return conv2d_flops;
    case OpId::Dense: return dense_flops;
    case OpId::Matmul: return matmul_flops;
    // Windows and reductions: one operation per element read.
    case OpId::MaxPool2d:
    case OpId::AvgPool2d: return pool_flops;
    case OpId::GlobalAvgPool:
    case OpId::ReduceMean: return mean_flops;
    case OpId::ReduceSum:
    case OpId::PairwiseSum:
    case OpId::ReduceMax:
    case OpId::GatherElementsGrad: return reduce_flops;  // an add per dy element
    // A copy per element, and a few integer operations to find it.
    case OpId::ExpandTwoFour: return no_flops;
    case OpId::BatchNorm: return batch_norm_flops;
    // Mean (1), variance (subtract, square, add: 3), normalize, scale, shift (4).
    case OpId::LayerNorm: return per_result<8>;
    case OpId::RmsNorm: return per_result<5>;
    // Row max, subtract, exp, row sum, divide (softmax) or subtract the log (log_softmax).
    case OpId::Softmax:
    case OpId::LogSoftmax: return per_result<5>;
    case OpId::SoftmaxCrossEntropy: return softmax_cross_entropy_flops;
    case OpId::Attention: return attention_flops;
    case OpId::AttentionGrad: return attention_grad_flops;
    case OpId::MseLoss: return mse_loss_flops;
    // Optimizer updates: a fixed count per parameter element.
    case OpId::SgdUpdate: return sgd_update_flops;
    case OpId::AdamUpdate:
    case OpId::AdamwUpdate: return adam_update_flops;
    case OpId::ClipGrad: return per_result<2>;
    // The warmup ramp or the cosine of the progress: a handful of scalar operations.
    case OpId::LrSchedule: return lr_schedule_flops;
    case OpId::GradNormClip: return grad_norm_clip_flops;
    case OpId::LossScaleUpdate: return loss_scale_update_flops;
    case OpId::PruneMask: return prune_mask_flops;
    // Communication, no arithmetic on one rank (the ranks' sum is the network's time).
    case OpId::AllReduce:
    case OpId::Broadcast: return no_flops;
    // Two comparisons per element.
    case OpId::MaximumShare:
    case OpId::MinimumShare: return per_result<2>;
    // A row sum of dy (times y for softmax), then a multiply-subtract per element.
    case OpId::SoftmaxGrad:
    case OpId::LogSoftmaxGrad: return per_result<4>;
    // The forward softmax of each row again (5), then subtract the one-hot and scale (2).
    case OpId::SoftmaxCrossEntropyGrad: return per_result<7>;
    case OpId::Conv2dGradInput:
    case OpId::Conv2dGradWeight: return conv2d_grad_flops;
    case OpId::MaxPool2dGrad:
    case OpId::AvgPool2dGrad: return pool_grad_flops;
    // Normalization in training (per element of x). batch_norm_train: as batch_norm training.
    // Backward: the statistics again where not saved (layer_norm_grad: 4), xhat (2), the two
    // sums (3), dx (4) and layer_norm_grad's dy * xhat (1).
    case OpId::BatchNormTrain: return per_result<7>;
    case OpId::BatchNormTrainGrad: return per_result<9>;
    case OpId::BatchNormChunkStats: return chunk_stats_flops;
    case OpId::BatchNormChunkSums: return chunk_sums_flops;
    case OpId::LayerNormGrad: return per_result<14>;
    case OpId::RmsNormGrad: return per_result<11>;
    // A fused kernel: the sum over the nodes of its body.
    case OpId::Kernel: return kernel_flops;
  }
  KILN_CHECK(false) << "unknown op id " << static_cast<int>(op);
  return no_flops;
}

int64_t node_flops(const ir::Node& node) {
  if (node.is_kernel()) return kernel_flops(node);
  return flop_rule(node.op)(node);
}

}  // namespace


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
  // attention as kiln runs the subgraph it replaces: the q k^T matmul writes the scores (scale
  // fused into its epilogue), the row kernel reads them (mask fused) and writes the
  // probabilities, and the second matmul reads those: four passes over an S x S tensor. The
  // unfused graph has no logsumexp result.
  if (node.op == ir::OpId::Attention) {
    const ir::TensorType& q = node.inputs[0]->type;
    const ir::Shape& v = node.inputs[2]->type.shape;
    const ir::TensorType scores{q.dtype, ir::Shape{ir::num_elements(q.shape, 0, q.shape.size() - 1),
                                                   v[v.size() - 2]}};
    return node_cost(node).bytes() - ir::tensor_bytes(node.results[1]->type) +
           4 * ir::tensor_bytes(scores);
  }
  if (!node.is_kernel()) return node_cost(node).bytes();
  int64_t bytes = 0;
  for (const auto& inner : node.body->nodes()) bytes += unfused_bytes(*inner);
  return bytes;
}

KernelTime model_kernel_time(const Kernel& kernel, int active_blocks_per_sm,
                             const Roofline& roofline) {
  KernelTime time;
  // The unit and its peak: a library call's 16-bit tensors, or the math it may use on f32
  // ones (cuDNN's bf16 is TF32 math, cudnn_conv.h), or the generated kernel's tensor-core
  // operand format.
  Precision format = Precision::F32;
  if (kernel.library && kernel.library->dtype != ir::DType::F32)
    format = kernel.library->dtype == ir::DType::BF16 ? Precision::Bf16 : Precision::F16;
  else if (kernel.library)
    format = kernel.library->math == Precision::Bf16 && kernel.library->conv() ? Precision::Tf32
                                                                               : kernel.library->math;
  else if (kernel.tensor_cores)
    format = kernel.tensor_core_inputs;
  // Sparse tensor cores (mma.sp, A 2:4) do the dense product's work at twice the dense rate.
  const bool sparse = kernel.gemm.sparse && format != Precision::F32;
  const double peak = (format == Precision::F32 ? roofline.flops_per_second
                                                : roofline.tensor_core_flops_per_second(format)) *
                      (sparse ? 2 : 1);
  time.unit = format == Precision::F32    ? "f32 FMA"
              : format == Precision::Tf32 ? "TF32 tensor-core"
              : format == Precision::Bf16 ? (sparse ? "bf16 sparse tensor-core" : "bf16 tensor-core")
                                          : (sparse ? "f16 sparse tensor-core" : "f16 tensor-core");
  const auto ceil_div = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  // The share of its waves' block slots the grid fills (the last wave partly idle).
  const auto wave_share = [&] {
    const int64_t blocks = static_cast<int64_t>(kernel.grid.count());
    const int64_t per_wave = int64_t{kSms} * std::max(1, active_blocks_per_sm);
    return static_cast<double>(blocks) / static_cast<double>(ceil_div(blocks, per_wave) * per_wave);
  };
  const bool direct = kernel.gemm.m == 0 &&
                      std::any_of(kernel.source_ops.begin(), kernel.source_ops.end(), [](const std::string& op) {
                        return op == "conv2d_grad_input" || op == "conv2d_grad_weight";
                      });
  if (kernel.library) {
    time.efficiency = kLibrary;
  } else if (direct) {
    time.efficiency = kDirectLoop * wave_share();
  } else if (kernel.gemm.m > 0) {
    const GemmGeometry& g = kernel.gemm;
    const double tiles = static_cast<double>(g.m * g.n) /
                         static_cast<double>(ceil_div(g.m, g.tile_m) * g.tile_m *
                                             ceil_div(g.n, g.tile_n) * g.tile_n);
    const double depth =
        static_cast<double>(g.k) / static_cast<double>(ceil_div(g.k, g.tile_k) * g.tile_k);
    const double template_ceiling =
        !kernel.tensor_cores ? kFmaTemplate : g.async_copies ? kTensorCoreTemplate : kTensorCoreStaged;
    time.efficiency = template_ceiling * tiles * depth * wave_share();
  }
  const double compute = static_cast<double>(kernel.flops) / (peak * time.efficiency);
  // Memory: at the share of the SMs the grid occupies (cost_model.h).
  if (kernel.library) {
    time.bandwidth_share = 1.0;
  } else if (kernel.gemm.m > 0) {
    time.bandwidth_share = std::min(1.0, static_cast<double>(kernel.grid.count()) / kSms);
  } else {
    const int64_t resident_blocks =
        std::min<int64_t>(static_cast<int64_t>(kernel.grid.count()),
                          int64_t{kSms} * std::max(1, active_blocks_per_sm));
    const double resident_threads =
        static_cast<double>(resident_blocks) * static_cast<double>(kernel.block.count());
    time.bandwidth_share = std::min(1.0, resident_threads / (double{kSms} * kStreamThreadsPerSm));
  }
  const double memory =
      roofline.memory_seconds(kernel.bytes_read + kernel.bytes_written) / time.bandwidth_share;
  time.compute_seconds = compute;
  time.memory_seconds = memory;
  // cuDNN's tensor-core algorithms read NHWC: an NCHW call may transform its tensors there and
  // back (the layout-nhwc pass stores them NHWC in the first place).
  if (kernel.library && kernel.library->conv() && !kernel.library->conv()->nhwc && format != Precision::F32)
    time.layout_transform_seconds =
        roofline.memory_seconds(kNchwTransforms * (kernel.bytes_read + kernel.bytes_written));
  time.seconds = std::max(compute, memory);
  time.bound = compute > memory ? "compute" : "memory";
  return time;
}

}  // namespace kiln::codegen
