// Theoretical occupancy from a kernel's resources and the per-SM limits of an architecture,
// computed without a GPU (the toolkit's host-only cuda_occupancy.h does the arithmetic).
#pragma once

#include <string>

namespace kiln::runtime {

struct Occupancy {
  int active_blocks_per_sm = 0;
  int active_warps_per_sm = 0;
  int max_warps_per_sm = 0;
  double fraction() const {
    return max_warps_per_sm ? double(active_warps_per_sm) / max_warps_per_sm : 0.0;
  }
  // What bounds the block count: "warps" (also at full occupancy), "registers",
  // "shared memory", "blocks" (blocks per SM) or "barriers".
  std::string limiter;
};

// arch: "sm_80", "sm_86", "sm_89" or "sm_90" (others: kiln::Error). threads: threads per block.
// shared_bytes_per_block: all of it (kiln's is dynamic), opted in above 48 KB.
Occupancy theoretical_occupancy(const std::string& arch, int threads, int registers_per_thread,
                                int shared_bytes_per_block);

}  // namespace kiln::runtime
