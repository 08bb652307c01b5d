// `kiln opt FILE`: parse, verify and print a model as textual IR.
#include <iostream>

#include "compiler/cli.h"
#include "compiler/model_loader.h"
#include "compiler/output_file.h"
#include "ir/printer.h"

namespace kiln::cli {

Command add_opt_command(CLI::App& app) {
  struct Options {
    std::string input;
    std::string output;
  };
  auto options = std::make_shared<Options>();
  CLI::App* opt = app.add_subcommand(
      "opt", "Parse and verify a model (.json, textual IR, or - for stdin); print it as textual IR");
  opt->add_option("FILE", options->input, "model file: .json, textual IR, or - for stdin")->required();
  opt->add_option("-o,--output", options->output, "write the IR to this file instead of stdout");
  return {opt, [options]() {
    const ir::Graph graph = compiler::load_model(options->input);
    const std::string text = ir::print_graph(graph);
    if (options->output.empty() || options->output == "-") {
      std::cout << text;
    } else {
      compiler::write_file_atomically(options->output, text);
    }
    return kExitOk;
  }};
}

}  // namespace kiln::cli
