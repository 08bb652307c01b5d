// `kiln inspect FILE`: what the compiler made of a model, kernel by kernel — source nodes,
// launch, modeled FLOPs and bytes, ptxas figures per arch, a roofline time — with totals before
// and after fusion and the memory plan. The same pipeline, codegen and NVRTC step as
// `kiln emit`, so what it reports is what emit and run build. docs/inspect.md explains the
// columns and the JSON schema.
#include <iostream>

#include "codegen/emit.h"
#include "compiler/cli.h"
#include "compiler/cli_common.h"
#include "compiler/inspect_report.h"
#include "compiler/model_loader.h"
#include "compiler/output_file.h"
#include "compiler/parameters.h"
#include "compiler/pipeline_flags.h"
#include "ir/diagnostic.h"
#include "runtime/package/package.h"

namespace kiln::cli {

namespace inspect_command {

struct Options {
  std::string model;
  std::string format = "text";
  std::vector<std::string> archs = {"sm_80", "sm_90"};
  std::string dot;
  std::string html;
  std::string program;  // of a package: inference or train_step
  CacheFlags cache;
  LibraryFlag library;
  PrecisionFlag precision;
  PipelineFlags pipeline;
  InputShapeFlag input_shapes;
};

void print(const Options& options, const compiler::Inspection& inspection,
           const std::vector<std::pair<std::string, std::string>>& decisions) {
  // The files first: when one cannot be written, the command fails before printing.
  if (!options.html.empty())
    compiler::write_file_atomically(options.html, compiler::format_inspection_html(inspection, decisions));
  if (!options.dot.empty())
    compiler::write_file_atomically(options.dot, compiler::format_kernel_graph_dot(inspection.program));
  std::cout << (options.format == "json" ? compiler::format_inspection_json(inspection)
                                         : compiler::format_inspection_text(inspection));
}

// A package: the report from the tables it carries, nothing recompiled.
int inspect_package(const Options& options, const CLI::App& command) {
  if (options.pipeline.given(command) || command.count("--arch") > 0 ||
      command.count("--precision") > 0)
    throw Error("-O/--passes/--arch/--precision", "a package is already compiled; pass the model "
                                                  "to choose passes, archs or precision");
  const runtime::Package package = runtime::read_package(options.model);
  std::string role = options.program;
  if (role.empty()) role = package.find(runtime::kTrainStepProgram) ? runtime::kTrainStepProgram
                                                                    : runtime::kInferenceProgram;
  const runtime::PackageProgram* program = package.find(role);
  if (!program) throw Error("--program", "the package has no program '" + role + "'");
  // The fusion decisions kiln compile recorded for this program (report.fusion_decisions.<role>).
  std::vector<std::pair<std::string, std::string>> decisions;
  const auto& report = package.manifest.report;
  const auto recorded = report.is_object() && report.contains("fusion_decisions") &&
                                report["fusion_decisions"].is_object()
                            ? report["fusion_decisions"].value(role, nlohmann::ordered_json::array())
                            : nlohmann::ordered_json::array();
  if (recorded.is_array())
    for (const auto& d : recorded)
      if (d.is_object() && d.contains("pass") && d.contains("message") && d["pass"].is_string() &&
          d["message"].is_string())
        decisions.emplace_back(d["pass"].get<std::string>(), d["message"].get<std::string>());
  print(options, compiler::package_inspection(package, *program), decisions);
  return kExitOk;
}

int run(const Options& options, const CLI::App& command) {
  if (runtime::is_package_file(options.model)) return inspect_package(options, command);
  if (!options.program.empty())
    throw Error("--program", "chooses a program of a package; this is a model");
  ir::Graph graph = compiler::load_model(options.model, options.input_shapes.options(options.model));
  // Weights from files (a checkpoint, ONNX initializers) are read so that 2:4-pruned layers can
  // be marked; random initializers stay unmaterialized (they are dense).
  compiler::load_file_parameter_data(graph);
  std::vector<std::pair<std::string, std::string>> decisions;
  options.pipeline.run(graph, &decisions, options.library.selection(), options.precision.value());
  const codegen::Program program =
      codegen::emit_program(graph, options.library.selection(), options.precision.value());
  const runtime::CudaBinary binary = options.cache.compile(program.source, graph.name + ".cu", options.archs);
  compiler::Inspection inspection{program, binary, options.archs,
                                  options.pipeline.pass_names(options.library.selection(), options.precision.value()), {}};
  for (const ir::Value* parameter : graph.parameters)
    if (parameter->data) inspection.weights.emplace(parameter->name, parameter->data.get());
  print(options, inspection, decisions);
  return kExitOk;
}
}  // namespace inspect_command

Command add_inspect_command(CLI::App& app) {
  using namespace inspect_command;
  auto options = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "inspect", "Per kernel: source nodes, launch, modeled FLOPs and bytes, registers, occupancy "
                 "and a roofline time; totals before and after fusion; the memory plan");
  cmd->add_option("FILE", options->model,
                  "model file (.json, .onnx, Keras (.json, .h5), textual IR, or - for stdin), or a package from kiln compile")
      ->required();
  cmd->add_option("--program", options->program,
                  "of a package: inference or train_step (default: train_step when there is one)")
      ->check(CLI::IsMember({"inference", "train_step"}));
  cmd->add_option("--format", options->format, "text for people, json for scripts (docs/inspect.md)")
      ->check(CLI::IsMember({"text", "json"}))
      ->capture_default_str();
  cmd->add_option("--dot", options->dot, "also write the fused kernels as a Graphviz graph to this file");
  cmd->add_option("--html", options->html,
                  "also write the report as one self-contained HTML page: the kernel graph, the "
                  "kernel table, the memory plan as a timeline, the fusion refusals (needs Graphviz)");
  add_arch_option(*cmd, options->archs);
  options->cache.add_to(*cmd);
  options->library.add_to(*cmd);
  options->precision.add_to(*cmd);
  options->pipeline.add_to(*cmd, 1);
  options->input_shapes.add_to(*cmd);
  return {cmd, [options, cmd]() { return run(*options, *cmd); }};
}

}  // namespace kiln::cli
