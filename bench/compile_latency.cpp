// Compile-latency benchmark: parse → codegen → NVRTC (PTX + sm_80 + sm_90 cubins) for each
// model given, cold (empty kernel cache) and warm (cache hit), plus the host compiler.
// A program, not a test: it prints figures and asserts nothing.
//
//   build/kiln_compile_latency [-O1] examples/*.json
//
// Without -O1 each graph is compiled as written (one kernel per node); with it, after the
// default inference pipeline (fusion included), timing the passes too.
#include <chrono>
#include <filesystem>
#include <fmt/format.h>
#include <iostream>
#include <thread>

#include "codegen/emit.h"
#include "compiler/model_loader.h"
#include "compiler/parameters.h"
#include "ir/diagnostic.h"
#include "passes/pass_manager.h"
#include "runtime/compile/nvrtc.h"
#include "runtime/host/host_module.h"

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

struct Figures {
  double parse = 0, passes = 0, codegen = 0, nvrtc_cold = 0, nvrtc_warm = 0, host_cold = 0, host_warm = 0;
  size_t kernels = 0, source_bytes = 0;
};

Figures measure(const std::string& path, const std::string& cache_dir, int opt_level) {
  Figures f;
  auto start = Clock::now();
  kiln::ir::Graph graph = kiln::compiler::load_model(path);
  f.parse = ms_since(start);
  if (opt_level > 0) {
    start = Clock::now();
    kiln::compiler::load_parameter_data(graph);  // folding needs the weights
    kiln::passes::PassManager manager(kiln::passes::PassManagerOptions{}, std::cerr);
    manager.add_all(kiln::passes::inference_pipeline(opt_level));
    manager.run(graph);
    f.passes = ms_since(start);
  }
  start = Clock::now();
  const kiln::codegen::Program program = kiln::codegen::emit_program(graph);
  f.codegen = ms_since(start);
  f.kernels = program.kernels.size();
  f.source_bytes = program.source.size();

  std::filesystem::remove_all(cache_dir);
  kiln::runtime::KernelCache cache(cache_dir);
  kiln::runtime::NvrtcOptions options;
  options.cache = &cache;
  start = Clock::now();
  kiln::runtime::compile_with_nvrtc(program.source, graph.name + ".cu", options);
  f.nvrtc_cold = ms_since(start);
  start = Clock::now();
  const auto warm = kiln::runtime::compile_with_nvrtc(program.source, graph.name + ".cu", options);
  f.nvrtc_warm = ms_since(start);
  if (!warm.from_cache) std::cerr << "warning: the warm NVRTC compile did not hit the cache\n";

  start = Clock::now();
  kiln::runtime::host::HostModule::compile(program.source, graph.name, &cache);
  f.host_cold = ms_since(start);
  start = Clock::now();
  kiln::runtime::host::HostModule::compile(program.source, graph.name, &cache);
  f.host_warm = ms_since(start);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> models;
  int opt_level = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "-O1") {
      opt_level = 1;
      continue;
    }
    models.push_back(argv[i]);
  }
  if (models.empty()) {
    std::cerr << "usage: kiln_compile_latency [-O1] MODEL.json...\n";
    return 2;
  }
  const std::string cache_dir =
      (std::filesystem::temp_directory_path() / ("kiln-bench-cache-" + std::to_string(::getpid()))).string();
  std::cout << fmt::format("machine: {} hardware threads; {}\n", std::thread::hardware_concurrency(),
                           kiln::runtime::nvrtc_version());
  std::cout << fmt::format("pipeline: -O{}\n", opt_level);
  std::cout << fmt::format("{:<16} {:>7} {:>9} {:>9} {:>9} {:>9} {:>12} {:>11} {:>11} {:>10}\n",
                           "model", "kernels", "src KiB", "parse ms", "passes", "codegen",
                           "nvrtc cold", "nvrtc warm", "host cold", "host warm");
  int status = 0;
  for (const std::string& model : models) {
    try {
      const Figures f = measure(model, cache_dir, opt_level);
      std::cout << fmt::format("{:<16} {:>7} {:>9.1f} {:>9.1f} {:>9.1f} {:>9.1f} {:>12.0f} {:>11.1f} {:>11.0f} {:>10.1f}\n",
                               std::filesystem::path(model).stem().string(), f.kernels,
                               f.source_bytes / 1024.0, f.parse, f.passes, f.codegen, f.nvrtc_cold,
                               f.nvrtc_warm, f.host_cold, f.host_warm);
    } catch (const std::exception& error) {
      std::cerr << model << ": " << error.what() << "\n";
      status = 1;
    }
  }
  std::filesystem::remove_all(cache_dir);
  return status;
}
