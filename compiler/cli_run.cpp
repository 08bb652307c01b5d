// `kiln run FILE`: execute a model on inputs read from .npy files.
#include <cmath>
#include <filesystem>
#include <fmt/format.h>
#include <iostream>
#include <map>

#include "compiler/cli.h"
#include "compiler/model_loader.h"
#include "compiler/npy.h"
#include "compiler/parameters.h"
#include "ir/diagnostic.h"
#include "runtime/reference/interpreter.h"

namespace kiln::cli {

namespace {

struct Options {
  std::string model;
  std::string backend = "reference";
  std::vector<std::string> inputs;  // NAME=PATH
  std::string output_dir;
};

std::map<std::string, ir::Tensor> read_inputs(const std::vector<std::string>& specs) {
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

// Output file names come from value names, which may hold characters a path must not.
std::string file_stem(const std::string& name) {
  std::string stem;
  for (char c : name) stem += std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' ? c : '_';
  return stem;
}

std::string summarize(const ir::Tensor& tensor) {
  double min = INFINITY, max = -INFINITY, sum = 0;
  int64_t argmax = 0;
  for (int64_t i = 0; i < tensor.num_elements(); ++i) {
    const double v = tensor.get(i);
    if (v > max) argmax = i;
    min = std::min(min, v);
    max = std::max(max, v);
    sum += v;
  }
  return fmt::format("min {:.6g}  max {:.6g}  mean {:.6g}  argmax {}", min, max,
                     sum / static_cast<double>(tensor.num_elements()), argmax);
}

int run(const Options& options) {
  ir::Graph graph = compiler::load_model(options.model);
  std::map<std::string, ir::Tensor> inputs = read_inputs(options.inputs);
  compiler::load_parameter_data(graph);
  const std::vector<ir::Tensor> outputs = runtime::run_reference(graph, inputs);

  if (!options.output_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(options.output_dir, ec);
    if (ec) throw Error(options.output_dir, "cannot create the output directory: " + ec.message());
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string& name = graph.outputs[i]->name;
    std::string line = fmt::format("{}: {}  {}", name, outputs[i].type().to_string(), summarize(outputs[i]));
    if (!options.output_dir.empty()) {
      const std::string path =
          (std::filesystem::path(options.output_dir) / (file_stem(name) + ".npy")).string();
      compiler::write_npy(path, outputs[i]);
      line += "  -> " + path;
    }
    std::cout << line << "\n";
  }
  return kExitOk;
}

}  // namespace

Command add_run_command(CLI::App& app) {
  auto options = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("run", "Run a model on inputs from .npy files");
  cmd->add_option("FILE", options->model, "model file: .json, textual IR, or - for stdin")->required();
  cmd->add_option("--backend", options->backend,
                  "where to run: reference (the interpreter; host and cuda backends come with codegen)")
      ->check(CLI::IsMember({"reference"}))
      ->capture_default_str();
  cmd->add_option("-i,--input", options->inputs, "graph input as NAME=FILE.npy (repeatable)");
  cmd->add_option("-o,--output-dir", options->output_dir, "write each output as NAME.npy in this directory");
  return {cmd, [options]() { return run(*options); }};
}

}  // namespace kiln::cli
