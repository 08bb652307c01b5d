// Pruning in kiln train and kiln compile --train: which options of the prune pass the flags
// become, and what a run reports of the masks (docs/training.md, "Pruning").
#pragma once

#include <string>

#include "compiler/trainer.h"
#include "runtime/executor/executable.h"

namespace kiln::compiler {

// " prune_sparsity=0.8 prune_start=1 prune_end=600 ..." (the optimizer spec's tail, which
// passes::backward_and_update hands to the prune pass), or "" without pruning. kiln::Error
// naming the flag for a bad value or combination.
std::string pruning_options(const StepScalarFlags& scalars);

// "  sparsity 80.0 %" (the pruned weights' zeros among their elements) for the epoch line; ""
// when the step prunes nothing.
std::string pruning_report(runtime::TrainingExecutable& executable);

}  // namespace kiln::compiler
