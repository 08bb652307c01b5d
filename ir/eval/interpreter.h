// The reference interpreter: plain, obviously correct loops over the IR.
//
// It is the oracle that every backend is compared against, so it favours clarity over speed:
// each op reads its operands as doubles, computes in double (so sums accumulate in double)
// and rounds once to the result dtype. It is itself checked against PyTorch (tests/torch/).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"

namespace kiln::eval {

// Evaluates one node: given its operands, returns one tensor per result. Throws kiln::Error
// for run-time data errors (a label out of range), located at the node.
using ReferenceKernel =
    std::function<std::vector<ir::Tensor>(const ir::Node& node,
                                          const std::vector<const ir::Tensor*>& inputs)>;

// The kernel for an op, or nullptr when the interpreter does not implement it.
const ReferenceKernel* find_reference_kernel(ir::OpId op);

// Runs `graph` on `inputs` (keyed by graph input name). Every parameter must have its data
// loaded (Value::data). Returns the graph outputs in order. Throws kiln::Error on a missing,
// unknown or mistyped input ("input 'image': expected f32[1,1,28,28], got f32[1,28,28]").
std::vector<ir::Tensor> run_reference(const ir::Graph& graph,
                                      const std::map<std::string, ir::Tensor>& inputs);

// Called after each node of the graph (fused kernels as one node) with its results; returning
// false stops the run. `kiln train --check-numerics` finds the first non-finite op with it.
using NodeObserver =
    std::function<bool(const ir::Node& node, const std::vector<const ir::Tensor*>& results)>;

// run_reference, calling `observe` after every node. Returns no outputs when it stopped the run.
std::vector<ir::Tensor> run_reference(const ir::Graph& graph,
                                      const std::map<std::string, ir::Tensor>& inputs,
                                      const NodeObserver& observe);

}  // namespace kiln::eval
