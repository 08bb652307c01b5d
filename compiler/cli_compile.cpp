// `kiln compile MODEL -o model.kiln`: compile a model ahead of time into a package — kernel
// table, memory plan, CUDA source, PTX and cubins, weights and a manifest — that `kiln run`,
// `kiln train` and `kiln inspect` take in place of the model (runtime/package/package.h).
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "codegen/emit.h"
#include "compiler/cli.h"
#include "compiler/cli_common.h"
#include "compiler/model_loader.h"
#include "compiler/output_file.h"
#include "compiler/parameters.h"
#include "compiler/pipeline_flags.h"
#include "compiler/trainer.h"
#include "ir/diagnostic.h"
#include "runtime/package/package.h"

namespace kiln::cli {
namespace {

struct Options {
  std::string model;
  std::string output;
  std::vector<std::string> archs = {"sm_80", "sm_90"};
  bool no_ptx = false;
  bool timings = false;
  CacheFlags cache;
  LibraryFlag library;
  PipelineFlags pipeline;
  // --train
  bool train = false;
  int64_t batch_size = 32;
  std::string optimizer = "adam";
  double lr = 1e-3;
  double momentum = 0.0;
  double weight_decay = -1;
  uint64_t seed = 0;
};

std::string read_model_bytes(const std::string& path) {
  if (path == "-")
    throw Error("-", "kiln compile reads the model from a file (the package records its hash)");
  std::ifstream file(path, std::ios::binary);
  if (!file) throw Error(path, "cannot open the model: " + std::string(std::strerror(errno)));
  std::ostringstream bytes;
  bytes << file.rdbuf();
  return bytes.str();
}

runtime::PackageProgram compile_program(const Options& options, std::string role,
                                        codegen::Program program, PhaseTimer& timer) {
  runtime::CudaBinary binary = timer.time("nvrtc " + role, [&] {
    return options.cache.compile(program.source, program.graph_name + ".cu", options.archs);
  });
  if (options.no_ptx) {
    binary.ptx.clear();
    binary.ptx_arch.clear();
  }
  return {std::move(role), std::move(program), std::move(binary)};
}

nlohmann::ordered_json decisions_json(const std::vector<std::pair<std::string, std::string>>& decisions) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const auto& [pass, message] : decisions) list.push_back({{"pass", pass}, {"message", message}});
  return list;
}

int run(const Options& options, const CLI::App& command) {
  PhaseTimer timer;
  if (!options.train)
    for (const char* flag : {"--batch-size", "--optimizer", "--lr", "--momentum", "--weight-decay", "--seed"})
      if (command.count(flag) > 0) throw Error(flag, "applies to training packages: add --train");
  if (runtime::is_package_file(options.model))
    throw Error(options.model, "this is already a package; kiln compile takes a model (.json or IR)");
  const std::string model_bytes = read_model_bytes(options.model);

  runtime::Package package;
  runtime::PackageManifest& m = package.manifest;
  m.kiln_version = KILN_VERSION;
  m.model = std::filesystem::path(options.model).filename().string();
  m.model_hash = runtime::hash_text(model_bytes);
  m.archs = options.archs;
  m.options = {{"library", options.library.text}, {"ptx", !options.no_ptx}};
  nlohmann::ordered_json report = nlohmann::ordered_json::object();

  if (options.train) {
    if (options.pipeline.given(command))
      throw Error("-O/--passes", "a training package always runs the training pipeline "
                                 "(docs/training.md); leave these flags out with --train");
    const std::string optimizer =
        compiler::optimizer_spec(options.optimizer, options.lr, options.momentum, options.weight_decay);
    compiler::TrainingPrograms programs = timer.time("passes", [&] {
      return compiler::build_training_programs(options.model, options.batch_size, options.seed,
                                               optimizer, options.library.selection());
    });
    m.pipeline = passes::training_pipeline(optimizer);
    m.options["train"] = compiler::training_options_json(programs);
    package.programs.push_back(compile_program(options, std::string(runtime::kInferenceProgram),
                                               std::move(programs.eval), timer));
    package.programs.push_back(compile_program(options, std::string(runtime::kTrainStepProgram),
                                               std::move(programs.step), timer));
    package.weights = std::move(programs.weights);
  } else {
    ir::Graph graph = timer.time("parse", [&] { return compiler::load_model(options.model); });
    timer.time("weights", [&] { compiler::load_parameter_data(graph); });
    std::vector<std::pair<std::string, std::string>> decisions;
    timer.time("passes", [&] { options.pipeline.run(graph, &decisions); });
    report["fusion_decisions"] = decisions_json(decisions);
    m.pipeline = options.pipeline.pass_names();
    m.options["opt_level"] = options.pipeline.opt_level;
    codegen::Program program = timer.time("codegen", [&] {
      return codegen::emit_program(graph, options.library.selection());
    });
    package.programs.push_back(compile_program(options, std::string(runtime::kInferenceProgram),
                                               std::move(program), timer));
    for (const ir::Value* param : graph.parameters) package.weights.emplace(param->name, *param->data);
  }
  m.report = std::move(report);

  const std::string bytes = timer.time("write", [&] {
    std::string serialized = runtime::serialize_package(package);
    compiler::write_file_atomically(options.output, serialized);
    return serialized;
  });

  int64_t weight_bytes = 0;
  for (const auto& [name, tensor] : package.weights) weight_bytes += static_cast<int64_t>(tensor.byte_size());
  std::string programs;
  for (const runtime::PackageProgram& p : package.programs)
    programs += fmt::format("{}{} {} kernels", programs.empty() ? "" : ", ", p.role, p.program.kernels.size());
  std::cout << fmt::format("wrote {}: {} bytes ({}; {} weights, {} bytes; cubins {}{})\n", options.output,
                           bytes.size(), programs, package.weights.size(), weight_bytes,
                           fmt::join(options.archs, ", "),
                           options.no_ptx ? ", no PTX" : ", PTX " + package.programs[0].binary.ptx_arch);
  if (options.timings) timer.print();
  return kExitOk;
}

}  // namespace

Command add_compile_command(CLI::App& app) {
  auto options = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "compile", "Compile a model ahead of time into a package (.kiln) that run, train and "
                 "inspect take; loading it on the GPU needs no compiler");
  cmd->add_option("MODEL", options->model, "model file: .json or textual IR")->required();
  cmd->add_option("-o,--output", options->output, "the package to write (model.kiln)")->required();
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
  cmd->add_option("--seed", options->seed, "with --train: the dropout streams' seed")->capture_default_str();
  cmd->add_flag("--timings", options->timings, "print the time of each phase on stderr");
  options->cache.add_to(*cmd);
  options->library.add_to(*cmd);
  options->pipeline.add_to(*cmd, 1);
  return {cmd, [options, cmd]() { return run(*options, *cmd); }};
}

}  // namespace kiln::cli
