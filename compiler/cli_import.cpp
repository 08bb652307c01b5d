// `kiln import MODEL.onnx -o model.json` (or a Keras model): write an imported model as kiln JSON with its weights
// in a safetensors file beside it, for people to read and edit (docs/import.md).
#include <filesystem>
#include <fmt/format.h>
#include <iostream>

#include "compiler/cli.h"
#include "compiler/cli_common.h"
#include "compiler/json_writer.h"
#include "compiler/model_loader.h"
#include "ir/diagnostic.h"

namespace kiln::cli {

namespace import_command {

struct Options {
  std::string model;
  std::string output;
  std::string weights;  // default: the output with .safetensors in place of .json
  InputShapeFlag input_shapes;
};

int run(const Options& options) {
  if (options.model != "-" && !compiler::is_imported_model(options.model))
    throw Error(options.model, "is not an ONNX or Keras model (kiln import reads .onnx files, Keras "
                               "model JSON, TensorFlow.js model.json and Keras .h5; kiln JSON and textual IR "
                               "need no import)");
  const ir::Graph graph = compiler::load_model(options.model, options.input_shapes.options(options.model));
  std::filesystem::path weights = options.weights;
  if (weights.empty()) weights = std::filesystem::path(options.output).replace_extension(".safetensors");
  compiler::write_json_model(graph, options.output, weights.string());
  std::cout << fmt::format("wrote {} ({} nodes) and {} ({} parameters)\n", options.output,
                           graph.nodes().size(), weights.string(), graph.parameters.size());
  return kExitOk;
}

}  // namespace import_command

Command add_import_command(CLI::App& app) {
  using namespace import_command;
  auto options = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "import", "Convert an ONNX or Keras model to kiln JSON with its weights in a safetensors file");
  cmd->add_option("MODEL", options->model, "the ONNX or Keras model (.onnx, Keras JSON, TensorFlow.js model.json; detected by content)")->required();
  cmd->add_option("-o,--output", options->output, "the kiln JSON model to write (model.json)")->required();
  cmd->add_option("--weights", options->weights,
                  "the safetensors file to write (default: the output's name with .safetensors)");
  options->input_shapes.add_to(*cmd);
  return {cmd, [options]() { return run(*options); }};
}

}  // namespace kiln::cli
