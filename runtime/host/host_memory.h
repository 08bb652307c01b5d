// Memory a worker reuses from block to block (internal to runtime/host/): fiber stacks and the
// dynamic shared-memory arena.
#pragma once

#include <boost/context/stack_context.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln::runtime::host::detail {

// Stacks for a worker's fibers: mmap'ed on first use, each with a PROT_NONE guard page below
// it, so an overflowing kernel faults instead of corrupting its neighbour. Pools outlive
// launches (acquire/release) because mapping a thousand stacks costs more than a small launch.
class StackPool {
 public:
  static std::unique_ptr<StackPool> acquire(size_t stack_bytes);
  static void release(std::unique_ptr<StackPool> pool);

  explicit StackPool(size_t stack_bytes);
  ~StackPool();
  StackPool(const StackPool&) = delete;
  StackPool& operator=(const StackPool&) = delete;

  size_t stack_bytes() const { return stack_bytes_; }
  // Stack `index`, mapping more as needed. Throws kiln::Error when the mapping fails.
  boost::context::stack_context stack(size_t index);

 private:
  size_t stack_bytes_;
  size_t guard_bytes_;
  std::vector<void*> mappings_;  // each guard_bytes_ + stack_bytes_ long
};

// A Boost.Context stack allocator that lends one stack of a pool (the fiber never frees it).
struct BorrowedStack {
  boost::context::stack_context lent;
  boost::context::stack_context allocate() { return lent; }
  void deallocate(boost::context::stack_context&) noexcept {}
};

// The block's dynamic shared memory (kiln_smem), 128-byte aligned, between two guard zones
// filled with 0xFF. After the block, a guard byte that changed means the kernel wrote out of
// bounds; a read out of bounds returns 0xFF bytes (NaN as float), like poisoned memory.
class SharedArena {
 public:
  // Readies the arena for a block: payload poisoned with 0xFF when `poison`, guards reset.
  unsigned char* prepare(uint32_t bytes, bool poison);
  // "" or what was overwritten: "kiln_smem[1024..1027] written, past the end of its 1024 bytes".
  std::string check_guards() const;

 private:
  std::vector<unsigned char> storage_;
  unsigned char* payload_ = nullptr;
  uint32_t bytes_ = 0;
};

}  // namespace kiln::runtime::host::detail
