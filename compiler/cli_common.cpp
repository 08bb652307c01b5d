#include "compiler/cli_common.h"

#include "codegen/library_dispatch.h"

#include <fmt/format.h>
#include <cmath>
#include <string>
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

namespace {
CLI::Validator number_check(const char* name, const char* rule, bool (*ok)(double)) {
  return CLI::Validator(
      [rule, ok](std::string& text) -> std::string {
        double value = 0;
        size_t used = 0;
        try {
          value = std::stod(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != text.size() || !ok(value)) return std::string("must be ") + rule + ", got " + text;
        return {};
      },
      name);
}
}  // namespace

CLI::Validator at_least_one() {
  return number_check("INT>=1", ">= 1", [](double v) { return v >= 1; });
}
CLI::Validator positive() {
  return number_check("NUMBER>0", "> 0", [](double v) { return v > 0 && std::isfinite(v); });
}
CLI::Validator non_negative() {
  return number_check("NUMBER>=0", ">= 0", [](double v) { return v >= 0 && std::isfinite(v); });
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
