#include "runtime/cuda/pinned_staging.h"

#include <fmt/format.h>

#include <algorithm>

namespace kiln::runtime::cuda {
namespace {

constexpr size_t kAlignment = 256;

size_t align_up(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

// Offsets of `bytes` laid out back to back at aligned offsets; returns the total.
size_t lay_out(const std::vector<int64_t>& bytes, std::vector<size_t>& offsets) {
  size_t total = 0;
  for (int64_t size : bytes) {
    offsets.push_back(total);
    total += align_up(static_cast<size_t>(size));
  }
  return total;
}

}  // namespace

PinnedStaging::PinnedStaging(const DriverApi& api, const std::vector<int64_t>& input_bytes,
                             const std::vector<int64_t>& output_bytes) {
  const size_t inputs = lay_out(input_bytes, input_offsets_);
  const size_t outputs = lay_out(output_bytes, output_offsets_);
  const size_t per_slot = inputs + outputs;
  // Portable to every context; a zero-byte program still gets a (tiny) allocation.
  void* memory = nullptr;
  api.check(api.cuMemHostAlloc(&memory, std::max<size_t>(2 * per_slot, kAlignment),
                               CU_MEMHOSTALLOC_PORTABLE),
            "cuMemHostAlloc",
            fmt::format("{} bytes of pinned staging for inputs and outputs", 2 * per_slot));
  memory_ = Owned<void*>(memory, api.cuMemFreeHost);
  for (int i = 0; i < 2; ++i) {
    Slot& slot = slots_[i];
    slot.inputs = static_cast<std::byte*>(memory) + i * per_slot;
    slot.outputs = slot.inputs + inputs;
    for (Owned<CUevent>* event : {&slot.uploaded, &slot.done}) {
      CUevent handle = nullptr;
      api.check(api.cuEventCreate(&handle, CU_EVENT_DISABLE_TIMING), "cuEventCreate",
                "staging event");
      *event = Owned<CUevent>(handle, api.cuEventDestroy_v2);
    }
  }
}

}  // namespace kiln::runtime::cuda
