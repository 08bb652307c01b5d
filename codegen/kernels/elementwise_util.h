// Map kernels: one output element from the operand elements at the same (broadcast) position.
// Shared by the elementwise, cast and copy emitters.
//
// The per-element computation is a lambda at the top of the kernel body (`apply`), written
// once and called from the vector loop and the scalar loop, so the arithmetic reads like the
// op's definition. Loops:
//   - f32 operands and result, no broadcasting: float4 loads and stores over kCount / 4
//     vectors (cudaMalloc'ed buffers are 256-byte aligned and the host executor's 64-byte
//     aligned, so element 4k is 16-byte aligned), then a scalar loop over the last kCount % 4;
//   - otherwise a scalar grid-stride loop; broadcast operands find their element through
//     constexpr per-dim strides (see IndexMap in emit_util.h).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "codegen/kernels/emit_util.h"

namespace kiln::codegen {

// What `apply` computes: its body statements, in the operands' compute types (parameter
// names: element_param_name), returning the result's compute type.
struct ElementFn {
  std::string summary;                  // comment above the lambda
  std::vector<std::string> statements;  // one per line, the last one a return
};

// The name of operand `i` of an element function with `arity` operands: `value`; `lhs`, `rhs`;
// `cond`, `lhs`, `rhs` (where).
const char* element_param_name(size_t arity, size_t i);

// What `apply` computes for one elementwise or broadcast node (binary arithmetic, bias_add,
// activations, unary math, clip, cast, dropout at inference), for fused kernels to compose;
// nullopt for any other op.
std::optional<ElementFn> element_fn(const ir::Node& node);
// The same for the elementwise backward ops (relu_grad, ..., scale, broadcast_to:
// grad_elementwise.cpp); element_fn falls back to it. `lhs` is dy, `rhs` the saved value.
std::optional<ElementFn> grad_element_fn(const ir::Node& node);

// A map kernel over `request.node`'s operands (1 or 2, broadcast to the result's shape).
KernelSpec emit_map_kernel(const KernelRequest& request, const ElementFn& fn);

// A kernel copying operand 0 into the result bit for bit (reshape, flatten, dropout at
// inference, a cast to the same dtype): 16-byte float4 moves whatever the element type, then
// the leftover elements one at a time.
KernelSpec emit_copy_kernel(const KernelRequest& request, const std::string& why);

// Training dropout (operands x and the step counter): codegen/kernels/dropout.cpp.
KernelSpec emit_philox_dropout(const KernelRequest& request);

}  // namespace kiln::codegen
