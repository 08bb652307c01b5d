#include "ir/op_registry.h"

#include <algorithm>

#include "ir/diagnostic.h"
#include "ir/graph.h"

namespace kiln::ir {

std::string_view op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::Elementwise: return "elementwise";
    case OpKind::Broadcast: return "broadcast";
    case OpKind::Injective: return "injective";
    case OpKind::Reduce: return "reduce";
    case OpKind::OutElementwiseFusable: return "out_elementwise_fusable";
    case OpKind::Opaque: return "opaque";
  }
  return "?";
}

namespace {
template <typename T>
const T& get_attr(const AttrMap& attrs, const std::string& name) {
  auto it = attrs.find(name);
  KILN_CHECK(it != attrs.end()) << "attribute '" << name << "' missing after normalization";
  const T* value = std::get_if<T>(&it->second);
  KILN_CHECK(value != nullptr) << "attribute '" << name << "' has the wrong type";
  return *value;
}
}  // namespace

int64_t InferContext::get_int(const std::string& name) const {
  return get_attr<int64_t>(attrs, name);
}
double InferContext::get_float(const std::string& name) const {
  return get_attr<double>(attrs, name);
}
bool InferContext::get_bool(const std::string& name) const {
  return get_attr<bool>(attrs, name);
}
const std::string& InferContext::get_string(const std::string& name) const {
  return get_attr<std::string>(attrs, name);
}
const std::vector<int64_t>& InferContext::get_ints(const std::string& name) const {
  return get_attr<std::vector<int64_t>>(attrs, name);
}
const std::vector<double>& InferContext::get_floats(const std::string& name) const {
  return get_attr<std::vector<double>>(attrs, name);
}

const AttrSpec* OpDef::find_attr(std::string_view attr_name) const {
  for (const AttrSpec& spec : attrs)
    if (spec.name == attr_name) return &spec;
  return nullptr;
}

const OpRegistry& OpRegistry::instance() {
  static const OpRegistry registry = [] {
    OpRegistry r;
    register_elementwise_ops(r);
    register_nn_ops(r);
    register_shape_ops(r);
    register_reduce_ops(r);
    register_loss_ops(r);
    register_optimizer_ops(r);
    register_kernel_op(r);
    register_grad_ops(r);
    register_norm_train_ops(r);
    register_nn_grad_ops(r);
    register_gradient_rules(r);
    return r;
  }();
  return registry;
}

void register_kernel_op(OpRegistry& registry) {
  OpDef def;
  def.name = std::string(kKernelOp);
  def.summary = "a fused kernel: the nodes of its body run as one kernel (made by fusion passes)";
  def.input_names = {"in"};
  def.min_inputs = 1;
  def.max_inputs = -1;
  def.attrs = {{"kind", AttrType::String, std::nullopt}};
  def.kind = OpKind::Opaque;
  // A kernel's result types are its body's output types (ir/kernel_region.h); the verifier and
  // the parser check them against the body.
  def.infer = [](const InferContext&) -> std::vector<TensorType> {
    throw OpError{"a kernel's result types come from its body"};
  };
  registry.add(std::move(def));
}

void OpRegistry::add(OpDef def) {
  KILN_CHECK(find(def.name) == nullptr) << "op '" << def.name << "' registered twice";
  KILN_CHECK(def.infer != nullptr) << "op '" << def.name << "' has no inference function";
  ops_.push_back(std::move(def));
}

const OpDef* OpRegistry::find(std::string_view name) const {
  for (const OpDef& def : ops_)
    if (def.name == name) return &def;
  return nullptr;
}

OpDef* OpRegistry::find_mutable(std::string_view name) {
  for (OpDef& def : ops_)
    if (def.name == name) return &def;
  return nullptr;
}

std::optional<std::string> OpRegistry::suggest(std::string_view unknown) const {
  std::vector<std::string> names;
  for (const OpDef& def : ops_) names.push_back(def.name);
  return closest_name(unknown, names);
}

namespace {
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substitute = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      diagonal = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitute});
    }
  }
  return row[b.size()];
}

std::string arity_text(const OpDef& def) {
  if (def.max_inputs < 0) return "at least " + std::to_string(def.min_inputs);
  if (def.min_inputs == def.max_inputs) return std::to_string(def.min_inputs);
  return std::to_string(def.min_inputs) + " or " + std::to_string(def.max_inputs);
}
}  // namespace

std::optional<std::string> closest_name(std::string_view word,
                                        const std::vector<std::string>& candidates) {
  std::optional<std::string> best;
  size_t best_distance = std::max<size_t>(2, word.size() / 3) + 1;
  for (const std::string& candidate : candidates) {
    const size_t distance = edit_distance(word, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  return best;
}

std::vector<TensorType> infer_op(const OpDef& def, const std::vector<TensorType>& inputs,
                                 AttrMap& attrs) {
  const int count = static_cast<int>(inputs.size());
  if (count < def.min_inputs || (def.max_inputs >= 0 && count > def.max_inputs)) {
    throw OpError{"expects " + arity_text(def) + " input" +
                  (def.min_inputs == 1 && def.max_inputs == 1 ? "" : "s") + ", got " +
                  std::to_string(count)};
  }
  for (const auto& [name, value] : attrs) {
    const AttrSpec* spec = def.find_attr(name);
    if (spec == nullptr) {
      std::vector<std::string> known;
      for (const AttrSpec& s : def.attrs) known.push_back(s.name);
      std::string message = "unknown attribute '" + name + "'";
      if (auto hint = closest_name(name, known)) message += "; did you mean '" + *hint + "'?";
      else if (known.empty()) message += "; " + def.name + " takes no attributes";
      throw OpError{message, -1, name};
    }
  }
  for (const AttrSpec& spec : def.attrs) {
    auto it = attrs.find(spec.name);
    if (it == attrs.end()) {
      if (!spec.default_value)
        throw OpError{"missing required attribute '" + spec.name + "' (" +
                          std::string(attr_type_name(spec.type)) + ")",
                      -1, spec.name};
      attrs[spec.name] = *spec.default_value;
      continue;
    }
    std::optional<Attribute> coerced = coerce_attribute(it->second, spec.type);
    if (!coerced)
      throw OpError{"attribute '" + spec.name + "' must be a " +
                        std::string(attr_type_name(spec.type)) + ", got a " +
                        std::string(attr_type_name(attr_type_of(it->second))) + " (" +
                        attribute_to_string(it->second) + ")",
                    -1, spec.name};
    it->second = std::move(*coerced);
  }
  return def.infer(InferContext{def.name, inputs, attrs});
}

std::vector<TensorType> infer_op(std::string_view op, const std::vector<Value*>& inputs,
                                 AttrMap& attrs) {
  const OpDef* def = OpRegistry::instance().find(op);
  KILN_CHECK(def != nullptr) << "op '" << op << "' is not registered";
  std::vector<TensorType> types;
  for (const Value* input : inputs) types.push_back(input->type);
  return infer_op(*def, types, attrs);
}

}  // namespace kiln::ir
