// prune: gradual magnitude pruning of a training step (Zhu & Gupta, "To prune, or not to
// prune", 2017), after append-optimizer.
//
// Every parameter of rank >= 2 that the optimizer updates (conv and dense weights, embedding
// tables; biases and norms stay dense) gets a mask, the parameter "prune.mask.P" (ones to start
// with), and the step's result for it becomes
//
//   %r = <the update's new P>
//   %next.prune.mask.P = prune_mask(%r, %prune.mask.P, %train.step) {sparsity, start, end, ...}
//   %next.P = mul(%r, %next.prune.mask.P)
//
// so pruned weights are 0 after every step, whatever their gradient: they stay pruned, and the
// forward pass of the next step reads the pruned model. prune_mask (ir/ops.def) moves the mask
// on pruning steps only: a cubic schedule from 0 at step `start` to `sparsity` at step `end`,
// every `frequency` steps and at `end`, or the 2:4 pattern of sparse tensor cores (`pattern=2:4`; sparsity
// is then 0.5, and a parameter whose rows are not a multiple of 4 long stays dense, said under
// --debug-only=prune). The masks are training state like the optimizer's: checkpoints carry
// them, and the training state contract (docs/training.md) needs nothing new.
//
// Options: sparsity (required without 2:4), start (1), end (required), frequency (1), pattern
// (unstructured | 2:4).
#include <fmt/format.h>

#include "ir/diagnostic.h"
#include "ir/kernel_region.h"
#include "ir/op_registry.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

constexpr std::string_view kPass = "prune";
constexpr std::string_view kNextPrefix = "next.";

// The parameters the step's optimizer updates: operand 0 of every update in its multi_update
// kernels, as the graph's values.
std::vector<ir::Value*> updated_parameters(const ir::Graph& graph) {
  std::vector<ir::Value*> params;
  for (const auto& node : graph.nodes()) {
    if (!node->is_kernel() || ir::kernel_kind(*node) != ir::kMultiUpdateKernel)
      continue;
    for (const auto& update : node->body->nodes())
      for (size_t i = 0; i < node->body->inputs.size(); ++i)
        if (node->body->inputs[i] == update->inputs[0]) params.push_back(node->inputs[i]);
  }
  return params;
}

}  // namespace

bool Prune::run(ir::Graph& graph, PassContext& context) {
  context.check_options(kPass, {"sparsity", "start", "end", "frequency", "pattern"});
  const std::string pattern = context.option("pattern", "unstructured");
  if (pattern != "unstructured" && pattern != "2:4")
    throw Error("--passes", fmt::format("pass '{}': pattern '{}' is not one of unstructured, 2:4",
                                        kPass, pattern));
  const bool two_four = pattern == "2:4";
  const double sparsity = context.number_option(kPass, "sparsity", two_four ? 0.5 : -1);
  if (two_four && sparsity != 0.5)
    throw Error("--passes", fmt::format("pass '{}': the 2:4 pattern prunes half of every group "
                                        "of 4; sparsity must be 0.5 (or left out), got {}",
                                        kPass, sparsity));
  if (!(sparsity >= 0 && sparsity < 1))
    throw Error("--passes", fmt::format("pass '{}': option 'sparsity' must be in [0, 1), got {}",
                                        kPass, sparsity));
  if (context.option("end", "").empty())
    throw Error("--passes", fmt::format("pass '{}': option 'end' (the step at which the "
                                        "schedule reaches its sparsity) is required",
                                        kPass));
  ir::AttrMap attrs = {{"sparsity", sparsity},
                       {"start", static_cast<int64_t>(context.number_option(kPass, "start", 1))},
                       {"end", static_cast<int64_t>(context.number_option(kPass, "end", 0))},
                       {"frequency",
                        static_cast<int64_t>(context.number_option(kPass, "frequency", 1))},
                       {"pattern", pattern}};
  ir::Value* step = graph.find_value("train.step");
  if (step == nullptr)
    throw Error("--passes", fmt::format("pass '{}': the graph has no training step (no "
                                        "%train.step); run append-optimizer first",
                                        kPass));

  int pruned = 0;
  for (ir::Value* param : updated_parameters(graph)) {
    if (param->type.rank() < 2 || !ir::is_floating(param->type.dtype)) continue;
    const std::string next_name = std::string(kNextPrefix) + param->name;
    size_t output = graph.outputs.size();
    for (size_t i = 0; i < graph.outputs.size(); ++i)
      if (graph.output_name(i) == next_name) output = i;
    if (output == graph.outputs.size()) continue;
    const int64_t row = ir::num_elements(param->type.shape) / param->type.shape[0];
    if (two_four && row % 4 != 0) {
      context.debug(kPass, fmt::format("%{} stays dense: its rows are {} long, not a multiple "
                                       "of 4 (2:4)",
                                       param->name, row));
      continue;
    }
    if (!context.take_fuel(kPass, "prune %" + param->name)) break;
    const std::string mask_name = "prune.mask." + param->name;
    ir::Value* mask = graph.add_parameter(graph.unique_name(mask_name), param->type,
                                          ir::InitializerSpec{"ones", {}});
    const std::vector<double> ones(static_cast<size_t>(ir::num_elements(param->type.shape)), 1.0);
    mask->data = std::make_shared<const ir::Tensor>(ir::Tensor::from_doubles(param->type, ones));
    // The update's result is now an intermediate: next.P names the masked value.
    ir::Value* updated = graph.outputs[output];
    if (updated->name == next_name) updated->name = graph.unique_name(param->name + ".updated");
    std::vector<ir::TensorType> types;
    try {
      types = ir::infer_op(ir::OpId::PruneMask, {updated, mask, step}, attrs);
    } catch (const ir::OpError& error) {
      throw Error("--passes", fmt::format("pass '{}': prune_mask of %{}: {}", kPass, param->name,
                                          error.message));
    }
    ir::Node* next_mask = graph.add_node(ir::OpId::PruneMask, mask_name + ".next",
                                         {updated, mask, step}, attrs,
                                         {{graph.unique_name("next." + mask_name), types[0]}});
    ir::Node* masked = graph.add_node(ir::OpId::Mul, "prune." + param->name,
                                      {updated, next_mask->results[0]}, {},
                                      {{graph.unique_name(next_name), param->type}});
    graph.outputs[output] = masked->results[0];
    graph.outputs.push_back(next_mask->results[0]);
    graph.output_names.push_back("next." + mask_name);
    ++pruned;
    context.debug(kPass, fmt::format("%{} {}: pruned to {} by step {}", param->name,
                                     param->type.to_string(),
                                     two_four ? std::string("2:4") : fmt::format("{:g}", sparsity),
                                     std::get<int64_t>(attrs.at("end"))));
  }
  if (pruned == 0)
    context.debug(kPass, "no parameter of rank >= 2 is updated by the step: nothing to prune");
  return pruned > 0;
}

}  // namespace kiln::passes
