#include "compiler/training_graph.h"

#include <fmt/format.h>

#include "ir/diagnostic.h"
#include "ir/op_registry.h"
#include "passes/batch_norm_training.h"

namespace kiln::compiler {
namespace {

// SplitMix64's finalizer: decorrelates the seeds of neighbouring dropout nodes.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

void reinfer(ir::Node& node) {
  try {
    ir::reinfer_results(node);
  } catch (const ir::OpError& error) {
    throw Error(node.loc.render(), node.describe() + ": " + error.message);
  }
}

}  // namespace

void set_batch_size(ir::Graph& graph, int64_t batch) {
  if (batch < 1) throw Error("--batch-size", fmt::format("must be at least 1, got {}", batch));
  if (graph.inputs.empty()) throw Error("", "graph @" + graph.name + " has no inputs to batch");
  // A dynamic batch is resized exactly, as the dynamic-dim analysis says each dim follows it;
  // then the graph is static.
  const ir::DimMap& first = graph.inputs[0]->dynamic_dims;
  if (!first.empty() && first[0].is_dynamic()) {
    std::vector<int64_t> sizes;
    for (const ir::DimSymbol& symbol : graph.symbols) sizes.push_back(symbol.bound);
    sizes[static_cast<size_t>(first[0].symbol)] = batch;
    ir::resize_dynamic_dims(graph, sizes);
    ir::drop_dynamic_dims(graph);
    return;
  }
  // Otherwise (imported models start their symbolic batch at 1): every input's first dim is
  // the batch, and reshapes whose first dim is the old batch follow it.
  const int64_t old_batch = graph.inputs[0]->type.rank() > 0 ? graph.inputs[0]->type.shape[0] : -1;
  for (ir::Value* input : graph.inputs) {
    if (input->type.rank() == 0 || input->type.shape[0] != old_batch)
      throw Error(input->loc.render(),
                  fmt::format("input %{} {}: every input must have the batch as its first dim "
                              "({} for %{})",
                              input->name, input->type.to_string(), old_batch,
                              graph.inputs[0]->name));
    input->type.shape[0] = batch;
  }
  // The graph is static from here on: a dynamic batch (or any dynamic dim) is fixed at the
  // size chosen, the others at their bounds.
  ir::drop_dynamic_dims(graph);
  if (batch == old_batch) return;
  for (const auto& node : graph.nodes()) {
    if (node->is_kernel())
      throw Error(node->loc.render(), node->describe() + ": set the batch size before fusion");
    if (node->op == ir::OpId::Reshape) {
      auto& shape = std::get<std::vector<int64_t>>(node->attrs.at("shape"));
      if (!shape.empty() && shape[0] == old_batch) shape[0] = batch;
    }
    reinfer(*node);
  }
}

TrainingGraphInfo make_training_graph(ir::Graph& graph, const TrainingGraphOptions& options) {
  set_batch_size(graph, options.batch_size);
  TrainingGraphInfo info;
  if (graph.outputs.empty()) throw Error("", "graph @" + graph.name + " has no outputs");
  ir::Value* prediction = graph.outputs[0];
  ir::Node* softmax = prediction->producer;
  const int64_t rank = prediction->type.rank();
  const auto last_axis = [rank](const ir::Node& node) {
    const int64_t axis = std::get<int64_t>(node.attrs.at("axis"));
    return axis == -1 || axis == rank - 1;
  };
  if (softmax == nullptr || softmax->op != ir::OpId::Softmax || rank < 2 ||
      !last_axis(*softmax) || !graph.users(prediction).empty())
    throw Error(prediction->loc.render(),
                fmt::format("kiln train: cannot derive a loss from the first output %{} ({}{}): "
                            "train models whose first output is softmax(logits) over the last "
                            "axis of [batch, classes] (a classifier) or [batch, ..., classes] "
                            "(a class per position: a language model)",
                            graph.output_name(0), prediction->type.to_string(),
                            softmax ? ", made by " + softmax->describe() : ""));
  ir::Value* logits = softmax->inputs[0];
  // A label per position: i32 of the logits' shape without the classes. The loss is the mean
  // over every position (torch's cross_entropy of logits.view(-1, C), labels.view(-1)), so
  // positions become rows of the loss's [N, C] view.
  const ir::Shape& logits_shape = logits->type.shape;
  const ir::Shape label_shape(logits_shape.begin(), logits_shape.end() - 1);
  const std::string label_name = graph.unique_name("label");
  ir::Value* label = graph.add_input(label_name, ir::TensorType{ir::DType::I32, label_shape});
  ir::Value* loss_logits = logits;
  ir::Value* loss_labels = label;
  if (rank > 2) {
    const int64_t rows = ir::num_elements(label_shape);
    const auto reshape = [&](ir::Value* value, ir::Shape shape, const std::string& name) {
      ir::TensorType type{value->type.dtype, shape};
      return graph
          .add_node(ir::OpId::Reshape, name, {value}, {{"shape", std::vector<int64_t>(shape)}},
                    {{graph.unique_name(name), type}}, softmax->loc)
          ->results[0];
    };
    loss_logits = reshape(logits, {rows, logits_shape.back()}, "loss.logits");
    loss_labels = reshape(label, {rows}, "loss.labels");
  }
  ir::AttrMap attrs;
  std::vector<ir::TensorType> loss_type;
  try {
    loss_type = ir::infer_op(ir::OpId::SoftmaxCrossEntropy, {loss_logits, loss_labels}, attrs);
  } catch (const ir::OpError& error) {
    throw Error(softmax->loc.render(), "kiln train: the loss of " + softmax->describe() +
                                           "'s logits: " + error.message);
  }
  ir::Node* loss = graph.add_node(ir::OpId::SoftmaxCrossEntropy, "loss",
                                  {loss_logits, loss_labels}, attrs,
                                  {{graph.unique_name("loss"), loss_type[0]}}, softmax->loc);
  graph.outputs = {loss->results[0], logits};
  graph.output_names = {"loss", "logits"};
  graph.erase_nodes([&](const ir::Node& node) { return &node == softmax; });
  info.loss = fmt::format("softmax_cross_entropy of %{} (the input of {}){}", logits->name,
                          "the final softmax", rank > 2 ? ", a label per position" : "");
  info.label_input = label_name;
  info.logits = "logits";
  // Batch statistics, and the running averages as state outputs next.* (after loss, logits).
  for (const auto& node : graph.nodes()) info.batch_norm_nodes += node->op == ir::OpId::BatchNorm;
  passes::lower_batch_norm_for_training(graph);

  ir::Value* step = nullptr;
  int index = 0;
  for (const auto& node : graph.nodes()) {
    if (node->op != ir::OpId::Dropout) continue;
    if (step == nullptr) {
      const ir::TensorType type{ir::DType::I32, {1}};
      step = graph.add_parameter("train.step", type, ir::InlineData{{1.0}});
      step->data = std::make_shared<const ir::Tensor>(ir::Tensor::from_doubles(type, {1.0}));
    }
    node->attrs["training"] = true;
    node->attrs["seed"] = static_cast<int64_t>(mix(options.seed * 1000003u + index++) >> 1);
    // Rank r's input is the r-th slice of the global batch's (the batch leads every input).
    node->attrs["word_offset"] = options.rank * ir::num_elements(node->inputs[0]->type.shape);
    node->inputs.push_back(step);
    reinfer(*node);
    ++info.dropout_nodes;
  }
  return info;
}

}  // namespace kiln::compiler
