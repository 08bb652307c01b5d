// NCCL, loaded at run time like the driver (see cublaslt_api.h for why dlopen and decltype):
// the CUDA backend's all-reduce of data-parallel training (runtime/distributed/). A machine
// without libnccl.so.2 trains on one GPU as before; only a run under mpirun needs it.
//
// DeviceBuckets performs the collective kernels of a training step (codegen::Kernel::
// collective) on the GPU, as runtime/executor/host_executor.cpp does on the CPU: at the kernel,
// its operands are copied into one device buffer on the compute stream; the communication
// stream waits for that (an event), averages the buffer in place across the ranks
// (ncclAllReduce with ncclAvg; or ncclBroadcast from the root) and records a second event; the
// compute stream waits for it, and copies the buffer into the kernel's results, only before the
// first kernel that reads them (or at the end of the step). So
// the all-reduce overlaps the rest of the backward pass, and the memory plan may reuse the
// gradients' memory as soon as they are copied. A data-parallel step is not captured into a
// CUDA graph (cuda_executable.cpp launches it kernel by kernel): NCCL in captured graphs has
// conditions of its own (registered buffers, one capture per communicator at a time) that
// cannot be checked without GPUs.
#pragma once

#include <cuda.h>
#include <nccl.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "codegen/program.h"
#include "runtime/cuda/driver_api.h"
#include "runtime/distributed/collective_schedule.h"
#include "runtime/cuda/library_loader.h"
#include "runtime/cuda/library_paths.h"

namespace kiln::runtime::distributed {
class Communicator;
}

namespace kiln::runtime::cuda {

// Every NCCL function kiln calls (ncclAvg needs NCCL 2.10).
#define KILN_NCCL_FUNCTIONS(X) \
  X(ncclGetVersion)            \
  X(ncclGetErrorString)        \
  X(ncclGetUniqueId)           \
  X(ncclCommInitRank)          \
  X(ncclCommDestroy)           \
  X(ncclCommAbort)             \
  X(ncclAllReduce)              \
  X(ncclBroadcast)

class NcclApi {
 public:
#define KILN_NCCL_DECLARE(symbol) decltype(&::symbol) symbol = nullptr;
  KILN_NCCL_FUNCTIONS(KILN_NCCL_DECLARE)
#undef KILN_NCCL_DECLARE

  // dlopens `path` and resolves every function. Throws kiln::Error ("NCCL: libnccl.so.2 not
  // found (...)") when that fails or the library is older than 2.10.
  static std::unique_ptr<NcclApi> load(const std::string& path);
  // Throws kiln::Error("NCCL: <call> failed: <reason>") unless `result` is ncclSuccess.
  void check(ncclResult_t result, std::string_view call) const;
  int version() const { return version_; }  // 22809: NCCL 2.28.9

 private:
  NcclApi() = default;
  std::unique_ptr<SharedLibrary> library_;
  int version_ = 0;
};

// The process-wide NCCL, loaded on first use and never unloaded; the same kiln::Error on every
// call when loading failed, saying that data-parallel training on GPUs needs it.
const NcclApi& nccl(const std::string& path = kNcclLibraryFile);

class DeviceBuckets {
 public:
  // One NCCL communicator (of `nccl`) over `world`'s ranks on the current context's device (rank 0 makes
  // the unique id; MPI broadcasts it), the communication stream, two events and a device
  // buffer per bucket of `program`. `addresses`: each buffer id's device address.
  DeviceBuckets(const DriverApi& api, const NcclApi& nccl, const codegen::Program& program,
                distributed::Communicator& world, std::vector<CUdeviceptr> addresses);
  ~DeviceBuckets();
  DeviceBuckets(const DeviceBuckets&) = delete;
  DeviceBuckets& operator=(const DeviceBuckets&) = delete;

  // Before kernel `k` is enqueued on `stream`: completes every collective it reads.
  void before(size_t k, CUstream stream);
  // Kernel `k`, a collective: copies its operands into its buffer and starts it.
  void start(size_t k, CUstream stream);
  // At the end of the step: every bucket still outstanding.
  void finish_all(CUstream stream);

 private:
  struct Bucket {
    Owned<CUdeviceptr> buffer;
    Owned<CUevent> ready, done;  // buffer filled (compute stream); mean computed (comm stream)
    int64_t count = 0;
    ncclDataType_t dtype = ncclFloat32;
    int root = -1;  // >= 0: a broadcast from that rank, else an all-reduce (mean)
  };
  void finish(size_t k, CUstream stream);

  const DriverApi& api_;
  const NcclApi& nccl_;
  std::vector<CUdeviceptr> addresses_;  // per buffer id
  ncclComm_t comm_ = nullptr;
  Owned<CUstream> comm_stream_;
  distributed::CollectiveSchedule schedule_;  // when each bucket starts and finishes
  std::map<size_t, Bucket> buckets_;  // per collective kernel
};

}  // namespace kiln::runtime::cuda
