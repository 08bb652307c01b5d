// The CUDA backend: runs a Program on a GPU through the driver API.
//
// libcuda is loaded at run time (dlopen("libcuda.so.1")), so kiln builds and runs on machines
// without a driver; there, creating an executable fails with one clear line. Every driver call
// is checked and a failure names the call and the CUresult (cuGetErrorName).
#pragma once

#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "codegen/program.h"
#include "ir/tensor.h"
#include "runtime/compile/nvrtc.h"
#include "runtime/cuda/library_paths.h"
#include "runtime/executor/profile.h"

namespace kiln::runtime::distributed {
class Communicator;
}

namespace kiln::runtime::cuda {

class DriverApi;  // runtime/cuda/driver_api.h

struct CudaOptions {
  // CudaOptions{device, use_cuda_graph}: the usual choices, the rest at their defaults.
  CudaOptions(int device = 0, bool use_cuda_graph = true)
      : device(device), use_cuda_graph(use_cuda_graph) {}

  int device = 0;
  bool use_cuda_graph = true;  // capture the launch sequence once, replay it on every run
  // The vendor libraries that may run the kernels codegen marked (Kernel::library), each
  // where it loads and accepts the problem; everywhere else the generated kernel runs. The
  // default uses what the kernel table asks for: codegen's --library already chose.
  codegen::LibrarySelection libraries{true, true};
  LibraryPaths library_paths;
  // Data-parallel training: the ranks the collective kernels (codegen::Kernel::collective) run
  // across with NCCL (nccl_api.h); nullptr: one process.
  distributed::Communicator* communicator = nullptr;
};

// Whether a driver and at least one device can be opened; `why` says why not: the reason
// alone, as in create()'s error "CUDA backend: <reason>; use --backend=host to run on the CPU"
// ("libcuda.so.1 not found (no NVIDIA driver on this machine)", "no CUDA device (...)").
bool cuda_available(std::string* why = nullptr);

// --backend=auto: "cuda" when cuda_available, else "host". Falling back is announced on
// `notices` ("kiln: running on the CPU (host backend): <why>") when an NVIDIA driver is
// installed but unusable (too old, no device, the toolkit's stub library), since that machine
// was meant to run on its GPU; without any driver only when `verbose`.
std::string auto_backend(bool verbose, std::ostream& notices);

struct CudaDeviceInfo {
  std::string name;  // "NVIDIA H100 80GB HBM3"
  int sm = 0;        // compute capability as 10 * major + minor: 90
  std::string arch() const { return "sm_" + std::to_string(sm); }
};
// The device `device` (an ordinal); throws kiln::Error without a driver or such a device.
CudaDeviceInfo cuda_device_info(int device = 0);

class CudaExecutable {
 public:
  virtual ~CudaExecutable() = default;

  // Opens the device, loads the module (the cubin for the device's arch, else the PTX),
  // allocates one device arena for all buffers and uploads `parameters` (in graph order).
  // Throws kiln::Error when there is no driver/device or the binary has no code for it.
  static std::unique_ptr<CudaExecutable> create(const codegen::Program& program,
                                                const CudaBinary& binary,
                                                const std::vector<ir::Tensor>& parameters,
                                                const CudaOptions& options);
  // The same on a given driver instead of the process-wide libcuda.so.1 (the unit tests use a
  // mock driver, tests/mocks/). `driver` must be initialized and outlive the result.
  static std::unique_ptr<CudaExecutable> create_with_driver(
      const DriverApi& driver, const codegen::Program& program, const CudaBinary& binary,
      const std::vector<ir::Tensor>& parameters, const CudaOptions& options);

  // Copies `inputs` (graph order) in, launches every kernel, copies the outputs back. Throws
  // kiln::Error when an input's count or type is wrong, or on a driver failure. Not
  // thread-safe: one run at a time per executable.
  // A training step's state outputs (Program::state_updates) are copied, on the device, into
  // their parameters after the launches and are not returned.
  // `profile`: when given, the kernels are launched one by one (not as the CUDA graph), each
  // between two CUDA events, and their times go there.
  virtual std::vector<ir::Tensor> run(const std::vector<ir::Tensor>& inputs,
                                      RunProfile* profile = nullptr) = 0;
  // The same on inputs the caller owns, staged for upload straight from there. This default
  // copies them first.
  virtual std::vector<ir::Tensor> run_views(const std::vector<ir::TensorView>& inputs) {
    return run(ir::copies_of(inputs));
  }
  // A run in two halves, for a caller that prepares the next inputs while the GPU works:
  // submit() copies `inputs` into pinned staging memory and enqueues the run (uploads,
  // launches, downloads) without waiting for it; collect() waits for the oldest submitted run
  // and returns its outputs. At most two runs are submitted and not collected (two staging
  // slots); run() needs none. Errors as run(): input errors from submit(), faults of the run
  // from collect().
  virtual void submit(const std::vector<ir::Tensor>& inputs) = 0;
  virtual std::vector<ir::Tensor> collect() = 0;
  virtual size_t pending() const = 0;
  // The current value of parameter `index` (graph order; downloaded), and replacing it
  // (uploaded; kiln::Error when the type differs). For checkpoints and for evaluation graphs
  // that share a training step's parameters.
  virtual ir::Tensor parameter(int index) = 0;
  virtual void set_parameter(int index, const ir::Tensor& value) = 0;
  virtual std::string device_name() const = 0;
  // What was loaded: "cubin sm_90", or "PTX compute_80 (JIT for sm_86)".
  virtual std::string loaded_code() const = 0;
  // For -v: one line per kernel the kernel table marked for a library, saying what runs it
  // ("dense_2: cublasLt dense f32 64x128 * (10x128)^T + bias (cuBLASLt heuristic algorithm,
  // 0 B workspace, 0.25 waves)") or why the generated kernel does ("conv2d_0: generated
  // kernel: cudnn did not load"), after a line per library that failed to load ("cuDNN:
  // libcudnn.so.9 not found (...)").
  virtual std::vector<std::string> library_report() const = 0;
};

}  // namespace kiln::runtime::cuda
