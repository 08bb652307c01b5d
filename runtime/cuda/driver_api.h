// The CUDA driver API, loaded at run time.
//
// kiln never links libcuda: it dlopens libcuda.so.1 and resolves each function by its exported,
// versioned ABI name (cuMemAlloc_v2, not cuMemAlloc, which is the 32-bit legacy entry point).
// The toolkit's cuda.h supplies only types and enums, and cudaTypedefs.h the PFN_<name>_v<abi>
// signature of each symbol, so a name and its signature cannot drift apart. We use dlsym rather
// than cuGetProcAddress because the latter changed its own ABI in CUDA 12.0.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ir/diagnostic.h"

// Every driver function kiln calls: X(exported symbol, signature). The newest ABI here is
// cuEventElapsedTime_v2 (CUDA 12.8; the code NVRTC 13 makes needs a CUDA 13 driver anyway).
#define KILN_CUDA_DRIVER_FUNCTIONS(X)                                          \
  X(cuInit, PFN_cuInit_v2000)                                                  \
  X(cuDriverGetVersion, PFN_cuDriverGetVersion_v2020)                          \
  X(cuGetErrorName, PFN_cuGetErrorName_v6000)                                  \
  X(cuGetErrorString, PFN_cuGetErrorString_v6000)                              \
  X(cuDeviceGetCount, PFN_cuDeviceGetCount_v2000)                              \
  X(cuDeviceGet, PFN_cuDeviceGet_v2000)                                        \
  X(cuDeviceGetName, PFN_cuDeviceGetName_v2000)                                \
  X(cuDeviceGetAttribute, PFN_cuDeviceGetAttribute_v2000)                      \
  X(cuDevicePrimaryCtxRetain, PFN_cuDevicePrimaryCtxRetain_v7000)              \
  X(cuDevicePrimaryCtxRelease_v2, PFN_cuDevicePrimaryCtxRelease_v11000)        \
  X(cuCtxSetCurrent, PFN_cuCtxSetCurrent_v4000)                                \
  X(cuModuleLoadDataEx, PFN_cuModuleLoadDataEx_v2010)                          \
  X(cuModuleUnload, PFN_cuModuleUnload_v2000)                                  \
  X(cuModuleGetFunction, PFN_cuModuleGetFunction_v2000)                        \
  X(cuFuncSetAttribute, PFN_cuFuncSetAttribute_v9000)                          \
  X(cuMemAlloc_v2, PFN_cuMemAlloc_v3020)                                       \
  X(cuMemFree_v2, PFN_cuMemFree_v3020)                                         \
  X(cuMemsetD8Async, PFN_cuMemsetD8Async_v3020)                                \
  X(cuMemHostAlloc, PFN_cuMemHostAlloc_v2020)                                  \
  X(cuMemFreeHost, PFN_cuMemFreeHost_v2000)                                    \
  X(cuMemcpyHtoDAsync_v2, PFN_cuMemcpyHtoDAsync_v3020)                         \
  X(cuMemcpyDtoHAsync_v2, PFN_cuMemcpyDtoHAsync_v3020)                         \
  X(cuMemcpyDtoDAsync_v2, PFN_cuMemcpyDtoDAsync_v3020)                         \
  X(cuStreamCreate, PFN_cuStreamCreate_v2000)                                  \
  X(cuStreamDestroy_v2, PFN_cuStreamDestroy_v4000)                             \
  X(cuStreamSynchronize, PFN_cuStreamSynchronize_v2000)                        \
  X(cuStreamWaitEvent, PFN_cuStreamWaitEvent_v3020)                            \
  X(cuLaunchKernel, PFN_cuLaunchKernel_v4000)                                  \
  X(cuStreamBeginCapture_v2, PFN_cuStreamBeginCapture_v10010)                  \
  X(cuStreamEndCapture, PFN_cuStreamEndCapture_v10000)                         \
  X(cuGraphInstantiateWithFlags, PFN_cuGraphInstantiateWithFlags_v11040)       \
  X(cuGraphLaunch, PFN_cuGraphLaunch_v10000)                                   \
  X(cuGraphDestroy, PFN_cuGraphDestroy_v10000)                                 \
  X(cuGraphExecDestroy, PFN_cuGraphExecDestroy_v10000)                         \
  X(cuEventCreate, PFN_cuEventCreate_v2000)                                    \
  X(cuEventRecord, PFN_cuEventRecord_v2000)                                    \
  X(cuEventSynchronize, PFN_cuEventSynchronize_v2000)                          \
  X(cuEventElapsedTime_v2, PFN_cuEventElapsedTime_v12080)                      \
  X(cuEventDestroy_v2, PFN_cuEventDestroy_v4000)

namespace kiln::runtime::cuda {

// The library the process-wide driver is loaded from.
inline constexpr const char* kDriverLibrary = "libcuda.so.1";
// The oldest driver that loads what NVRTC 13 makes (PTX ISA 9.x and its cubins): CUDA 13.0,
// the R580 drivers. Checked before anything else, so an old driver says so.
inline constexpr int kMinimumDriverVersion = 13000;

// One loaded driver library: a table of function pointers, each named after its symbol.
class DriverApi {
 public:
#define KILN_CUDA_DECLARE_FUNCTION(symbol, signature) signature symbol = nullptr;
  KILN_CUDA_DRIVER_FUNCTIONS(KILN_CUDA_DECLARE_FUNCTION)
#undef KILN_CUDA_DECLARE_FUNCTION

  // dlopens `library`, checks that its driver is CUDA 13 or newer (kMinimumDriverVersion) and
  // resolves every function; does not call cuInit. Throws kiln::Error when the library cannot
  // be opened ("CUDA backend: libcuda.so.1 not found (no NVIDIA driver on this machine);
  // ..."), when the driver is older (its version and the one needed), or lacks a function.
  static std::unique_ptr<DriverApi> load(const std::string& library);
  ~DriverApi();
  DriverApi(const DriverApi&) = delete;
  DriverApi& operator=(const DriverApi&) = delete;

  // cuInit(0) and cuDriverGetVersion. Throws kiln::Error with a line fit for a user: no
  // device, the toolkit's stub library instead of a driver, or the CUresult.
  void initialize();
  int driver_version() const { return driver_version_; }  // 12040: CUDA 12.4

  // "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)"; `context`, when given, goes
  // after the call: "cuLaunchKernel failed for kernel 'relu_0' (...): ...".
  std::string describe(CUresult result, std::string_view call, std::string_view context = {}) const;
  // Throws kiln::Error("CUDA backend: " + describe(...)) unless `result` is CUDA_SUCCESS.
  // After an error a kernel left behind (illegal address, ...) a note says the context is
  // unusable and how to find the kernel.
  void check(CUresult result, std::string_view call, std::string_view context = {}) const;

 private:
  DriverApi() = default;
  void* library_ = nullptr;  // dlopen handle
  int driver_version_ = 0;
};

// The process-wide driver: libcuda.so.1, loaded and initialized on first use (thread-safe).
// Throws the same kiln::Error on every call when that failed. Never unloaded, so executables
// destroyed during static destruction still have a driver.
const DriverApi& driver();

// The error for a CUDA backend that cannot run here: "CUDA backend: <reason>; use
// --backend=host to run on the CPU", and the reason back from such an error (from any other
// error of the backend, its message without "CUDA backend: ").
Error backend_unavailable(std::string_view reason, std::vector<std::string> notes = {});
std::string unavailable_reason(const Error& error);

// The message of describe(), from the pieces: `name` and `description` as cuGetErrorName and
// cuGetErrorString gave them, or null when the driver did not know `result`.
std::string format_driver_failure(std::string_view call, std::string_view context, int result,
                                  const char* name, const char* description);

// True for the errors a kernel leaves behind on the device (they surface on a later call and
// make the context unusable), as opposed to errors of the call that reports them.
bool is_kernel_fault(CUresult result);

// Owns one driver handle (module, stream, device memory, ...) and releases it on destruction
// with the driver function given. Release errors are ignored: a destructor cannot report them,
// and after a kernel fault every release fails anyway.
template <typename T>
class Owned {
 public:
  using Release = CUresult(CUDAAPI*)(T);

  Owned() = default;
  Owned(T handle, Release release) : handle_(handle), release_(release) {}
  Owned(Owned&& other) noexcept
      : handle_(other.handle_), release_(std::exchange(other.release_, nullptr)) {}
  Owned& operator=(Owned&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = other.handle_;
      release_ = std::exchange(other.release_, nullptr);
    }
    return *this;
  }
  ~Owned() { reset(); }

  T get() const { return handle_; }
  bool owns() const { return release_ != nullptr; }
  void reset() {
    if (release_ != nullptr) (void)release_(handle_);
    release_ = nullptr;
  }

 private:
  T handle_{};
  Release release_ = nullptr;  // null: owns nothing (0 is a valid CUdevice, so not the handle)
};

}  // namespace kiln::runtime::cuda
