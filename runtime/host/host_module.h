// The host backend's core: the generated CUDA translation unit compiled by the host C++
// compiler against kiln's host prelude (runtime/host/kiln_host_prelude.h), loaded with dlopen,
// and its kernels run on the CPU.
//
// Threads of a block run as fibers (Boost.Context) on one OS thread when the kernel uses
// barriers or warp collectives, and as a plain loop otherwise. Blocks run in parallel on
// worker threads; a worker runs one block at a time and fibers never migrate, so
// `static thread_local` in the prelude is exactly one copy per running block.
//
// Debugging aids: KILN_HOST_SCHEDULE (see Schedule), HostOptions::strict and poison_shared,
// and KILN_HOST_KEEP_TEMPS=1 to keep the generated source and .so of each compile.
// A kernel that overflows its fiber stack (HostOptions::stack_bytes) hits a guard page and
// crashes the process (SIGSEGV); it is not reported as an error.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "codegen/program.h"
#include "runtime/compile/kernel_cache.h"

namespace kiln::runtime::distributed {
class Communicator;
}

namespace kiln::runtime::host {

// The order in which the threads of a block run between two barriers (and, with one worker,
// the order of blocks: reverse runs the last block first). Random orders are reproducible from
// the seed alone, whatever the number of workers.
struct Schedule {
  enum class Kind { InOrder, Reverse, Random } kind = Kind::InOrder;
  uint64_t seed = 0;

  // From KILN_HOST_SCHEDULE=order|reverse|random:SEED (unset: in order). A bad value is a
  // kiln::Error naming the variable.
  static Schedule from_environment();
  // Parses "order", "reverse" or "random:SEED" (SEED: a decimal 64-bit number). `origin` names
  // where the text came from for the error ("KILN_HOST_SCHEDULE", "--host-schedule").
  static Schedule parse(std::string_view text, std::string_view origin);
  std::string describe() const;  // "order", "reverse", "random:42"
  friend bool operator==(const Schedule&, const Schedule&) = default;
};

struct HostOptions {
  // Data-parallel training: the ranks the collective kernels (codegen::Kernel::collective)
  // run across; nullptr: one process, which launches them.
  distributed::Communicator* communicator = nullptr;
  Schedule schedule;
  int workers = 0;            // OS threads running blocks; 0: one per core
  bool poison_shared = true;  // fill shared memory with 0xFF (NaN) before each block
  // Before a run below the bounds of a program with kernels of real rows only
  // (codegen/dynamic_rows.h): fill every buffer the kernels write with 0xFF (NaN), so that a
  // real result that read skipped padding shows as NaN instead of passing on stale values.
  bool poison_padding = true;
  // Abort the run (kiln::Error) on a barrier reached from different places in one block, or a
  // shuffle whose source lane is outside the mask or has exited.
  bool strict = false;
  // Stack of each GPU thread's fiber (with a guard page below it). Kernels keep their local
  // arrays there: 256 KB fits a few thousand floats per thread.
  size_t stack_bytes = 256 * 1024;
  // Run the CUDA body of kernels that also have a host-specific one (codegen::Kernel::
  // host_variant), with its barriers, as the GPU would: tests check the two against each
  // other, and the schedules and strict mode above exercise the CUDA code.
  bool cuda_variants = false;
};

// The options the environment asks for, as debugging aids: the schedule (KILN_HOST_SCHEDULE)
// and, with KILN_HOST_CUDA_BODIES=1, cuda_variants (0 or unset: the host bodies). A bad value
// is a kiln::Error naming the variable.
HostOptions host_options_from_environment();

// The text of kiln_host_prelude.h, embedded in the library at build time.
std::string_view host_prelude();
// Version of the prelude's text (its hash): part of every host cache key.
std::string host_prelude_version();

class HostModule {
 public:
  ~HostModule();
  HostModule(HostModule&&) noexcept;
  HostModule& operator=(HostModule&&) noexcept;

  // Compiles `source` with the host C++ compiler (g++, -O2 -fpeel-loops -shared -fPIC, no
  // fast-math, no contraction) through `cache` (nullptr: always compile) and loads it; `name`
  // names the files and errors. A compile error is a kiln::Error holding the compiler's output.
  // `verbose`: say on stderr why the cache missed. Thread-safe.
  static HostModule compile(const std::string& source, const std::string& name,
                            const KernelCache* cache, bool verbose = false);
  // Loads an already compiled shared object (RTLD_NOW | RTLD_LOCAL); a kiln::Error carries
  // dlerror(), or says the file was built for another host ABI version.
  static HostModule load(const std::string& path);

  bool has_kernel(const std::string& kernel) const;
  // Whether the module runs `kernel`'s blocks in one call each (kiln_host_block_<kernel>: the
  // kernels without barriers that codegen emits), rather than one call per GPU thread.
  bool has_block_entry(const std::string& kernel) const;
  // The loaded shared object (a private copy when it came from the cache).
  const std::string& path() const;

  // Runs kernel `kernel` (its entry kiln_host_entry_<kernel>) over `grid` x `block` with
  // `shared_bytes` of dynamic shared memory per block. `args` are the kernel's pointer
  // arguments in order. `uses_barriers` must be true when the kernel calls __syncthreads or a
  // warp collective (see codegen::Kernel). Throws kiln::Error naming the kernel and block on a
  // strict-mode violation, a deadlock (a barrier or collective some threads can never reach),
  // shared memory written out of bounds, or a barrier in a kernel launched without
  // uses_barriers; an exception the kernel itself throws is rethrown here. After an error,
  // blocks not yet started are not run. Several launches may run at once (any threads).
  // `lone_thread`: the kernel runs its host-specific body (codegen::Kernel::host_variant), in
  // which thread 0 computes the whole block and the other threads return at once; only
  // thread 0 is run, as a plain call (the body has no barriers, whatever uses_barriers says).
  void launch(const std::string& kernel, void* const* args, codegen::Dim3 grid,
              codegen::Dim3 block, uint32_t shared_bytes, bool uses_barriers,
              const HostOptions& options, bool lone_thread = false) const;

 private:
  struct Impl;
  explicit HostModule(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::runtime::host
