// Orders derived from a Schedule (internal to runtime/host/).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "runtime/host/host_module.h"

namespace kiln::runtime::host::detail {

// The order of a block's `count` threads in barrier phase `phase` (0, 1, ... between barriers).
// Random orders differ per block and per phase, and depend on nothing else.
void thread_order(const Schedule& schedule, uint32_t count, uint64_t block, uint64_t phase,
                  std::vector<uint32_t>& order);

// The order in which blocks are handed to workers: the schedule also reorders blocks, which
// exposes kernels that wrongly depend on other blocks having run first.
class BlockOrder {
 public:
  BlockOrder(const Schedule& schedule, uint64_t count);
  uint64_t at(uint64_t i) const;  // the i-th block to run, as a linear block index

 private:
  Schedule::Kind kind_;
  uint64_t count_;
  uint64_t stride_ = 1;
  uint64_t offset_ = 0;
};

}  // namespace kiln::runtime::host::detail
