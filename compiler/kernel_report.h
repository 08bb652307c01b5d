// The kernel table as text (`kiln emit --emit=kernels`): per kernel its launch, arguments and,
// per arch, the ptxas resources and theoretical occupancy.
#pragma once

#include <optional>
#include <string>

#include "codegen/program.h"
#include "runtime/compile/nvrtc.h"
#include "runtime/compile/occupancy.h"

namespace kiln::compiler {

// One kernel on one arch: what ptxas reported and the theoretical occupancy it allows.
struct KernelArchFigures {
  int registers = 0;
  int spill_bytes = 0;   // stores plus loads
  int stack_bytes = 0;   // the stack frame: local arrays indexed at run time, calls
  int shared_bytes = 0;  // static (ptxas) plus the kernel's dynamic shared memory
  runtime::Occupancy occupancy;
};

// nullopt when ptxas reported nothing for this kernel and arch.
std::optional<KernelArchFigures> kernel_arch_figures(const codegen::Kernel& kernel,
                                                     const runtime::CudaBinary& binary,
                                                     const std::string& arch);

// "(128,1,1)"
std::string dim3_text(const codegen::Dim3& d);

std::string format_kernel_table(const codegen::Program& program, const runtime::CudaBinary& binary,
                                const std::vector<std::string>& archs);

}  // namespace kiln::compiler
