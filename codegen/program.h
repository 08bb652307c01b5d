// The product of codegen: one CUDA C++ translation unit for a whole graph, and the kernel
// table that says how to run it. Backends (runtime/) read only this, never the graph.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "codegen/library_call.h"  // LibraryCall: a kernel a vendor library computes (--library)
#include "codegen/precision.h"
#include "ir/dynamic_binding.h"
#include "ir/dynamic_dims.h"
#include "ir/shape.h"

namespace kiln::codegen {

enum class BufferRole { Input, Parameter, Intermediate, Output };
std::string_view buffer_role_name(BufferRole role);  // "input", "parameter", ...

// One tensor the program reads or writes: a graph input, parameter or output, or a value passed
// between kernels. Intermediates placed by plan-memory share the activation arena
// (arena_offset); the others have storage of their own.
struct Buffer {
  std::string name;     // the IR value's name
  ir::TensorType type;
  BufferRole role;
  int index = -1;       // position among the graph's inputs / parameters / outputs; -1 otherwise
  int64_t bytes = 0;
  // Intermediates placed by plan-memory: the offset of this buffer in the activation arena
  // (Program::arena_bytes), shared over time with buffers whose lifetimes do not overlap.
  // -1: the buffer has storage of its own.
  int64_t arena_offset = -1;
};

struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
  uint64_t count() const { return uint64_t{x} * y * z; }
  friend bool operator==(const Dim3&, const Dim3&) = default;
};

// A generated GEMM's problem and block tiling (conv2d, dense, matmul and the kernels fused on
// them), for the cost model's tile and wave efficiency; m == 0 for other kernels.
struct GemmGeometry {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  int tile_m = 0, tile_n = 0, tile_k = 0;
  bool async_copies = false;  // an operand goes global -> shared by cp.async (tensor cores)
  bool sparse = false;        // A is 2:4 sparse, on sparse tensor cores (mma.sp)
};

// What a collective kernel does across the ranks: all_reduce's mean (of gradient bucket
// `index`), or broadcast's copy of rank `index`'s values.
struct Collective {
  enum Kind { Mean, Broadcast };
  Kind kind = Mean;
  int index = 0;  // Mean: the bucket; Broadcast: the root rank
  friend bool operator==(const Collective&, const Collective&) = default;
};

// One kernel launch, in program order.
struct Kernel {
  std::string name;                       // "conv2d_3": what it computes, plus an index
  // The name of an earlier kernel whose __global__ function it launches, their code being
  // identical (codegen emits each distinct body once); empty: its own function, `name`.
  std::string entry;
  const std::string& function() const { return entry.empty() ? name : entry; }
  std::vector<std::string> source_nodes;  // names of the IR nodes it implements
  std::vector<std::string> source_ops;    // the op of each source node ("conv2d", ...)
  std::string op_kind;                    // the registry's op kind of its main node
  Dim3 grid;
  Dim3 block;
  uint32_t dynamic_shared_bytes = 0;      // all shared memory is dynamic (one arena per block)
  // True when threads of a block cooperate (__syncthreads, warp shuffles): the host backend
  // then runs them as fibers; otherwise as plain loops.
  bool uses_barriers = false;
  // True when its source also holds a host-specific body (under #ifndef __CUDACC__) that needs
  // no barriers and computes the same results bit for bit (a GEMM's whole tile as one loop
  // nest, codegen/kernels/gemm_host.cpp): the host backend runs that body as a plain loop,
  // unless told to run the CUDA body (HostOptions::cuda_variants), as tests do.
  bool host_variant = false;
  // True when its products run on tensor cores (mma.sync, --precision=tf32, bf16 or f16), on
  // operands of `tensor_core_inputs`' format: the cost model then counts its FLOPs against that
  // format's tensor-core peak.
  bool tensor_cores = false;
  Precision tensor_core_inputs = Precision::Tf32;
  GemmGeometry gemm;
  // Buffer ids (into Program::buffers), in the kernel's parameter order. Every parameter is
  // a pointer: inputs first, then the buffers it writes.
  std::vector<int> args;
  int num_outputs = 1;                    // the last num_outputs args are written
  // The modeled cost (codegen/cost_model.h): floating-point operations, and DRAM bytes with
  // every argument read or written once.
  int64_t flops = 0;
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
  // The same traffic had each source node run as a kernel of its own (before fusion).
  int64_t unfused_bytes = 0;
  // Set when --library chose a vendor routine for this kernel.
  std::optional<LibraryCall> library;
  // Why none did, for a GEMM kernel when --library selected a library (kiln inspect shows it):
  // "the kernel starts with cast, not conv2d, dense or matmul".
  std::string library_refusal;
  // A collective of data-parallel training (ir/ops.def: all_reduce, broadcast), from its
  // operands into its results. In a run of several processes the runtime performs it in the
  // kernel's place (runtime/distributed/); one process launches the kernel, whose copy is what
  // one rank computes. Unset: a kernel like any other.
  std::optional<Collective> collective;
  // A kernel that computes only the real rows of a run with dynamic dims (codegen/dynamic_rows.h):
  // it takes the run's size of symbol `dynamic_symbol` as one more parameter, an int after the
  // buffers, and the runtime launches ceil(grid[dynamic_grid_axis] × size / bound) blocks along
  // that axis (0 x, 1 y, 2 z). -1: the kernel computes every row at the bounds.
  int dynamic_symbol = -1;
  int dynamic_grid_axis = 0;
};

// How the host backend runs a kernel: its host-specific body, one loop nest per block
// (Kernel::host_variant); a plain loop over the block's threads (no barriers or warp
// collectives); or each thread a fiber, switched at barriers and collectives.
enum class HostExecution { LoopNest, PlainLoop, Fibers };
HostExecution host_execution(const Kernel& kernel);
std::string_view host_execution_name(HostExecution execution);  // "loop nest", ...

// The grid of `kernel` in a run where the symbols have `sizes` (empty: the bounds).
Dim3 launch_grid(const Kernel& kernel, const std::vector<ir::DimSymbol>& symbols,
                 const std::vector<int64_t>& sizes);

struct Program {
  std::string graph_name;
  std::string source;              // the translation unit (see codegen/emit.h)
  std::vector<Buffer> buffers;
  std::vector<Kernel> kernels;     // launch order
  std::vector<int> outputs;        // buffer id of each graph output, in order (but state)
  std::vector<std::string> output_names;  // the model's name of each of `outputs`
  // Training state carried between runs: graph outputs named "next.P" hold the value parameter
  // P takes for the next run. They are the graph's last outputs; a backend copies each into
  // its parameter's buffer after every run and does not return it. Where the memory plan
  // writes next.P in place (ir/state_in_place.cpp), output and parameter are one buffer and
  // there is nothing to copy.
  struct StateUpdate {
    int output;     // buffer id of the next.P output
    int parameter;  // buffer id of parameter P
    bool in_place() const { return output == parameter; }
  };
  std::vector<StateUpdate> state_updates;
  // Bounded dynamic dims (ir/dynamic_dims.h): the graph's symbols, and the dims of each input
  // (graph order) and of each of `outputs`; empty maps are static. Buffer types hold the
  // bounds; a backend pads smaller inputs to them and slices the outputs back
  // (runtime/executor/dynamic_dims_binding.h).
  std::vector<ir::DimSymbol> symbols;
  std::vector<ir::DimMap> input_dims;
  std::vector<ir::DimMap> output_dims;
  int64_t arena_bytes = 0;         // the activation arena (0 when the graph was not planned)
  // The memory plan's figures (ir::MemoryPlan), so that reports need no graph. Without a plan
  // every intermediate has a buffer of its own: naive_bytes, and planned is false.
  bool planned = false;
  int64_t naive_bytes = 0;
  int64_t lower_bound_bytes = 0;
  // What arithmetic the GEMMs were generated for (--precision, codegen/precision.h).
  Precision precision = Precision::F32;

  const Kernel* find_kernel(std::string_view name) const;
  // The buffer id of each input (or parameter, ...) in graph order; a gap or a repeated
  // index is an internal error.
  std::vector<int> buffer_ids(BufferRole role) const;
};

// Runs `run_at_bounds` (a backend's run on inputs of the program's exact types, and each symbol's
// size in this run) on inputs whose dynamic dims may be smaller than their bounds
// (ir::run_padded). A program without dynamic dims runs the inputs as given, with no sizes.
template <typename RunAtBounds>
std::vector<ir::Tensor> run_with_dynamic_dims(const Program& program,
                                              const std::vector<ir::Tensor>& inputs,
                                              RunAtBounds&& run_at_bounds) {
  if (program.symbols.empty()) return run_at_bounds(inputs, std::vector<int64_t>{});
  std::vector<ir::TensorType> types;
  std::vector<std::string> names;
  for (int id : program.buffer_ids(BufferRole::Input)) {
    types.push_back(id >= 0 ? program.buffers[id].type : ir::TensorType{});
    names.push_back(id >= 0 ? program.buffers[id].name : "");
  }
  return ir::run_padded(program.symbols, program.input_dims, types, names, program.output_dims,
                        inputs, run_at_bounds);
}

}  // namespace kiln::codegen
