#include "passes/fusion_util.h"

#include <fmt/format.h>

#include <set>

#include "ir/image_layout.h"
#include "ir/kernel_region.h"
#include "ir/op_registry.h"
#include "ir/strided_view.h"

namespace kiln::passes::fusion {
namespace {

// The activations of the op table (a scalar expression with a backward op of its own), and clip.
bool is_activation(const ir::Node& node) {
  return node.op == ir::OpId::Clip || (node.def != nullptr && node.def->has_grad_op);
}

bool is_binary_arithmetic(ir::OpId op) {
  switch (op) {
    case ir::OpId::Add:
    case ir::OpId::Sub:
    case ir::OpId::Mul:
    case ir::OpId::Div:
    case ir::OpId::Maximum:
    case ir::OpId::Minimum: return true;
    default: return false;
  }
}

// Whether `shape`, broadcast to `out` (NumPy rules), varies along `axis` only.
bool per_channel(const ir::Shape& shape, const ir::Shape& out, int axis) {
  if (shape.size() > out.size()) return false;
  const size_t offset = out.size() - shape.size();
  for (size_t i = 0; i < shape.size(); ++i) {
    const size_t dim = i + offset;
    if (shape[i] == 1) continue;
    if (static_cast<int>(dim) != axis || shape[i] != out[dim]) return false;
  }
  return true;
}

enum class Layout { Channel, Residual, Scalar, Other };

Layout layout_of(const ir::Shape& shape, const ir::Shape& out, int axis) {
  if (shape == out) return Layout::Residual;
  if (ir::num_elements(shape) == 1 && shape.size() <= out.size()) return Layout::Scalar;
  if (per_channel(shape, out, axis)) return Layout::Channel;
  return Layout::Other;
}

int normalized_axis(const ir::Node& node, size_t rank) {
  const auto it = node.attrs.find("axis");
  const int64_t axis = it == node.attrs.end() ? 1 : std::get<int64_t>(it->second);
  return static_cast<int>(axis < 0 ? axis + static_cast<int64_t>(rank) : axis);
}

}  // namespace

std::string ref(const ir::Value* value) { return "%" + value->name; }

std::string ref(const ir::Node& node) {
  return node.results.empty() ? node.describe() : ref(node.results[0]) + " (" + node.describe() + ")";
}

std::optional<std::string> stored_value_reason(const ir::Graph& graph, const ir::Value* value) {
  return stored_value_reason(graph, value, graph.users(value).size());
}

std::optional<std::string> stored_value_reason(const ir::Graph& graph, const ir::Value* value,
                                               size_t users) {
  if (graph.is_output(value)) return ref(value) + " is a graph output, so it is stored";
  if (users != 1)
    return fmt::format("producer has {} users (the value is stored once and each reads it)", users);
  return std::nullopt;
}

Users::Users(const ir::Graph& graph) {
  for (const auto& node : graph.nodes())
    for (const ir::Value* input : node->inputs) {
      std::vector<ir::Node*>& readers = users_[input];
      if (readers.empty() || readers.back() != node.get()) readers.push_back(node.get());
    }
}

const std::vector<ir::Node*>& Users::of(const ir::Value* value) const {
  const auto it = users_.find(value);
  return it == users_.end() ? none_ : it->second;
}

bool is_gemm(const ir::Node& node) {
  return !node.is_kernel() && (node.op == ir::OpId::Conv2d || node.op == ir::OpId::Dense || node.op == ir::OpId::Matmul);
}

bool is_split_k(const ir::Node& gemm) {
  const auto it = gemm.attrs.find("k_chunk");
  return it != gemm.attrs.end() && std::get<int64_t>(it->second) > 0;
}

bool is_rows_gemm(const ir::Node& node) {
  if (node.op == ir::OpId::Dense) return true;
  if (node.op != ir::OpId::Matmul || std::get<bool>(node.attrs.at("transpose_a"))) return false;
  const ir::Shape& b = node.inputs[1]->type.shape;
  return ir::num_elements(b, 0, b.size() - 2) == 1;
}

const ir::Node* rows_gemm_of(const ir::Node& consumer) {
  if (!consumer.is_kernel()) return is_rows_gemm(consumer) ? &consumer : nullptr;
  if (ir::kernel_kind(consumer) != ir::kEpilogueKernel) return nullptr;
  for (const auto& node : consumer.body->nodes()) {
    if (ir::is_view_op(node->op) || node->op == ir::OpId::LayerNorm || node->op == ir::OpId::RmsNorm) continue;
    return is_rows_gemm(*node) ? node.get() : nullptr;
  }
  return nullptr;
}

std::optional<std::string> compressed_weight_refusal(const ir::Node& consumer) {
  if (!consumer.is_kernel()) return std::nullopt;
  for (const auto& node : consumer.body->nodes()) {
    const ir::Node* weight = node->op == ir::OpId::Dense ? node->inputs[1]->producer : nullptr;
    if (weight != nullptr && weight->op == ir::OpId::ExpandTwoFour)
      return ref(consumer) + " reads a 2:4 weight compressed: its dense runs as weight * x^T on sparse tensor "
                             "cores, x's rows as its columns";
  }
  return std::nullopt;
}

std::optional<std::string> recomputed_norm_refusal(const ir::Node& norm) {
  const int64_t rank = norm.results[0]->type.rank();
  const int64_t axis = std::get<int64_t>(norm.attrs.at("axis"));
  if (axis != -1 && axis != rank - 1)
    return fmt::format("it normalizes from axis {}, not the last axis alone", axis);
  for (const ir::Value* operand : norm.inputs)
    if (operand->type.dtype != ir::DType::F32) return "it is not f32";
  return std::nullopt;
}

std::optional<std::string> norm_prologue_refusal(const ir::Node& norm, const ir::Node& consumer,
                                                 const ir::Value* rows) {
  if (auto reason = recomputed_norm_refusal(norm)) return reason;
  const ir::Value* y = rows ? rows : norm.results[0];
  if (auto reason = compressed_weight_refusal(consumer)) return reason;
  const ir::Node* dense = rows_gemm_of(consumer);
  if (!dense)
    return ref(consumer) + " is not a dense or a matmul of rows by one matrix (or such a GEMM's epilogue kernel)";
  if (is_split_k(*dense)) return ref(*dense) + " computes split-K partial sums, each over part of a row";
  // Inside an epilogue kernel the dense reads the body input that stands for y, or reads it
  // through view ops (fuse-gemm-views) that keep each row of A one whole row of y: a row-wise
  // norm then commutes with them.
  const ir::Value* x = dense->inputs[0];
  if (consumer.is_kernel()) {
    std::vector<const ir::Node*> views;
    while (x->producer != nullptr && ir::is_view_op(x->producer->op)) {
      views.insert(views.begin(), x->producer);
      x = x->producer->inputs[0];
    }
    if (!views.empty() && !ir::gemm_rows_view(x, views, true))
      return ref(consumer) + " reads it through views whose rows are not whole rows of it";
    const auto& body_inputs = consumer.body->inputs;
    bool rows = false;
    for (size_t i = 0; i < body_inputs.size(); ++i) {
      if (consumer.inputs[i] != y) continue;
      if (body_inputs[i] != x) return ref(consumer) + " reads it as another operand than the dense's rows";
      rows = true;
    }
    if (!rows) return ref(consumer) + " reads it as another operand than the dense's rows";
  } else if (x != y || dense->inputs[1] == y || (dense->inputs.size() > 2 && dense->inputs[2] == y)) {
    return ref(consumer) + " reads it as another operand than the dense's rows";
  }
  if (dense->inputs[0]->type.dtype != y->type.dtype) return "the GEMM does not read its rows in their dtype";
  if (y->type.dtype != ir::DType::F32 && y->type.dtype != ir::DType::BF16 && y->type.dtype != ir::DType::F16)
    return "the GEMM is not f32, bf16 or f16";
  return std::nullopt;
}

int channel_axis(const ir::Node& gemm) {
  const int rank = static_cast<int>(gemm.results[0]->type.shape.size());
  return gemm.op == ir::OpId::Conv2d ? ir::channel_axis(ir::image_layout(gemm)) : rank - 1;
}

// The channel axis of the running value: conv2d's 1 (3 in NHWC); a dense's or matmul's last, also after
// the reshapes and transposes an epilogue writes through (they keep the columns last).
namespace {
int running_channel_axis(const ir::Node& gemm, const ir::Value* running) {
  return gemm.op == ir::OpId::Conv2d ? ir::channel_axis(ir::image_layout(gemm)) : running->type.rank() - 1;
}
}  // namespace

std::optional<std::string> epilogue_refusal(const ir::Node& gemm, const ir::Value* running,
                                            const ir::Node& consumer, bool activations_only) {
  if (consumer.is_kernel()) return consumer.describe() + " is already a fused kernel";
  if (is_split_k(gemm))
    return gemm.describe() + " computes split-K partial sums: an epilogue applies after their sum";
  const bool activation = is_activation(consumer);
  const bool bias_add = consumer.op == ir::OpId::BiasAdd;
  const bool binary = is_binary_arithmetic(consumer.op);
  if (activations_only && !activation && !bias_add && consumer.op != ir::OpId::Add)
    return ir::to_string(consumer.op) + " is not a bias, a residual add or an activation this pass fuses";
  if (!activation && !bias_add && !binary && !(consumer.def && consumer.def->kind == ir::OpKind::Elementwise))
    return ir::to_string(consumer.op) + " is not an elementwise op";
  const ir::Value* result = consumer.results[0];
  if (!ir::is_floating(result->type.dtype) || !ir::is_floating(running->type.dtype))
    return "the epilogue computes in float; " + ref(result) + " is " +
           std::string(ir::dtype_name(result->type.dtype));
  if (result->type.shape != running->type.shape)
    return ref(result) + " has shape " + ir::shape_to_string(result->type.shape) +
           ", not the GEMM result's " + ir::shape_to_string(running->type.shape);
  // A cast between float types joins: the epilogue computes in float and its store rounds once
  // to the result's type, as for a 16-bit GEMM's own result (cuBLASLt's epilogues do the same).
  if (consumer.op == ir::OpId::Dropout) return ir::to_string(consumer.op) + " is left to its own kernel";
  if (consumer.inputs.size() == 1) return std::nullopt;
  if (consumer.inputs.size() != 2) return ir::to_string(consumer.op) + " has more than two operands";
  if (bias_add) {
    if (consumer.inputs[0] != running) return ref(running) + " is the bias, not the biased value";
    const int axis = normalized_axis(consumer, running->type.shape.size());
    if (axis != running_channel_axis(gemm, running))
      return fmt::format("bias_add on axis {}, but the {}'s channels are axis {}", axis, gemm.op,
                         running_channel_axis(gemm, running));
    return std::nullopt;
  }
  for (const ir::Value* operand : consumer.inputs) {
    if (operand == running) continue;
    if (layout_of(operand->type.shape, running->type.shape, running_channel_axis(gemm, running)) == Layout::Other)
      return fmt::format("operand {} {} is neither per-channel, a scalar nor of the result's shape",
                         ref(operand), operand->type.to_string());
  }
  return std::nullopt;
}

std::string epilogue_step_name(const ir::Node& gemm, const ir::Value* running,
                               const ir::Node& consumer) {
  if (consumer.op == ir::OpId::BiasAdd) return "bias";
  if (consumer.op != ir::OpId::Add) return ir::to_string(consumer.op);
  for (const ir::Value* operand : consumer.inputs)
    if (operand != running &&
        layout_of(operand->type.shape, running->type.shape, running_channel_axis(gemm, running)) == Layout::Channel)
      return "bias";
  return "add";
}

}  // namespace kiln::passes::fusion
