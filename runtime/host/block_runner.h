// Runs the blocks of one launch on one worker OS thread (internal to runtime/host/).
//
// A kernel without barriers runs its threads as a plain loop. Otherwise every GPU thread is a
// Boost.Context fiber and this class is their scheduler: it resumes runnable threads in the
// schedule's order until each one blocks (at __syncthreads or in a warp collective) or exits.
// When all threads wait at the barrier, a new phase starts with a new order. When nothing can
// run and the block is not finished, the block has deadlocked: a kiln::Error says who waits
// for whom. Fibers never leave the worker's OS thread, so the shared object's thread_local
// "current thread" pointer (kiln_host_tls) is switched by a plain store before each resume.
#pragma once

#include <boost/context/fiber.hpp>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "codegen/program.h"
#include "runtime/host/host_memory.h"
#include "runtime/host/host_module.h"
#include "runtime/host/warp_collective.h"

#define KILN_HOST_ABI_ONLY
#include "runtime/host/kiln_host_prelude.h"

namespace kiln::runtime::host::detail {

using HostEntry = void (*)(void* const* args);
// A kernel without barriers: the block's `count` threads, in the given order, in one call.
using HostBlockEntry = void (*)(void* const* args, kiln_host_thread* const* threads, unsigned count);
using HostTls = kiln_host_thread** (*)();

// What every block of a launch shares.
struct LaunchSpec {
  std::string kernel;
  HostEntry entry = nullptr;
  HostBlockEntry block_entry = nullptr;  // when the module has one (modules before it do not)
  HostTls tls = nullptr;
  void* const* args = nullptr;
  codegen::Dim3 grid;
  codegen::Dim3 block;
  uint32_t shared_bytes = 0;
  bool uses_barriers = false;
  // A host-specific body (codegen::Kernel::host_variant): thread 0 computes the whole block and
  // the others return before doing anything, so thread 0 alone is run.
  bool lone_thread = false;
  HostOptions options;
};

class BlockRunner;

struct GpuThread {
  enum class State : uint8_t { Runnable, AtBarrier, InWarp, Exited };

  kiln_host_thread abi{};  // what the kernel sees; abi.runtime points back here
  BlockRunner* runner = nullptr;
  uint32_t linear = 0;  // x fastest, as CUDA numbers threads into warps
  State state = State::Runnable;
  int barrier_line = 0;
  boost::context::fiber fiber;      // this thread, while suspended; lives across blocks
  boost::context::fiber scheduler;  // the scheduler, while this thread runs
  boost::context::stack_context stack;
  void* asan_fake_stack = nullptr;  // AddressSanitizer's bookkeeping across switches
};

class BlockRunner {
 public:
  // Must be constructed on the worker thread that calls run(): it binds that OS thread's slot
  // (and so makes this thread's first access to the module's TLS outside kernel code; see the
  // -mtls-dialect note in host_compiler.cpp).
  explicit BlockRunner(const LaunchSpec& spec);
  ~BlockRunner();
  BlockRunner(const BlockRunner&) = delete;
  BlockRunner& operator=(const BlockRunner&) = delete;

  // Runs block `linear` to completion. Throws kiln::Error (strict mode, deadlock, shared memory
  // written out of bounds) or rethrows what the kernel threw.
  void run(uint64_t linear);

  // Called from the kernel through kiln_host_ops (see the .cpp).
  int arrive_at_barrier(GpuThread& thread, int op, int predicate, int line);
  uint64_t warp_collective(GpuThread& thread, int op, uint32_t mask, uint64_t value, int operand,
                           int width, int line);
  [[noreturn]] void fail(const std::string& what) const;
  [[noreturn]] void fail_without_barriers(const char* what, int line) const;
  std::string thread_name(uint32_t linear) const;  // "thread (3,0,0)"

 private:
  void run_plain();
  void run_fibers();
  void start_fibers();
  void fiber_main(GpuThread& thread);
  void resume(GpuThread& thread);
  void switch_to_scheduler(GpuThread& thread);
  void yield(GpuThread& thread);  // switch_to_scheduler, then throw FiberCancel when closing
  void release_barrier();
  void close_fibers();
  [[noreturn, gnu::cold, gnu::noinline]] void fail_divergent_barrier(const GpuThread& thread,
                                                                     int op, int line) const;
  [[noreturn, gnu::cold, gnu::noinline]] void fail_bad_collective(const GpuThread& thread, int op,
                                                                  uint32_t mask, int width,
                                                                  int line) const;
  [[noreturn, gnu::cold, gnu::noinline]] void fail_disagreement(const GpuThread& thread,
                                                                uint32_t other) const;
  [[noreturn, gnu::cold, gnu::noinline]] void fail_strict_collective(const GpuThread& thread,
                                                                     const std::string& what) const;
  void complete_collective(const GpuThread& thread, uint32_t group);
  std::string describe_deadlock() const;
  std::string describe_wait(uint32_t linear) const;
  uint32_t lanes_present(uint32_t warp) const;

  const LaunchSpec& spec_;
  kiln_host_thread** tls_;
  kiln_host_block block_{};
  uint64_t block_linear_ = 0;
  uint32_t count_;  // threads per block
  std::vector<GpuThread> threads_;
  std::vector<WarpPost> posts_;   // one per thread
  std::vector<uint32_t> posted_;  // per warp: lanes with a pending post
  std::vector<uint32_t> order_;
  std::vector<kiln_host_thread*> ordered_abi_;  // order_'s threads, for the block entry
  std::unique_ptr<StackPool> stacks_;
  SharedArena arena_;

  uint64_t phase_ = 0;
  uint32_t runnable_ = 0;
  uint32_t exited_ = 0;
  uint32_t at_barrier_ = 0;
  uint32_t barrier_count_ = 0;   // predicates of this phase's arrivals
  uint32_t released_count_ = 0;  // ... of the last released barrier
  int barrier_op_ = 0;
  int barrier_line_ = 0;
  uint32_t barrier_first_ = 0;                    // the first thread to arrive in this phase
  bool closing_ = false;                          // resumed fibers unwind and return (close_fibers)
  const void* scheduler_stack_bottom_ = nullptr;  // for AddressSanitizer
  size_t scheduler_stack_size_ = 0;
  std::exception_ptr failure_;  // thrown inside a fiber, rethrown by run()
};

}  // namespace kiln::runtime::host::detail
