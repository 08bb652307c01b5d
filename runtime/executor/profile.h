// Per-kernel timings of one run, and the Chrome trace they become (`kiln run --profile FILE`).
//
// The host backend times each launch with the wall clock; the CUDA backend brackets each
// launch with CUDA events on its stream (so a profiled run launches kernel by kernel, not as a
// CUDA graph). The trace is the Trace Event Format that chrome://tracing and Perfetto read:
// one complete event ("ph": "X") per kernel, named after the kernel, its arguments listing the
// source nodes it computes.
#pragma once

#include <string>
#include <vector>

#include "codegen/program.h"

namespace kiln::runtime {

struct KernelTiming {
  int kernel = 0;           // index into Program::kernels
  double start_us = 0;      // from the start of the first launch
  double duration_us = 0;
};

struct RunProfile {
  std::string backend;      // "host", "cuda"
  std::string device;       // "2 CPU workers", "NVIDIA H100 80GB HBM3"
  std::vector<KernelTiming> kernels;  // in launch order
};

// The trace of `runs` of `program` (each run one after the other on the time line), as JSON.
std::string chrome_trace_json(const codegen::Program& program, const std::vector<RunProfile>& runs);

}  // namespace kiln::runtime
