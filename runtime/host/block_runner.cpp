// The per-worker scheduler of GPU threads; see block_runner.h for the design and
// HOST_BACKEND.md for the measurements behind it (Boost.Context, one block per OS thread).
#include "runtime/host/block_runner.h"

#include <fmt/format.h>

#include "ir/diagnostic.h"
#include "runtime/host/schedule_order.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#endif

namespace kiln::runtime::host::detail {
namespace ctx = boost::context;

namespace {

GpuThread& thread_of(kiln_host_thread* self) { return *static_cast<GpuThread*>(self->runtime); }

// Entry points of kiln_host_ops: C function pointers the shared object calls. They may throw
// (kiln::Error); the exception unwinds through the kernel's frames, compiled with unwind tables.
int fiber_barrier(kiln_host_thread* self, int op, int predicate, int line) {
  GpuThread& thread = thread_of(self);
  return thread.runner->arrive_at_barrier(thread, op, predicate, line);
}

unsigned long long fiber_warp(kiln_host_thread* self, int op, unsigned mask,
                              unsigned long long value, int operand, int width, int line) {
  GpuThread& thread = thread_of(self);
  return thread.runner->warp_collective(thread, op, mask, value, operand, width, line);
}

int plain_barrier(kiln_host_thread* self, int, int, int line) {
  thread_of(self).runner->fail_without_barriers("__syncthreads", line);
}

unsigned long long plain_warp(kiln_host_thread* self, int op, unsigned, unsigned long long, int,
                              int, int line) {
  thread_of(self).runner->fail_without_barriers(warp_op_name(op).data(), line);
}

// AddressSanitizer must hear of every stack switch, or it reports false stack errors; Boost
// 1.74's fcontext fibers do not tell it. No-ops in other builds.
void asan_start_switch(void** fake_stack, const void* bottom, size_t size) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_start_switch_fiber(fake_stack, bottom, size);
#endif
}
void asan_finish_switch(void* fake_stack, const void** bottom, size_t* size) {
#if defined(__SANITIZE_ADDRESS__)
  __sanitizer_finish_switch_fiber(fake_stack, bottom, size);
#endif
}

// The path from a kernel's barrier to the fiber switch and back is inlined into one frame:
// after a switch every return is mispredicted (the return stack buffer holds the other
// stack's calls), so each level of calls around the switch costs a few nanoseconds.
#define KILN_HOT_PATH [[gnu::always_inline]] inline

// Thrown inside a fiber to unwind it when the block is abandoned (an error elsewhere) or the
// runner closes; caught in fiber_main. Not derived from std::exception: kernels never see it.
struct FiberCancel {};

const kiln_host_ops kFiberOps = {&fiber_barrier, &fiber_warp};
const kiln_host_ops kPlainOps = {&plain_barrier, &plain_warp};

std::string_view barrier_name(int op) {
  switch (op) {
    case KILN_HOST_BARRIER_COUNT: return "__syncthreads_count";
    case KILN_HOST_BARRIER_AND: return "__syncthreads_and";
    case KILN_HOST_BARRIER_OR: return "__syncthreads_or";
  }
  return "__syncthreads";
}

kiln_host_uint3 unflatten(uint64_t linear, const codegen::Dim3& dims) {
  return {static_cast<unsigned>(linear % dims.x), static_cast<unsigned>(linear / dims.x % dims.y),
          static_cast<unsigned>(linear / (uint64_t{dims.x} * dims.y))};
}

}  // namespace

BlockRunner::BlockRunner(const LaunchSpec& spec)
    : spec_(spec),
      tls_(spec.tls()),
      count_(static_cast<uint32_t>(spec.block.count())),
      threads_(count_),
      posts_(count_),
      posted_((count_ + kWarpSize - 1) / kWarpSize, 0) {
  block_.block_dim = {spec.block.x, spec.block.y, spec.block.z};
  block_.grid_dim = {spec.grid.x, spec.grid.y, spec.grid.z};
  block_.cuda_variants = spec.options.cuda_variants ? 1 : 0;
  for (uint32_t i = 0; i < count_; ++i) {
    GpuThread& thread = threads_[i];
    thread.runner = this;
    thread.linear = i;
    thread.abi.thread_idx = unflatten(i, spec.block);
    thread.abi.block = &block_;
    thread.abi.ops = spec.uses_barriers ? &kFiberOps : &kPlainOps;
    thread.abi.runtime = &thread;
  }
  if (spec.uses_barriers) stacks_ = StackPool::acquire(spec.options.stack_bytes);
}

BlockRunner::~BlockRunner() {
  close_fibers();   // while their stacks are still ours
  *tls_ = nullptr;  // a stray access after the launch faults instead of reading stale state
  StackPool::release(std::move(stacks_));
}

std::string BlockRunner::thread_name(uint32_t linear) const {
  const kiln_host_uint3 t = threads_[linear].abi.thread_idx;
  return fmt::format("thread ({},{},{})", t.x, t.y, t.z);
}

void BlockRunner::fail(const std::string& what) const {
  const kiln_host_uint3 b = block_.block_idx;
  throw Error(fmt::format("kernel '{}' block ({},{},{})", spec_.kernel, b.x, b.y, b.z), what);
}

void BlockRunner::fail_without_barriers(const char* what, int line) const {
  fail(
      fmt::format("{} (line {}) called, but the kernel was launched with uses_barriers = false; "
                  "its KernelSpec must say it uses barriers",
                  what, line));
}

void BlockRunner::run(uint64_t linear) {
  block_linear_ = linear;
  block_.block_idx = unflatten(linear, spec_.grid);
  block_.smem = arena_.prepare(spec_.shared_bytes, spec_.options.poison_shared);
  block_.smem_bytes = spec_.shared_bytes;
  if (spec_.uses_barriers) {
    run_fibers();
  } else {
    run_plain();
  }
  if (std::string overrun = arena_.check_guards(); !overrun.empty()) fail(overrun);
}

void BlockRunner::run_plain() {
  if (spec_.lone_thread) {
    *tls_ = &threads_[0].abi;
    spec_.entry(spec_.args);
    return;
  }
  thread_order(spec_.options.schedule, count_, block_linear_, 0, order_);
  if (spec_.block_entry != nullptr) {
    ordered_abi_.resize(order_.size());
    for (size_t i = 0; i < order_.size(); ++i) ordered_abi_[i] = &threads_[order_[i]].abi;
    spec_.block_entry(spec_.args, ordered_abi_.data(), static_cast<unsigned>(ordered_abi_.size()));
    return;
  }
  for (uint32_t index : order_) {
    *tls_ = &threads_[index].abi;
    spec_.entry(spec_.args);
  }
}

// Fibers live as long as the runner: each one runs the kernel for its GPU thread of every
// block, marking itself exited and yielding between blocks, so a block costs two switches per
// thread rather than a fiber creation and teardown (4 switches) per thread.
void BlockRunner::start_fibers() {
  phase_ = 0;
  exited_ = at_barrier_ = barrier_count_ = released_count_ = 0;
  runnable_ = count_;
  failure_ = nullptr;
  std::fill(posted_.begin(), posted_.end(), 0u);
  for (GpuThread& thread : threads_) {
    thread.state = GpuThread::State::Runnable;
    if (thread.fiber) continue;
    GpuThread* self = &thread;
    thread.stack = stacks_->stack(thread.linear);
    thread.fiber =
        ctx::fiber(std::allocator_arg, BorrowedStack{thread.stack}, [self](ctx::fiber&& scheduler) {
          self->scheduler = std::move(scheduler);
          BlockRunner& runner = *self->runner;
          asan_finish_switch(nullptr, &runner.scheduler_stack_bottom_,
                             &runner.scheduler_stack_size_);
          runner.fiber_main(*self);
          // Last switch away: nullptr lets ASan free this fiber's state.
          asan_start_switch(nullptr, runner.scheduler_stack_bottom_, runner.scheduler_stack_size_);
          return std::move(self->scheduler);
        });
  }
}

void BlockRunner::fiber_main(GpuThread& thread) {
  try {
    while (!closing_) {
      try {
        spec_.entry(spec_.args);
      } catch (const FiberCancel&) {
        throw;
      } catch (...) {
        if (!failure_) failure_ = std::current_exception();
      }
      thread.state = GpuThread::State::Exited;
      ++exited_;
      switch_to_scheduler(thread);  // resumed again for the next block, or to finish
    }
  } catch (const FiberCancel&) {
    // close_fibers: this thread's block was abandoned mid-kernel.
  }
}

KILN_HOT_PATH void BlockRunner::resume(GpuThread& thread) {
  --runnable_;
  *tls_ = &thread.abi;
  void* fake_stack = nullptr;
  asan_start_switch(&fake_stack, static_cast<char*>(thread.stack.sp) - thread.stack.size,
                    thread.stack.size);
  thread.fiber = std::move(thread.fiber).resume();
  asan_finish_switch(fake_stack, nullptr, nullptr);
}

KILN_HOT_PATH void BlockRunner::switch_to_scheduler(GpuThread& thread) {
  asan_start_switch(&thread.asan_fake_stack, scheduler_stack_bottom_, scheduler_stack_size_);
  thread.scheduler = std::move(thread.scheduler).resume();
  asan_finish_switch(thread.asan_fake_stack, &scheduler_stack_bottom_, &scheduler_stack_size_);
}

KILN_HOT_PATH void BlockRunner::yield(GpuThread& thread) {
  switch_to_scheduler(thread);
  if (closing_) throw FiberCancel{};
}

void BlockRunner::run_fibers() {
  start_fibers();
  std::exception_ptr error;
  try {
    for (;;) {
      thread_order(spec_.options.schedule, count_, block_linear_, phase_, order_);
      // Threads woken by a warp collective completing run in a later sweep of the same order.
      while (runnable_ > 0) {
        for (uint32_t index : order_) {
          if (threads_[index].state != GpuThread::State::Runnable) continue;
          resume(threads_[index]);
          if (failure_) std::rethrow_exception(failure_);
        }
      }
      if (exited_ == count_) break;
      if (at_barrier_ == count_) {
        release_barrier();
        continue;
      }
      fail(describe_deadlock());
    }
  } catch (...) {
    error = std::current_exception();
  }
  if (error) {
    close_fibers();  // outside the handler: each fiber unwinds with an exception of its own
    std::rethrow_exception(error);
  }
}

// Resumes every live fiber with closing_ set: an idle one returns, one suspended mid-kernel
// (a barrier or collective) unwinds its kernel with FiberCancel. Either way it finishes through
// our own switch, never through Boost's forced unwinding, which AddressSanitizer cannot follow.
void BlockRunner::close_fibers() {
  closing_ = true;
  for (GpuThread& thread : threads_) {
    if (!thread.fiber) continue;
    *tls_ = &thread.abi;
    void* fake_stack = nullptr;
    asan_start_switch(&fake_stack, static_cast<char*>(thread.stack.sp) - thread.stack.size,
                      thread.stack.size);
    thread.fiber = std::move(thread.fiber).resume();
    asan_finish_switch(fake_stack, nullptr, nullptr);
  }
  closing_ = false;
}

void BlockRunner::release_barrier() {
  released_count_ = barrier_count_;
  barrier_count_ = 0;
  at_barrier_ = 0;
  ++phase_;
  runnable_ = count_;
  for (GpuThread& thread : threads_) thread.state = GpuThread::State::Runnable;
}

KILN_HOT_PATH int BlockRunner::arrive_at_barrier(GpuThread& thread, int op, int predicate,
                                                 int line) {
  if (at_barrier_ == 0) {
    barrier_op_ = op;
    barrier_line_ = line;
    barrier_first_ = thread.linear;
  } else if (spec_.options.strict && (line != barrier_line_ || op != barrier_op_)) {
    fail_divergent_barrier(thread, op, line);
  }
  ++at_barrier_;
  barrier_count_ += predicate != 0;
  thread.barrier_line = line;
  thread.state = GpuThread::State::AtBarrier;
  yield(thread);
  switch (op) {
    case KILN_HOST_BARRIER_COUNT: return static_cast<int>(released_count_);
    case KILN_HOST_BARRIER_AND: return released_count_ == count_;
    case KILN_HOST_BARRIER_OR: return released_count_ > 0;
  }
  return 0;
}

// The error paths below are out of line: a fiber's hot frames stay small (256 fibers' stacks
// compete for the L1 cache at every barrier).
void BlockRunner::fail_divergent_barrier(const GpuThread& thread, int op, int line) const {
  fail(
      fmt::format("strict: divergent barriers: {} reached {} at line {}, but {} reached {} at "
                  "line {} in the same phase",
                  thread_name(barrier_first_), barrier_name(barrier_op_), barrier_line_,
                  thread_name(thread.linear), barrier_name(op), line));
}

void BlockRunner::fail_bad_collective(const GpuThread& thread, int op, uint32_t mask, int width,
                                      int line) const {
  const std::string_view name = warp_op_name(op);
  if (width <= 0 || width > kWarpSize || (width & (width - 1)) != 0)
    fail(fmt::format("{} (line {}) by {}: width {} is not a power of two up to 32", name, line,
                     thread_name(thread.linear), width));
  fail(fmt::format("{} (line {}) by {}: mask 0x{:08x} does not include the calling lane {}", name,
                   line, thread_name(thread.linear), mask, thread.linear % kWarpSize));
}

void BlockRunner::fail_disagreement(const GpuThread& thread, uint32_t other) const {
  const WarpPost& mine = posts_[thread.linear];
  const WarpPost& theirs = posts_[other];
  fail(fmt::format(
      "warp {}: lanes disagree: {} calls {} (line {}, mask 0x{:08x}) while {} calls "
      "{} (line {}, mask 0x{:08x})",
      thread.linear / kWarpSize, thread_name(thread.linear), warp_op_name(mine.op), mine.line,
      mine.group, thread_name(other), warp_op_name(theirs.op), theirs.line, theirs.group));
}

void BlockRunner::fail_strict_collective(const GpuThread& thread, const std::string& what) const {
  const WarpPost& mine = posts_[thread.linear];
  // Shuffles fail here in strict mode only; an mma.sync of part of a warp always does.
  fail(fmt::format("{}{} (line {}) in warp {}: {}", spec_.options.strict ? "strict: " : "",
                   warp_op_name(mine.op), mine.line, thread.linear / kWarpSize, what));
}

uint32_t BlockRunner::lanes_present(uint32_t warp) const {
  const uint32_t lanes = std::min<uint32_t>(kWarpSize, count_ - warp * kWarpSize);
  return lanes == kWarpSize ? ~0u : (1u << lanes) - 1;
}

KILN_HOT_PATH uint64_t BlockRunner::warp_collective(GpuThread& thread, int op, uint32_t mask,
                                                    uint64_t value, int operand, int width,
                                                    int line) {
  const uint32_t warp = thread.linear / kWarpSize;
  const uint32_t self_bit = 1u << (thread.linear % kWarpSize);
  // A bad width, or a mask without the calling lane (undefined in CUDA, and there is no
  // sensible group to join): always an error.
  if (width <= 0 || width > kWarpSize || (width & (width - 1)) != 0 || !(mask & self_bit))
    fail_bad_collective(thread, op, mask, width, line);
  // Lanes past the end of a partial last warp do not exist; they never take part.
  const uint32_t group = mask & lanes_present(warp);
  WarpPost& post = posts_[thread.linear];
  post = WarpPost{op, group, value, operand, width, line, 0};
  posted_[warp] |= self_bit;
  if ((posted_[warp] & group) != group) {
    thread.state = GpuThread::State::InWarp;
    yield(thread);  // the last lane to arrive computed our result
    return post.result;
  }
  complete_collective(thread, group);
  return post.result;
}

// The last lane to arrive: every lane of the group has posted.
void BlockRunner::complete_collective(const GpuThread& thread, uint32_t group) {
  const uint32_t warp = thread.linear / kWarpSize;
  const int op = posts_[thread.linear].op;
  WarpPost* lanes = &posts_[warp * kWarpSize];
  // The lanes must agree on what they do.
  for (uint32_t lane = 0; lane < kWarpSize; ++lane) {
    if (!(group >> lane & 1u) || (lanes[lane].op == op && lanes[lane].group == group)) continue;
    fail_disagreement(thread, warp * kWarpSize + lane);
  }
  if (std::string bad = compute_collective(lanes, group, spec_.options.strict); !bad.empty())
    fail_strict_collective(thread, bad);
  posted_[warp] &= ~group;
  for (uint32_t lane = 0; lane < kWarpSize; ++lane) {
    GpuThread& other = threads_[warp * kWarpSize + lane];
    if ((group >> lane & 1u) && other.state == GpuThread::State::InWarp) {
      other.state = GpuThread::State::Runnable;
      ++runnable_;
    }
  }
}

std::string BlockRunner::describe_wait(uint32_t linear) const {
  const GpuThread& thread = threads_[linear];
  const WarpPost& post = posts_[linear];
  switch (thread.state) {
    case GpuThread::State::Exited: return "has exited";
    case GpuThread::State::AtBarrier:
      return fmt::format("waits at __syncthreads (line {})", thread.barrier_line);
    case GpuThread::State::InWarp:
      return fmt::format("waits in {} (line {}, mask 0x{:08x})", warp_op_name(post.op), post.line,
                         post.group);
    case GpuThread::State::Runnable: break;
  }
  return "is runnable";
}

std::string BlockRunner::describe_deadlock() const {
  // A warp collective that cannot complete: name a waiting lane and a lane it waits for.
  for (uint32_t i = 0; i < count_; ++i) {
    if (threads_[i].state != GpuThread::State::InWarp) continue;
    const WarpPost& post = posts_[i];
    const uint32_t warp = i / kWarpSize;
    for (uint32_t lane = 0; lane < kWarpSize; ++lane) {
      const uint32_t other = warp * kWarpSize + lane;
      if (!(post.group >> lane & 1u) || other == i) continue;
      const bool joined = threads_[other].state == GpuThread::State::InWarp &&
                          posts_[other].group == post.group && posts_[other].op == post.op;
      if (joined) continue;
      return fmt::format(
          "deadlock: {} waits in {} (line {}, mask 0x{:08x}) for lane {} "
          "({}), which {}",
          thread_name(i), warp_op_name(post.op), post.line, post.group, lane, thread_name(other),
          describe_wait(other));
    }
  }
  // Otherwise some threads wait at a barrier that exited threads will never reach.
  uint32_t first_exited = 0;
  while (first_exited < count_ && threads_[first_exited].state != GpuThread::State::Exited)
    ++first_exited;
  return fmt::format(
      "deadlock: {} of {} threads wait at {} (line {}), but {} exited without "
      "reaching it (first: {}); every thread of a block must reach each barrier",
      at_barrier_, count_, barrier_name(barrier_op_), barrier_line_, exited_,
      first_exited < count_ ? thread_name(first_exited) : "none");
}

}  // namespace kiln::runtime::host::detail
