// Rewrites of many values in one sweep, for passes that must stay linear in the graph's size.
//
// Graph::replace_all_uses and Graph::unique_name each scan the whole graph, so a pass that calls
// them once per rewrite is quadratic (100,000 folds of a 100,000-node graph: 10^10 steps). The
// passes here sweep the nodes in topological order, so a node's operands are produced before
// it is reached: recording replacements and applying them to each node as the sweep reaches it
// (then to the graph outputs once) is equivalent, and linear.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "ir/graph.h"

namespace kiln::passes {

// The value of a one-element float parameter with data (a scalar constant of an exported
// graph), or nullopt.
std::optional<double> scalar_constant(const ir::Value* value);

// Value → the value that replaces it. A replacement is never itself replaced.
using Replacements = std::unordered_map<const ir::Value*, ir::Value*>;

// Makes `node` read the replacements of its operands.
void rewrite_operands(ir::Node& node, const Replacements& replacements);
// Makes the graph outputs the replacements of theirs.
void rewrite_outputs(ir::Graph& graph, const Replacements& replacements);
// Both, for every node but the `dead` ones, which are then erased: the end of a pattern pass
// whose matched nodes give way to new ones.
void replace_and_erase(ir::Graph& graph, const Replacements& replacements,
                       const std::unordered_set<const ir::Node*>& dead);

// The axes a reduce_sum, reduce_mean or reduce_max node reduces: in [0, rank), sorted, each once;
// every axis when its `axes` is empty.
std::vector<int64_t> reduced_axes(const ir::Node& node);

// Unique value names for many new values: the graph's names are read once.
class NameTable {
 public:
  explicit NameTable(const ir::Graph& graph);
  // `base`, or `base.1`, `base.2`, ... (as Graph::unique_name): the first not taken, now taken.
  std::string take(const std::string& base);
  // The pass cleared a value's name: it may be taken again.
  void release(const std::string& name) { taken_.erase(name); }

 private:
  std::unordered_set<std::string> taken_;
};

// Builds nodes right before an anchor node (so the order stays topological), each result typed
// by shape inference and named uniquely after a base: what an expansion pass writes its
// replacement with. An ill-typed node is a kiln bug (internal compiler error).
class NodeInserter {
 public:
  NodeInserter(ir::Graph& graph, NameTable& names, const ir::Node& anchor)
      : graph_(graph), names_(names), anchor_(anchor) {}

  // `op(inputs)` with `attrs`; its one result is named `name` (or `name.1`, ... if taken).
  ir::Value* add(ir::OpId op, std::vector<ir::Value*> inputs, ir::AttrMap attrs,
                 const std::string& name);

 private:
  ir::Graph& graph_;
  NameTable& names_;
  const ir::Node& anchor_;
};

}  // namespace kiln::passes
