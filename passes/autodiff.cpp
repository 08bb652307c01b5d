// autodiff: appends the backward graph of the loss with respect to the trainable parameters.
//
// Conventions (the graph carries everything the pass reads):
//   - the loss is the graph's FIRST output and must be a float scalar (f32[] or f32[1]);
//   - every float parameter is trainable (the model format has no `trainable` flag yet);
//   - for each trainable parameter P the loss depends on, one graph output is appended, named
//     "grad.P" (Graph::output_names, and the value's own name where it is free); outputs keep
//     their order, so the loss stays first. Parameters the loss does not depend on get no
//     gradient output (as in PyTorch, where their .grad stays None);
//   - d(loss)/d(loss) = 1 is a new inline parameter "grad.seed". With dynamic loss scaling
//     (option loss_scale=N > 0, or a graph that already has the parameter "train.loss_scale")
//     it is the parameter train.loss_scale (f32[1], N to start with), so every gradient comes
//     out scaled by it; append-optimizer unscales them (loss_scale_update) and updates the
//     scale. The loss does not depend on the scale, so the scale gets no gradient.
//
// Algorithm (reverse-mode AD, as in any tape-based autograd): mark the values that depend on a
// trainable parameter (forward sweep) and that the loss depends on (backward sweep); only the
// nodes in both need a gradient. Walking those in reverse topological order, each node's rule
// (OpDef::grad) turns its results' gradients into its operands'; a value with several users
// receives one gradient per use, summed with `add` nodes. Saved activations are just the
// forward values the backward nodes read, so fusion and the memory planner see them like any
// other value. Backward nodes a rule built for an operand that needs no gradient are removed.
#include <fmt/format.h>

#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include "ir/diagnostic.h"
#include "ir/grad_builder.h"
#include "ir/op_registry.h"
#include "passes/dce.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

constexpr std::string_view kPass = "autodiff";
constexpr std::string_view kGradPrefix = "grad.";

bool is_grad_name(const std::string& name) { return name.rfind(kGradPrefix, 0) == 0; }

ir::Value* check_loss(const ir::Graph& graph) {
  if (graph.outputs.empty())
    throw Error("", "autodiff: the graph has no outputs; its first output must be the loss");
  ir::Value* loss = graph.outputs[0];
  const bool scalar = loss->type.rank() == 0 || loss->type.shape == ir::Shape{1};
  if (!scalar || !ir::is_floating(loss->type.dtype))
    throw Error(loss->loc.render(),
                fmt::format("autodiff: the loss (the first output, %{}) must be a float scalar "
                            "(f32[] or f32[1]), got {}",
                            graph.output_name(0), loss->type.to_string()));
  return loss;
}

constexpr std::string_view kLossScale = "train.loss_scale";

// The seed of a loss-scaled backward pass: train.loss_scale in the loss's shape, made with
// value `initial` when the graph has no such parameter; nullptr without loss scaling.
ir::Value* loss_scale_seed(ir::Graph& graph, ir::Value& loss, double initial) {
  ir::Value* scale = graph.find_value(std::string(kLossScale));
  if (scale == nullptr && initial == 0) return nullptr;
  if (scale == nullptr) {
    const ir::TensorType type{loss.type.dtype, {1}};
    scale = graph.add_parameter(std::string(kLossScale), type, ir::InlineData{{initial}}, loss.loc);
    scale->data = std::make_shared<const ir::Tensor>(ir::Tensor::from_doubles(type, {initial}));
  }
  if (scale->role != ir::ValueRole::Parameter || scale->type.dtype != loss.type.dtype ||
      ir::num_elements(scale->type.shape) != 1)
    throw Error(scale->loc.render(),
                fmt::format("autodiff: %{} must be a parameter of one {} element, the loss "
                            "scale; got {}",
                            kLossScale, ir::dtype_name(loss.type.dtype), scale->type.to_string()));
  ir::GradBuilder builder(graph, "grad.seed");
  return builder.reshape(scale, loss.type.shape);
}

}  // namespace

bool Autodiff::run(ir::Graph& graph, PassContext& context) {
  context.check_options(kPass, {"loss_scale"});
  const double loss_scale = context.number_option(kPass, "loss_scale", 0);
  if (!(loss_scale >= 0) || std::isinf(loss_scale))
    throw Error("--passes", fmt::format("pass '{}': option 'loss_scale' must be a finite number "
                                        "> 0 (0: no loss scaling), got {}",
                                        kPass, loss_scale));
  for (size_t i = 0; i < graph.outputs.size(); ++i)
    if (is_grad_name(graph.output_name(i))) {
      context.debug(kPass, "graph already has gradient outputs; nothing to do");
      return false;
    }
  for (const auto& node : graph.nodes())
    if (node->is_kernel())
      throw Error(node->loc.render(), node->describe() +
                                          ": autodiff runs before fusion, found a fused kernel");
  ir::Value* loss = check_loss(graph);

  std::vector<ir::Value*> trainable;
  std::unordered_set<const ir::Value*> depends;  // float values that depend on a trainable one
  for (ir::Value* param : graph.parameters)
    if (ir::is_floating(param->type.dtype) && !is_grad_name(param->name)) {
      trainable.push_back(param);
      depends.insert(param);
    }
  std::vector<ir::Node*> forward;
  for (const auto& node : graph.nodes()) forward.push_back(node.get());
  for (ir::Node* node : forward) {
    bool reached = false;
    for (const ir::Value* input : node->inputs) reached |= depends.count(input) > 0;
    if (!reached) continue;
    for (const ir::Value* result : node->results)
      if (ir::is_floating(result->type.dtype)) depends.insert(result);
  }
  if (!depends.count(loss))
    throw Error(loss->loc.render(), fmt::format("autodiff: the loss %{} does not depend on any "
                                                "float parameter",
                                                graph.output_name(0)));
  // Backward sweep: the nodes between the parameters and the loss.
  std::unordered_set<const ir::Value*> wanted = {loss};
  std::vector<ir::Node*> on_path;  // reverse topological order
  for (auto it = forward.rbegin(); it != forward.rend(); ++it) {
    bool needed = false;
    for (const ir::Value* result : (*it)->results) needed |= wanted.count(result) > 0;
    if (!needed) continue;
    on_path.push_back(*it);
    for (const ir::Value* input : (*it)->inputs)
      if (depends.count(input)) wanted.insert(input);
  }
  for (auto it = on_path.rbegin(); it != on_path.rend(); ++it)
    if ((*it)->def == nullptr || (*it)->def->grad == nullptr)
      throw Error((*it)->loc.render(),
                  fmt::format("{}: op '{}' has no gradient rule yet, and the loss depends on a "
                              "parameter through it",
                              (*it)->describe(), (*it)->op));

  if (!context.take_fuel(kPass, fmt::format("build the backward graph of %{}", graph.output_name(0))))
    return false;
  context.debug(kPass, fmt::format("loss %{}: {} trainable parameter(s), {} node(s) to differentiate",
                                   graph.output_name(0), trainable.size(), on_path.size()));

  const size_t first_new = graph.nodes().size();
  ir::Value* seed = loss_scale_seed(graph, *loss, loss_scale);
  if (seed != nullptr) {
    context.debug(kPass, fmt::format("seed the backward pass with %{} (dynamic loss scaling)",
                                     kLossScale));
  } else {
    seed = graph.add_parameter(graph.unique_name("grad.seed"), loss->type, ir::InlineData{{1.0}},
                               loss->loc);
    seed->data = std::make_shared<const ir::Tensor>(ir::Tensor::from_doubles(loss->type, {1.0}));
  }

  std::unordered_map<const ir::Value*, ir::Value*> grads = {{loss, seed}};
  auto accumulate = [&](const ir::Value* value, ir::Value* grad) {
    KILN_CHECK(grad->type == value->type) << "gradient of %" << value->name << " is "
                                          << grad->type.to_string() << ", value is "
                                          << value->type.to_string();
    auto [it, fresh] = grads.emplace(value, grad);
    if (fresh) return;
    ir::GradBuilder sum(graph, "grad." + value->name + ".sum");
    it->second = sum.op(ir::OpId::Add, {it->second, grad});
    context.debug(kPass, fmt::format("sum gradients of %{} (several uses)", value->name));
  };

  for (ir::Node* node : on_path) {
    std::vector<ir::Value*> result_grads;
    for (const ir::Value* result : node->results) {
      auto it = grads.find(result);
      result_grads.push_back(it == grads.end() ? nullptr : it->second);
    }
    context.debug(kPass, "differentiate " + node->describe());
    ir::GradBuilder builder(graph, *node);
    const std::vector<ir::Value*> input_grads = node->def->grad(builder, *node, result_grads);
    KILN_CHECK(input_grads.size() == node->inputs.size())
        << node->describe() << ": gradient rule returned " << input_grads.size()
        << " gradients for " << node->inputs.size() << " operands";
    for (size_t i = 0; i < input_grads.size(); ++i)
      if (input_grads[i] != nullptr && wanted.count(node->inputs[i]))
        accumulate(node->inputs[i], input_grads[i]);
  }

  if (graph.output_names.size() != graph.outputs.size()) {
    std::vector<std::string> names;
    for (size_t i = 0; i < graph.outputs.size(); ++i) names.push_back(graph.output_name(i));
    graph.output_names = std::move(names);
  }
  std::unordered_set<const ir::Value*> renamed;
  for (ir::Value* param : trainable) {
    auto it = grads.find(param);
    if (it == grads.end()) {
      context.debug(kPass, fmt::format("no gradient for %{}: the loss does not depend on it",
                                       param->name));
      continue;
    }
    ir::Value* grad = it->second;
    const std::string name = std::string(kGradPrefix) + param->name;
    // Name the value after its parameter where that is unambiguous: a backward node's own
    // result, not shared with another output.
    const bool own = grad->producer != nullptr && !graph.is_output(grad) && !renamed.count(grad) &&
                     is_grad_name(grad->name) && graph.find_value(name) == nullptr;
    if (own) {
      grad->name = name;
      renamed.insert(grad);
    }
    graph.outputs.push_back(grad);
    graph.output_names.push_back(name);
    context.debug(kPass, fmt::format("output {} = %{}", name, grad->name));
  }
  // Rules build gradients for every operand; those of operands that need none are dead. Only
  // backward nodes go: dead forward nodes and unused parameters are dce's to remove, with fuel.
  erase_dead_nodes(graph, first_new, [](const ir::Node&) { return true; });
  return true;
}

}  // namespace kiln::passes
