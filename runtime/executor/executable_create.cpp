// Executable::create: NVRTC first when the CUDA backend has no compiled code yet. Apart from
// executable.cpp so that a program that only loads packages links no NVRTC.
#include "runtime/compile/nvrtc.h"
#include "runtime/executor/executable.h"

namespace kiln::runtime {

std::unique_ptr<Executable> Executable::create(codegen::Program program,
                                               const std::vector<ir::Tensor>& parameters,
                                               const ExecutableOptions& options,
                                               const CudaBinary* binary) {
  if (options.backend != Backend::Cuda || binary != nullptr)
    return load(std::move(program), parameters, options, binary);
  NvrtcOptions nvrtc;
  nvrtc.cache = options.cache;
  nvrtc.verbose = options.verbose;
  const CudaBinary compiled = compile_with_nvrtc(program.source, program.graph_name + ".cu", nvrtc);
  return load(std::move(program), parameters, options, &compiled);
}

}  // namespace kiln::runtime
