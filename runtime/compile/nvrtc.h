// NVRTC: the CUDA translation unit → PTX and cubins, with the ptxas resource report.
// NVRTC needs no GPU, so every machine can check that generated code compiles for real GPUs.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "runtime/compile/kernel_cache.h"

namespace kiln::runtime {

// Per kernel and arch, as ptxas reports it (--ptxas-options=-v).
struct KernelResources {
  std::string kernel;
  std::string arch;               // "sm_90"
  int registers = 0;
  int spill_store_bytes = 0;
  int spill_load_bytes = 0;
  int static_shared_bytes = 0;
  int stack_frame_bytes = 0;
  int constant_bytes = 0;         // all cmem banks ptxas lists (sm_80 lists bank 0; sm_90 none)
  int barriers = 0;               // named barriers ("used 1 barriers")
};

struct CudaBinary {
  std::string ptx;                          // for the lowest arch: runs on newer GPUs (JIT)
  std::string ptx_arch;                     // "compute_80"
  std::map<std::string, std::string> cubins;  // arch ("sm_90") → cubin bytes
  std::vector<KernelResources> resources;
  std::string compiler;                     // "nvrtc 13.0"
  bool from_cache = false;                  // every part came from the cache
};

struct NvrtcOptions {
  std::vector<std::string> archs = {"sm_80", "sm_90"};
  std::vector<std::string> extra_flags;     // passed to NVRTC as is
  KernelCache* cache = nullptr;             // nullptr: always compile (--no-cache)
  bool verbose = false;                     // say on stderr why cache lookups missed
};

// "nvrtc 13.0"
std::string nvrtc_version();

// Compiles `source` (named `program_name` in messages, e.g. "mnist_cnn.cu") to PTX for the
// lowest arch and a cubin per arch. A compile error is a kiln::Error whose message holds the
// NVRTC log, each error line annotated with the kernel it falls in and the source line.
CudaBinary compile_with_nvrtc(const std::string& source, const std::string& program_name,
                              const NvrtcOptions& options);

// Parses ptxas -v output (as in NVRTC's log) into resources, one entry per kernel and arch.
std::vector<KernelResources> parse_ptxas_report(const std::string& log);

}  // namespace kiln::runtime
