// dce: removes nodes whose results nothing reads, then parameters nothing reads.
//
// One reverse sweep reaches the fixed point: nodes are in topological order, so every user of a
// node comes after it; walking backwards, a node's users have all been decided (kept or removed)
// by the time we reach it. Each value carries a use count (node operands plus graph outputs);
// removing a node decrements the counts of its operands, which may make an earlier node dead.
// Graph inputs are never removed: they are the graph's interface, unused or not.
// MLIR's region DCE (mlir/lib/Transforms/Utils/RegionUtils.cpp) erases dead ops within a block
// the same way, walking them in reverse.
#include <fmt/format.h>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "passes/dce.h"
#include "passes/pass.h"

namespace kiln::passes {

namespace {

constexpr std::string_view kPass = "dce";

// "%a, %b": the names a node's results print under (best effort: unnamed values show as %?).
std::string result_names(const ir::Node& node) {
  std::string out;
  for (const ir::Value* result : node.results)
    out += (out.empty() ? "%" : ", %") + (result->name.empty() ? "?" : result->name);
  return out;
}

// How many times each value is read: once per operand slot and once per graph output.
std::unordered_map<const ir::Value*, int> count_uses(const ir::Graph& graph) {
  std::unordered_map<const ir::Value*, int> uses;
  for (const auto& node : graph.nodes())
    for (const ir::Value* input : node->inputs) ++uses[input];
  for (const ir::Value* output : graph.outputs) ++uses[output];
  return uses;
}

}  // namespace

size_t erase_dead_nodes(ir::Graph& graph, size_t first,
                        const std::function<bool(const ir::Node&)>& may_erase) {
  std::unordered_map<const ir::Value*, int> uses = count_uses(graph);
  std::unordered_set<const ir::Node*> dead;
  const auto& nodes = graph.nodes();
  for (size_t i = nodes.size(); i-- > first;) {
    const ir::Node& node = *nodes[i];
    bool used = false;
    for (const ir::Value* result : node.results) used |= uses[result] > 0;
    if (used || !may_erase(node)) continue;  // a kept node's operands stay used
    dead.insert(&node);
    for (const ir::Value* input : node.inputs) --uses[input];
  }
  // erase_nodes asks the predicate more than once per node: it must not call may_erase.
  if (!dead.empty()) graph.erase_nodes([&](const ir::Node& node) { return dead.count(&node) > 0; });
  return dead.size();
}

bool DeadCodeElimination::run(ir::Graph& graph, PassContext& context) {
  const size_t erased = erase_dead_nodes(graph, 0, [&](const ir::Node& node) {
    return context.take_fuel(kPass, fmt::format("erase dead {} ({})", node.describe(),
                                                result_names(node)));
  });

  // Parameters and inputs that only the erased nodes read are unused now.
  std::unordered_map<const ir::Value*, int> uses = count_uses(graph);
  std::unordered_set<const ir::Value*> dead_params;
  for (const ir::Value* param : graph.parameters) {
    if (uses[param] > 0) continue;
    if (!context.take_fuel(kPass, fmt::format("erase unused parameter %{}", param->name))) continue;
    dead_params.insert(param);
  }
  if (!dead_params.empty())
    graph.erase_parameters([&](const ir::Value& param) { return dead_params.count(&param) > 0; });

  for (const ir::Value* input : graph.inputs)
    if (uses[input] == 0)
      context.debug(kPass, fmt::format("keep unused input %{}: graph inputs are the interface",
                                       input->name));
  return erased > 0 || !dead_params.empty();
}

}  // namespace kiln::passes
