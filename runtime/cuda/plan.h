// The decisions of the CUDA backend that need no device, as pure functions: where each buffer
// lives in the device arena, which code of a CudaBinary a device can run, and which buffer
// each graph input and parameter is. cuda_executable.cpp only carries them out.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "codegen/program.h"
#include "ir/tensor.h"
#include "runtime/compile/nvrtc.h"

namespace kiln::runtime::cuda {

// Every buffer starts at a multiple of this. cuMemAlloc returns 256-byte aligned memory, so
// offsets aligned the same way keep every buffer as aligned as its own allocation would be
// (enough for any vector load and for whole memory transactions).
inline constexpr int64_t kArenaAlignment = 256;

struct ArenaLayout {
  std::vector<int64_t> offsets;   // per buffer id, in bytes from the arena's start
  int64_t workspace_offset = -1;  // the library workspace region; -1 when there is none
  int64_t workspace_bytes = 0;
  int64_t total_bytes = 0;        // a multiple of kArenaAlignment
};

// One region per buffer, in buffer order, each at the next aligned offset; then the activation
// region, where the intermediates plan-memory placed (Buffer::arena_offset >= 0) sit at their
// planned offsets, sharing space over time; then `workspace_bytes` (rounded up to the
// alignment) of scratch for library calls, when it is not 0.
ArenaLayout plan_arena(const std::vector<codegen::Buffer>& buffers, int64_t workspace_bytes = 0);

// The workspace the library calls of `program` need: the largest of those whose library is in
// `usable`, aligned (calls run one at a time on one stream, so they share one region).
int64_t library_workspace_bytes(const codegen::Program& program,
                                const codegen::LibrarySelection& usable);

// "sm_90" → 90, "compute_80" → 80, "sm_90a" → 90; nullopt when it is neither form.
std::optional<int> arch_number(std::string_view arch);
// 10 * major + minor of a compute capability: 8.6 → 86, 12.0 → 120.
inline int sm_number(int major, int minor) { return 10 * major + minor; }

enum class CodeKind { Cubin, Ptx };
struct CodeChoice {
  CodeKind kind;
  std::string arch;  // the cubin's key ("sm_90") or the PTX's arch ("compute_80")
  friend bool operator==(const CodeChoice&, const CodeChoice&) = default;
};

// The code an sm_`device_sm` device runs: the cubin built for exactly that arch, else the PTX
// when the device can JIT it (the PTX's arch is not newer; an arch-specific "compute_90a"
// only on that arch; a family "compute_100f" on its major with a minor as high); else nullopt.
// A cubin for a lower arch of the same major would also run, but JIT-compiling the PTX for
// the device itself gives better code, so only an exact cubin is taken.
std::optional<CodeChoice> select_code(const CudaBinary& binary, int device_sm);
// "cubins for sm_80, sm_90 and PTX for compute_80", for the error when nothing fits.
std::string describe_code(const CudaBinary& binary);

// Which buffer is each graph input, parameter and output, checked against the program's own
// invariants (every index present once, args and byte sizes consistent): a violation is a
// bug in codegen, an internal error.
struct ProgramBindings {
  std::vector<int> inputs;      // graph input i → buffer id
  std::vector<int> parameters;  // graph parameter i → buffer id
  std::vector<int> outputs;     // graph output i → buffer id (Program::outputs)
};
ProgramBindings bind_program(const codegen::Program& program);

// Throws kiln::Error unless `tensors` match the buffers `buffer_ids` in count and type, e.g.
// "CUDA backend: input 'x': expected f32[1,3,8,8], got f32[1,3,8,9]". `what` is "input" or
// "parameter".
void check_tensors(const codegen::Program& program, std::string_view what,
                   const std::vector<int>& buffer_ids, const std::vector<ir::TensorView>& tensors);
inline void check_tensors(const codegen::Program& program, std::string_view what,
                          const std::vector<int>& buffer_ids, const std::vector<ir::Tensor>& tensors) {
  check_tensors(program, what, buffer_ids, ir::views_of(tensors));
}

}  // namespace kiln::runtime::cuda
