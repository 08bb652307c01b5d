// kiln train's checkpoints (safetensors files of the training state): what a checkpoint
// stores, and whether one may resume this run. docs/training.md, "Checkpoints".
#pragma once

#include <map>
#include <string>

#include "compiler/safetensors.h"
#include "ir/tensor.h"

namespace kiln::compiler {

// A checkpoint records its run's settings (kiln.batch_size, ...) in its metadata: resuming with
// others would train on other batches than the ones the checkpoint's step counts, so a
// difference is refused (kiln::Error naming the file and the flag). Checkpoints without the
// records (older ones) resume as before.
void check_resume_settings(const SafetensorsFile& file,
                           const std::map<std::string, std::string>& settings);

// The tensors a checkpoint stores: the training state, with the model's f32 parameters rounded
// to `weights_dtype` (--weights-dtype; the optimizer's state and step count as they are). A
// value beyond f16's range is an error naming `checkpoint` and the parameter.
std::map<std::string, ir::Tensor> checkpoint_tensors(std::map<std::string, ir::Tensor> state,
                                                     ir::DType weights_dtype,
                                                     const std::string& checkpoint);

}  // namespace kiln::compiler
