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

// The kernels_*.cpp files, each a family of ops with its own table.
enum class KernelFamily {
  Elementwise,
  Index,
  Nn,
  NnGrad,
  Shape,
  Reduce,
  Grad,
  Optimizer,
  NormTrain,
  Fused
};

// Which family evaluates `op`. A switch without a default: a new row in ir/ops.def does not
// compile (-Wswitch; an error with -Werror, as CI builds) until it is placed here, and the
// family's table must then hold its kernel (tests/unit/interpreter_test.cpp checks every op).
// Scalar-expression rows (activations, their backward ops, unary math) need nothing: their
// cases and kernels both come from the row itself.
KernelFamily kernel_family(ir::OpId op) {
  using ir::OpId;
  switch (op) {
#define KILN_OP(...)
#define KILN_ACTIVATION(Id, ...) case OpId::Id: case OpId::Id##Grad:
#define KILN_MATH(Id, ...) case OpId::Id:
#include "ir/ops.def"
    case OpId::Add: case OpId::Sub: case OpId::Mul: case OpId::Div: case OpId::Maximum:
    case OpId::Minimum: case OpId::Neg: case OpId::Abs: case OpId::Clip: case OpId::Cast:
    case OpId::Dropout:
    case OpId::Power:
    case OpId::Mod:
    case OpId::BitShift:
      return KernelFamily::Elementwise;
    case OpId::Equal:
    case OpId::Less:
    case OpId::LessEqual:
    case OpId::Greater:
    case OpId::GreaterEqual:
    case OpId::LogicalAnd:
    case OpId::LogicalOr:
    case OpId::LogicalXor:
    case OpId::LogicalNot:
    case OpId::Where:
    case OpId::IsNan:
    case OpId::IsInf:
    case OpId::Argmax:
    case OpId::Argmin:
    case OpId::Gather:
    case OpId::GatherElements:
    case OpId::GatherElementsGrad:
    case OpId::ExpandTwoFour:
      return KernelFamily::Index;
    case OpId::Conv2d: case OpId::Matmul: case OpId::Dense: case OpId::BiasAdd:
    case OpId::MaxPool2d: case OpId::AvgPool2d: case OpId::GlobalAvgPool: case OpId::BatchNorm:
    case OpId::LayerNorm: case OpId::RmsNorm: case OpId::Softmax: case OpId::LogSoftmax:
    case OpId::Attention: case OpId::AttentionGrad:
      return KernelFamily::Nn;
    case OpId::Conv2dGradInput: case OpId::Conv2dGradWeight: case OpId::MaxPool2dGrad:
    case OpId::AvgPool2dGrad:
      return KernelFamily::NnGrad;
    case OpId::Reshape: case OpId::Flatten: case OpId::Transpose: case OpId::Concat:
    case OpId::Slice:
      return KernelFamily::Shape;
    case OpId::ReduceSum: case OpId::ReduceMean: case OpId::ReduceMax: case OpId::PairwiseSum:
    case OpId::SoftmaxCrossEntropy: case OpId::MseLoss:
      return KernelFamily::Reduce;
    case OpId::BroadcastTo: case OpId::Scale: case OpId::AbsGrad: case OpId::ClipGrad:
    case OpId::SliceGrad: case OpId::MaximumShare: case OpId::MinimumShare:
    case OpId::SoftmaxGrad: case OpId::LogSoftmaxGrad: case OpId::SoftmaxCrossEntropyGrad:
      return KernelFamily::Grad;
    case OpId::SgdUpdate: case OpId::AdamUpdate: case OpId::AdamwUpdate:
    case OpId::LrSchedule: case OpId::GradNormClip: case OpId::LossScaleUpdate:
    case OpId::PruneMask: case OpId::AllReduce: case OpId::Broadcast:
      return KernelFamily::Optimizer;
    case OpId::BatchNormTrain: case OpId::BatchNormTrainGrad: case OpId::LayerNormGrad:
    case OpId::RmsNormGrad: case OpId::BatchNormChunkStats: case OpId::BatchNormChunkSums:
      return KernelFamily::NormTrain;
    case OpId::Kernel:
      return KernelFamily::Fused;
  }
  KILN_CHECK(false) << "op id " << static_cast<int>(op) << " is outside the op table";
  return KernelFamily::Fused;
}

KernelTable make_table(void (*add_kernels)(KernelTable&)) {
  KernelTable table;
  add_kernels(table);
  return table;
}

const KernelTable& family_table(KernelFamily family) {
  static const KernelTable elementwise = make_table(add_elementwise_kernels);
  static const KernelTable index = make_table(add_index_kernels);
  static const KernelTable nn = make_table(add_nn_kernels);
  static const KernelTable nn_grad = make_table(add_nn_grad_kernels);
  static const KernelTable shape = make_table(add_shape_kernels);
  static const KernelTable reduce = make_table(add_reduce_kernels);
  static const KernelTable grad = make_table(add_grad_kernels);
  static const KernelTable optimizer = make_table(add_optimizer_kernels);
  static const KernelTable norm_train = make_table(add_norm_train_kernels);
  static const KernelTable fused = {{ir::OpId::Kernel, run_kernel_body}};
  switch (family) {
    case KernelFamily::Elementwise: return elementwise;
    case KernelFamily::Index: return index;
    case KernelFamily::Nn: return nn;
    case KernelFamily::NnGrad: return nn_grad;
    case KernelFamily::Shape: return shape;
    case KernelFamily::Reduce: return reduce;
    case KernelFamily::Grad: return grad;
    case KernelFamily::Optimizer: return optimizer;
    case KernelFamily::NormTrain: return norm_train;
    case KernelFamily::Fused: return fused;
  }
  KILN_CHECK(false) << "kernel family " << static_cast<int>(family) << " has no table";
  return fused;
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
// node result. `observe` (may be null) sees each node's results; false from it stops the run,
// and evaluate_nodes returns false.
bool evaluate_nodes(const ir::Graph& graph, Environment& env, const NodeObserver* observe = nullptr) {
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
    if (observe != nullptr) {
      std::vector<const ir::Tensor*> observed;
      for (const ir::Value* result : node->results) observed.push_back(env.at(result).get());
      if (!(*observe)(*node, observed)) return false;
    }
  }
  return true;
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
  const KernelTable& table = family_table(kernel_family(op));
  auto it = table.find(op);
  return it == table.end() ? nullptr : &it->second;
}

std::vector<ir::Tensor> run_reference(const ir::Graph& graph,
                                      const std::map<std::string, ir::Tensor>& inputs) {
  return run_reference(graph, inputs, [](const ir::Node&, const std::vector<const ir::Tensor*>&) {
    return true;
  });
}

std::vector<ir::Tensor> run_reference(const ir::Graph& graph,
                                      const std::map<std::string, ir::Tensor>& inputs,
                                      const NodeObserver& observe) {
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

  if (!evaluate_nodes(graph, env, &observe)) return {};

  std::vector<ir::Tensor> outputs;
  for (const ir::Value* output : graph.outputs) {
    auto it = env.find(output);
    KILN_CHECK(it != env.end()) << "graph output '" << output->name << "' is never defined";
    outputs.push_back(*it->second);
  }
  return outputs;
}

}  // namespace kiln::eval
