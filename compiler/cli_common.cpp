#include "compiler/cli_common.h"

#include <fmt/format.h>
#include <iostream>

namespace kiln::cli {

void PhaseTimer::record(const std::string& phase, std::chrono::steady_clock::time_point start) {
  const std::chrono::duration<double, std::milli> elapsed = std::chrono::steady_clock::now() - start;
  phases_.push_back({phase, elapsed.count()});
}

void PhaseTimer::print() const {
  double total = 0;
  for (const auto& [phase, ms] : phases_) {
    std::cerr << fmt::format("  {:<10} {:>10.2f} ms\n", phase, ms);
    total += ms;
  }
  std::cerr << fmt::format("  {:<10} {:>10.2f} ms\n", "total", total);
}

void CacheFlags::add_to(CLI::App& command) {
  command.add_flag("--no-cache", no_cache, "compile from scratch; neither read nor write the kernel cache");
  command.add_flag("-v,--verbose", verbose, "say why kernel cache lookups missed");
}

std::unique_ptr<runtime::KernelCache> CacheFlags::open() const {
  if (no_cache) return nullptr;
  return std::make_unique<runtime::KernelCache>(runtime::KernelCache::default_directory());
}

}  // namespace kiln::cli
