// The multi-tensor optimizer update: one kernel for the updates of many parameters.
#pragma once

#include <vector>

#include "codegen/kernel_emitter.h"

namespace kiln::codegen {

// One kernel applying `updates` (sgd_update, adam_update or adamw_update nodes of one op, one
// set of attributes and one dtype, shapes free) to all their parameters, as
// multi_tensor_apply does in apex and PyTorch's fused optimizers. `request.node` is the kernel
// node of kind "multi_update" whose body holds the updates: every update operand is one of its
// operands (request.input_params) and every update result one of its results
// (request.output_params). Throws Error when the updates cannot share a kernel.
KernelSpec emit_multi_tensor_update(const KernelRequest& request,
                                    const std::vector<const ir::Node*>& updates);

}  // namespace kiln::codegen
