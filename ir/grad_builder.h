// GradBuilder: what a gradient rule (OpDef::grad) uses to append backward nodes.
//
// Every node it makes gets its result type from shape inference (ir::infer_op, so attributes
// are complete) and a name derived from the forward node: "grad.relu1", "grad.relu1.1", ...
// Backward nodes are appended at the end of the graph; the autodiff pass visits forward nodes
// in reverse, so each backward node's operands already exist when it is made.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln::ir {

class GradBuilder {
 public:
  // Names the nodes it makes "grad.<forward.name>" (an unnamed node: after its first result).
  GradBuilder(Graph& graph, const Node& forward);
  // For nodes not tied to one forward node (gradient sums): names them "<base>", "<base>.1"...
  GradBuilder(Graph& graph, std::string base_name);

  Graph& graph() { return graph_; }

  // Appends `op(inputs...)` with `attrs` and returns its (only) result. A rule that builds an
  // ill-typed node is a kiln bug: reported as an internal compiler error.
  Value* op(OpId op, std::vector<Value*> inputs, AttrMap attrs = {});
  // The same for an op with several results (batch_norm_train_grad: dx, dscale, dbias);
  // returns all of them, named "<base>", "<base>.1", ...
  std::vector<Value*> op_results(OpId op, std::vector<Value*> inputs,
                                 AttrMap attrs = {});

  // --- helpers every family needs -----------------------------------------------------------
  // `value` reshaped to `shape` (returned as is when it already has that shape).
  Value* reshape(Value* value, const Shape& shape);
  // `value` times a compile-time constant (returned as is for 1).
  Value* scale(Value* value, double factor);
  // `value` broadcast (NumPy rules) to `shape`.
  Value* broadcast_to(Value* value, const Shape& shape);
  // The adjoint of broadcasting `shape` up to grad's shape: sums grad over the leading dims
  // broadcasting added and over the dims that were 1 in `shape`, then reshapes to `shape`.
  Value* sum_to(Value* grad, const Shape& shape);
  // grad of a reduction over `axes` (normalized, kept as 1 in `keep_shape`) back to `shape`.
  Value* expand_reduced(Value* grad, const Shape& keep_shape, const Shape& shape);

 private:
  Graph& graph_;
  std::string base_name_;
};

}  // namespace kiln::ir
