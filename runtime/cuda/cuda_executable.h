// The CUDA backend: runs a Program on a GPU through the driver API.
//
// libcuda is loaded at run time (dlopen("libcuda.so.1")), so kiln builds and runs on machines
// without a driver; there, creating an executable fails with one clear line. Every driver call
// is checked and a failure names the call and the CUresult (cuGetErrorName).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "codegen/program.h"
#include "ir/tensor.h"
#include "runtime/compile/nvrtc.h"

namespace kiln::runtime::cuda {

struct CudaOptions {
  int device = 0;
  bool use_cuda_graph = true;  // capture the launch sequence once, replay it on every run
};

// Whether a driver and at least one device can be opened; `why` says why not
// ("libcuda.so.1 not found: no NVIDIA driver on this machine", "no CUDA device").
bool cuda_available(std::string* why = nullptr);

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

  // Copies `inputs` (graph order) in, launches every kernel, copies the outputs back.
  virtual std::vector<ir::Tensor> run(const std::vector<ir::Tensor>& inputs) = 0;
  virtual std::string device_name() const = 0;
};

}  // namespace kiln::runtime::cuda
