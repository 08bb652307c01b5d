// The reference interpreter's driver: checks the run's inputs against the graph, then evaluates
// nodes in their (topological) order with the kernels from kernels_*.cpp.
#include "ir/eval/interpreter.h"

#include <algorithm>
#include <memory>

#include "ir/op_registry.h"
#include "ir/kernel_region.h"
#include "ir/eval/kernel_util.h"

namespace kiln::eval {
namespace {

std::vector<ir::Tensor> run_kernel_body(const ir::Node& node,
                                        const std::vector<const ir::Tensor*>& operands);

const KernelTable& kernel_table() {
  static const KernelTable table = [] {
    KernelTable t;
    add_elementwise_kernels(t);
    add_nn_kernels(t);
    add_shape_kernels(t);
    add_reduce_kernels(t);
    add_grad_kernels(t);
    add_optimizer_kernels(t);
    add_norm_train_kernels(t);
    add_nn_grad_kernels(t);
    t.emplace(ir::OpId::Kernel, run_kernel_body);
    return t;
  }();
  return table;
}

// Rejects run inputs the graph does not declare. Checked before missing inputs, so a typo is
// reported as the unknown name (with a suggestion) rather than as the name it was meant to be.
void check_no_unknown_inputs(const ir::Graph& graph,
                             const std::map<std::string, ir::Tensor>& inputs) {
  std::vector<std::string> declared;
  for (const ir::Value* input : graph.inputs) declared.push_back(input->name);
  for (const auto& [name, tensor] : inputs) {
    if (std::find(declared.begin(), declared.end(), name) != declared.end()) continue;
    std::string list;
    for (const std::string& d : declared) list += (list.empty() ? "" : ", ") + d;
    Diagnostic diagnostic{"", "unknown input '" + name + "'; the graph's inputs are: " +
                                  (list.empty() ? "(none)" : list),
                          {}};
    if (auto hint = ir::closest_name(name, declared))
      diagnostic.notes.push_back("did you mean '" + *hint + "'?");
    throw Error(std::move(diagnostic));
  }
}

using Environment = std::map<const ir::Value*, std::shared_ptr<const ir::Tensor>>;

// Runs the graph's nodes in order; `env` holds its inputs and parameters and receives every
// node result.
void evaluate_nodes(const ir::Graph& graph, Environment& env) {
  for (const auto& node : graph.nodes()) {
    const ReferenceKernel* kernel = find_reference_kernel(node->op);
    if (kernel == nullptr)
      throw Error(node->loc.render(), node->describe() +
                                          ": the reference interpreter has no kernel for op '" +
                                          ir::to_string(node->op) + "'");
    std::vector<const ir::Tensor*> operands;
    for (const ir::Value* operand : node->inputs) {
      auto it = env.find(operand);
      KILN_CHECK(it != env.end()) << node->describe() << ": operand '" << operand->name
                                  << "' is used before it is defined";
      operands.push_back(it->second.get());
    }
    std::vector<ir::Tensor> results = (*kernel)(*node, operands);
    KILN_CHECK(results.size() == node->results.size())
        << node->describe() << ": kernel returned " << results.size() << " results, expected "
        << node->results.size();
    for (size_t i = 0; i < results.size(); ++i) {
      KILN_CHECK(results[i].type() == node->results[i]->type)
          << node->describe() << ": kernel result " << i << " is "
          << results[i].type().to_string() << ", inference said "
          << node->results[i]->type.to_string();
      env[node->results[i]] = std::make_shared<const ir::Tensor>(std::move(results[i]));
    }
  }
}

// A fused kernel computes what its body's nodes compute, one after the other.
std::vector<ir::Tensor> run_kernel_body(const ir::Node& node,
                                        const std::vector<const ir::Tensor*>& operands) {
  const ir::Graph& body = *node.body;
  Environment env;
  for (size_t i = 0; i < operands.size(); ++i)
    env[body.inputs[i]] = std::shared_ptr<const ir::Tensor>(operands[i], [](const ir::Tensor*) {});
  evaluate_nodes(body, env);
  std::vector<ir::Tensor> results;
  for (const ir::Value* output : body.outputs) results.push_back(*env.at(output));
  return results;
}

}  // namespace

const ReferenceKernel* find_reference_kernel(ir::OpId op) {
  const KernelTable& table = kernel_table();
  auto it = table.find(op);
  return it == table.end() ? nullptr : &it->second;
}

std::vector<ir::Tensor> run_reference(const ir::Graph& graph,
                                      const std::map<std::string, ir::Tensor>& inputs) {
  check_no_unknown_inputs(graph, inputs);

  // Every value's tensor. Shared pointers let parameters be used without copying their data.
  Environment env;
  for (const ir::Value* input : graph.inputs) {
    auto it = inputs.find(input->name);
    if (it == inputs.end()) throw Error(input->loc.render(), "missing input '" + input->name + "'");
    if (it->second.type() != input->type)
      throw Error(input->loc.render(), "input '" + input->name + "': expected " +
                                           input->type.to_string() + ", got " +
                                           it->second.type().to_string());
    env[input] = std::make_shared<const ir::Tensor>(it->second);
  }
  for (const ir::Value* param : graph.parameters) {
    KILN_CHECK(param->data != nullptr) << "parameter '" << param->name << "' has no data loaded";
    KILN_CHECK(param->data->type() == param->type)
        << "parameter '" << param->name << "' has data of type "
        << param->data->type().to_string() << ", declared " << param->type.to_string();
    env[param] = param->data;
  }

  evaluate_nodes(graph, env);

  std::vector<ir::Tensor> outputs;
  for (const ir::Value* output : graph.outputs) {
    auto it = env.find(output);
    KILN_CHECK(it != env.end()) << "graph output '" << output->name << "' is never defined";
    outputs.push_back(*it->second);
  }
  return outputs;
}

}  // namespace kiln::eval
