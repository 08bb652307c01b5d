#include "codegen/dynamic_rows.h"

#include <unordered_set>
#include <vector>

#include "ir/dynamic_dims.h"
#include "ir/op_registry.h"

namespace kiln::codegen {

namespace {

using DimsOf = std::unordered_map<const ir::Value*, ir::DimMap>;

// The symbol of `value` when its only dynamic dim is its first, padded at the end (outer 1);
// -1 when it has none; -2 when it has another kind.
int prefix_symbol(const DimsOf& dims, const ir::Value* value) {
  const auto it = dims.find(value);
  if (it == dims.end() || !ir::has_dynamic_dims(it->second)) return -1;
  const ir::DimMap& map = it->second;
  if (!map[0].is_dynamic() || map[0].outer != 1) return -2;
  for (size_t d = 1; d < map.size(); ++d)
    if (map[d].is_dynamic()) return -2;
  return map[0].symbol;
}

// Condition 1 of the header: the one symbol every result and dynamic body value is a prefix
// of, or -1.
int candidate_symbol(const DimsOf& dims, const ir::Node& node) {
  int symbol = -1;
  const auto agree = [&](const ir::Value* value, bool must_be_dynamic) {
    const int s = prefix_symbol(dims, value);
    if (s == -1) return !must_be_dynamic;
    if (s == -2 || (symbol >= 0 && s != symbol)) return false;
    symbol = s;
    return true;
  };
  for (const ir::Value* result : node.results)
    if (!agree(result, true)) return -1;
  if (node.is_kernel())
    for (const auto& inner : node.body->nodes())
      for (const ir::Value* result : inner->results)
        if (!agree(result, false)) return -1;
  return symbol;
}

// Whether `node`, computing every row, may read `input` with garbage in its padding: garbage
// then stays in the padding of its results. True for float data that no op turns into an
// integer (an index built from garbage could fault, and so could an integer division) and
// that no attention reads as keys along a dynamic axis (a masked key's p = 0 times a garbage
// value is NaN). Everything else row-wise keeps padding and real rows apart: that is what
// infer_dynamic_dims proved.
bool reads_garbage_safely(const DimsOf& dims, const ir::Node& node, const ir::Value* input) {
  if (!ir::is_floating(input->type.dtype)) return false;
  std::vector<const ir::Node*> ops{&node};
  if (node.is_kernel())
    for (const auto& inner : node.body->nodes()) ops.push_back(inner.get());
  for (const ir::Node* op : ops) {
    for (const ir::Value* result : op->results)
      if (ir::is_integer(result->type.dtype)) return false;
    if (op->op != ir::OpId::Attention && op->op != ir::OpId::AttentionGrad) continue;
    for (const ir::Value* operand : op->inputs) {
      const auto it = dims.find(operand);
      if (it == dims.end()) continue;
      const ir::DimMap& map = it->second;
      // The keys and features axes (the last two) of k, v and the mask.
      for (size_t d = map.size() >= 2 ? map.size() - 2 : 0; d < map.size(); ++d)
        if (map[d].is_dynamic()) return false;
    }
  }
  return true;
}

}  // namespace

std::unordered_map<const ir::Node*, DynamicRows> choose_dynamic_rows(const ir::Graph& graph,
                                                                     const DynamicRowsProbe& honours) {
  std::unordered_map<const ir::Node*, DynamicRows> chosen;
  if (graph.symbols.empty()) return chosen;
  const DimsOf dims = ir::infer_dynamic_dims(graph);
  for (const auto& node : graph.nodes()) {
    const int symbol = candidate_symbol(dims, *node);
    if (symbol < 0) continue;
    const DynamicRows rows{symbol, graph.symbols[static_cast<size_t>(symbol)].bound};
    if (honours(*node, rows)) chosen.emplace(node.get(), rows);
  }
  // Condition 3. A value must be clean (its padding computed, as from zero-padded inputs) when
  // a kernel that computes every row reads it unsafely, or computes a clean value from it.
  // Readers come after their producers, so one backward sweep settles every reader first.
  std::unordered_set<const ir::Value*> must_be_clean;
  const auto& nodes = graph.nodes();
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    const ir::Node& node = **it;
    bool clean_results = false;
    for (const ir::Value* result : node.results) clean_results = clean_results || must_be_clean.count(result);
    if (clean_results) chosen.erase(&node);
    if (chosen.count(&node)) continue;  // reads only real rows
    for (const ir::Value* input : node.inputs)
      if (clean_results || !reads_garbage_safely(dims, node, input)) must_be_clean.insert(input);
  }
  return chosen;
}

}  // namespace kiln::codegen
