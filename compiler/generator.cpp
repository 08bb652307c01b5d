#include "compiler/generator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <numeric>
#include <ostream>
#include <random>
#include <vector>

#include "codegen/emit.h"
#include "compiler/model_loader.h"
#include "compiler/parameters.h"
#include "compiler/safetensors.h"
#include "compiler/training_graph.h"
#include "ir/diagnostic.h"
#include "ir/eval/interpreter.h"
#include "ir/float_storage.h"
#include "passes/pass_manager.h"
#include "runtime/cuda/cuda_executable.h"
#include "runtime/executor/executable.h"

namespace kiln::compiler {
namespace {

// The model's forward pass at batch 1 on one backend: token ids [1, context] in, the first
// output [1, context, vocabulary] out.
class Forward {
 public:
  Forward(ir::Graph graph, const GenerateOptions& options) : graph_(std::move(graph)) {
    std::string why;
    std::string backend = options.backend;
    if (backend == "auto") backend = runtime::cuda::auto_backend(false, std::cerr);
    if (backend == "reference") return;  // the interpreter runs the graph as loaded
    if (backend == "cuda" && !runtime::cuda::cuda_available(&why))
      throw Error("--backend=cuda", why + "; use --backend=host to run the same kernels on the CPU");
    if (backend != "host" && backend != "cuda")
      throw Error("--backend", "expected auto, host, cuda or reference, got '" + backend + "'");
    passes::PassManager manager(passes::PassManagerOptions{}, std::cerr);
    manager.add_all(passes::inference_pipeline(1));
    manager.run(graph_);
    std::vector<ir::Tensor> parameters;
    for (const ir::Value* param : graph_.parameters) parameters.push_back(*param->data);
    runtime::ExecutableOptions exe;
    exe.backend = backend == "cuda" ? runtime::Backend::Cuda : runtime::Backend::Host;
    exe.cache = options.cache;
    exe.verbose = options.verbose;
    executable_ = runtime::Executable::create(codegen::emit_program(graph_), parameters, exe);
  }

  ir::Tensor operator()(const ir::Tensor& tokens) {
    if (executable_) return executable_->run({tokens}).at(0);
    return eval::run_reference(graph_, {{graph_.inputs[0]->name, tokens}}).at(0);
  }

 private:
  ir::Graph graph_;
  std::unique_ptr<runtime::Executable> executable_;
};

// Replaces every parameter's data with the checkpoint's tensor of its name; a missing
// parameter, or one of another type, is an error naming both files.
void load_checkpoint(ir::Graph& graph, const std::string& path, const std::string& model) {
  const SafetensorsFile file = SafetensorsFile::open(path);
  for (ir::Value* param : graph.parameters) {
    if (file.find(param->name) == nullptr)
      throw Error(path, fmt::format("holds no tensor '{}', a parameter of {}: is it a checkpoint "
                                    "of this model?",
                                    param->name, model));
    // Weights stored in bf16 or f16 (kiln train --weights-dtype) widen exactly to f32.
    ir::Tensor tensor = ir::widened_from_storage(file.read(param->name), param->type);
    if (tensor.type() != param->type)
      throw Error(path, fmt::format("tensor '{}' is {}; {} declares {}", param->name,
                                    tensor.type().to_string(), model, param->type.to_string()));
    param->data = std::make_shared<const ir::Tensor>(std::move(tensor));
  }
}

// Picks the next token from row `row` of `output` ([1, context, vocabulary]).
class Sampler {
 public:
  Sampler(const GenerateOptions& options, bool probabilities)
      : temperature_(options.temperature), top_k_(options.top_k), probabilities_(probabilities),
        engine_(options.seed) {}

  int64_t operator()(const ir::Tensor& output, int64_t row) {
    const int64_t vocabulary = output.shape().back();
    std::vector<double> logit(static_cast<size_t>(vocabulary));
    for (int64_t v = 0; v < vocabulary; ++v) {
      const double value = output.get(row * vocabulary + v);
      // A NaN has no place in an order of likelihoods: say so rather than draw from it.
      if (std::isnan(value))
        throw Error("", fmt::format("the model's next-token {} at position {} hold NaN (token "
                                    "{}): are the weights finite?",
                                    probabilities_ ? "probabilities" : "logits", row, v));
      logit[v] = probabilities_ ? std::log(value) : value;  // log(0) = -inf: never drawn
    }
    std::vector<int64_t> order(static_cast<size_t>(vocabulary));
    std::iota(order.begin(), order.end(), 0);
    // Most likely first; ties by token id, so a run is reproducible.
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return logit[a] > logit[b]; });
    if (temperature_ == 0) return order[0];
    const int64_t keep = top_k_ > 0 ? std::min(top_k_, vocabulary) : vocabulary;
    std::vector<double> weight(static_cast<size_t>(keep));
    double total = 0;
    for (int64_t i = 0; i < keep; ++i) {
      weight[i] = std::exp((logit[order[i]] - logit[order[0]]) / temperature_);
      total += weight[i];
    }
    // A uniform draw from the top 53 bits: the same stream on every platform.
    const double u = static_cast<double>(engine_() >> 11) * 0x1.0p-53 * total;
    double sum = 0;
    for (int64_t i = 0; i < keep; ++i) {
      sum += weight[i];
      if (u < sum) return order[i];
    }
    return order[keep - 1];
  }

 private:
  double temperature_;
  int64_t top_k_;
  bool probabilities_;
  std::mt19937_64 engine_;
};

}  // namespace

std::string generate(const GenerateOptions& options, std::ostream& out) {
  if (options.prompt.empty())
    throw Error("--prompt", "needs at least one byte to start from");
  if (options.tokens < 0) throw Error("--tokens", fmt::format("must be >= 0, got {}", options.tokens));
  if (!(options.temperature >= 0) || !std::isfinite(options.temperature))
    throw Error("--temperature", fmt::format("must be >= 0, got {}", options.temperature));

  ir::Graph graph = load_model(options.model);
  if (graph.inputs.size() != 1 || !ir::is_integer(graph.inputs[0]->type.dtype) ||
      graph.inputs[0]->type.rank() != 2)
    throw Error(options.model, "kiln generate needs a language model: one input of token ids "
                               "[batch, context] (integers); this model takes " +
                                   graph.inputs[0]->type.to_string());
  set_batch_size(graph, 1);
  const ir::TensorType input = graph.inputs[0]->type;
  const int64_t context = input.shape[1];
  const ir::TensorType& output = graph.outputs.at(0)->type;
  if (output.rank() != 3 || output.shape[1] != context || !ir::is_floating(output.dtype))
    throw Error(options.model, fmt::format("kiln generate reads the next-token distribution "
                                           "[batch, {}, vocabulary] from the first output; it "
                                           "is {}",
                                           context, output.to_string()));
  const int64_t vocabulary = output.shape[2];
  for (unsigned char byte : options.prompt)
    if (byte >= vocabulary)
      throw Error("--prompt", fmt::format("byte {} is outside the model's vocabulary of {}", byte,
                                          vocabulary));
  const ir::Node* producer = graph.outputs[0]->producer;
  const bool probabilities = producer != nullptr && producer->op == ir::OpId::Softmax;
  load_parameter_data(graph);
  if (!options.checkpoint.empty()) load_checkpoint(graph, options.checkpoint, options.model);

  Forward forward(std::move(graph), options);
  Sampler sample(options, probabilities);
  std::vector<int64_t> text(options.prompt.begin(), options.prompt.end());
  for (int64_t& token : text) token = static_cast<unsigned char>(token);
  out << options.prompt << std::flush;
  std::string sampled;
  ir::Tensor window(input);
  for (int64_t n = 0; n < options.tokens; ++n) {
    // The last `context` tokens, padded with zeros at the end.
    const int64_t length = std::min<int64_t>(static_cast<int64_t>(text.size()), context);
    const int64_t first = static_cast<int64_t>(text.size()) - length;
    for (int64_t t = 0; t < context; ++t) window.set(t, t < length ? double(text[first + t]) : 0.0);
    const int64_t token = sample(forward(window), length - 1);
    text.push_back(token);
    sampled.push_back(static_cast<char>(token));
    out << static_cast<char>(token) << std::flush;
  }
  out << "\n";
  return sampled;
}

}  // namespace kiln::compiler
