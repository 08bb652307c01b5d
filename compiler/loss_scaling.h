// Dynamic loss scaling in kiln train and kiln compile --train (torch.amp.GradScaler): which
// pass options the flags become, and what a run reports of the scaler. The mechanism itself is
// in the passes: autodiff seeds the backward pass with the scale, append-optimizer's
// loss_scale_update skips steps with inf or NaN gradients and moves the scale
// (docs/training.md, "Mixed precision").
#pragma once

#include <string>

#include <map>

#include "codegen/precision.h"
#include "compiler/trainer.h"
#include "ir/tensor.h"

namespace kiln::compiler {

// " loss_scale=65536 loss_scale_growth_interval=2000" (the optimizer spec's tail: autodiff
// takes loss_scale, append-optimizer the rest), or "" without loss scaling. --loss-scale=auto
// is dynamic scaling for f16, whose gradients underflow without it. kiln::Error naming the
// flag for a bad value or combination.
std::string loss_scaling_options(const StepScalarFlags& scalars, codegen::Precision precision);

// "  loss scale 8192, 3 steps skipped" for the epoch line, from the training state
// (TrainingExecutable::state()); "" when the step has no loss scale.
std::string loss_scaling_report(const std::map<std::string, ir::Tensor>& state);

}  // namespace kiln::compiler
