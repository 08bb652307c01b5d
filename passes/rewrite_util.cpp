#include "passes/rewrite_util.h"

#include <algorithm>

#include "ir/diagnostic.h"
#include "ir/op_registry.h"

namespace kiln::passes {

std::optional<double> scalar_constant(const ir::Value* value) {
  if (value->role != ir::ValueRole::Parameter || !value->data) return std::nullopt;
  if (!ir::is_floating(value->type.dtype) || ir::num_elements(value->type.shape) != 1)
    return std::nullopt;
  return value->data->to_doubles()[0];
}

void rewrite_operands(ir::Node& node, const Replacements& replacements) {
  if (replacements.empty()) return;
  for (ir::Value*& operand : node.inputs)
    if (auto it = replacements.find(operand); it != replacements.end()) operand = it->second;
}

void replace_and_erase(ir::Graph& graph, const Replacements& replacements,
                       const std::unordered_set<const ir::Node*>& dead) {
  for (const auto& node : graph.nodes())
    if (!dead.count(node.get())) rewrite_operands(*node, replacements);
  rewrite_outputs(graph, replacements);
  graph.erase_nodes([&](const ir::Node& node) { return dead.count(&node) > 0; });
}

void rewrite_outputs(ir::Graph& graph, const Replacements& replacements) {
  for (ir::Value*& output : graph.outputs)
    if (auto it = replacements.find(output); it != replacements.end()) output = it->second;
}

NameTable::NameTable(const ir::Graph& graph) {
  for (const auto& value : graph.values())
    if (!value->name.empty()) taken_.insert(value->name);
}

std::string NameTable::take(const std::string& base) {
  std::string name = base;
  for (int i = 1; taken_.count(name) > 0; ++i) name = base + "." + std::to_string(i);
  taken_.insert(name);
  return name;
}

std::vector<int64_t> reduced_axes(const ir::Node& node) {
  const int64_t rank = static_cast<int64_t>(node.inputs[0]->type.shape.size());
  std::vector<int64_t> axes = std::get<std::vector<int64_t>>(node.attrs.at("axes"));
  if (axes.empty())
    for (int64_t a = 0; a < rank; ++a) axes.push_back(a);
  for (int64_t& a : axes)
    if (a < 0) a += rank;
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  return axes;
}

ir::Value* NodeInserter::add(ir::OpId op, std::vector<ir::Value*> inputs, ir::AttrMap attrs,
                             const std::string& name) {
  std::vector<ir::TensorType> types;
  try {
    types = ir::infer_op(op, inputs, attrs);
  } catch (const ir::OpError& error) {
    KILN_CHECK(false) << "rewrite of " << anchor_.describe() << " built an ill-typed " << op
                      << ": " << error.message;
  }
  KILN_CHECK(types.size() == 1) << op << " has " << types.size() << " results";
  const std::string result = names_.take(name);
  return graph_
      .insert_node_before(&anchor_, op, anchor_.name, std::move(inputs), std::move(attrs),
                          {{result, types[0]}}, anchor_.loc)
      ->results[0];
}

}  // namespace kiln::passes
