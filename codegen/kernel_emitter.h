// How one op becomes one CUDA kernel.
//
// codegen/emit.cpp walks the graph and, for each node, asks the op's KernelEmitter for the
// kernel body and launch configuration; it writes the comment, the signature and the host
// entry point itself, so every kernel in the translation unit looks the same from outside:
//
//   // relu 'act1': x f32[1,64] -> out f32[1,64]
//   extern "C" __global__ void __launch_bounds__(256) relu_3(
//       const float* __restrict__ x,
//       float* __restrict__ out) {
//     <body>
//   }
//
// Parameters are named after the op's input names in the registry (x, weight, bias; a variadic
// op numbers them: x0, x1, ...), then `out` (or out0, out1, ... for several results).
// Shapes are compile-time constants written into the body. All shared memory comes from the
// dynamic arena `kiln_smem` (an unsigned char array aligned to 16 bytes): a kernel carves it at
// fixed offsets and reports the total in shared_bytes, so the host backend can allocate, poison
// and bound-check it, and GPUs can use more than 48 KB.
//
// Element types in the source: f32 float, f16 kiln_half, bf16 kiln_bf16, i32 int, i64 long long,
// bool unsigned char. Arithmetic happens in the compute type (float for every float dtype,
// int/long long for integers); use load()/store() below to convert.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "codegen/program.h"
#include "codegen/precision.h"
#include "ir/graph.h"

namespace kiln::codegen {

// A kernel whose results hold a dynamic dim as their first dim (ir/dynamic_dims.h), with the
// symbol's padding at the end of each buffer (outer 1): in a run where the symbol is n, only the
// first n/bound of every result is real. Such a kernel may compute just those rows: it takes n
// as its last parameter, `const int kiln_dim_size`, scales the count of its outermost loop by
// it (dynamic_count below), and says which grid axis the runtime may shrink in proportion
// (KernelSpec::dynamic_grid_axis). codegen/dynamic_rows.h decides which kernels do.
struct DynamicRows {
  int symbol = -1;
  int64_t bound = 1;
};

struct KernelRequest {
  const ir::Node& node;
  std::string kernel_name;                // "relu_3"
  std::vector<std::string> input_params;  // C names of the operand pointers, in order
  std::vector<std::string> output_params; // C names of the result pointers
  // Inside a fused kernel (codegen/kernels/fused.cpp): for operand k, the name of a device
  // lambda `float f(index)` computing element `index` of that operand from the kernel's inputs,
  // or "" when the operand is read from input_params[k]. Emitters read operands through
  // load_input (emit_util.h), which honours this; the reduce-kind emitters support it for
  // operand 0, which is what fuse-elementwise fuses into them.
  std::vector<std::string> fused_inputs;
  // Set when the kernel should compute only the real rows (see DynamicRows); an emitter that
  // cannot leaves KernelSpec::dynamic_grid_axis at -1 and computes every row.
  std::optional<DynamicRows> dynamic_rows;
  // The arithmetic GEMMs may use (--precision): f32 on the FMA units, or tf32, bf16 or f16
  // operands on tensor cores.
  Precision precision = Precision::F32;
  // For operand k, the dtype its buffer holds when the kernel absorbed a cast of it (the node
  // reads cast(buffer); fused.cpp's operand casts), or nullopt: the node's operand type. Loads
  // (load_input, input_address) read the buffer's dtype.
  std::vector<std::optional<ir::DType>> stored_dtypes;
  // For result k, the float dtype its buffer holds when the kernel absorbed a cast of it (a
  // single kernel ending in casts, ir::stores_rounded_result), or nullopt: the node's result
  // type. Emitters that ir::stores_rounded_result names store that result through
  // store_result; fused.cpp refuses the casts for any other.
  std::vector<std::optional<ir::DType>> result_dtypes;
};

struct KernelSpec {
  std::string body;          // statements, indented by two spaces, one per line, commented
  Dim3 grid;
  Dim3 block;
  uint32_t shared_bytes = 0; // bytes of kiln_smem the kernel uses
  bool uses_barriers = false;  // __syncthreads / __syncwarp / __shfl_*_sync
  bool tensor_cores = false;   // the products run on tensor cores (mma.sync)
  Precision tensor_core_inputs = Precision::Tf32;  // and their operands' format (tf32, bf16, f16)
  // The body also holds a host-specific version of itself, without barriers (Kernel::host_variant).
  bool host_variant = false;
  GemmGeometry gemm;           // a generated GEMM's problem and tiling (Kernel::gemm)
  // __launch_bounds__'s second argument when > 0. 1 lets ptxas use every register a thread may
  // have: without it, ptxas spilled a few bytes at under 64 registers in the attention kernels.
  uint32_t min_blocks_per_sm = 0;
  std::string note;          // one line for the kernel's comment: the algorithm ("implicit GEMM,
                             // 64x64 tiles, 4x4 per thread")
  // For a request with dynamic_rows: the grid axis (0 x, 1 y, 2 z) whose blocks walk the rows
  // in order, which the runtime shrinks to ceil(grid × n / bound); -1: the request was not
  // honoured and the kernel computes every row.
  int dynamic_grid_axis = -1;
};

using KernelEmitter = std::function<KernelSpec(const KernelRequest&)>;

// The emitter for an op, or nullptr when codegen cannot compile it.
const KernelEmitter* find_kernel_emitter(ir::OpId op);

// Registration hooks, one per file under codegen/kernels/.
using EmitterTable = std::vector<std::pair<ir::OpId, KernelEmitter>>;
void add_elementwise_emitters(EmitterTable& table);
void add_shape_emitters(EmitterTable& table);
void add_reduce_emitters(EmitterTable& table);
void add_nn_emitters(EmitterTable& table);  // calls add_pool_norm_ and add_attention_emitters
void add_pool_norm_emitters(EmitterTable& table);  // pooling, bias_add, batch_norm
void add_attention_emitters(EmitterTable& table);  // attention, attention_grad
void add_nn_grad_emitters(EmitterTable& table);    // conv2d/pool backward ops
void add_norm_train_emitters(EmitterTable& table);  // batch_norm_train, norm backward ops
void add_optimizer_emitters(EmitterTable& table);  // sgd_update, adam_update, adamw_update
void add_grad_emitters(EmitterTable& table);       // backward ops of ir/ops/grad_ops.cpp
void add_grad_shape_emitters(EmitterTable& table); // slice_grad; add_grad_emitters calls it
void add_fused_emitters(EmitterTable& table);      // "kernel" nodes (ir/kernel_region.h)
void add_index_emitters(EmitterTable& table);      // argmax, argmin, gather_elements

// The parameter name of operand `i` in an op's own kernel: the registry's input name, numbered
// when the op is variadic ("x", "weight", "x0", "x1").
std::string operand_name(const ir::Node& node, size_t i);

// The parameter names of a fused kernel's operands, after its body's inputs: "in_conv1_weight".
std::vector<std::string> fused_kernel_params(const ir::Node& kernel);
// The names a fused kernel's code derives from the values of its body, in body order: each
// value's variable and its node's function (v_NAME, f_NAME).
std::vector<std::string> fused_kernel_locals(const ir::Node& kernel);

// --- helpers for emitters ------------------------------------------------------------------------

// C element type used in kernel signatures: "float", "kiln_half", "kiln_bf16", "int",
// "long long", "unsigned char".
std::string_view c_type(ir::DType dtype);
// Type arithmetic happens in: "float" for float dtypes, "int"/"long long" for integers,
// "int" for bool.
std::string_view compute_type(ir::DType dtype);
// Expression converting a stored element `expr` of `dtype` to its compute type, and back.
std::string load(ir::DType dtype, const std::string& expr);
std::string store(ir::DType dtype, const std::string& expr);
// A C literal of the compute type: 1.0f, -INFINITY, 3, 7LL.
std::string literal(ir::DType dtype, double value);

// Threads per block for simple one-element-per-thread kernels.
inline constexpr uint32_t kDefaultBlock = 256;
// Grid size for a grid-stride loop over `count` items: enough blocks to fill a large GPU
// (capped so tiny tensors don't launch empty blocks, and huge ones stride).
uint32_t grid_stride_blocks(int64_t count, uint32_t block = kDefaultBlock);

// The declaration of a loop count `name` of `count` iterations over a kernel's rows, outermost
// first: `constexpr T name = count;`, or with dynamic `rows` the real rows' share,
// `const T name = static_cast<T>(kiln_dim_size) * (count / bound);` (count must be a multiple
// of the bound, as the rows of a prefix-dynamic result are).
std::string dynamic_count(const std::optional<DynamicRows>& rows, std::string_view name, std::string_view type,
                          int64_t count);
// "constexpr", or "const" when the request has dynamic_rows: for constants derived from a
// dynamic_count.
std::string_view count_qualifier(const KernelRequest& request);

}  // namespace kiln::codegen
