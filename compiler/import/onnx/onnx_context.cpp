#include "compiler/import/onnx/onnx_context.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "compiler/import/onnx/onnx_ops.h"
#include "ir/diagnostic.h"
#include "ir/eval/interpreter.h"

namespace kiln::compiler::onnx_import {

std::vector<int64_t> tensor_ints(const ir::Tensor& tensor) {
  std::vector<int64_t> values(static_cast<size_t>(tensor.num_elements()));
  if (tensor.dtype() == ir::DType::I64) {  // exact, INT64_MAX included (Slice's "to the end")
    std::memcpy(values.data(), tensor.data(), values.size() * sizeof(int64_t));
    return values;
  }
  for (size_t i = 0; i < values.size(); ++i) {
    const double v = tensor.get(static_cast<int64_t>(i));
    if (std::isnan(v)) throw ConvertError{"element " + std::to_string(i) + " is NaN where an integer is expected"};
    values[i] = v >= 9.2e18 ? INT64_MAX : v <= -9.2e18 ? INT64_MIN : static_cast<int64_t>(v);
  }
  return values;
}

// --- GraphBuilder --------------------------------------------------------------------------------

namespace {
// `base`, or base.N for the first N from `next[base]` on that is free. Starting where the last
// search for the same base ended keeps a base asked for n times (an unrolled recurrence's
// "y.add") linear in n instead of quadratic.
std::string unique_in(std::unordered_set<std::string>& used, std::unordered_map<std::string, int>& next,
                      const std::string& base) {
  if (used.insert(base).second) return base;
  int& from = next[base];
  for (int i = std::max(from, 1);; ++i) {
    std::string candidate = base + "." + std::to_string(i);
    if (used.insert(candidate).second) {
      from = i + 1;
      return candidate;
    }
  }
}
}  // namespace

std::string GraphBuilder::unique_value_name(const std::string& base) {
  return unique_in(used_value_names, next_value_suffix, base.empty() ? std::string("value") : base);
}
std::string GraphBuilder::unique_node_name(const std::string& base) {
  return unique_in(used_node_names, next_node_suffix, base);
}

ir::Value* GraphBuilder::materialize(const Operand& operand) {
  if (operand.value) return operand.value;
  KILN_CHECK(operand.constant != nullptr) << "materializing an absent operand";
  auto it = parameters.find(operand.constant.get());
  if (it != parameters.end()) return it->second;
  const ir::Tensor& tensor = *operand.constant;
  // An initializer refers to the model file (printed IR stays small and reads it back); a
  // constant made at import carries its values.
  ir::ParamSource source = operand.initializer && !model_path.empty()
                               ? ir::ParamSource(ir::ExternalData{model_path, operand.name})
                               : ir::ParamSource(ir::InlineData{tensor.to_doubles()});
  ir::Value* param = graph.add_parameter(unique_value_name(operand.name), tensor.type(), std::move(source),
                                         ir::SourceLoc{file, "initializer '" + operand.name + "'", 0, 0});
  param->data = operand.constant;
  parameters.emplace(operand.constant.get(), param);
  return param;
}

// --- NodeContext ---------------------------------------------------------------------------------

NodeContext::NodeContext(GraphBuilder& builder, const onnx::NodeProto& node, std::string node_name,
                         int opset, std::vector<Operand> inputs, ir::SourceLoc loc)
    : builder_(builder), node_(node), node_name_(std::move(node_name)), opset_(opset),
      inputs_(std::move(inputs)), loc_(std::move(loc)) {}

int NodeContext::num_outputs() const {
  int count = node_.output_size();
  while (count > 0 && node_.output(count - 1).empty()) --count;
  return count;
}

bool NodeContext::output_used(int index) const {
  return index < node_.output_size() && !node_.output(index).empty();
}

void NodeContext::fail(const std::string& message) const { throw ConvertError{message}; }

const Operand& NodeContext::input(int index) const {
  if (index < num_inputs() && inputs_[index].empty)
    fail("input " + std::to_string(index) + " is an empty tensor (kiln tensors have at least one element)");
  if (!has_input(index))
    fail("input " + std::to_string(index) + " is required but " +
         (index < num_inputs() ? "empty" : "missing"));
  return inputs_[index];
}

std::vector<int64_t> NodeContext::const_ints(int index, const char* what) const {
  const Operand& operand = input(index);
  const std::string named = std::string(what) + " (input " + std::to_string(index) + " '" + node_.input(index) + "')";
  if (!operand.given && !operand.is_constant())
    fail(named + " must be known at import: kiln needs static shapes, and it is computed at run time");
  try {
    return tensor_ints(operand.given ? *operand.given : *operand.constant);
  } catch (const ConvertError& error) {
    fail(named + ": " + error.message);
  }
  return {};
}

std::vector<double> NodeContext::const_doubles(int index, const char* what) const {
  const Operand& operand = input(index);
  if (operand.given) return operand.given->to_doubles();
  if (!operand.is_constant())
    fail(std::string(what) + " (input " + std::to_string(index) + " '" + node_.input(index) +
         "') must be a constant");
  return operand.constant->to_doubles();
}

const onnx::AttributeProto* NodeContext::find_attr(const std::string& name) const {
  for (const auto& attr : node_.attribute())
    if (attr.name() == name) return &attr;
  return nullptr;
}

int64_t NodeContext::attr_int(const std::string& name, int64_t default_value) const {
  const auto* attr = find_attr(name);
  return attr ? attr->i() : default_value;
}
double NodeContext::attr_float(const std::string& name, double default_value) const {
  const auto* attr = find_attr(name);
  return attr ? attr->f() : default_value;
}
std::string NodeContext::attr_string(const std::string& name, const std::string& default_value) const {
  const auto* attr = find_attr(name);
  return attr ? attr->s() : default_value;
}
std::vector<int64_t> NodeContext::attr_ints(const std::string& name,
                                            std::vector<int64_t> default_value) const {
  const auto* attr = find_attr(name);
  if (!attr) return default_value;
  return {attr->ints().begin(), attr->ints().end()};
}
std::vector<double> NodeContext::attr_floats(const std::string& name) const {
  const auto* attr = find_attr(name);
  if (!attr) return {};
  return {attr->floats().begin(), attr->floats().end()};
}
std::vector<std::string> NodeContext::attr_strings(const std::string& name) const {
  const auto* attr = find_attr(name);
  if (!attr) return {};
  return {attr->strings().begin(), attr->strings().end()};
}
const onnx::TensorProto* NodeContext::attr_tensor(const std::string& name) const {
  const auto* attr = find_attr(name);
  return attr && attr->has_t() ? &attr->t() : nullptr;
}

const onnx::GraphProto* NodeContext::attr_graph(const std::string& name) const {
  const auto* attr = find_attr(name);
  return attr && attr->has_g() ? &attr->g() : nullptr;
}

void NodeContext::check_attrs(const std::vector<std::string>& known) const {
  for (const auto& attr : node_.attribute())
    if (std::find(known.begin(), known.end(), attr.name()) == known.end())
      fail("attribute '" + attr.name() + "' is not supported");
}

Operand NodeContext::constant(ir::Tensor tensor, const std::string& suffix) {
  Operand operand;
  operand.constant = std::make_shared<const ir::Tensor>(std::move(tensor));
  operand.name = node_name_ + "." + suffix;
  return operand;
}

Operand NodeContext::scalar(ir::DType dtype, double value) {
  return constant(ir::Tensor::from_doubles(ir::TensorType{dtype, {}}, {value}), "scalar");
}

Operand NodeContext::fill(ir::DType dtype, const ir::Shape& shape, double value) {
  const Operand one = scalar(dtype, value);
  if (shape.empty()) return one;
  return emit(ir::OpId::BroadcastTo, {one}, {{"shape", shape}});
}

Operand NodeContext::positions(int rank, int axis, int64_t n) {
  ir::Shape shape(static_cast<size_t>(rank), 1);
  shape[static_cast<size_t>(axis)] = n;
  check_fold_size({ir::DType::I64, shape}, "the positions along axis " + std::to_string(axis));
  std::vector<double> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = static_cast<double>(i);
  return constant(ir::Tensor::from_doubles({ir::DType::I64, shape}, values), "positions");
}

Operand NodeContext::reshape(const Operand& x, const ir::Shape& shape) {
  if (x.type().shape == shape) return x;
  return emit(ir::OpId::Reshape, {x}, {{"shape", shape}});
}

void NodeContext::check_fold_size(const ir::TensorType& type, const std::string& what) const {
  const std::optional<int64_t> elements = ir::checked_num_elements(type.shape);
  if (!elements || *elements > kMaxFoldedBytes / static_cast<int64_t>(ir::dtype_size(type.dtype)))
    fail(what + " would be " + type.to_string() + ", over the " + std::to_string(kMaxFoldedBytes >> 20) +
         " MiB that import builds constants up to");
}

ir::Tensor NodeContext::evaluate(ir::OpId op, const std::vector<const ir::Tensor*>& operands,
                                 const ir::AttrMap& attrs, const ir::TensorType& result) const {
  ir::Graph scratch;
  std::vector<ir::Value*> values;
  std::map<std::string, ir::Tensor> feeds;
  for (size_t i = 0; i < operands.size(); ++i) {
    const std::string name = "in" + std::to_string(i);
    values.push_back(scratch.add_input(name, operands[i]->type()));
    feeds.emplace(name, *operands[i]);
  }
  ir::Node* node = scratch.add_node(op, node_name_, values, attrs, {{"out", result}});
  scratch.outputs = node->results;
  return std::move(eval::run_reference(scratch, feeds).at(0));
}

Operand NodeContext::fold(ir::OpId op, const std::vector<Operand>& operands, const ir::AttrMap& attrs,
                          const ir::TensorType& result) {
  std::vector<const ir::Tensor*> tensors;
  for (const Operand& operand : operands) tensors.push_back(operand.constant.get());
  try {
    return constant(evaluate(op, tensors, attrs, result), "folded");
  } catch (const Error& error) {
    fail("folding " + std::string(ir::op_name(op)) + " at import: " + error.diagnostic().message);
  }
}

Operand NodeContext::emit(ir::OpId op, const std::vector<Operand>& operands, ir::AttrMap attrs) {
  const ir::OpDef& def = ir::OpRegistry::instance().get(op);
  std::vector<ir::TensorType> types;
  bool all_constant = true;
  for (const Operand& operand : operands) {
    KILN_CHECK(operand.present()) << "emitting " << def.name << " with an absent operand";
    types.push_back(operand.type());
    all_constant &= operand.is_constant();
  }
  std::vector<ir::TensorType> results;
  try {
    results = ir::infer_op(def, types, attrs);
  } catch (const ir::OpError& error) {
    fail(def.name + ": " + error.message);
  }
  KILN_CHECK(results.size() == 1) << def.name << " has " << results.size() << " results";
  // Folding may not blow constants up: a result within kMaxFoldedBytes that is at most
  // kMaxFoldGrowth bigger than its operands (a transposed weight folds; a broadcast of a scalar
  // to a big pad block runs at run time).
  auto bytes = [](const ir::TensorType& type) {
    return ir::num_elements(type.shape) * static_cast<int64_t>(ir::dtype_size(type.dtype));
  };
  int64_t operand_bytes = 0;
  for (const Operand& operand : operands) operand_bytes += bytes(operand.type());
  const int64_t result_elements = ir::num_elements(results[0].shape);
  const bool small = result_elements <= kMaxFoldedBytes / static_cast<int64_t>(ir::dtype_size(results[0].dtype)) &&
                     bytes(results[0]) <= operand_bytes + kMaxFoldGrowth;
  const bool foldable = small && op != ir::OpId::Dropout && eval::find_reference_kernel(op);
  if (all_constant && foldable) return fold(op, operands, attrs, results[0]);
  // Operands known now (constants, and graph inputs whose values this import was given): the
  // result is computed for the import too, so shape arithmetic on a given input (a window's
  // size, a range's limit) stays known downstream, while the node still runs at run time. Only
  // small results: shape arithmetic is, and a whole model is not evaluated twice.
  std::vector<const ir::Tensor*> known;
  for (const Operand& operand : operands)
    if (const ir::Tensor* tensor = operand.constant ? operand.constant.get() : operand.given.get())
      known.push_back(tensor);
  std::shared_ptr<const ir::Tensor> given;
  if (foldable && known.size() == operands.size() && ir::num_elements(results[0].shape) <= kMaxGivenElements) {
    try {
      given = std::make_shared<const ir::Tensor>(evaluate(op, known, attrs, results[0]));
    } catch (const Error&) {
      // The values given make the op fail; it fails the same way when run.
    }
  }

  std::vector<ir::Value*> values;
  for (const Operand& operand : operands) values.push_back(builder_.materialize(operand));
  const std::string base = node_.output_size() > 0 && !node_.output(0).empty() ? node_.output(0)
                                                                               : node_name_;
  const std::string node_name =
      builder_.unique_node_name(emitted_ == 0 ? node_name_ : node_name_ + "." + def.name);
  ++emitted_;
  ir::Node* node = builder_.graph.add_node(op, node_name, std::move(values), std::move(attrs),
                                           {{builder_.unique_value_name(base + "." + def.name), results[0]}},
                                           loc_);
  node->results[0]->loc = loc_;
  Operand result;
  result.value = node->results[0];
  result.given = std::move(given);
  return result;
}

}  // namespace kiln::compiler::onnx_import
