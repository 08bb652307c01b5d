// constant-fold: whatever depends only on parameters is computed once, at compile time.
//
// Nodes are visited in graph (topological) order. A node all of whose operands are parameters
// with data is evaluated with the reference interpreter's kernel (ir/eval: double
// arithmetic, rounded once to the result dtype, exactly what the graph would compute) and its
// result becomes a new parameter with an inline source and the result's name. Because that
// parameter replaces every use, a later node fed only by folded values folds too, so a whole
// parameter-only subgraph collapses in one pass.
//
// Not folded, each with a reason under --debug-only=constant-fold: training-mode dropout
// (random), expand_2_4 (a compressed weight the conv's kernel reads as it is), ops the
// interpreter has no kernel for, nodes whose kernel reports a data error
// (integer division by zero: that stays a run-time error, never a compile failure), and results
// so much larger than their operands that folding would bloat the model (a scalar broadcast to
// a huge tensor).
//
// A node with one constant operand folds when the constant makes it the identity: mul(x, 1),
// mul(1, x) and div(x, 1) are x exactly in IEEE arithmetic (±0, ±inf and NaN included) and in
// integer arithmetic, when the constant does not broadcast x to a larger shape. Exporters write
// them (PyTorch 1.13 scales the attention mask by 1).
//
// Then equal small constants become one (dtype, shape and every bit of the data equal, up to
// kMaxMergedElements elements): an exporter writes the same scalar or mask constant once per
// layer, and nodes that read different copies of it are not identical to cse, which runs next.
// Graph outputs are not merged.
// The inference pipeline only: training updates every float parameter on its own.
#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "ir/diagnostic.h"
#include "ir/eval/interpreter.h"
#include "passes/pass.h"
#include "passes/rewrite_util.h"

namespace kiln::passes {
namespace {

constexpr std::string_view kPass = "constant-fold";

// "batch_norm 'bn1' (%y)": the node, and the result a reader finds it by in the printed IR.
std::string who(const ir::Node& node) {
  return node.results.empty() ? node.describe()
                              : node.describe() + " (%" + node.results[0]->name + ")";
}

// A folded result may exceed its operands by this factor, or by this many bytes, not both.
constexpr int64_t kMaxGrowthFactor = 4;
constexpr int64_t kMaxGrowthBytes = int64_t{1} << 20;

int64_t byte_size(const ir::TensorType& type) {
  return ir::num_elements(type.shape) * static_cast<int64_t>(ir::dtype_size(type.dtype));
}

bool all_operands_are_parameters(const ir::Node& node) {
  for (const ir::Value* operand : node.inputs)
    if (operand->role != ir::ValueRole::Parameter) return false;
  return true;
}

// Why `node` (all of whose operands are parameters) must not be folded; empty when it may be.
std::string refusal(const ir::Node& node) {
  if (node.op == ir::OpId::Dropout) {
    auto training = node.attrs.find("training");
    if (training != node.attrs.end() && std::get<bool>(training->second))
      return "training-mode dropout reads the step counter, which changes every step";
  }
  if (node.op == ir::OpId::ExpandTwoFour)
    return "a 2:4 weight stays compressed for sparse tensor cores (sparsify-two-four)";
  if (eval::find_reference_kernel(node.op) == nullptr)
    return "the reference interpreter has no kernel for op '" + ir::to_string(node.op) + "'";
  std::unordered_set<const ir::Value*> operands;
  int64_t operand_bytes = 0;
  for (const ir::Value* operand : node.inputs) {
    if (!operand->data) return "parameter '" + operand->name + "' has no data loaded";
    if (operands.insert(operand).second) operand_bytes += byte_size(operand->type);
  }
  int64_t result_bytes = 0;
  for (const ir::Value* result : node.results) result_bytes += byte_size(result->type);
  if (result_bytes > kMaxGrowthFactor * operand_bytes &&
      result_bytes - operand_bytes > kMaxGrowthBytes)
    return fmt::format("the result ({} bytes) would be more than {}x and more than {} bytes "
                       "larger than its operands ({} bytes)",
                       result_bytes, kMaxGrowthFactor, kMaxGrowthBytes, operand_bytes);
  return {};
}

// The operand `node` passes through unchanged because its other operand is a constant 1, or
// nullptr.
ir::Value* identity_operand(const ir::Node& node) {
  if (node.op != ir::OpId::Mul && node.op != ir::OpId::Div) return nullptr;
  for (size_t i = node.op == ir::OpId::Div ? 1 : 0; i < 2; ++i) {
    const ir::Value* one = node.inputs[i];
    ir::Value* x = node.inputs[1 - i];
    if (one->role != ir::ValueRole::Parameter || !one->data || x->type != node.results[0]->type) continue;
    const std::vector<double> values = one->data->to_doubles();
    if (std::all_of(values.begin(), values.end(), [](double v) { return v == 1.0; })) return x;
  }
  return nullptr;
}

// Constants of at most this many elements are merged when equal. Exporters repeat scalars,
// masks and shape vectors per layer; large weights they deduplicate themselves (PyTorch's
// exporter shares equal initializers), and hashing them all would cost compile time.
constexpr int64_t kMaxMergedElements = 4096;

// Equal small constants read as the first of them; the others, unread, are erased. Returns
// whether any was merged.
bool merge_equal_constants(ir::Graph& graph, PassContext& context) {
  std::unordered_map<std::string, ir::Value*> first_with_data;
  Replacements replacements;
  for (const auto& value : graph.values()) {
    // A graph output keeps its own parameter, and with it its name.
    if (value->role != ir::ValueRole::Parameter || !value->data ||
        ir::num_elements(value->type.shape) > kMaxMergedElements || graph.is_output(value.get()))
      continue;
    const std::vector<double> data = value->data->to_doubles();
    std::string key = value->type.to_string() + ":";
    key.append(reinterpret_cast<const char*>(data.data()), data.size() * sizeof(double));
    auto [it, inserted] = first_with_data.emplace(std::move(key), value.get());
    if (inserted) continue;
    if (!context.take_fuel(kPass, fmt::format("read %{} for %{}: equal constants", it->second->name,
                                              value->name)))
      continue;
    replacements.emplace(value.get(), it->second);
  }
  if (replacements.empty()) return false;
  for (const auto& node : graph.nodes()) rewrite_operands(*node, replacements);
  rewrite_outputs(graph, replacements);
  graph.erase_parameters([&](const ir::Value& value) { return replacements.count(&value) > 0; });
  return true;
}

}  // namespace

bool ConstantFold::run(ir::Graph& graph, PassContext& context) {
  std::vector<ir::Node*> nodes;
  for (const auto& node : graph.nodes()) nodes.push_back(node.get());

  std::unordered_set<const ir::Node*> folded;
  Replacements replacements;  // folded results → their parameters, applied as the sweep goes
  NameTable names(graph);
  for (ir::Node* node : nodes) {
    // Folded operands are parameters already once their replacements are read.
    rewrite_operands(*node, replacements);
    if (ir::Value* x = identity_operand(*node)) {
      if (!context.take_fuel(kPass, fmt::format("replace {} by %{}: {} by the constant 1 is the identity",
                                                who(*node), x->name,
                                                node->op == ir::OpId::Mul ? "multiplication" : "division")))
        continue;
      replacements.emplace(node->results[0], x);
      folded.insert(node);
      continue;
    }
    if (!all_operands_are_parameters(*node)) continue;
    if (std::string why = refusal(*node); !why.empty()) {
      context.debug(kPass, fmt::format("not folding {}: {}", who(*node), why));
      continue;
    }
    std::vector<const ir::Tensor*> operands;
    for (const ir::Value* operand : node->inputs) operands.push_back(operand->data.get());
    std::vector<ir::Tensor> results;
    try {
      results = (*eval::find_reference_kernel(node->op))(*node, operands);
    } catch (const Error& error) {
      // A data error (integer division by zero) stays where it was: a run-time error.
      context.debug(kPass, fmt::format("not folding {}: evaluating it fails: {}", who(*node),
                                       error.diagnostic().message));
      continue;
    }
    KILN_CHECK(results.size() == node->results.size())
        << node->describe() << ": the reference kernel returned " << results.size()
        << " results, the node has " << node->results.size();

    if (!context.take_fuel(kPass, fmt::format("fold {} into a parameter", who(*node)))) continue;

    for (size_t i = 0; i < results.size(); ++i) {
      ir::Value* result = node->results[i];
      KILN_CHECK(results[i].type() == result->type)
          << node->describe() << ": the reference kernel returned " << results[i].type().to_string()
          << ", the node's result is " << result->type.to_string();
      // The parameter takes over the result's name, so a folded graph output keeps its name.
      const std::string base =
          !result->name.empty() ? result->name : !node->name.empty() ? node->name : ir::to_string(node->op);
      names.release(result->name);
      result->name.clear();
      const std::string name = names.take(base);
      auto data = std::make_shared<const ir::Tensor>(std::move(results[i]));
      ir::Value* param =
          graph.add_parameter(name, result->type, ir::InlineData{data->to_doubles()}, result->loc);
      param->data = std::move(data);
      replacements.emplace(result, param);
    }
    folded.insert(node);
  }
  if (!folded.empty()) {
    rewrite_outputs(graph, replacements);
    graph.erase_nodes([&](const ir::Node& node) { return folded.count(&node) > 0; });
  }
  const bool merged = merge_equal_constants(graph, context);
  return !folded.empty() || merged;
}

}  // namespace kiln::passes
