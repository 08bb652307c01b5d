// `kiln train --check-numerics`: when a training step's loss, or the state it leaves, is not
// finite, the step is replayed on the reference evaluator from the state before it — unfused,
// op by op — and the first op whose output is not finite is named, instead of "lower --lr?".
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"

namespace kiln::compiler {

class NumericsReplay {
 public:
  // The unfused training step of `model` at `batch_size`: canonicalize, autodiff and the
  // optimizer update (`optimizer` is an optimizer_spec()), no fusion, so every op of the model
  // and of its backward pass keeps its own name. Throws kiln::Error as loading the model does.
  NumericsReplay(const std::string& model, int64_t batch_size, uint64_t seed,
                 const std::string& optimizer);

  // Replays one step: `state` is the training state before it (TrainingExecutable::state()),
  // `inputs` the step's inputs by name (the batch and the labels). Returns what went wrong —
  // "the output of log 'nll' (op 17 of the training step) is not finite: 3 of 16 elements are
  // NaN; its operands are finite" — or, when every output stays finite on the reference
  // evaluator, a message that says so (the backend and the reference then disagree).
  std::string explain(const std::map<std::string, ir::Tensor>& state,
                      const std::map<std::string, ir::Tensor>& inputs);

  // Whether every floating-point element of `tensor` is finite (integers always are).
  static bool all_finite(const ir::Tensor& tensor);

 private:
  ir::Graph step_;
};

}  // namespace kiln::compiler
