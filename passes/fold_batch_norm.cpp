// fold-batch-norm: inference batch_norm disappears into the conv2d or dense before it.
//
// In inference a batch_norm is a per-channel affine map, y = (x - mean) * s + bias with
// s = scale / sqrt(var + epsilon). When x is a conv2d or dense whose weight and bias are known
// parameters, the map folds into them (Ioffe & Szegedy 2015, section 3.2; PyTorch's
// torch.nn.utils.fusion.fuse_conv_bn_weights):
//   W'[o, ...] = W[o, ...] * s[o]         (output channel o: axis 0 of conv [O,C/g,KH,KW] and
//   b'[o]      = (b[o] - mean[o]) * s[o] + bias[o]           of dense [N,K]; b = 0 if absent)
// Everything is computed in double and rounded once to the parameter dtype. The conv or dense
// is rewritten in place: it keeps its name and location, always has a bias, and its result takes
// over the batch_norm result's name, so graph outputs keep theirs. The old parameters are left
// unused for dce. One sweep, linear in the graph (passes/rewrite_util.h).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "ir/image_layout.h"
#include "passes/pass.h"
#include "passes/rewrite_util.h"

namespace kiln::passes {
namespace {

constexpr std::string_view kPass = "fold-batch-norm";

// "batch_norm 'bn1' (%y)": the node, and the result a reader finds it by in the printed IR.
std::string who(const ir::Node& node) {
  return node.results.empty() ? node.describe()
                              : node.describe() + " (%" + node.results[0]->name + ")";
}

// batch_norm's operands, by index, for debug messages.
constexpr const char* kBnOperandNames[] = {"x", "scale", "bias", "mean", "var"};

// A parameter's data, or nullopt with the reason in `why`.
std::optional<std::vector<double>> parameter_values(const ir::Node& node, const ir::Value* value,
                                                    const char* role, std::string& why) {
  if (value->role != ir::ValueRole::Parameter) {
    why = fmt::format("{} of {} ('{}') is not a parameter", role, who(node), value->name);
    return std::nullopt;
  }
  if (!value->data) {
    why = fmt::format("{} of {} (parameter '{}') has no data loaded", role, who(node),
                      value->name);
    return std::nullopt;
  }
  if (!ir::is_floating(value->data->dtype())) {
    why = fmt::format("{} of {} (parameter '{}') is {}, not a float dtype", role, who(node),
                      value->name, ir::dtype_name(value->data->dtype()));
    return std::nullopt;
  }
  return value->data->to_doubles();
}

// The conv2d or dense `bn` can fold into, or nullptr with the reason in `why`.
ir::Node* foldable_producer(const ir::Graph& graph, const ir::Node& bn,
                            const std::unordered_map<const ir::Value*, size_t>& use_counts,
                            std::string& why) {
  auto training = bn.attrs.find("training");
  if (training != bn.attrs.end() && std::get<bool>(training->second)) {
    why = "it is in training mode (it normalizes with batch statistics)";
    return nullptr;
  }
  const ir::Value* x = bn.inputs[0];
  ir::Node* producer = x->producer;
  if (producer == nullptr) {
    why = fmt::format("its input '{}' is not produced by conv2d or dense", x->name);
    return nullptr;
  }
  if (producer->op != ir::OpId::Conv2d && producer->op != ir::OpId::Dense) {
    why = fmt::format("its input '{}' is produced by {}, not conv2d or dense", x->name,
                      who(*producer));
    return nullptr;
  }
  if (auto it = producer->attrs.find("k_chunk"); it != producer->attrs.end() && std::get<int64_t>(it->second) > 0) {
    why = fmt::format("its input '{}' is split-K partial sums", x->name);
    return nullptr;
  }
  if (ir::image_layout(*producer) == ir::ImageLayout::Nhwc) {
    why = fmt::format("its input '{}' is an NHWC convolution's: batch_norm's channel axis 1 is not its "
                      "channel axis 3",
                      x->name);
    return nullptr;
  }
  // batch_norm normalizes axis 1; dense's features are its last axis, so only rank 2 matches.
  if (producer->op == ir::OpId::Dense && x->type.rank() != 2) {
    why = fmt::format("its input '{}' ({}) is a dense of rank {}: batch_norm's channel axis 1 "
                      "is not dense's feature axis",
                      x->name, x->type.to_string(), x->type.rank());
    return nullptr;
  }
  if (use_counts.at(x) != 1 || graph.is_output(x)) {
    why = fmt::format("the result '{}' of {} has another user{}", x->name, who(*producer),
                      graph.is_output(x) ? " (it is a graph output)" : "");
    return nullptr;
  }
  return producer;
}

std::string base_name(const ir::Node& node) {
  return node.name.empty() ? node.results[0]->name : node.name;
}

// What the folds of one run share, so the pass stays linear (passes/rewrite_util.h).
struct FoldRewrite {
  explicit FoldRewrite(const ir::Graph& graph) : names(graph) {
    for (const auto& node : graph.nodes())
      for (const ir::Value* operand : node->inputs) ++use_counts[operand];
    for (const auto& value : graph.values()) use_counts.emplace(value.get(), 0);
  }
  NameTable names;
  Replacements replacements;                              // batch_norm results → folded results
  std::unordered_map<const ir::Value*, size_t> use_counts;  // operand slots reading each value
  std::unordered_set<const ir::Node*> dead;                 // the folded batch_norms
};

// Folds `bn` into `producer`; returns false (with a debug reason) when an operand's data is
// unusable or fuel is out, leaving the graph untouched.
bool fold(ir::Graph& graph, PassContext& context, FoldRewrite& rewrite, ir::Node& bn,
          ir::Node& producer) {
  const auto refuse = [&](const std::string& why) {
    context.debug(kPass, fmt::format("not folding {}: {}", who(bn), why));
    return false;
  };
  std::string why;
  std::optional<std::vector<double>> weight =
      parameter_values(producer, producer.inputs[1], "weight", why);
  if (!weight) return refuse(why);
  std::vector<double> bias(static_cast<size_t>(producer.inputs[1]->type.shape[0]), 0.0);
  if (producer.inputs.size() == 3) {
    const std::optional<std::vector<double>> given =
        parameter_values(producer, producer.inputs[2], "bias", why);
    if (!given) return refuse(why);
    bias = *given;
  }
  std::vector<double> bn_values[5];
  for (size_t i = 1; i < 5; ++i) {
    std::optional<std::vector<double>> values =
        parameter_values(bn, bn.inputs[i], kBnOperandNames[i], why);
    if (!values) return refuse(why);
    bn_values[i] = std::move(*values);
  }
  const std::vector<double>& scale = bn_values[1];
  const std::vector<double>& shift = bn_values[2];
  const std::vector<double>& mean = bn_values[3];
  const std::vector<double>& var = bn_values[4];
  const double epsilon = std::get<double>(bn.attrs.at("epsilon"));

  const size_t channels = bias.size();
  std::vector<double> s(channels);
  for (size_t o = 0; o < channels; ++o) {
    s[o] = scale[o] / std::sqrt(var[o] + epsilon);
    // (x - mean) / 0 is inf or NaN depending on x; a folded weight cannot say that.
    if (!std::isfinite(s[o]))
      return refuse(fmt::format("channel {}: scale / sqrt(var + epsilon) = {} / sqrt({} + {}) "
                                "is not finite",
                                o, scale[o], var[o], epsilon));
  }

  if (!context.take_fuel(kPass, fmt::format("fold {} into {}", who(bn), who(producer))))
    return false;

  // W' = W * s[o]: each output channel is a contiguous block of the row-major weight.
  std::vector<double> new_weight = std::move(*weight);
  const size_t per_channel = new_weight.size() / channels;
  for (size_t i = 0; i < new_weight.size(); ++i) new_weight[i] *= s[i / per_channel];
  std::vector<double> new_bias(channels);
  for (size_t o = 0; o < channels; ++o) new_bias[o] = (bias[o] - mean[o]) * s[o] + shift[o];

  // Rounded once to the parameter dtype; the inline source holds the rounded values, so the
  // printed dense<> materializes to exactly `data`.
  const auto add_parameter = [&](const std::string& name, const ir::TensorType& type,
                                 const std::vector<double>& values, const ir::SourceLoc& loc) {
    auto data = std::make_shared<const ir::Tensor>(ir::Tensor::from_doubles(type, values));
    ir::Value* param =
        graph.add_parameter(rewrite.names.take(name), type, ir::InlineData{data->to_doubles()}, loc);
    param->data = std::move(data);
    return param;
  };
  const std::string base = base_name(producer);
  const ir::Value* old_weight = producer.inputs[1];
  const ir::TensorType bias_type{old_weight->type.dtype, {static_cast<int64_t>(channels)}};
  const ir::SourceLoc& bias_loc =
      producer.inputs.size() == 3 ? producer.inputs[2]->loc : old_weight->loc;
  ir::Value* weight_param =
      add_parameter(base + ".weight.folded", old_weight->type, new_weight, old_weight->loc);
  ir::Value* bias_param = add_parameter(base + ".bias.folded", bias_type, new_bias, bias_loc);

  // The producer takes the folded weight and bias in place, and its result takes over the
  // batch_norm result's name and location (names are unique, so the name moves); the
  // batch_norm's users read it once the sweep reaches them.
  producer.inputs[1] = weight_param;
  if (producer.inputs.size() == 3) producer.inputs[2] = bias_param;
  else producer.inputs.push_back(bias_param);
  ir::Value* bn_result = bn.results[0];
  ir::Value* folded = producer.results[0];
  rewrite.names.release(folded->name);
  folded->name = bn_result->name;
  folded->loc = bn_result->loc;
  bn_result->name.clear();
  rewrite.replacements.emplace(bn_result, folded);
  rewrite.use_counts[folded] = rewrite.use_counts.at(bn_result);
  std::replace(graph.outputs.begin(), graph.outputs.end(), bn_result, folded);
  rewrite.dead.insert(&bn);
  return true;
}

}  // namespace

bool FoldBatchNorm::run(ir::Graph& graph, PassContext& context) {
  FoldRewrite rewrite(graph);
  for (const auto& node : graph.nodes()) {
    rewrite_operands(*node, rewrite.replacements);
    if (node->op != ir::OpId::BatchNorm) continue;
    ir::Node& bn = *node;
    std::string why;
    ir::Node* producer = foldable_producer(graph, bn, rewrite.use_counts, why);
    if (producer == nullptr) {
      context.debug(kPass, fmt::format("not folding {}: {}", who(bn), why));
      continue;
    }
    fold(graph, context, rewrite, bn, *producer);
  }
  if (rewrite.dead.empty()) return false;
  graph.erase_nodes([&](const ir::Node& node) { return rewrite.dead.count(&node) > 0; });
  return true;
}

}  // namespace kiln::passes
