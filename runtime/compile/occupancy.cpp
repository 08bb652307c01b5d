// Theoretical occupancy without a GPU: the toolkit's cuda_occupancy.h (the arithmetic behind
// cudaOccupancyMaxActiveBlocksPerMultiprocessor) fed with hand-written device limits.
//
// Limits (CUDA C++ Programming Guide, "Technical Specifications per Compute Capability", and
// docs/HOST_BACKEND.md): sm_80 (A100) and sm_90 (H100) run at most 2048 threads, 32 blocks and
// 64K 32-bit registers per SM, 255 registers per thread, with registers allocated per warp in
// units of 256. Shared memory per SM is 164 KB (sm_80) / 228 KB (sm_90); a block may use 48 KB
// by default and up to 163 / 227 KB after opting in; the driver reserves 1 KB per block.
// The consumer parts the CLI also accepts, sm_86 and sm_89, have 1536 threads per SM and 100 KB
// of shared memory per SM (99 KB per block); cuda_occupancy.h knows their block limits (16, 24).
//
// kiln kernels use dynamic shared memory only, and the CUDA backend opts in to the per-block
// maximum when a kernel needs more than 48 KB, so the shared bytes are passed as dynamic memory
// with the opt-in limit.
#include "runtime/compile/occupancy.h"

#include <cuda_occupancy.h>

#include <climits>
#include <optional>

#include <fmt/format.h>

#include "ir/diagnostic.h"

namespace kiln::runtime {

namespace {

constexpr int kKiB = 1024;
constexpr int kMaxRegistersPerThread = 255;  // ptxas never allocates more (the header says 256)

struct ArchLimits {
  int major;
  int minor;
  int threads_per_sm;
  int num_sms;  // of the reference part; occupancy per SM does not depend on it
  size_t shared_per_sm;
  size_t shared_per_block_optin;
};

std::optional<ArchLimits> limits_for(const std::string& arch) {
  if (arch == "sm_80") return ArchLimits{8, 0, 2048, 108, 164 * kKiB, 163 * kKiB};  // A100
  if (arch == "sm_86") return ArchLimits{8, 6, 1536, 84, 100 * kKiB, 99 * kKiB};    // A40
  if (arch == "sm_89") return ArchLimits{8, 9, 1536, 142, 100 * kKiB, 99 * kKiB};   // L40S
  if (arch == "sm_90") return ArchLimits{9, 0, 2048, 132, 228 * kKiB, 227 * kKiB};  // H100
  return std::nullopt;
}

cudaOccDeviceProp device_properties(const ArchLimits& limits) {
  cudaOccDeviceProp prop;
  prop.computeMajor = limits.major;
  prop.computeMinor = limits.minor;
  prop.maxThreadsPerBlock = 1024;
  prop.maxThreadsPerMultiprocessor = limits.threads_per_sm;
  prop.regsPerBlock = 64 * kKiB;
  prop.regsPerMultiprocessor = 64 * kKiB;
  prop.warpSize = 32;
  prop.sharedMemPerBlock = 48 * kKiB;
  prop.sharedMemPerMultiprocessor = limits.shared_per_sm;
  prop.numSms = limits.num_sms;
  prop.sharedMemPerBlockOptin = limits.shared_per_block_optin;
  prop.reservedSharedMemPerBlock = 1 * kKiB;
  return prop;
}

// One name for what bounds the block count. Ties go to the first in this order: with warps
// first, a kernel at full occupancy reports "warps" rather than a resource that merely also
// fits exactly, and in any tie, shrinking one tied resource alone would not help anyway.
std::string limiter_name(const cudaOccResult& result) {
  const int active = result.activeBlocksPerMultiprocessor;
  if (result.blockLimitWarps == active) return "warps";
  if (result.blockLimitRegs == active) return "registers";
  if (result.blockLimitSharedMem == active) return "shared memory";
  if (result.blockLimitBlocks == active) return "blocks";
  if (result.blockLimitBarriers == active) return "barriers";
  return "warps";
}

}  // namespace

Occupancy theoretical_occupancy(const std::string& arch, int threads, int registers_per_thread,
                                int shared_bytes_per_block) {
  const std::optional<ArchLimits> limits = limits_for(arch);
  if (!limits)
    throw Error("", fmt::format("no occupancy model for GPU architecture '{}' (known: sm_80, "
                                "sm_86, sm_89, sm_90)",
                                arch));
  KILN_CHECK(threads > 0 && registers_per_thread >= 0 && shared_bytes_per_block >= 0)
      << "occupancy of a block of " << threads << " threads, " << registers_per_thread
      << " registers, " << shared_bytes_per_block << " bytes of shared memory";

  const cudaOccDeviceProp prop = device_properties(*limits);
  Occupancy occupancy;
  occupancy.max_warps_per_sm = prop.maxThreadsPerMultiprocessor / prop.warpSize;
  if (registers_per_thread > kMaxRegistersPerThread) {
    occupancy.limiter = "registers";
    return occupancy;
  }

  cudaOccFuncAttributes attributes;
  attributes.maxThreadsPerBlock = prop.maxThreadsPerBlock;
  attributes.numRegs = registers_per_thread;
  attributes.sharedSizeBytes = 0;  // all of kiln's shared memory is dynamic
  attributes.shmemLimitConfig = FUNC_SHMEM_LIMIT_OPTIN;
  attributes.maxDynamicSharedSizeBytes = prop.sharedMemPerBlockOptin;
  attributes.numBlockBarriers = 1;  // __syncthreads uses barrier 0; what the runtime assumes
  cudaOccDeviceState state;         // default carveout: the whole shared memory capacity

  cudaOccResult result{};
  const cudaOccError status = cudaOccMaxActiveBlocksPerMultiprocessor(
      &result, &prop, &attributes, &state, threads, size_t(shared_bytes_per_block));
  KILN_CHECK(status == CUDA_OCC_SUCCESS)
      << "cudaOccMaxActiveBlocksPerMultiprocessor failed (" << int(status) << ") for " << arch
      << ", " << threads << " threads";

  const int warps_per_block = (threads + prop.warpSize - 1) / prop.warpSize;
  occupancy.active_blocks_per_sm = result.activeBlocksPerMultiprocessor;
  occupancy.active_warps_per_sm = occupancy.active_blocks_per_sm * warps_per_block;
  occupancy.limiter = limiter_name(result);
  return occupancy;
}

}  // namespace kiln::runtime
