// What an ONNX op converter sees: one node's operands (graph values or constants known at
// import), its attributes with their per-opset defaults, and a builder that appends kiln ops —
// or folds them on the spot when every operand is a constant, so shape arithmetic (Shape,
// Gather, Concat, Unsqueeze on shapes) never reaches the graph.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ir/graph.h"
#include "ir/op_registry.h"

namespace onnx {
class NodeProto;
class AttributeProto;
class TensorProto;
class GraphProto;
}  // namespace onnx

namespace kiln::compiler::onnx_import {

// Import folds an op whose operands are all constants only when its result is at most this
// big: a larger result (a ConstantOfShape or Expand of a huge shape) is computed at run time,
// where the memory is the user's to give, instead of being held at import and stored as weights.
inline constexpr int64_t kMaxFoldedBytes = int64_t{64} << 20;
// ... and only when the result is at most this much bigger than its operands together.
inline constexpr int64_t kMaxFoldGrowth = int64_t{1} << 20;
// The largest result import also computes from values given for graph inputs (shape arithmetic).
inline constexpr int64_t kMaxGivenElements = 1024;

// A value during import: a node result or graph input in the kiln graph, or a constant (an
// initializer, a Constant node, or anything folded from constants). Absent optional inputs
// ("" in ONNX) have neither.
struct Operand {
  ir::Value* value = nullptr;
  std::shared_ptr<const ir::Tensor> constant;
  // A graph input's value given for this run (ImportOptions::input_values): read where a value
  // is needed at import, while the operand stays the run-time input everywhere else.
  std::shared_ptr<const ir::Tensor> given;
  std::string name;  // the ONNX name, used when a constant becomes a parameter
  bool initializer = false;  // the constant is the model's initializer `name`, unchanged
  // A constant with no elements (a zero dim): neither value nor constant. Ops that take an empty
  // input as "not given" see it absent; input() refuses it; Concat skips it, as ONNX does.
  bool empty = false;

  bool present() const { return value != nullptr || constant != nullptr; }
  bool is_constant() const { return constant != nullptr; }
  const ir::TensorType& type() const { return value ? value->type : constant->type(); }
};

// Thrown by a converter: what is unsupported or wrong about this node. The importer adds the
// node's location ("model.onnx: node 17 'Conv_3' (Conv, opset 13)").
struct ConvertError {
  std::string message;
};

// What control-flow ops (If, Scan) need from the importer: a subgraph's nodes imported into the
// graph being built, with its inputs bound to operands; the outer scope's values stay visible
// and the subgraph's own names are forgotten afterwards. Errors are reported by the importer,
// located under `scope` ("node 3 'If_0' (If, opset 13) then_branch"); nullopt when any occurred.
class SubgraphImporter {
 public:
  virtual ~SubgraphImporter() = default;
  virtual std::optional<std::vector<Operand>> import_subgraph(
      const onnx::GraphProto& body, const std::vector<std::pair<std::string, Operand>>& bound,
      const std::string& scope) = 0;
};

// The graph being built and the constants turned into parameters (shared by every node).
struct GraphBuilder {
  ir::Graph graph;
  std::string file;  // for locations
  std::string model_path;  // the model file (absolute), which initializer parameters name
  std::unordered_set<std::string> used_value_names;
  std::unordered_set<std::string> used_node_names;
  std::unordered_map<std::string, int> next_value_suffix, next_node_suffix;  // where to search next
  std::unordered_map<const ir::Tensor*, ir::Value*> parameters;  // constant → its parameter
  SubgraphImporter* subgraphs = nullptr;  // the importer, for control flow

  std::string unique_value_name(const std::string& base);
  std::string unique_node_name(const std::string& base);
  // The graph value for an operand: a constant becomes a parameter (once).
  ir::Value* materialize(const Operand& operand);
};

class NodeContext {
 public:
  NodeContext(GraphBuilder& builder, const onnx::NodeProto& node, std::string node_name, int opset,
              std::vector<Operand> inputs, ir::SourceLoc loc);

  int opset() const { return opset_; }
  const std::string& node_name() const { return node_name_; }
  int num_outputs() const;  // outputs the model names (trailing optional ones may be omitted)
  bool output_used(int index) const;

  // --- inputs -----------------------------------------------------------------------------------
  int num_inputs() const { return static_cast<int>(inputs_.size()); }
  bool has_input(int index) const { return index < num_inputs() && inputs_[index].present(); }
  const Operand& input(int index) const;  // fails when absent
  const std::vector<Operand>& inputs() const { return inputs_; }
  // A constant input's values as integers (shapes, axes, pads); fails unless constant.
  std::vector<int64_t> const_ints(int index, const char* what) const;
  std::vector<double> const_doubles(int index, const char* what) const;

  // --- attributes -------------------------------------------------------------------------------
  bool has_attr(const std::string& name) const { return find_attr(name) != nullptr; }
  int64_t attr_int(const std::string& name, int64_t default_value) const;
  double attr_float(const std::string& name, double default_value) const;
  std::string attr_string(const std::string& name, const std::string& default_value) const;
  std::vector<int64_t> attr_ints(const std::string& name, std::vector<int64_t> default_value = {}) const;
  std::vector<double> attr_floats(const std::string& name) const;
  std::vector<std::string> attr_strings(const std::string& name) const;
  const onnx::TensorProto* attr_tensor(const std::string& name) const;
  const onnx::GraphProto* attr_graph(const std::string& name) const;  // a subgraph attribute
  // Fails when the node carries an attribute not in `known` (so a setting is never ignored).
  void check_attrs(const std::vector<std::string>& known) const;

  // --- building ---------------------------------------------------------------------------------
  // Appends kiln op `op` (one result), or evaluates it now when every operand is a constant
  // and the result is at most kMaxFoldedBytes.
  Operand emit(ir::OpId op, const std::vector<Operand>& operands, ir::AttrMap attrs = {});
  Operand constant(ir::Tensor tensor, const std::string& suffix = "const");
  Operand scalar(ir::DType dtype, double value);
  // A tensor of `shape` filled with `value`: a broadcast of a scalar, folded when small, filled
  // at run time when not (so a huge pad or mask never sits in memory at import).
  Operand fill(ir::DType dtype, const ir::Shape& shape, double value);
  // 0, 1, ..., n-1 (i64) along `axis` of a shape of ones of rank `rank`; n checked against the
  // fold limit.
  Operand positions(int rank, int axis, int64_t n);
  Operand reshape(const Operand& x, const ir::Shape& shape);

  [[noreturn]] void fail(const std::string& message) const;
  // Fails unless a constant of `type` that a rule builds at import (`what`: "the range") is at
  // most kMaxFoldedBytes.
  void check_fold_size(const ir::TensorType& type, const std::string& what) const;

  GraphBuilder& builder() { return builder_; }
  // Where the node is, as its errors say ("node 3 'If_0' (If, opset 13)"), for subgraph scopes.
  const std::string& location() const { return loc_.pointer; }

 private:
  const onnx::AttributeProto* find_attr(const std::string& name) const;
  Operand fold(ir::OpId op, const std::vector<Operand>& operands, const ir::AttrMap& attrs,
               const ir::TensorType& result);
  // Runs `op` on the reference evaluator now.
  ir::Tensor evaluate(ir::OpId op, const std::vector<const ir::Tensor*>& operands, const ir::AttrMap& attrs,
                      const ir::TensorType& result) const;

  GraphBuilder& builder_;
  const onnx::NodeProto& node_;
  std::string node_name_;
  int opset_;
  std::vector<Operand> inputs_;
  ir::SourceLoc loc_;
  int emitted_ = 0;
};

}  // namespace kiln::compiler::onnx_import
