// Pruning in kiln train and kiln compile --train: which options of the prune pass the flags
// become, and what a run reports of the masks (docs/training.md, "Pruning").
#pragma once

#include <map>
#include <string>

#include "compiler/trainer.h"
#include "ir/tensor.h"

namespace kiln::compiler {

// " prune_sparsity=0.8 prune_start=1 prune_end=600 ..." (the optimizer spec's tail, which
// passes::backward_and_update hands to the prune pass), or "" without pruning. kiln::Error
// naming the flag for a bad value or combination.
std::string pruning_options(const StepScalarFlags& scalars);

// "  sparsity 80.0 %" (the pruned weights' zeros among their elements) for the epoch line, from
// the training state (TrainingExecutable::state()); "" when the step prunes nothing.
std::string pruning_report(const std::map<std::string, ir::Tensor>& state);

}  // namespace kiln::compiler
