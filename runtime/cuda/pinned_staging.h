// Page-locked (pinned) host memory for a program's inputs and outputs, in two slots.
//
// A copy from pageable memory is staged by the driver through a pinned bounce buffer, and
// cuMemcpyHtoDAsync from pageable memory returns only once the source has been read: the host
// waits for the copy, and the copy waits for the stream. From pinned memory the copy is a DMA
// the stream runs on its own ("Pinned memory", CUDA C++ Best Practices Guide). With two slots,
// the inputs of the next run are written into one while the current run reads the other, so a
// training loop prepares batch k + 1 while the GPU runs step k (DeviceExecutable::submit).
//
// Each slot has two events: `uploaded`, recorded after its host-to-device copies (the slot's
// inputs may be overwritten once it completes), and `done`, recorded after the run's last
// operation (its outputs in the slot are then complete).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/cuda/driver_api.h"

namespace kiln::runtime::cuda {

class PinnedStaging {
 public:
  struct Slot {
    std::byte* inputs = nullptr;   // the inputs at input_offsets, back to back
    std::byte* outputs = nullptr;  // the outputs at output_offsets
    Owned<CUevent> uploaded;
    Owned<CUevent> done;
    bool used = false;  // its events were recorded at least once
  };

  // Two slots for inputs of `input_bytes` and outputs of `output_bytes` (each list laid out at
  // 256-byte aligned offsets: DMA and vector copies like aligned rows). Needs the context
  // current; throws kiln::Error when the driver cannot pin the memory.
  PinnedStaging(const DriverApi& api, const std::vector<int64_t>& input_bytes,
                const std::vector<int64_t>& output_bytes);
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;

  Slot& slot(int index) { return slots_[static_cast<size_t>(index)]; }
  size_t input_offset(size_t i) const { return input_offsets_[i]; }
  size_t output_offset(size_t i) const { return output_offsets_[i]; }

 private:
  std::vector<size_t> input_offsets_, output_offsets_;
  Owned<void*> memory_;  // one pinned allocation for both slots; freed after their events
  Slot slots_[2];
};

}  // namespace kiln::runtime::cuda
