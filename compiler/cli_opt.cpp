// `kiln opt FILE`: parse, verify, optionally run passes, and print the result as textual IR.
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <iostream>
#include <sstream>

#include "compiler/cli.h"
#include "compiler/cli_common.h"
#include "compiler/model_loader.h"
#include "compiler/parameters.h"
#include "compiler/training_graph.h"
#include "compiler/output_file.h"
#include "compiler/pipeline_flags.h"
#include "compiler/safetensors.h"
#include "ir/diagnostic.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"

namespace kiln::cli {

namespace opt_command {

struct Options {
  std::string input;
  std::string output;
  bool split_input_file = false;
  bool list_passes = false;
  std::string params_out;
  int64_t training_batch = 0;  // --training-graph
  uint64_t training_seed = 0;
  bool distributed = false;  // --distributed: the step of a data-parallel run
  bool batch_invariant = false;  // --batch-invariant: as kiln train's
  int rank = 0;
  PipelineFlags pipeline;
  PrecisionFlag precision;  // bf16/f16: the default pipelines autocast (passes/autocast.cpp)
  InputShapeFlag input_shapes;
};

// Above this many inline parameter values, opt suggests --params-out (resnet50's folded
// weights print as ~500 MB of text).
constexpr size_t kLargeInlineValues = 1 << 20;

// --params-out: parameters whose values are inline (computed by passes such as constant-fold
// and fold-batch-norm, or written inline in the model) move to a safetensors file, and the IR
// refers to them with file(...), so it stays small and still parses back.
void move_inline_params(ir::Graph& graph, const std::string& path) {
  const std::string absolute = std::filesystem::absolute(path).lexically_normal().string();
  std::map<std::string, ir::Tensor> tensors;
  for (ir::Value* param : graph.parameters) {
    if (!param->source || !std::holds_alternative<ir::InlineData>(*param->source)) continue;
    tensors.emplace(param->name, ir::Tensor::from_doubles(
                                     param->type, std::get<ir::InlineData>(*param->source).values));
    param->source = ir::ExternalData{absolute, param->name};
  }
  compiler::write_safetensors(path, tensors);
}

size_t inline_values(const ir::Graph& graph) {
  size_t count = 0;
  for (const ir::Value* param : graph.parameters)
    if (param->source && std::holds_alternative<ir::InlineData>(*param->source))
      count += std::get<ir::InlineData>(*param->source).values.size();
  return count;
}

std::string read_text(const std::string& path) {
  if (path == "-") {
    std::ostringstream buffer;
    buffer << std::cin.rdbuf();
    return buffer.str();
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path, "cannot open the model file");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// --split-input-file: graphs separated by a line "// -----", each processed on its own (as in
// MLIR's tools), so one lit file holds many cases. Chunks keep their line numbers: each is
// parsed with as many blank lines before it as precede it in the file.
int run_split(const Options& options, std::string& out) {
  const std::string text = read_text(options.input);
  const std::string base_dir = std::filesystem::path(options.input).parent_path().string();
  std::vector<std::pair<int, std::string>> chunks;  // first line, text
  std::istringstream lines(text);
  std::string line, chunk;
  int line_number = 0, chunk_start = 1;
  while (std::getline(lines, line)) {
    ++line_number;
    if (line.rfind("// -----", 0) == 0) {
      chunks.push_back({chunk_start, chunk});
      chunk.clear();
      chunk_start = line_number + 1;
      continue;
    }
    chunk += line + "\n";
  }
  chunks.push_back({chunk_start, chunk});

  int status = kExitOk;
  for (size_t i = 0; i < chunks.size(); ++i) {
    try {
      const std::string padded = std::string(static_cast<size_t>(chunks[i].first - 1), '\n') + chunks[i].second;
      ir::Graph graph = ir::parse_graph(padded, options.input, base_dir.empty() ? "." : base_dir);
      ir::verify(graph);
      options.pipeline.run(graph, nullptr, {}, options.precision.value());
      if (i) out += "// -----\n";
      out += ir::print_graph(graph);
    } catch (const Error& error) {
      std::cerr << error.what() << "\n";
      status = kExitUserError;
    }
  }
  return status;
}

int run(const Options& options) {
  if (options.list_passes) {
    for (const passes::PassInfo& pass : passes::all_passes())
      std::cout << fmt::format("  {:<24} {}\n", pass.name, pass.summary);
    std::cout << "default pipeline (-O1): " << fmt::format("{}", fmt::join(passes::inference_pipeline(1), ",")) << "\n";
    return kExitOk;
  }
  if ((options.distributed || options.batch_invariant || options.rank != 0) &&
      options.training_batch == 0) {
    std::cerr << "kiln opt: --distributed, --batch-invariant and --rank need --training-graph BATCH\n";
    return kExitUsage;
  }
  if (options.input.empty()) {
    std::cerr << "kiln opt: FILE is required (a model, textual IR, or - for stdin)\n"
                 "Run with --help for more information.\n";
    return kExitUsage;
  }
  std::string text;
  int status = kExitOk;
  if (options.split_input_file) {
    status = run_split(options, text);
  } else {
    ir::Graph graph = compiler::load_model(options.input, options.input_shapes.options(options.input));
    if (options.training_batch != 0) {
      compiler::load_parameter_data(graph);
      compiler::make_training_graph(graph,
                                    {options.training_batch, options.training_seed, options.rank});
    }
    if ((options.distributed || options.batch_invariant) && !options.pipeline.passes_given) {
      // The whole step as `[mpirun ...] kiln train [--batch-invariant]` compiles it (Adam at
      // its defaults).
      PipelineFlags step = options.pipeline;
      step.passes = passes::with_autocast(
          passes::training_pipeline("optimizer=adam lr=0.001", options.distributed, options.batch_invariant),
          codegen::autocast_dtype(options.precision.value()));
      step.passes_given = true;
      step.run(graph);
    } else {
      options.pipeline.run(graph, nullptr, {}, options.precision.value());
    }
    if (!options.params_out.empty()) {
      move_inline_params(graph, options.params_out);
    } else if (const size_t values = inline_values(graph); values > kLargeInlineValues) {
      std::cerr << fmt::format("kiln opt: note: {} parameter values are printed inline; "
                               "--params-out FILE.safetensors keeps them out of the IR\n",
                               values);
    }
    text = ir::print_graph(graph);
  }
  if (options.output.empty() || options.output == "-") {
    std::cout << text;
  } else {
    compiler::write_file_atomically(options.output, text);
  }
  return status;
}

}  // namespace opt_command

Command add_opt_command(CLI::App& app) {
  using namespace opt_command;
  auto options = std::make_shared<Options>();
  CLI::App* opt = app.add_subcommand(
      "opt", "Parse and verify a model (.json, .onnx, Keras (.json, .h5), textual IR, or - for stdin), run passes, print it as textual IR");
  opt->add_option("FILE", options->input, "model file: .json, .onnx, Keras (.json, .h5), textual IR, or - for stdin");
  opt->add_option("-o,--output", options->output, "write the IR to this file instead of stdout");
  opt->add_flag("--split-input-file", options->split_input_file,
                "treat '// -----' lines as separators between independent graphs (textual IR)");
  opt->add_flag("--list-passes", options->list_passes, "list every pass and the default pipeline");
  opt->add_option("--training-graph", options->training_batch,
                  "first rewrite the model into the forward graph of a training step at this "
                  "batch size, as kiln train does (loss and label input from the final softmax, "
                  "dropout in training mode); then e.g. --passes=autodiff")
      ->check(CLI::PositiveNumber);
  opt->add_option("--training-seed", options->training_seed,
                  "with --training-graph: the seed of the dropout streams")
      ->capture_default_str();
  opt->add_flag("--distributed", options->distributed,
                "with --training-graph: the training step of a data-parallel run (mpirun), "
                "its gradients averaged over the ranks by all_reduce nodes; without --passes, "
                "the whole pipeline of kiln train (Adam)");
  opt->add_flag("--batch-invariant", options->batch_invariant,
                "with --training-graph: the training step of kiln train --batch-invariant, its "
                "sums over the batch per sample in a fixed tree (pairwise_sum); without "
                "--passes, the whole pipeline of kiln train (Adam)");
  opt->add_option("--rank", options->rank,
                  "with --training-graph: the data-parallel rank whose step to build (its "
                  "dropouts draw from its shard of the global batch)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  opt->add_option("--params-out", options->params_out,
                  "write inline parameters (such as weights folded by the passes) to this "
                  "safetensors file and refer to them from the IR with file(...)");
  // opt prints the graph as written unless passes are asked for (-O1 or --passes).
  options->pipeline.add_to(*opt, 0);
  options->precision.add_to(*opt);
  options->input_shapes.add_to(*opt);
  return {opt, [options]() { return run(*options); }};
}

}  // namespace kiln::cli
