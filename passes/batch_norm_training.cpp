// lower-batch-norm-training and lower_batch_norm_for_training: see batch_norm_training.h.
#include "passes/batch_norm_training.h"

#include <functional>
#include <set>

#include "ir/diagnostic.h"
#include "ir/op_registry.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

constexpr std::string_view kPass = "lower-batch-norm-training";
constexpr std::string_view kNextPrefix = "next.";

// Adds `op(inputs)` before `bn` with results named after `names` (made unique); a type error
// (only possible from the user's model, e.g. one value per channel) is reported at `bn`.
ir::Node* add_before(ir::Graph& graph, const ir::Node& bn, ir::OpId op,
                     const std::string& node_name, std::vector<ir::Value*> inputs,
                     ir::AttrMap attrs, const std::vector<std::string>& names) {
  std::vector<ir::TensorType> results;
  try {
    results = ir::infer_op(op, inputs, attrs);
  } catch (const ir::OpError& error) {
    throw Error(bn.loc.render(), bn.describe() + ": cannot train it: " + error.message);
  }
  KILN_CHECK(results.size() == names.size()) << op << " has " << results.size() << " results";
  std::vector<std::pair<std::string, ir::TensorType>> named;
  // unique_name only sees existing values, so sibling results rely on distinct base names
  // (y, y.batch_mean, y.batch_var) to stay distinct.
  for (size_t i = 0; i < names.size(); ++i) named.emplace_back(graph.unique_name(names[i]), results[i]);
  return graph.insert_node_before(&bn, op, node_name, std::move(inputs), std::move(attrs), named,
                                  bn.loc);
}

// (1 - momentum) * running + momentum * factor * batch, built before `bn`.
ir::Value* running_update(ir::Graph& graph, const ir::Node& bn, ir::Value* running,
                          ir::Value* batch, double momentum, double factor) {
  const std::string base = bn.name + "." + running->name;
  ir::Value* kept = add_before(graph, bn, ir::OpId::Scale, base + ".kept", {running},
                               {{"factor", 1.0 - momentum}}, {base + ".kept"})
                        ->results[0];
  ir::Value* added = add_before(graph, bn, ir::OpId::Scale, base + ".added", {batch},
                                {{"factor", momentum * factor}}, {base + ".added"})
                         ->results[0];
  return add_before(graph, bn, ir::OpId::Add, base + ".next", {kept, added},
                    {}, {std::string(kNextPrefix) + running->name})
      ->results[0];
}

ir::Value* running_statistic(const ir::Node& bn, int operand, const char* role,
                             std::set<const ir::Value*>& seen) {
  ir::Value* value = bn.inputs[operand];
  if (value->role != ir::ValueRole::Parameter)
    throw Error(bn.loc.render(),
                bn.describe() + ": the running " + role + " %" + value->name +
                    " must be a parameter, so that training can update it");
  if (!seen.insert(value).second)
    throw Error(bn.loc.render(), bn.describe() + ": the running " + role + " parameter '" +
                                     value->name +
                                     "' is shared with another batch_norm; each needs its own");
  return value;
}

// Output names for every output, so the appended ones can be named next.P.
void name_all_outputs(ir::Graph& graph) {
  if (graph.output_names.size() == graph.outputs.size()) return;
  std::vector<std::string> names;
  for (size_t i = 0; i < graph.outputs.size(); ++i) names.push_back(graph.output_name(i));
  graph.output_names = std::move(names);
}

// Builds the training form of `bn` in front of it and redirects its users; `bn` itself is left
// for the caller to erase.
void lower_one(ir::Graph& graph, ir::Node* bn, std::set<const ir::Value*>& seen) {
  ir::Value* running_mean = running_statistic(*bn, 3, "mean", seen);
  ir::Value* running_var = running_statistic(*bn, 4, "var", seen);
  const double momentum = std::get<double>(bn->attrs.at("momentum"));
  const ir::Shape& xs = bn->inputs[0]->type.shape;
  const double count = static_cast<double>(ir::num_elements(xs) / xs[1]);
  if (count < 2)
    throw Error(bn->loc.render(), bn->describe() + ": training needs more than 1 value per "
                                                   "channel, input " +
                                      bn->inputs[0]->type.to_string() + " has 1");
  ir::Value* old_y = bn->results[0];
  const std::string y_name = old_y->name;
  old_y->name = graph.unique_name(y_name + ".inference");  // frees the name for the new y

  ir::Node* train = add_before(graph, *bn, ir::OpId::BatchNormTrain, bn->name,
                               {bn->inputs[0], bn->inputs[1], bn->inputs[2]},
                               {{"epsilon", bn->attrs.at("epsilon")}},
                               {y_name, y_name + ".batch_mean", y_name + ".batch_var"});
  ir::Value* next_mean = running_update(graph, *bn, running_mean, train->results[1], momentum, 1.0);
  ir::Value* next_var = running_update(graph, *bn, running_var, train->results[2], momentum,
                                       count / (count - 1.0));
  graph.replace_all_uses(old_y, train->results[0]);
  graph.outputs.push_back(next_mean);
  graph.output_names.push_back(std::string(kNextPrefix) + running_mean->name);
  graph.outputs.push_back(next_var);
  graph.output_names.push_back(std::string(kNextPrefix) + running_var->name);
}

// Lowers the batch_norm nodes `take` accepts (it is asked once per node, in graph order);
// returns how many.
size_t lower_batch_norms(ir::Graph& graph, const std::function<bool(const ir::Node&)>& take) {
  std::vector<ir::Node*> batch_norms;
  for (const auto& node : graph.nodes())
    if (node->op == ir::OpId::BatchNorm) batch_norms.push_back(node.get());
  std::set<const ir::Value*> seen;
  std::set<const ir::Node*> lowered;
  for (ir::Node* bn : batch_norms) {
    if (!take(*bn)) break;
    name_all_outputs(graph);
    lower_one(graph, bn, seen);
    lowered.insert(bn);
  }
  graph.erase_nodes([&](const ir::Node& node) { return lowered.count(&node) > 0; });
  return lowered.size();
}

}  // namespace

void lower_batch_norm_for_training(ir::Graph& graph) {
  lower_batch_norms(graph, [](const ir::Node&) { return true; });
}

bool LowerBatchNormTraining::run(ir::Graph& graph, PassContext& context) {
  const size_t count = lower_batch_norms(graph, [&](const ir::Node& bn) {
    // take_fuel logs what it allows under --debug-only.
    return context.take_fuel(kPass, "lower " + bn.describe() + " to batch_norm_train, outputs next." +
                                        bn.inputs[3]->name + " and next." + bn.inputs[4]->name);
  });
  return count > 0;
}

}  // namespace kiln::passes
