// The kernel table as text (`kiln emit --emit=kernels`): per kernel its launch, arguments and,
// per arch, the ptxas resources and theoretical occupancy.
#pragma once

#include <string>

#include "codegen/program.h"
#include "runtime/compile/nvrtc.h"

namespace kiln::compiler {

std::string format_kernel_table(const codegen::Program& program, const runtime::CudaBinary& binary,
                                const std::vector<std::string>& archs);

}  // namespace kiln::compiler
