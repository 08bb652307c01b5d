#include "compiler/cli_common.h"

#include "codegen/library_dispatch.h"
#include "compiler/npy.h"
#include "ir/diagnostic.h"

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

std::map<std::string, ir::Tensor> read_input_flags(const std::vector<std::string>& specs) {
  std::map<std::string, ir::Tensor> tensors;
  for (const std::string& spec : specs) {
    const size_t equals = spec.find('=');
    if (equals == std::string::npos || equals == 0 || equals + 1 == spec.size())
      throw Error("--input " + spec, "expected NAME=FILE.npy");
    const std::string name = spec.substr(0, equals);
    if (tensors.count(name)) throw Error("--input " + spec, "input '" + name + "' is given twice");
    tensors.emplace(name, compiler::read_npy(spec.substr(equals + 1)));
  }
  return tensors;
}

void CacheFlags::add_to(CLI::App& command) {
  command.add_flag("--no-cache", no_cache, "compile from scratch; neither read nor write the kernel cache");
  command.add_flag("-v,--verbose", verbose, "say why kernel cache lookups missed");
}

void LibraryFlag::add_to(CLI::App& command) {
  command.add_option("--library", text,
                     "vendor libraries the CUDA backend may use for fused conv/dense/matmul "
                     "kernels: auto, none, or a list of cublas,cudnn (the host backend always "
                     "runs the generated kernels)")
      ->capture_default_str();
}

codegen::LibrarySelection LibraryFlag::selection() const {
  return codegen::parse_library_flag(text);
}

std::unique_ptr<runtime::KernelCache> CacheFlags::open() const {
  if (no_cache) return nullptr;
  return std::make_unique<runtime::KernelCache>(runtime::KernelCache::default_directory());
}

runtime::CudaBinary CacheFlags::compile(const std::string& source, const std::string& program_name,
                                        const std::vector<std::string>& archs) const {
  std::unique_ptr<runtime::KernelCache> cache = open();
  runtime::NvrtcOptions nvrtc;
  nvrtc.archs = archs;
  nvrtc.cache = cache.get();
  nvrtc.verbose = verbose;
  return runtime::compile_with_nvrtc(source, program_name, nvrtc);
}

void add_arch_option(CLI::App& command, std::vector<std::string>& archs) {
  command.add_option("--arch", archs, "GPU architectures (sm_80, sm_90), comma separated")
      ->delimiter(',')
      ->check(CLI::IsMember({"sm_80", "sm_86", "sm_89", "sm_90"}))
      ->capture_default_str();
}

}  // namespace kiln::cli
