// `kiln emit FILE --emit=cuda|ptx|kernels`: what codegen makes of a model.
#include <iostream>

#include "codegen/emit.h"
#include "compiler/cli.h"
#include "compiler/cli_common.h"
#include "compiler/kernel_report.h"
#include "compiler/model_loader.h"
#include "compiler/pipeline_flags.h"
#include "compiler/output_file.h"
#include "ir/diagnostic.h"
#include "runtime/compile/nvrtc.h"

namespace kiln::cli {

namespace emit_command {

struct Options {
  std::string model;
  std::string emit = "cuda";
  std::vector<std::string> archs = {"sm_80", "sm_90"};
  std::string output;
  bool timings = false;
  CacheFlags cache;
  LibraryFlag library;
  PrecisionFlag precision;
  PipelineFlags pipeline;
  InputShapeFlag input_shapes;
};

int run(const Options& options) {
  PhaseTimer timer;
  ir::Graph graph = timer.time("parse", [&] { return compiler::load_model(options.model, options.input_shapes.options(options.model)); });
  timer.time("passes", [&] { options.pipeline.run(graph, nullptr, options.library.selection(), options.precision.value()); });
  const codegen::Program program = timer.time("codegen", [&] {
    return codegen::emit_program(graph, options.library.selection(), options.precision.value());
  });

  std::string text;
  if (options.emit == "cuda") {
    text = program.source;
  } else {
    const runtime::CudaBinary binary = timer.time("compile", [&] {
      return options.cache.compile(program.source, graph.name + ".cu", options.archs);
    });
    text = options.emit == "ptx" ? binary.ptx
                                 : compiler::format_kernel_table(program, binary, options.archs);
  }
  if (options.output.empty() || options.output == "-") {
    std::cout << text;
  } else {
    compiler::write_file_atomically(options.output, text);
  }
  if (options.timings) timer.print();
  return kExitOk;
}

}  // namespace emit_command

Command add_emit_command(CLI::App& app) {
  using namespace emit_command;
  auto options = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("emit", "Generate CUDA C++ for a model, its PTX, or its kernel table");
  cmd->add_option("FILE", options->model, "model file: .json, .onnx, Keras (.json, .h5), textual IR, or - for stdin")->required();
  cmd->add_option("--emit", options->emit,
                  "cuda: the translation unit; ptx: NVRTC's PTX for the lowest --arch; "
                  "kernels: the kernel table with registers, spills, shared memory and occupancy")
      ->check(CLI::IsMember({"cuda", "ptx", "kernels"}))
      ->capture_default_str();
  add_arch_option(*cmd, options->archs);
  cmd->add_option("-o,--output", options->output, "write to this file instead of stdout");
  cmd->add_flag("--timings", options->timings, "print the time of each phase on stderr");
  options->cache.add_to(*cmd);
  options->library.add_to(*cmd);
  options->precision.add_to(*cmd);
  options->pipeline.add_to(*cmd, 1);
  options->input_shapes.add_to(*cmd);
  return {cmd, [options]() { return run(*options); }};
}

}  // namespace kiln::cli
