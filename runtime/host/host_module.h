// The host backend's core: the generated CUDA translation unit compiled by the host C++
// compiler against kiln's host prelude (runtime/host/kiln_host_prelude.h), loaded with dlopen,
// and its kernels run on the CPU.
//
// Threads of a block run as fibers (Boost.Context) on one OS thread when the kernel uses
// barriers or warp collectives, and as a plain loop otherwise. Blocks run in parallel on
// worker threads; a worker runs one block at a time and fibers never migrate, so
// `static thread_local` in the prelude is exactly one copy per running block.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "codegen/program.h"
#include "runtime/compile/kernel_cache.h"

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
  Schedule schedule;
  int workers = 0;            // OS threads running blocks; 0: one per core
  bool poison_shared = true;  // fill shared memory with 0xFF (NaN) before each block
  // Abort the run (kiln::Error) on a barrier reached from different places in one block, or a
  // shuffle whose source lane is outside the mask or has exited.
  bool strict = false;
  // Stack of each GPU thread's fiber (with a guard page below it). Kernels keep their local
  // arrays there: 256 KB fits a few thousand floats per thread.
  size_t stack_bytes = 256 * 1024;
};

// The text of kiln_host_prelude.h, embedded in the library at build time.
std::string_view host_prelude();
// Version of the prelude's text (its hash): part of every host cache key.
std::string host_prelude_version();

class HostModule {
 public:
  ~HostModule();
  HostModule(HostModule&&) noexcept;
  HostModule& operator=(HostModule&&) noexcept;

  // Compiles `source` with the host C++ compiler (g++, -O2 -shared -fPIC) through `cache`
  // (nullptr: always compile) and loads it. A compile error is a kiln::Error holding the
  // compiler's output. `verbose`: say on stderr why the cache missed.
  static HostModule compile(const std::string& source, const std::string& name,
                            const KernelCache* cache, bool verbose = false);
  // Loads an already compiled shared object.
  static HostModule load(const std::string& path);

  bool has_kernel(const std::string& kernel) const;
  // The loaded shared object (a private copy when it came from the cache).
  const std::string& path() const;

  // Runs kernel `kernel` (its entry kiln_host_entry_<kernel>) over `grid` x `block` with
  // `shared_bytes` of dynamic shared memory per block. `args` are the kernel's pointer
  // arguments in order. Throws kiln::Error on a strict-mode violation or a deadlock
  // (a collective some threads can never reach), naming the kernel and block.
  void launch(const std::string& kernel, void* const* args, codegen::Dim3 grid,
              codegen::Dim3 block, uint32_t shared_bytes, bool uses_barriers,
              const HostOptions& options) const;

 private:
  struct Impl;
  explicit HostModule(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kiln::runtime::host
