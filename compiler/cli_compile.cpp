// `kiln compile MODEL -o model.kiln`: compile a model ahead of time into a package — kernel
// table, memory plan, CUDA source, PTX and cubins, weights and a manifest — that `kiln run`,
// `kiln train` and `kiln inspect` take in place of the model (runtime/package/package.h).
#include <fmt/format.h>

#include <filesystem>
#include <iostream>

#include "compiler/cli.h"
#include "compiler/cli_common.h"
#include "compiler/output_file.h"
#include "compiler/pipeline_flags.h"
#include "compiler/cuda_project.h"
#include "compiler/exe_builder.h"
#include "compiler/package_builder.h"
#include "compiler/trainer.h"
#include "ir/diagnostic.h"
#include "runtime/package/package.h"

namespace kiln::cli {
namespace compile_command {

struct Options {
  std::string model;
  std::string output;
  std::vector<std::string> archs = {"sm_80", "sm_90"};
  bool no_ptx = false;
  bool timings = false;
  std::string emit = "package";
  CacheFlags cache;
  LibraryFlag library;
  PrecisionFlag precision;
  WeightsDtypeFlag weights_dtype;
  PipelineFlags pipeline;
  InputShapeFlag input_shapes;
  // --train
  bool train = false;
  int64_t batch_size = 32;
  std::string optimizer = "adam";
  double lr = 1e-3;
  double momentum = 0.0;
  double weight_decay = -1;
  compiler::StepScalarFlags step_scalars;
  uint64_t seed = 0;
};

int run(const Options& options, const CLI::App& command) {
  PhaseTimer timer;
  if (!options.train)
    for (const char* flag : {"--batch-size", "--optimizer", "--lr", "--momentum", "--weight-decay", "--seed"})
      if (command.count(flag) > 0) throw Error(flag, "applies to training packages: add --train");
  if (!options.train)
    for (const char* flag : compiler::StepScalarFlags::kFlags)
      if (command.count(flag) > 0) throw Error(flag, "applies to training packages: add --train");
  compiler::PackageRequest request;
  request.model = options.model;
  request.import = options.input_shapes.options(options.model);
  request.archs = options.archs;
  request.ptx = !options.no_ptx;
  request.library = options.library.text;
  request.precision = options.precision.value();
  request.weights_dtype = options.weights_dtype.value();
  options.library.selection();  // a bad --library fails here, naming the flag
  if (options.train) {
    if (options.pipeline.given(command))
      throw Error("-O/--passes", "a training package always runs the training pipeline "
                                 "(docs/training.md); leave these flags out with --train");
    request.train = compiler::PackageRequest::Training{
        options.batch_size,
        compiler::optimizer_spec(options.optimizer, options.lr, options.momentum,
                                 options.weight_decay, options.step_scalars,
                                 options.precision.value()),
        options.seed};
  }
  options.pipeline.apply_to(request, options.library.selection(), options.precision.value());
  std::unique_ptr<runtime::KernelCache> cache = options.cache.open();
  request.cache = cache.get();
  request.verbose = options.cache.verbose;
  // Model packages report parse, weights, passes, codegen and nvrtc; training packages their
  // whole build as one phase.
  if (!options.train)
    request.record_phase = [&timer](const std::string& phase, double ms) { timer.add(phase, ms); };
  const compiler::BuiltPackage built = options.train
      ? timer.time("compile", [&] { return compiler::build_package(request); })
      : compiler::build_package(request);
  const runtime::Package& package = built.package;

  if (options.emit == "cuda-project") {
    compiler::write_cuda_project(package, options.output);
    std::cout << fmt::format("wrote {}/: model.cu, main.cu, weights.bin, CMakeLists.txt for graph @{}; "
                             "build with: cmake -S {} -B {}/build && cmake --build {}/build\n",
                             options.output, package.programs[0].program.graph_name, options.output,
                             options.output, options.output);
    return kExitOk;
  }
  if (options.emit == "exe") {
    if (!package.find(runtime::kInferenceProgram)) throw Error(options.output, "no inference program");
    const std::string bytes = runtime::serialize_package(package);
    timer.time("link", [&] {
      compiler::build_standalone_executable(package, bytes, options.output, options.cache.verbose);
    });
    std::cout << fmt::format("wrote {}: a standalone program for graph @{} ({} bytes of package "
                             "embedded); run it with --help\n",
                             options.output, package.programs[0].program.graph_name, bytes.size());
    if (options.timings) timer.print();
    return kExitOk;
  }
  // The package cache's entry is this package, byte for byte: copied, not serialized again.
  const size_t written_bytes = timer.time("write", [&] {
    if (!built.cache_entry.empty()) {
      compiler::copy_file_atomically(built.cache_entry, options.output);
      return static_cast<size_t>(std::filesystem::file_size(built.cache_entry));
    }
    const std::string serialized = runtime::serialize_package(package);
    compiler::write_file_atomically(options.output, serialized);
    return serialized.size();
  });

  // As stored: f32 weights in their --weights-dtype, pruned ones as a bitmask of their nonzeros.
  const runtime::StoredWeights stored = runtime::stored_weights(package);
  std::string programs;
  for (const runtime::PackageProgram& p : package.programs)
    programs += fmt::format("{}{} {} kernels", programs.empty() ? "" : ", ", p.role, p.program.kernels.size());
  std::cout << fmt::format("wrote {}: {} bytes ({}; {} weights{}, {} bytes{}; cubins {}{})\n", options.output,
                           written_bytes, programs, package.weights.size(),
                           package.weights_dtype == ir::DType::F32
                               ? std::string()
                               : fmt::format(" in {}", ir::dtype_name(package.weights_dtype)),
                           stored.bytes,
                           stored.sparse == 0 ? std::string()
                                              : fmt::format(" ({} stored sparse, {} bytes dense)",
                                                            stored.sparse, stored.dense_bytes),
                           fmt::join(options.archs, ", "),
                           options.no_ptx ? ", no PTX" : ", PTX " + package.programs[0].binary.ptx_arch);
  if (options.timings) timer.print();
  return kExitOk;
}

}  // namespace compile_command

Command add_compile_command(CLI::App& app) {
  using namespace compile_command;
  auto options = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "compile", "Compile a model ahead of time into a package (.kiln) that run, train and "
                 "inspect take; loading it on the GPU needs no compiler");
  cmd->add_option("MODEL", options->model, "model file: .json, .onnx, Keras (.json, .h5) or textual IR")->required();
  cmd->add_option("-o,--output", options->output,
                  "the package to write (model.kiln), or the program with --emit=exe")
      ->required();
  cmd->add_option("--emit", options->emit,
                  "package: a .kiln file for kiln run/train/inspect and the C++ API; exe: a "
                  "standalone program (generated main + libkiln.a + the package embedded); cuda-project: "
                  "a directory (-o) with the kernels, a main.cu and a CMakeLists.txt for nvcc")
      ->check(CLI::IsMember({"package", "exe", "cuda-project"}))
      ->capture_default_str();
  add_arch_option(*cmd, options->archs);
  cmd->add_flag("--no-ptx", options->no_ptx,
                "leave out the PTX: smaller, but the package then runs only on the --arch GPUs");
  cmd->add_flag("--train", options->train,
                "also compile the training step (forward, backward and optimizer) for `kiln train`");
  cmd->add_option("--batch-size", options->batch_size, "with --train: samples per step")
      ->capture_default_str();
  cmd->add_option("--optimizer", options->optimizer, "with --train: sgd, adam or adamw")
      ->check(CLI::IsMember({"sgd", "adam", "adamw"}))
      ->capture_default_str();
  cmd->add_option("--lr", options->lr, "with --train: learning rate")->capture_default_str();
  cmd->add_option("--momentum", options->momentum, "with --train: sgd momentum")->capture_default_str();
  cmd->add_option("--weight-decay", options->weight_decay,
                  "with --train: weight decay (default: 0 for sgd and adam, 0.01 for adamw)");
  add_step_scalar_flags(*cmd, options->step_scalars, "with --train: ");
  cmd->add_option("--seed", options->seed, "with --train: the dropout streams' seed")->capture_default_str();
  cmd->add_flag("--timings", options->timings, "print the time of each phase on stderr");
  options->cache.add_to(*cmd);
  options->library.add_to(*cmd);
  options->precision.add_to(*cmd);
  options->weights_dtype.add_to(*cmd, "in the package");
  options->pipeline.add_to(*cmd, 1);
  options->input_shapes.add_to(*cmd);
  return {cmd, [options, cmd]() { return run(*options, *cmd); }};
}

}  // namespace kiln::cli
