// The kiln IR: a graph of typed SSA values with static shapes.
//
// A Graph owns its Values and Nodes. Values are graph inputs (fed at run time), parameters
// (weights: data from an initializer, an inline array or a safetensors file) or node results.
// Nodes are kept in a valid topological order: every node's operands are defined before it.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "ir/attribute.h"
#include "ir/dynamic_dims.h"
#include "ir/memory_plan.h"
#include "ir/op_id.h"
#include "ir/shape.h"
#include "ir/tensor.h"

namespace kiln::ir {

struct OpDef;
class Node;

// Where something came from, for diagnostics: a JSON pointer into a model file, or a
// line:column in textual IR.
struct SourceLoc {
  std::string file;     // "model.json"; empty when built in memory
  std::string pointer;  // JSON pointer, "/nodes/3"; empty for textual IR
  int line = 0;         // 1-based; 0 when unknown
  int column = 0;

  // "model.json: /nodes/3/inputs/1" (sub is appended to a JSON pointer) or "net.ir:12:7".
  std::string render(std::string_view sub = {}) const;
};

// Where a parameter's data comes from.
struct InitializerSpec {
  std::string kind;  // zeros, ones, constant, uniform, normal, glorot_uniform, he_normal
  AttrMap args;      // value, low, high, mean, std, seed — as the kind requires
};
struct InlineData {
  std::vector<double> values;  // row-major, one per element
};
struct ExternalData {
  std::string path;  // safetensors file, absolute
  std::string key;   // tensor name inside it
};
using ParamSource = std::variant<InitializerSpec, InlineData, ExternalData>;

enum class ValueRole { Input, Parameter, NodeResult };

class Value {
 public:
  std::string name;  // unique within the graph
  TensorType type;
  ValueRole role = ValueRole::NodeResult;
  Node* producer = nullptr;  // for node results
  int result_index = 0;      // which result of the producer
  SourceLoc loc;

  // Graph inputs only: which dims are dynamic (ir/dynamic_dims.h); empty when all are static.
  DimMap dynamic_dims;

  // Parameters only.
  std::optional<ParamSource> source;
  std::shared_ptr<const Tensor> data;  // materialized parameter data, when loaded
};

class Node {
 public:
  OpId op{};                   // what the node computes (ir/ops.def)
  const OpDef* def = nullptr;  // registry entry for op
  std::string name;            // the node's name in the model; printed as loc("...")
  std::vector<Value*> inputs;
  std::vector<Value*> results;
  AttrMap attrs;               // complete: defaults filled in by inference
  SourceLoc loc;
  // Fused kernels only (op "kernel", made by the fusion passes): the nodes the kernel computes,
  // as a graph of their own whose inputs stand for this node's operands (same order and types)
  // and whose outputs are this node's results. `name` is then the kernel's name
  // ("conv2d_bias_relu") and attrs hold its fusion kind ({kind = "epilogue"}).
  std::unique_ptr<Graph> body;

  bool is_kernel() const { return body != nullptr; }

  // "conv2d 'conv1'" — how diagnostics name a node.
  std::string describe() const;
  // "conv2d": the op's name.
  std::string_view op_name() const { return ir::op_name(op); }
};

class Graph {
 public:
  std::string name;
  std::vector<Value*> inputs;
  std::vector<Value*> parameters;
  std::vector<Value*> outputs;
  // The names the model gave its outputs (what `kiln run` names files after). Rewrites may
  // replace an output value with another value of another name; these names stay.
  std::vector<std::string> output_names;
  std::optional<MemoryPlan> memory_plan;  // set by plan-memory (ir/memory_plan.h)
  // The named dims inputs may declare dynamic, with their bounds (ir/dynamic_dims.h).
  std::vector<DimSymbol> symbols;

  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  Graph(Graph&&) = default;
  Graph& operator=(Graph&&) = default;

  Value* add_input(std::string name, TensorType type, SourceLoc loc = {});
  Value* add_parameter(std::string name, TensorType type, ParamSource source, SourceLoc loc = {});
  // Appends a node whose results have the given names and types (one entry per result). Its
  // `def` is looked up in the op registry; attrs should be complete (see ir::infer_op).
  Node* add_node(OpId op, std::string name, std::vector<Value*> inputs, AttrMap attrs,
                 const std::vector<std::pair<std::string, TensorType>>& results,
                 SourceLoc loc = {});

  // Same as add_node, but the node goes right before `before` (which must be in the graph), so
  // a rewrite keeps the order topological.
  Node* insert_node_before(const Node* before, OpId op, std::string name,
                           std::vector<Value*> inputs, AttrMap attrs,
                           const std::vector<std::pair<std::string, TensorType>>& results,
                           SourceLoc loc = {});

  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  const std::vector<std::unique_ptr<Value>>& values() const { return values_; }

  // The value with this name, or nullptr.
  Value* find_value(std::string_view name) const;

  // --- rewriting ---------------------------------------------------------------------------------
  // Nodes that read `value`, in graph order (a node reading it twice appears once).
  std::vector<Node*> users(const Value* value) const;
  // The model's name for output `index` (output_names, else the value's own name).
  const std::string& output_name(size_t index) const;
  // Whether `value` is a graph output.
  bool is_output(const Value* value) const;
  // Makes every node operand and graph output that is `from` read `to` instead.
  void replace_all_uses(const Value* from, Value* to);
  // Removes the nodes for which `dead` is true, with their results. None of those results may
  // still be used by a remaining node or be a graph output. Returns how many were removed.
  size_t erase_nodes(const std::function<bool(const Node&)>& dead);
  // Removes the parameters for which `dead` is true; none may still be used.
  size_t erase_parameters(const std::function<bool(const Value&)>& dead);
  // Reorders the nodes so that each comes after the producers of its operands, keeping the
  // current order wherever it is already valid (a rewrite that adds a node late may break it).
  // Throws InternalError when the nodes form a cycle.
  void sort_topologically();
  // Puts the nodes in `order`, which must hold each of them once. O(n).
  void reorder(const std::vector<const Node*>& order);
  // A name no value of the graph has, built from `base` ("conv1.folded", "conv1.folded.1", ...).
  std::string unique_name(const std::string& base) const;

 private:
  Value* new_value(std::string name, TensorType type, ValueRole role, SourceLoc loc);

  std::vector<std::unique_ptr<Value>> values_;
  std::vector<std::unique_ptr<Node>> nodes_;
};

}  // namespace kiln::ir
