// canonicalize: local rewrites that put the graph in a canonical form, applied to a fixed point.
//
// Algorithm (a small version of MLIR's greedy canonicalizer, mlir/lib/Transforms/
// Canonicalizer.cpp): sweep the nodes in graph order and try the patterns for each node's op;
// every rewrite takes one unit of fuel. A rewrite either
//   - forwards: every use of the node's result (graph outputs included) reads an existing value
//     instead, and the node, now dead, is erased; or
//   - rewrites the node in place: same node name, same result value, new op/operands/attrs, so
//     its users and the graph outputs need no update and the name stays meaningful.
// A node that a chain rewrite bypasses (the inner reshape of reshape(reshape(x))) is erased too
// when nothing reads it any more; other dead code is left to dce. Dead nodes are unhooked
// (operands cleared) during a sweep and erased at its end, so no node is freed mid-sweep.
// Sweeps repeat until one changes nothing (each rewrite removes a node, shortens a chain or
// moves to a form no pattern matches, so this ends; kMaxSweeps only guards against a bug).
// The rewriter keeps its own use lists (who reads each value), updated by every rewrite, so
// that a rewrite costs time in its own operands and users, not in the size of the graph: a
// sweep is linear (times log n for the maps), also on a chain of 100,000 nodes.
//
// Every rewrite is exact: the new graph gives bit-identical results for every input, NaN, ±0
// and ±inf included, in the reference evaluator (ir/eval/) and in generated code
// (codegen/). A cheaper form that is only approximately equal is not used, and the refusal is
// logged under --debug-only=canonicalize.
#include <cmath>
#include <fmt/format.h>
#include <set>
#include <unordered_map>

#include "ir/diagnostic.h"
#include "ir/op_registry.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

using ir::Node;
using ir::Value;

constexpr std::string_view kPass = "canonicalize";
constexpr int kMaxSweeps = 16;

std::string name_of(const Value* value) { return "%" + value->name; }

// "dropout 'drop1' (%4)": the node as the model names it, and its result as the IR prints it.
std::string label(const Node& node) {
  return fmt::format("{} ({})", node.describe(), name_of(node.results[0]));
}

template <typename T>
const T& attr(const Node& node, const std::string& name) {
  auto found = node.attrs.find(name);
  KILN_CHECK(found != node.attrs.end() && std::holds_alternative<T>(found->second))
      << node.describe() << ": attribute '" << name << "' missing or of the wrong type";
  return std::get<T>(found->second);
}

// The producer of `value` if it is a node result of op `op` (or of `other_op`), else nullptr.
Node* producer_of(const Value* value, ir::OpId op, std::optional<ir::OpId> other_op = {}) {
  if (value->role != ir::ValueRole::NodeResult || value->producer == nullptr) return nullptr;
  Node* node = value->producer;
  return node->op == op || (other_op && node->op == *other_op) ? node : nullptr;
}

// transpose's perm with the default ([] = reversed axes) spelled out.
std::vector<int64_t> permutation(const Node& transpose) {
  std::vector<int64_t> perm = attr<std::vector<int64_t>>(transpose, "perm");
  if (perm.empty())
    for (int64_t i = transpose.inputs[0]->type.rank() - 1; i >= 0; --i) perm.push_back(i);
  return perm;
}

bool is_identity(const std::vector<int64_t>& perm) {
  for (size_t i = 0; i < perm.size(); ++i)
    if (perm[i] != static_cast<int64_t>(i)) return false;
  return true;
}

class Rewriter {
 public:
  Rewriter(ir::Graph& graph, PassContext& context) : graph_(graph), context_(context) {
    for (const auto& node : graph.nodes())
      for (Value* input : node->inputs) ++uses_[input][node.get()];
    for (const Value* output : graph.outputs) ++output_uses_[output];
  }

  ir::Graph& graph() { return graph_; }
  // Whether `value` has readers besides one node, or is a graph output.
  bool shared(const Value* value) const {
    auto it = uses_.find(value);
    return (it != uses_.end() && it->second.size() > 1) || output_uses_.count(value) > 0;
  }
  bool is_dead(const Node* node) const { return dead_.count(node) > 0; }

  // Asks for one unit of fuel for the rewrite described by `what` (logged when debugging).
  bool take_fuel(const std::string& what) { return context_.take_fuel(kPass, what); }

  // Logs why `node` is left as it is, once per node and reason (sweeps repeat).
  void refuse(const Node& node, const std::string& why) {
    std::string message = fmt::format("keep {}: {}", label(node), why);
    if (refused_.insert(message).second) context_.debug(kPass, message);
  }

  // Forwards `node`: its uses read `value` instead; the node is dead. One fuel unit.
  bool forward(Node& node, Value* value, std::string_view why) {
    if (!take_fuel(fmt::format("replace {} by {}: {}", label(node), name_of(value), why)))
      return false;
    replace(node, value);
    return true;
  }

  void replace(Node& node, Value* value) {
    KILN_CHECK(value->type == node.results[0]->type)
        << "canonicalize: " << label(node) << " replaced by a value of another type";
    Value* from = node.results[0];
    if (auto it = uses_.find(from); it != uses_.end()) {
      const std::unordered_map<Node*, int> readers = std::move(it->second);
      uses_.erase(it);
      for (const auto& [user, count] : readers) {
        std::replace(user->inputs.begin(), user->inputs.end(), from, value);
        uses_[value][user] += count;
      }
    }
    if (auto it = output_uses_.find(from); it != output_uses_.end()) {
      std::replace(graph_.outputs.begin(), graph_.outputs.end(), from, value);
      output_uses_[value] += it->second;
      output_uses_.erase(from);
    }
    kill(node);
  }

  // Rewrites `node` in place as op(inputs){attrs}, keeping its name and result value.
  void rewrite(Node& node, ir::OpId op, std::vector<Value*> inputs, ir::AttrMap attrs) {
    const ir::OpDef* def = &ir::OpRegistry::instance().get(op);
    std::vector<ir::TensorType> types;
    for (const Value* input : inputs) types.push_back(input->type);
    std::vector<ir::TensorType> results;
    try {
      results = ir::infer_op(*def, types, attrs);  // also normalizes attrs
    } catch (const ir::OpError& error) {
      KILN_CHECK(false) << "canonicalize: rewriting " << label(node) << " as " << op
                        << " is invalid: " << error.message;
    }
    KILN_CHECK(results.size() == 1 && results[0] == node.results[0]->type)
        << "canonicalize: rewriting " << label(node) << " as " << op << " changes its type";
    node.op = op;
    node.def = def;
    unhook(node);
    node.inputs = std::move(inputs);
    for (Value* input : node.inputs) ++uses_[input][&node];
    node.attrs = std::move(attrs);
  }

  // Erases `node` (bypassed by a chain rewrite) if nothing reads its result any more.
  void erase_if_unused(Node& node) {
    const Value* result = node.results[0];
    auto it = uses_.find(result);
    if ((it == uses_.end() || it->second.empty()) && !output_uses_.count(result)) kill(node);
  }

  void erase_dead() {
    if (dead_.empty()) return;
    graph_.erase_nodes([&](const Node& node) { return dead_.count(&node) > 0; });
    dead_.clear();
  }

 private:
  // Unhooks the node from its operands, so users() no longer counts it; erased by erase_dead.
  void kill(Node& node) {
    unhook(node);
    node.inputs.clear();
    dead_.insert(&node);
  }

  // Takes `node` off the use lists of its operands.
  void unhook(Node& node) {
    for (Value* input : node.inputs) {
      auto it = uses_.find(input);
      if (it == uses_.end()) continue;
      if (--it->second[&node] <= 0) it->second.erase(&node);
    }
  }

  ir::Graph& graph_;
  PassContext& context_;
  std::set<const Node*> dead_;
  std::set<std::string> refused_;
  std::unordered_map<const Value*, std::unordered_map<Node*, int>> uses_;  // value → reader → count
  std::unordered_map<const Value*, int> output_uses_;                     // value → times an output
};

// ---- patterns: each returns whether it rewrote the node ---------------------------------------

// dropout with training=false is the identity (docs/ops.md), at any rate.
bool remove_inference_dropout(Node& node, Rewriter& rw) {
  if (attr<bool>(node, "training")) {
    rw.refuse(node, "training=true: dropout zeroes elements, it is not the identity");
    return false;
  }
  return rw.forward(node, node.inputs[0], "dropout with training=false is the identity");
}

// reshape and flatten are both row-major relabelings of the same elements, so:
//  - one whose result has its operand's shape is the identity;
//  - a chain of them is one row-major relabeling, to the final shape: the outer node is
//    rewritten as reshape(x) (a reshape keeps its own 'shape' attr, valid since the element
//    count is the same; a flatten gets the explicit final shape).
bool simplify_reshape(Node& node, Rewriter& rw) {
  Value* x = node.inputs[0];
  const ir::TensorType& type = node.results[0]->type;
  if (x->type == type) return rw.forward(node, x, ir::to_string(node.op) + " to the same shape is the identity");
  Node* inner = producer_of(x, ir::OpId::Reshape, ir::OpId::Flatten);
  if (inner == nullptr) return false;
  Value* source = inner->inputs[0];
  const bool shared = rw.shared(x);
  const std::string kept =
      shared ? fmt::format("; {} stays, {} has other users", label(*inner), name_of(x)) : "";
  if (source->type == type) {
    if (!rw.take_fuel(fmt::format("replace {} by {}: {} of {} restores its shape{}", label(node),
                                  name_of(source), node.op, label(*inner), kept)))
      return false;
    rw.replace(node, source);
  } else {
    if (!rw.take_fuel(fmt::format("fold {} into {}: one reshape of {} to {}{}", label(*inner),
                                  label(node), name_of(source), ir::shape_to_string(type.shape),
                                  kept)))
      return false;
    ir::AttrMap attrs = node.op == ir::OpId::Reshape ? node.attrs : ir::AttrMap{{"shape", type.shape}};
    rw.rewrite(node, ir::OpId::Reshape, {source}, std::move(attrs));
  }
  rw.erase_if_unused(*inner);
  return true;
}

// transpose(x, p) puts x's axis p[i] at position i. The identity permutation is the identity;
// transpose(transpose(x, inner), outer) puts axis inner[outer[i]] at i: one transpose with the
// composed permutation (or x itself when that is the identity). Pure data movement: exact.
bool simplify_transpose(Node& node, Rewriter& rw) {
  Value* x = node.inputs[0];
  const std::vector<int64_t> outer = permutation(node);
  if (is_identity(outer))
    return rw.forward(node, x, "transpose with the identity permutation is the identity");
  Node* inner = producer_of(x, ir::OpId::Transpose);
  if (inner == nullptr) return false;
  Value* source = inner->inputs[0];
  const std::vector<int64_t> inner_perm = permutation(*inner);
  std::vector<int64_t> composed(outer.size());
  for (size_t i = 0; i < outer.size(); ++i) composed[i] = inner_perm[outer[i]];
  const bool shared = rw.shared(x);
  const std::string kept =
      shared ? fmt::format("; {} stays, {} has other users", label(*inner), name_of(x)) : "";
  if (is_identity(composed)) {
    if (!rw.take_fuel(fmt::format("replace {} by {}: it undoes {}{}", label(node),
                                  name_of(source), label(*inner), kept)))
      return false;
    rw.replace(node, source);
  } else {
    if (!rw.take_fuel(fmt::format("fold {} into {}: one transpose of {} with perm {}{}",
                                  label(*inner), label(node), name_of(source),
                                  ir::shape_to_string(composed), kept)))
      return false;
    rw.rewrite(node, ir::OpId::Transpose, {source}, {{"perm", composed}});
  }
  rw.erase_if_unused(*inner);
  return true;
}

// A slice whose result has its operand's shape selects everything: with step >= 1 and a
// clamped start s, a dim d yields at most ceil((d - s) / step) elements, which is d only for
// s = 0 and (when d > 1) step = 1, i.e. element i of the result is element i of x.
bool remove_full_slice(Node& node, Rewriter& rw) {
  if (node.inputs[0]->type != node.results[0]->type) return false;
  return rw.forward(node, node.inputs[0], "the slice selects every element");
}

// A cast to the operand's own dtype converts every value to itself (NaN stays NaN).
bool remove_noop_cast(Node& node, Rewriter& rw) {
  if (node.inputs[0]->type != node.results[0]->type) return false;
  return rw.forward(node, node.inputs[0], "cast to the same dtype is the identity");
}

bool remove_single_concat(Node& node, Rewriter& rw) {
  if (node.inputs.size() != 1) return false;
  return rw.forward(node, node.inputs[0], "concat of one operand is that operand");
}

// clip is `x < min ? min : (x > max ? max : x)`: with infinite bounds neither comparison holds
// for any x (NaN included), on floats and integers alike.
bool remove_unbounded_clip(Node& node, Rewriter& rw) {
  const double lo = attr<double>(node, "min");
  const double hi = attr<double>(node, "max");
  if (!(std::isinf(lo) && lo < 0 && std::isinf(hi) && hi > 0)) return false;
  return rw.forward(node, node.inputs[0], "clip to [-inf, inf] is the identity");
}

// pow with a constant exponent (float operands only):
//  - exponent 1: pow(x, 1) = x for every x, -0, ±inf and NaN included (C11 F.10.4.4).
//  - exponent 2: mul(x, x). The reference computes both in double, where the square of an
//    f32/f16/bf16 value is exact (at most 2 x 24 significant bits, no overflow or underflow), so
//    x * x is that square, and so is std::pow(x, 2) (within 1 ulp of a representable result
//    means equal to it); both then round once to the result dtype. Generated code already emits
//    value * value for pow 2. Special values agree: NaN -> NaN, ±0 -> +0, ±inf -> +inf.
//  - exponents 0.5 and -0.5 are NOT rewritten to sqrt / rsqrt: pow(-0, 0.5) = +0 but
//    sqrt(-0) = -0, pow(-inf, 0.5) = +inf but sqrt(-inf) = NaN; pow(-0, -0.5) = +inf but
//    rsqrt(-0) = -inf, pow(-inf, -0.5) = +0 but rsqrt(-inf) = NaN; and powf and sqrtf round
//    differently on the GPU (powf is not correctly rounded), so results would not be equal.
bool simplify_pow(Node& node, Rewriter& rw) {
  const double exponent = attr<double>(node, "exponent");
  Value* x = node.inputs[0];
  if (exponent == 1.0) return rw.forward(node, x, "pow with exponent 1 is the identity");
  if (exponent == 2.0) {
    if (!rw.take_fuel(fmt::format("rewrite {} as mul({}, {}): x^2 is x*x, exactly", label(node),
                                  name_of(x), name_of(x))))
      return false;
    rw.rewrite(node, ir::OpId::Mul, {x, x}, {});
    return true;
  }
  if (exponent == 0.5)
    rw.refuse(node, "exponent 0.5 is not rewritten to sqrt: they differ at x = -0 "
                    "(pow gives +0, sqrt -0) and x = -inf (+inf vs NaN), and in rounding on the GPU");
  if (exponent == -0.5)
    rw.refuse(node, "exponent -0.5 is not rewritten to rsqrt: they differ at x = -0 "
                    "(pow gives +inf, rsqrt -inf) and x = -inf (+0 vs NaN), and in rounding");
  return false;
}

// neg(neg(x)) = x on floats: neg flips the sign bit, exactly (±0, ±inf, NaN included). Not on
// integers: neg saturates (docs/ops.md), so neg(neg(INT_MIN)) = neg(INT_MAX) = INT_MIN + 1.
bool fold_double_neg(Node& node, Rewriter& rw) {
  Node* inner = producer_of(node.inputs[0], ir::OpId::Neg);
  if (inner == nullptr) return false;
  if (!ir::is_floating(node.results[0]->type.dtype)) {
    rw.refuse(node, fmt::format("neg of {} on {}: integer neg saturates, so neg(neg(x)) is not "
                                "x at the minimum value",
                                label(*inner), ir::dtype_name(node.results[0]->type.dtype)));
    return false;
  }
  Value* source = inner->inputs[0];
  if (!rw.forward(node, source, fmt::format("it undoes {}", label(*inner)))) return false;
  rw.erase_if_unused(*inner);
  return true;
}

// relu(relu(x)) = relu(x): relu (`x < 0 ? 0 : x`) maps its own results (>= 0, -0 or NaN) to
// themselves, so the outer relu is forwarded to the inner one's result.
bool fold_double_relu(Node& node, Rewriter& rw) {
  Node* inner = producer_of(node.inputs[0], ir::OpId::Relu);
  if (inner == nullptr) return false;
  return rw.forward(node, inner->results[0], "relu is idempotent");
}

bool has_no_zero(const Value& parameter) {
  if (!parameter.data) return false;
  for (double v : parameter.data->to_doubles())
    if (v == 0) return false;
  return true;
}

// add, mul, maximum, minimum: a parameter operand goes second, so `add(%x, %b)` and
// `add(%b, %x)` become one form for CSE and fusion. Broadcasting is symmetric, so the result
// type is unchanged. IEEE add and mul are commutative (saturating integer ones too), and
// integer maximum/minimum are. Float maximum/minimum are not quite: both the reference and the
// CUDA kernel return the second operand when neither is greater, so maximum(-0, +0) = +0 but
// maximum(+0, -0) = -0. They are swapped only when the parameter's data is loaded and has no
// zero, so that case cannot arise.
bool order_commutative_operands(Node& node, Rewriter& rw) {
  Value* a = node.inputs[0];
  Value* b = node.inputs[1];
  if (a->role != ir::ValueRole::Parameter || b->role == ir::ValueRole::Parameter) return false;
  const bool min_max = node.op == ir::OpId::Maximum || node.op == ir::OpId::Minimum;
  if (min_max && ir::is_floating(a->type.dtype) && !has_no_zero(*a)) {
    rw.refuse(node, fmt::format("operands not swapped: {} of -0 and +0 returns its second "
                                "operand, and parameter {} may hold a zero",
                                node.op, name_of(a)));
    return false;
  }
  if (!rw.take_fuel(fmt::format("swap the operands of {}: {} first, parameter {} second",
                                label(node), name_of(b), name_of(a))))
    return false;
  std::swap(node.inputs[0], node.inputs[1]);
  return true;
}

bool canonicalize_node(Node& node, Rewriter& rw) {
  using ir::OpId;
  switch (node.op) {
    case OpId::Dropout: return remove_inference_dropout(node, rw);
    case OpId::Reshape:
    case OpId::Flatten: return simplify_reshape(node, rw);
    case OpId::Transpose: return simplify_transpose(node, rw);
    case OpId::Slice: return remove_full_slice(node, rw);
    case OpId::Cast: return remove_noop_cast(node, rw);
    case OpId::Concat: return remove_single_concat(node, rw);
    case OpId::Clip: return remove_unbounded_clip(node, rw);
    case OpId::Pow: return simplify_pow(node, rw);
    case OpId::Neg: return fold_double_neg(node, rw);
    case OpId::Relu: return fold_double_relu(node, rw);
    case OpId::Add:
    case OpId::Mul:
    case OpId::Maximum:
    case OpId::Minimum: return order_commutative_operands(node, rw);
    default: return false;  // no canonical form to reach
  }
}

}  // namespace

bool Canonicalize::run(ir::Graph& graph, PassContext& context) {
  Rewriter rewriter(graph, context);
  bool changed = false;
  for (int sweep = 0; sweep < kMaxSweeps; ++sweep) {
    std::vector<Node*> order;
    for (const auto& node : graph.nodes()) order.push_back(node.get());
    bool sweep_changed = false;
    for (Node* node : order)
      if (!rewriter.is_dead(node)) sweep_changed |= canonicalize_node(*node, rewriter);
    rewriter.erase_dead();
    changed |= sweep_changed;
    if (!sweep_changed) return changed;
  }
  context.debug(kPass, fmt::format("stopped after {} sweeps, before a fixed point", kMaxSweeps));
  return changed;
}

}  // namespace kiln::passes
