#include "runtime/host/host_memory.h"

#include <fmt/format.h>
#include <sanitizer/asan_interface.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include "ir/diagnostic.h"

namespace kiln::runtime::host::detail {
namespace {

// Idle pools, kept between launches: one per worker of a launch using every core, with room
// for two launches at once. Bounded, since each holds the pages its kernels touched.
size_t max_idle_pools() {
  static const size_t most = std::max<size_t>(16, 2 * std::thread::hardware_concurrency());
  return most;
}
std::mutex idle_mutex;
std::vector<std::unique_ptr<StackPool>>& idle_pools() {
  static auto* pools = new std::vector<std::unique_ptr<StackPool>>();  // never destroyed: no
  return *pools;                                                       // exit-order hazards
}

size_t page_size() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }
size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

constexpr size_t kArenaAlign = 128;  // more than any CUDA vector type needs
constexpr size_t kFrontGuard = 128;  // catches small negative offsets
constexpr size_t kBackGuard = 1024;  // catches a tile's worth of overrun
constexpr unsigned char kPoison = 0xFF;
constexpr size_t kCacheLine = 64;
constexpr size_t kStackColours = 64;  // 64 lines: every set of a 4 KB-way L1 cache

}  // namespace

std::unique_ptr<StackPool> StackPool::acquire(size_t stack_bytes) {
  {
    std::lock_guard<std::mutex> lock(idle_mutex);
    auto& pools = idle_pools();
    for (auto it = pools.begin(); it != pools.end(); ++it) {
      if ((*it)->stack_bytes() != round_up(stack_bytes, page_size())) continue;
      std::unique_ptr<StackPool> pool = std::move(*it);
      pools.erase(it);
      return pool;
    }
  }
  return std::make_unique<StackPool>(stack_bytes);
}

void StackPool::release(std::unique_ptr<StackPool> pool) {
  std::lock_guard<std::mutex> lock(idle_mutex);
  if (pool && idle_pools().size() < max_idle_pools()) idle_pools().push_back(std::move(pool));
}

StackPool::StackPool(size_t stack_bytes)
    : stack_bytes_(round_up(stack_bytes, page_size())), guard_bytes_(page_size()) {}

StackPool::~StackPool() {
  for (void* mapping : mappings_) munmap(mapping, guard_bytes_ + stack_bytes_);
}

boost::context::stack_context StackPool::stack(size_t index) {
  while (mappings_.size() <= index) {
    const size_t total = guard_bytes_ + stack_bytes_;
    // MAP_NORESERVE: a thousand 256 KB stacks only cost the pages kernels touch.
    void* mapping = mmap(nullptr, total, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mapping == MAP_FAILED)
      throw Error("host backend",
                  fmt::format("cannot map a {}-byte fiber stack: {}", total, std::strerror(errno)));
    mprotect(mapping, guard_bytes_, PROT_NONE);  // stacks grow down: the guard is below
    mappings_.push_back(mapping);
  }
  // Stack tops a whole number of pages apart would all fall in the same L1 cache set, and a
  // barrier touches every one of them: stagger them by a cache line per stack ("colouring").
  const size_t colour = (index % kStackColours) * kCacheLine;
  boost::context::stack_context context;
  context.size = stack_bytes_ - colour;
  context.sp = static_cast<char*>(mappings_[index]) + guard_bytes_ + stack_bytes_ - colour;
  // A stack lent again may still carry AddressSanitizer's marks of the frames a fiber left on
  // it (one torn down mid-kernel never unwound them): the next fiber starts on clean shadow, or
  // ASan reports its own bookkeeping (sigaltstack in __asan_handle_no_return) as a use after
  // scope. A no-op without ASan.
  ASAN_UNPOISON_MEMORY_REGION(static_cast<char*>(mappings_[index]) + guard_bytes_, stack_bytes_);
  return context;
}

unsigned char* SharedArena::prepare(uint32_t bytes, bool poison) {
  const size_t needed = kArenaAlign + kFrontGuard + round_up(bytes, kArenaAlign) + kBackGuard;
  const bool fresh = storage_.size() < needed;
  if (fresh) {
    storage_.assign(needed, 0);
    const auto base = reinterpret_cast<uintptr_t>(storage_.data()) + kFrontGuard;
    payload_ = reinterpret_cast<unsigned char*>(round_up(base, kArenaAlign));
  }
  bytes_ = bytes;
  std::memset(payload_ - kFrontGuard, kPoison, kFrontGuard);
  std::memset(payload_ + bytes_, kPoison, kBackGuard);
  if (poison) std::memset(payload_, kPoison, bytes_);
  return payload_;
}

std::string SharedArena::check_guards() const {
  // Every block ends with this check: compare whole guards against poison first (memcmp runs
  // in vectors; the byte loop below cost 2 % of a training step), bytes only on a mismatch.
  static const std::array<unsigned char, std::max(kFrontGuard, kBackGuard)> poisoned = [] {
    std::array<unsigned char, std::max(kFrontGuard, kBackGuard)> bytes;
    bytes.fill(kPoison);
    return bytes;
  }();
  if (std::memcmp(payload_ - kFrontGuard, poisoned.data(), kFrontGuard) == 0 &&
      std::memcmp(payload_ + bytes_, poisoned.data(), kBackGuard) == 0)
    return "";
  auto changed = [](const unsigned char* begin, size_t size, long origin, long& first, long& last) {
    first = last = -1;
    for (size_t i = 0; i < size; ++i) {
      if (begin[i] == kPoison) continue;
      if (first < 0) first = origin + static_cast<long>(i);
      last = origin + static_cast<long>(i);
    }
    return first >= 0;
  };
  long first = 0, last = 0;
  if (changed(payload_ - kFrontGuard, kFrontGuard, -static_cast<long>(kFrontGuard), first, last))
    return fmt::format("kiln_smem[{}..{}] written, before the start of the shared arena", first,
                       last);
  if (changed(payload_ + bytes_, kBackGuard, static_cast<long>(bytes_), first, last))
    return fmt::format("kiln_smem[{}..{}] written, past the end of its {} bytes", first, last,
                       bytes_);
  return "";
}

}  // namespace kiln::runtime::host::detail
