// cse: two nodes with the same op, the same operands (the same values, in the same order) and
// equal attributes compute the same thing; the later one is dropped and its users read the first.
//
// One forward sweep with a hash table keyed on (op, operand pointers, printed attributes, result
// types), as in MLIR's CSE (mlir/lib/Transforms/CSE.cpp). Because nodes are in topological order
// and a merge rewrites the uses at once, a node's operands are already merged when it is reached:
// after a' folds into a, b(a') reads a and matches b(a), so chains collapse in the same sweep.
// The uses are rewritten as the sweep reaches them (passes/rewrite_util.h): linear in the graph.
// Operand order matters: add(x, y) and add(y, x) are not merged here (canonicalize orders the
// operands of commutative ops first). Every op is a function of its operands and
// attributes; training dropout too: its mask is Philox(seed, step), so two dropouts merge only
// when they share the seed attribute, operand and step.
#include <fmt/format.h>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "ir/op_registry.h"
#include "passes/pass.h"
#include "passes/rewrite_util.h"

namespace kiln::passes {

namespace {

constexpr std::string_view kPass = "cse";

// The hash key: op, operand identities, attributes as the printer writes them (an attribute
// equal to the op's default counts as absent, as in the printed form) and result types.
std::string cse_key(const ir::Node& node) {
  std::string key = ir::to_string(node.op);
  key += '(';
  for (const ir::Value* input : node.inputs) key += fmt::format("{},", fmt::ptr(input));
  key += "){";
  for (const auto& [name, value] : node.attrs) {
    const ir::AttrSpec* spec = node.def ? node.def->find_attr(name) : nullptr;
    if (spec && spec->default_value && *spec->default_value == value) continue;
    key += name + "=" + ir::attribute_to_string(value) + ";";
  }
  key += "}:";
  for (const ir::Value* result : node.results) key += result->type.to_string() + ",";
  return key;
}

std::string result_names(const ir::Node& node) {
  std::string out;
  for (const ir::Value* result : node.results)
    out += (out.empty() ? "%" : ", %") + (result->name.empty() ? "?" : result->name);
  return out;
}

std::string describe(const ir::Node& node) {
  return fmt::format("{} ({})", node.describe(), result_names(node));
}

}  // namespace

bool CommonSubexpressionElimination::run(ir::Graph& graph, PassContext& context) {
  std::unordered_map<std::string, const ir::Node*> first_with_key;
  std::unordered_set<const ir::Node*> merged;
  Replacements replacements;  // results of merged nodes → the first node's
  for (const auto& node_ptr : graph.nodes()) {
    ir::Node& node = *node_ptr;
    rewrite_operands(node, replacements);
    auto [it, inserted] = first_with_key.emplace(cse_key(node), &node);
    if (inserted) continue;
    const ir::Node& first = *it->second;
    if (!context.take_fuel(kPass, fmt::format("merge {} into {}", describe(node), describe(first))))
      continue;
    for (size_t i = 0; i < node.results.size(); ++i)
      replacements.emplace(node.results[i], first.results[i]);
    merged.insert(&node);
  }
  if (merged.empty()) return false;
  rewrite_outputs(graph, replacements);
  graph.erase_nodes([&](const ir::Node& node) { return merged.count(&node) > 0; });
  return true;
}

}  // namespace kiln::passes
