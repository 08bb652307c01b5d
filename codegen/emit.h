// Codegen's entry point: a verified graph → a Program (CUDA C++ source + kernel table).
#pragma once

#include "codegen/library_call.h"
#include "codegen/precision.h"
#include "codegen/program.h"
#include "ir/graph.h"

namespace kiln::codegen {

// Emits one kernel per node, all in one translation unit, in node order; a kernel whose code
// matches an earlier one's launches that function (Kernel::entry) instead of repeating it.
// Throws kiln::Error (located at the node) when an op has no kernel emitter.
//
// The translation unit compiles both with NVRTC (for sm_80/sm_90) and with the host C++
// compiler: when __CUDACC__ is not defined it includes "kiln_host_prelude.h"
// (runtime/host/), which defines the CUDA built-ins on the CPU, and it ends with one
// `extern "C" void kiln_host_entry_<entry>(void* const* args)` per function so the host backend
// can call any kernel through one signature.
//
// `libraries` says which vendor routines the CUDA backend may use: a conv/dense/matmul kernel
// that one computes exactly gets Kernel::library (codegen/library_dispatch.h). The generated
// kernel is emitted either way. `precision` says what arithmetic the GEMMs may use
// (codegen/precision.h): with tf32 the generated conv2d/dense/matmul kernels run on tensor
// cores, and the library calls are told they may.
Program emit_program(const ir::Graph& graph, const LibrarySelection& libraries = {},
                     Precision precision = Precision::F32);

// Version of the emitted source's conventions; part of every cache key.
inline constexpr int kCodegenVersion = 1;

}  // namespace kiln::codegen
