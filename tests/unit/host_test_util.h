// Helpers for the host backend tests (tests/unit/host_*_test.cpp): kernels are written by hand
// as CUDA C++ in the style codegen emits (extern "C" __global__, the kiln_smem arena, one
// kiln_host_entry_<kernel> per kernel) and compiled with the real host compiler.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include "runtime/host/host_module.h"

namespace kiln::runtime::host::testing {

// The translation unit around `kernels`, as codegen/emit.cpp frames it; `entries` are the
// hand-written kiln_host_entry_ wrappers.
inline std::string translation_unit(const std::string& kernels, const std::string& entries) {
  return "#ifndef __CUDACC__\n#include \"kiln_host_prelude.h\"\n#endif\n" + kernels +
         "#ifndef __CUDACC__\n" + entries + "#endif  // __CUDACC__\n";
}

// A kernel cache in the build tree: ctest runs every test in its own process, and each would
// otherwise recompile its file's module.
inline const KernelCache* test_cache() {
  static const KernelCache cache(KILN_BINARY_DIR "/tests/host_module_cache");
  return &cache;
}

// Options for a schedule given as text ("order", "reverse", "random:7").
inline HostOptions options_for(const std::string& schedule, int workers = 1, bool strict = false) {
  HostOptions options;
  options.schedule = Schedule::parse(schedule, "test");
  options.workers = workers;
  options.strict = strict;
  return options;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace kiln::runtime::host::testing
