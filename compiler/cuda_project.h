// `kiln compile --emit=cuda-project DIR`: the compiled model as a CUDA project a user can edit
// and build with nvcc — the kernels (model.cu, as kiln emitted them), a generated main.cu that
// runs them with the CUDA runtime API on .npy inputs, the weights, and a CMakeLists.txt.
#pragma once

#include <string>

#include "runtime/package/package.h"

namespace kiln::compiler {

// Writes the project into `dir` (created; files replaced one by one, each atomically).
void write_cuda_project(const runtime::Package& package, const std::string& dir);

}  // namespace kiln::compiler
