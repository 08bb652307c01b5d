// Running a whole codegen::Program on the host backend: one buffer per Program buffer,
// kernels launched in program order.
#pragma once

#include <vector>

#include "codegen/program.h"
#include "ir/tensor.h"
#include "runtime/host/host_module.h"

namespace kiln::runtime::host {

// `inputs` and `parameters` in graph order, with exactly the program's types (kiln::Error
// otherwise, naming the input). Returns the graph outputs in order.
std::vector<ir::Tensor> run_program(const codegen::Program& program, const HostModule& module,
                                    const std::vector<ir::Tensor>& inputs,
                                    const std::vector<ir::Tensor>& parameters,
                                    const HostOptions& options);

}  // namespace kiln::runtime::host
