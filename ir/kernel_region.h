// Fused kernels in the IR: a node of op "kernel" whose body is a graph of the nodes it fuses.
//
//   %relu1 = kernel @conv2d_bias_relu_0(%image, %w, %b) {kind = "epilogue"} : f32[1,32,26,26] {
//     %conv1 = conv2d(%image, %w) : f32[1,32,26,26] loc("conv1")
//     %conv1_bias = bias_add(%conv1, %b) : f32[1,32,26,26] loc("conv1_bias")
//     %relu1 = relu(%conv1_bias) : f32[1,32,26,26] loc("relu1")
//     return %relu1
//   }
//
// The body's inputs stand for the kernel's operands, in order, and carry the operands' names;
// its outputs are the kernel's results, which keep the names of the values they replace, so the
// rest of the graph reads the same before and after fusion. Kernels do not nest: fusing a kernel
// with more nodes inlines its body into the new one.
//
// The kind says how codegen builds the kernel (codegen/kernels/fused.cpp):
//   epilogue  a conv2d/dense/matmul whose result flows through elementwise ops applied in
//             registers before the store (bias, activation, residual add)
//   loop      elementwise and broadcast ops evaluated per output element, intermediates in
//             registers; its results are one or more of the body's values, all of one shape
//             (a value and its casts, stored in one pass)
//   reduce    a reduction (softmax, layer_norm, reduce_*) that reads its input through a chain
//             of elementwise producers, recomputed per load instead of stored
//   single    one node of any other kind (a pool, a transpose) computed by its own kernel; it
//             may end in casts between float types of results that the op's kernel rounds as
//             it stores them (stores_rounded_result: a batch-norm gradient's dx stored in bf16)
//   attention an attention whose q, k and v are slices, reshapes and transposes of the kernel's
//             operands, and whose output may leave through transposes and reshapes: the
//             attention kernel reads and writes through the strided views (ir/strided_view.h)
//   multi_update
//             optimizer updates (sgd_update, adam_update, adamw_update) of many parameters
//             with one op, attributes and dtype, applied by one multi-tensor kernel; operands
//             are all the params, grads and states, results all the updated tensors
// Any kind but multi_update may end in reshape-like ops (reshape, flatten, squeeze, unsqueeze),
// which change only the type of the row-major result, not its bytes.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"

namespace kiln::ir {

inline constexpr std::string_view kEpilogueKernel = "epilogue";
inline constexpr std::string_view kLoopKernel = "loop";
inline constexpr std::string_view kReduceKernel = "reduce";
inline constexpr std::string_view kSingleKernel = "single";
inline constexpr std::string_view kMultiUpdateKernel = "multi_update";
inline constexpr std::string_view kAttentionKernel = "attention";

// CUDA's limit on the bytes of one kernel's parameters (every kiln kernel parameter is an
// 8-byte pointer) since CUDA 12.1 on sm_70 and later; 4096 before. NVRTC fails past it with
// "Formal parameter space overflowed", which the host backend would never show.
inline constexpr size_t kMaxKernelParameterBytes = 32764;

// Whether `kind` is one of the kinds above.
bool is_kernel_kind(std::string_view kind);

// The kernel's kind attribute ("epilogue", "loop", "reduce", "single", "multi_update",
// "attention").
const std::string& kernel_kind(const Node& kernel);

// Whether the kernel of `op` can store its result `index` in any float dtype, rounding each
// element once as it stores it (codegen's KernelRequest::stored_dtypes): a cast of that result
// to another float type then joins a "single" kernel of the op. The normalization gradients'
// dx, which autocast's casts bring to 16 bits for the convolution gradients that read it.
bool stores_rounded_result(OpId op, size_t index);

// Whether `op` only reinterprets a row-major tensor's shape (reshape, flatten, squeeze,
// unsqueeze): its result has the operand's bytes in the operand's order.
bool is_reshape_like(OpId op);

// Replaces `members` (nodes of `graph`; kernels among them are inlined) with one kernel node
// named `name` of kind `kind`, and returns it. The kernel's operands are the values the members
// read but do not produce, in first-use order; its results are the member results read outside
// the group or returned by the graph, in member order. The caller guarantees that no path leaves
// the group and comes back (the kernel would then depend on itself); the graph is re-sorted.
Node* make_kernel(Graph& graph, const std::vector<Node*>& members, const std::string& name,
                  std::string_view kind);

// One group of make_kernels: what make_kernel takes.
struct KernelGroup {
  std::vector<Node*> members;
  std::string name;
  std::string_view kind;
};

// make_kernel for many disjoint groups at once, in time linear in the graph and the groups
// (make_kernel alone sweeps the whole graph, so a pass calling it per group is quadratic).
// Each kernel takes its last member's place, as make_kernel's would. Returns the kernels in the
// order of `groups`.
std::vector<Node*> make_kernels(Graph& graph, const std::vector<KernelGroup>& groups);

}  // namespace kiln::ir
