// Vendor library calls on the CUDA backend: a codegen::LibraryCall carried out by cuBLASLt or
// cuDNN on the executable's stream, in place of the kernel's generated code.
//
// Everything that can fail or costs time happens once, at preparation: loading the library,
// the handle, every descriptor, the algorithm (picked by the library's heuristics among those
// whose workspace fits the arena's workspace region). Running is one library call on the
// stream, with no allocation and no synchronization, so it can be captured into a CUDA graph
// with the kernels around it. f32 math is kept exact: no TF32 (cuDNN FMA math, cuBLASLt
// CUBLAS_COMPUTE_32F), so results differ from the generated kernel only by summation order.
#pragma once

#include <cuda.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "codegen/library_call.h"
#include "ir/diagnostic.h"
#include "runtime/cuda/cublaslt_api.h"
#include "runtime/cuda/cudnn_api.h"
#include "runtime/cuda/library_paths.h"

namespace kiln::runtime::cuda {

// The library handles of one executable: created on first use, in the context current then,
// bound to `stream`; destroyed with this object (the context must still be alive).
class LibraryContext {
 public:
  LibraryContext(CUstream stream, LibraryPaths paths);
  ~LibraryContext();
  LibraryContext(const LibraryContext&) = delete;
  LibraryContext& operator=(const LibraryContext&) = delete;

  // The loaded library and its handle; throw kiln::Error when the library cannot be loaded
  // or the handle not created (both remembered: the second call throws the same at once).
  const CublasLtApi& cublaslt();
  cublasLtHandle_t cublaslt_handle();
  const CudnnApi& cudnn();
  cudnnHandle_t cudnn_handle();
  CUstream stream() const { return stream_; }

 private:
  CUstream stream_;
  LibraryPaths paths_;
  cublasLtHandle_t cublaslt_handle_ = nullptr;
  cudnnHandle_t cudnn_handle_ = nullptr;
  std::optional<Error> cublaslt_error_, cudnn_error_;
};

// The device memory a call works on.
struct LibraryOperands {
  std::vector<CUdeviceptr> args;  // the address of each Kernel::args entry
  CUdeviceptr workspace = 0;      // the arena's workspace region
  size_t workspace_bytes = 0;
};

class LibraryRunner {
 public:
  virtual ~LibraryRunner() = default;
  // Enqueues the call on the context's stream. Throws kiln::Error naming the call and the
  // library's status when the library refuses.
  virtual void enqueue() = 0;
  // What was chosen, for -v: "algo IMPLICIT_PRECOMP_GEMM, 0 B workspace".
  virtual std::string choice() const = 0;
};

// Prepares `call` for the kernel `kernel_name`. Throws kiln::Error when the library is missing
// or declines the problem (no algorithm fits, an unsupported configuration): the caller then
// runs the generated kernel instead.
std::unique_ptr<LibraryRunner> prepare_library_call(LibraryContext& context,
                                                    const codegen::LibraryCall& call,
                                                    const LibraryOperands& operands,
                                                    std::string_view kernel_name);
// The same for a backward convolution (conv_grad_runner.cpp): cudnnConvolutionBackwardData or
// cudnnConvolutionBackwardFilter.
std::unique_ptr<LibraryRunner> prepare_conv_grad_call(LibraryContext& context,
                                                      const codegen::LibraryCall& call,
                                                      const LibraryOperands& operands,
                                                      std::string_view kernel_name);

}  // namespace kiln::runtime::cuda
