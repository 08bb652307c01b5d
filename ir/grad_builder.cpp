#include "ir/grad_builder.h"

#include "ir/diagnostic.h"
#include "ir/op_registry.h"

namespace kiln::ir {

GradBuilder::GradBuilder(Graph& graph, const Node& forward)
    : graph_(graph),
      base_name_("grad." + (!forward.name.empty()        ? forward.name
                            : !forward.results.empty() ? forward.results[0]->name
                                                       : std::string(forward.op_name()))) {}

GradBuilder::GradBuilder(Graph& graph, std::string base_name)
    : graph_(graph), base_name_(std::move(base_name)) {}

Value* GradBuilder::op(OpId op, std::vector<Value*> inputs, AttrMap attrs) {
  std::vector<Value*> results = op_results(op, std::move(inputs), std::move(attrs));
  KILN_CHECK(results.size() == 1) << "GradBuilder::op builds single-result ops, " << op_name(op)
                                  << " has " << results.size() << " (use op_results)";
  return results[0];
}

std::vector<Value*> GradBuilder::op_results(OpId op, std::vector<Value*> inputs,
                                            AttrMap attrs) {
  const OpDef* def = &OpRegistry::instance().get(op);
  std::vector<TensorType> types;
  for (const Value* input : inputs) types.push_back(input->type);
  std::vector<TensorType> results;
  try {
    results = infer_op(*def, types, attrs);
  } catch (const OpError& error) {
    std::string operands;
    for (const TensorType& type : types) operands += (operands.empty() ? "" : ", ") + type.to_string();
    KILN_CHECK(false) << "gradient rule built an invalid " << op_name(op) << " (" << operands
                      << ") for " << base_name_ << ": " << error.message;
  }
  // Each result needs a name no value has yet, including its siblings: unique_name only
  // knows the values already in the graph, so later results extend the first one's name.
  const std::string name = graph_.unique_name(base_name_);
  std::vector<std::pair<std::string, TensorType>> named;
  for (size_t i = 0; i < results.size(); ++i)
    named.emplace_back(i == 0 ? name : graph_.unique_name(name + "." + std::to_string(i)),
                       results[i]);
  Node* node = graph_.add_node(op, name, std::move(inputs), std::move(attrs), named);
  return node->results;
}

Value* GradBuilder::reshape(Value* value, const Shape& shape) {
  if (value->type.shape == shape) return value;
  return op(OpId::Reshape, {value}, {{"shape", shape}});
}

Value* GradBuilder::scale(Value* value, double factor) {
  if (factor == 1.0) return value;
  return op(OpId::Scale, {value}, {{"factor", factor}});
}

Value* GradBuilder::broadcast_to(Value* value, const Shape& shape) {
  if (value->type.shape == shape) return value;
  return op(OpId::BroadcastTo, {value}, {{"shape", shape}});
}

Value* GradBuilder::sum_to(Value* grad, const Shape& shape) {
  const Shape& from = grad->type.shape;
  if (from == shape) return grad;
  const size_t lead = from.size() - shape.size();
  KILN_CHECK(from.size() >= shape.size()) << "sum_to: " << shape_to_string(from)
                                          << " does not broadcast from " << shape_to_string(shape);
  std::vector<int64_t> axes;
  for (size_t d = 0; d < from.size(); ++d)
    if (d < lead || (shape[d - lead] == 1 && from[d] != 1)) axes.push_back(static_cast<int64_t>(d));
  Value* summed = axes.empty() ? grad : op(OpId::ReduceSum, {grad}, {{"axes", axes}});
  return reshape(summed, shape);
}

Value* GradBuilder::expand_reduced(Value* grad, const Shape& keep_shape, const Shape& shape) {
  return broadcast_to(reshape(grad, keep_shape), shape);
}

}  // namespace kiln::ir
