// cuBLASLt, loaded at run time.
//
// Like the driver (driver_api.h), kiln never links the library: it dlopens libcublasLt.so.13
// and resolves each function by name. Each pointer has the type of the toolkit header's own
// declaration (decltype), so a name and its signature cannot drift apart; decltype does not
// odr-use the function, so nothing is linked. The soname's major version is the ABI: the
// headers kiln builds with are CUDA 13's, and so must the library be.
#pragma once

#include <cublasLt.h>

#include <memory>
#include <string>
#include <string_view>

#include "runtime/cuda/library_loader.h"
#include "runtime/cuda/library_paths.h"

// Every cuBLASLt function kiln calls.
#define KILN_CUBLASLT_FUNCTIONS(X)      \
  X(cublasLtGetVersion)                 \
  X(cublasLtGetStatusName)              \
  X(cublasLtGetStatusString)            \
  X(cublasLtCreate)                     \
  X(cublasLtDestroy)                    \
  X(cublasLtMatmulDescCreate)           \
  X(cublasLtMatmulDescDestroy)          \
  X(cublasLtMatmulDescSetAttribute)     \
  X(cublasLtMatrixLayoutCreate)         \
  X(cublasLtMatrixLayoutDestroy)        \
  X(cublasLtMatrixLayoutSetAttribute)   \
  X(cublasLtMatmulPreferenceCreate)     \
  X(cublasLtMatmulPreferenceDestroy)    \
  X(cublasLtMatmulPreferenceSetAttribute) \
  X(cublasLtMatmulAlgoGetHeuristic)     \
  X(cublasLtMatmul)

namespace kiln::runtime::cuda {

class CublasLtApi {
 public:
#define KILN_CUBLASLT_DECLARE(symbol) decltype(&::symbol) symbol = nullptr;
  KILN_CUBLASLT_FUNCTIONS(KILN_CUBLASLT_DECLARE)
#undef KILN_CUBLASLT_DECLARE

  // dlopens `path` and resolves every function; creates no handle, so it needs no device.
  // Throws kiln::Error ("cuBLASLt: libcublasLt.so.13 not found (...)") when either fails.
  static std::unique_ptr<CublasLtApi> load(const std::string& path);

  // "cublasLtMatmul failed for kernel 'dense_2': CUBLAS_STATUS_NOT_SUPPORTED (the
  // functionality requested is not supported)".
  std::string describe(cublasStatus_t status, std::string_view call,
                       std::string_view context = {}) const;
  // Throws kiln::Error("cuBLASLt: " + describe(...)) unless `status` is CUBLAS_STATUS_SUCCESS.
  void check(cublasStatus_t status, std::string_view call, std::string_view context = {}) const;
  const std::string& path() const { return library_->path(); }

 private:
  CublasLtApi() = default;
  std::unique_ptr<SharedLibrary> library_;
};

// The process-wide cuBLASLt at `path`, loaded on first use (thread-safe) and never unloaded;
// throws the same kiln::Error on every call when loading failed.
const CublasLtApi& cublaslt(const std::string& path = kCublasLtLibraryFile);

}  // namespace kiln::runtime::cuda
