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

}  // namespace

bool DeadCodeElimination::run(ir::Graph& graph, PassContext& context) {
  // How many times each value is read: once per operand slot and once per graph output.
  std::unordered_map<const ir::Value*, int> uses;
  for (const auto& node : graph.nodes())
    for (const ir::Value* input : node->inputs) ++uses[input];
  for (const ir::Value* output : graph.outputs) ++uses[output];

  std::unordered_set<const ir::Node*> dead;
  const auto& nodes = graph.nodes();
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    const ir::Node& node = **it;
    bool used = false;
    for (const ir::Value* result : node.results) used |= uses[result] > 0;
    if (used) continue;
    if (!context.take_fuel(kPass, fmt::format("erase dead {} ({})", node.describe(),
                                              result_names(node))))
      continue;  // kept: its operands stay used
    dead.insert(&node);
    for (const ir::Value* input : node.inputs) --uses[input];
  }
  // erase_nodes asks the predicate more than once per node: it must not take fuel itself.
  if (!dead.empty()) graph.erase_nodes([&](const ir::Node& node) { return dead.count(&node) > 0; });

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
  return !dead.empty() || !dead_params.empty();
}

}  // namespace kiln::passes
