// The op registry: the op table (ir/ops.def) as data, one OpDef per row, indexed by OpId.
//
// Per op: its id and name, operand names and count, attribute schema with defaults, type rule
// (shape and dtype inference), summary, and its op kind, which drives fusion legality (TVM's
// lattice, cheapest first):
//   elementwise < broadcast < injective < reduce < out_elementwise_fusable < opaque
// Gradient rules (ir/gradients/) attach to the same entries. What each layer does with an op
// (evaluate it, emit its kernel, cost it) is that layer's `switch` over OpId.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/attribute.h"
#include "ir/op_id.h"
#include "ir/shape.h"

namespace kiln::ir {

enum class OpKind { Elementwise, Broadcast, Injective, Reduce, OutElementwiseFusable, Opaque };
std::string_view op_kind_name(OpKind kind);  // "elementwise", ..., "out_elementwise_fusable"

struct AttrSpec {
  std::string name;
  AttrType type;
  std::optional<Attribute> default_value;  // nullopt: the attribute is required
  std::vector<std::string> choices = {};   // a string attribute's allowed values; empty: any

  // The index of `value` among the choices (how scalar expressions read a choice attribute);
  // nullopt when it is not one of them.
  std::optional<int> choice_index(std::string_view value) const;
};

// What an op's inference function sees: operand types and the complete attribute map
// (coerced to the schema's types, defaults filled in).
struct InferContext {
  std::string_view op;
  const std::vector<TensorType>& inputs;
  const AttrMap& attrs;

  int64_t get_int(const std::string& name) const;
  double get_float(const std::string& name) const;
  bool get_bool(const std::string& name) const;
  const std::string& get_string(const std::string& name) const;
  const std::vector<int64_t>& get_ints(const std::string& name) const;
  const std::vector<double>& get_floats(const std::string& name) const;
};

// A problem with one use of an op, thrown by inference. The caller knows where the node is
// and renders "<where>: error: <op> '<name>': <message>". input_index or attr, when set, let
// it point at the operand or attribute at fault.
struct OpError {
  std::string message;
  int input_index = -1;
  std::string attr = {};
};

using InferFn = std::function<std::vector<TensorType>(const InferContext&)>;

class GradBuilder;  // ir/grad_builder.h
class Node;
class Value;
// A gradient rule (reverse mode): given a forward node and the gradient of each of its results
// (nullptr for a result nothing downstream differentiates), appends the backward nodes through
// `builder` and returns one gradient per operand, of the operand's type (nullptr for an operand
// that has none: integer labels, or one the op does not depend on smoothly).
using GradFn = std::function<std::vector<Value*>(GradBuilder& builder, const Node& node,
                                                 const std::vector<Value*>& result_grads)>;

struct OpDef {
  OpId id{};
  std::string name;
  std::string summary;                  // one line, for docs and --help
  std::vector<std::string> input_names; // e.g. {"x", "weight", "bias"}; last repeats if variadic
  int min_inputs = 1;
  int max_inputs = 1;                   // -1: variadic
  std::vector<AttrSpec> attrs;
  OpKind kind = OpKind::Opaque;
  InferFn infer;
  std::string type_rule;                // the infer function's name in ir/ops/type_rules.def
  std::string type_rule_words;          // ... and the rule in words
  std::string section;                  // the table's KILN_SECTION above the row (for docs)
  // The result may take the buffer of its single operand (memory planning): true for the
  // elementwise ops, whose map kernels read element i before they write it, unless a row
  // says otherwise (KILN_ACTIVATION's in_place).
  bool in_place = false;
  GradFn grad = nullptr;                // nullptr: not differentiable (yet); see passes/autodiff
  std::string grad_words;               // the gradient rule in words, set with `grad`
  // Elementwise rows (KILN_ACTIVATION, KILN_MATH): the scalar expressions, as written in the
  // table; empty for other ops. For docs and kernel comments; the code is generated from the
  // same row.
  std::string forward_expr;
  std::string gradient_expr;
  OpId grad_op{};                       // an activation's backward op (has_grad_op)
  bool has_grad_op = false;
  bool grad_saves_result = false;       // the backward op reads y rather than x

  const AttrSpec* find_attr(std::string_view attr_name) const;
};

class OpRegistry {
 public:
  // The registry of all built-in ops (every row of ir/ops.def), built on first use.
  static const OpRegistry& instance();

  const OpDef& get(OpId op) const { return ops_[static_cast<size_t>(op)]; }
  // By name: for the parser, the JSON frontend and importers only.
  const OpDef* find(std::string_view name) const;
  // For attaching gradient rules after every op is registered (register_gradient_rules).
  OpDef& get_mutable(OpId op) { return ops_[static_cast<size_t>(op)]; }
  const std::vector<OpDef>& all() const { return ops_; }
  // The registered name closest to `unknown` (edit distance), if one is close enough.
  std::optional<std::string> suggest(std::string_view unknown) const;

 private:
  std::vector<OpDef> ops_;
};

// Checks the operand count and attributes of one use of `def` against its schema, normalizes
// `attrs` (coerces types, fills defaults) and returns the result types. Throws OpError.
std::vector<TensorType> infer_op(const OpDef& def, const std::vector<TensorType>& inputs,
                                 AttrMap& attrs);
// The same for op `op` applied to `inputs` (values of a graph), as a rewrite that builds a node
// needs it. OpError as above.
std::vector<TensorType> infer_op(OpId op, const std::vector<Value*>& inputs, AttrMap& attrs);
// Sets `node`'s result types from its operands' current types, after a rewrite changed them
// (the result count must stay). OpError as above.
void reinfer_results(Node& node);

// Closest candidate by edit distance, when within a third of the word's length (at least 2).
std::optional<std::string> closest_name(std::string_view word,
                                        const std::vector<std::string>& candidates);

// The gradient rules of every differentiable op (ir/gradients/*.cpp); they attach once every
// op they name exists.
void register_gradient_rules(OpRegistry& registry);

}  // namespace kiln::ir
