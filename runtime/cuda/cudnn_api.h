// cuDNN, loaded at run time (see cublaslt_api.h for why dlopen and decltype).
//
// kiln uses cuDNN 9's legacy convolution API: libcudnn.so.9 exports it and loads its
// sub-libraries (libcudnn_cnn, libcudnn_ops, ...) itself on first use.
#pragma once

#include <cudnn.h>

#include <memory>
#include <string>
#include <string_view>

#include "runtime/cuda/library_loader.h"
#include "runtime/cuda/library_paths.h"

// Every cuDNN function kiln calls.
#define KILN_CUDNN_FUNCTIONS(X)                 \
  X(cudnnGetVersion)                            \
  X(cudnnGetErrorString)                        \
  X(cudnnGetLastErrorString)                    \
  X(cudnnCreate)                                \
  X(cudnnDestroy)                               \
  X(cudnnSetStream)                             \
  X(cudnnCreateTensorDescriptor)                \
  X(cudnnSetTensor4dDescriptor)                 \
  X(cudnnDestroyTensorDescriptor)               \
  X(cudnnCreateFilterDescriptor)                \
  X(cudnnSetFilter4dDescriptor)                 \
  X(cudnnDestroyFilterDescriptor)               \
  X(cudnnCreateConvolutionDescriptor)           \
  X(cudnnSetConvolution2dDescriptor)            \
  X(cudnnSetConvolutionGroupCount)              \
  X(cudnnSetConvolutionMathType)                \
  X(cudnnGetConvolution2dForwardOutputDim)      \
  X(cudnnDestroyConvolutionDescriptor)          \
  X(cudnnCreateActivationDescriptor)            \
  X(cudnnSetActivationDescriptor)               \
  X(cudnnDestroyActivationDescriptor)           \
  X(cudnnGetConvolutionForwardAlgorithm_v7)     \
  X(cudnnGetConvolutionForwardWorkspaceSize)    \
  X(cudnnConvolutionForward)                    \
  X(cudnnConvolutionBiasActivationForward)      \
  X(cudnnGetConvolutionBackwardDataAlgorithm_v7) \
  X(cudnnConvolutionBackwardData)               \
  X(cudnnGetConvolutionBackwardFilterAlgorithm_v7) \
  X(cudnnConvolutionBackwardFilter)

namespace kiln::runtime::cuda {

class CudnnApi {
 public:
#define KILN_CUDNN_DECLARE(symbol) decltype(&::symbol) symbol = nullptr;
  KILN_CUDNN_FUNCTIONS(KILN_CUDNN_DECLARE)
#undef KILN_CUDNN_DECLARE

  // dlopens `path` and resolves every function; creates no handle, so it needs no device.
  // Throws kiln::Error ("cuDNN: libcudnn.so.9 not found (...)") when that fails or the
  // library is not cuDNN 9.
  static std::unique_ptr<CudnnApi> load(const std::string& path);

  // "cudnnCreate failed: CUDNN_STATUS_NOT_INITIALIZED" plus cuDNN's own last message, which
  // says which parameter it rejected.
  std::string describe(cudnnStatus_t status, std::string_view call,
                       std::string_view context = {}) const;
  // Throws kiln::Error("cuDNN: " + describe(...)) unless `status` is CUDNN_STATUS_SUCCESS.
  void check(cudnnStatus_t status, std::string_view call, std::string_view context = {}) const;
  size_t version() const { return version_; }  // 91900: cuDNN 9.19.0
  const std::string& path() const { return library_->path(); }

 private:
  CudnnApi() = default;
  std::unique_ptr<SharedLibrary> library_;
  size_t version_ = 0;
};

// The process-wide cuDNN at `path`, loaded on first use (thread-safe) and never unloaded;
// throws the same kiln::Error on every call when loading failed.
const CudnnApi& cudnn(const std::string& path = kCudnnLibraryFile);

}  // namespace kiln::runtime::cuda
