#include "ir/op_registry.h"

#include <algorithm>
#include <limits>

#include "ir/diagnostic.h"
#include "ir/graph.h"
#include "ir/ops/type_rules.h"

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

namespace {

using Ints = std::vector<int64_t>;

// One OpDef per row of the table.
std::vector<OpDef> table_rows() {
  std::vector<OpDef> rows;
  std::string section;  // the last KILN_SECTION
#define KILN_LIST(...) {__VA_ARGS__}
#define KILN_ATTR(attr_name, type, ...) AttrSpec{#attr_name, AttrType::type, Attribute{__VA_ARGS__}, {}},
#define KILN_REQUIRED_ATTR(attr_name, type) AttrSpec{#attr_name, AttrType::type, std::nullopt, {}},
#define KILN_CHOICE_ATTR(attr_name, default_value, choices) \
  AttrSpec{#attr_name, AttrType::String, Attribute{std::string(default_value)}, KILN_LIST choices},
#define KILN_OP(Id, op_name, op_kind, rule, inputs, min_in, max_in, op_summary, ...)      \
  rows.emplace_back();                                                                  \
  rows.back().id = OpId::Id;                                                            \
  rows.back().name = op_name;                                                           \
  rows.back().summary = op_summary;                                                     \
  rows.back().input_names = KILN_LIST inputs;                                           \
  rows.back().min_inputs = min_in;                                                      \
  rows.back().max_inputs = max_in;                                                      \
  rows.back().attrs = {__VA_ARGS__};                                                    \
  rows.back().kind = OpKind::op_kind;                                                   \
  rows.back().infer = type_rules::rule;                                                \
  rows.back().type_rule = #rule;                                                       \
  rows.back().type_rule_words = type_rules::rule##_words;                              \
  rows.back().section = section;                                                       \
  rows.back().in_place = OpKind::op_kind == OpKind::Elementwise;
#define KILN_SECTION(title) section = title;
#define KILN_ACTIVATION(Id, op_name, saved, forward, gradient, in_place_row, op_summary, ...) \
  KILN_OP(Id, op_name, Elementwise, infer_float_unary, ("x"), 1, 1, op_summary, __VA_ARGS__)      \
  rows.back().forward_expr = #forward;                                                       \
  rows.back().in_place = in_place_row;                                                       \
  rows.back().gradient_expr = #gradient;                                                     \
  rows.back().grad_op = OpId::Id##Grad;                                                      \
  rows.back().has_grad_op = true;                                                            \
  rows.back().grad_saves_result = std::string_view(#saved) == "y";                          \
  KILN_OP(Id##Grad, op_name "_grad", Elementwise, infer_like_dy, ("dy", #saved), 2, 2,       \
          "backward of " op_name, __VA_ARGS__)                                             \
  rows.back().forward_expr = #gradient;
#define KILN_MATH(Id, op_name, forward, op_summary, ...)                             \
  KILN_OP(Id, op_name, Elementwise, infer_float_unary, ("x"), 1, 1, op_summary, __VA_ARGS__) \
  rows.back().forward_expr = #forward;
#include "ir/ops.def"
#undef KILN_LIST
#undef KILN_ATTR
#undef KILN_REQUIRED_ATTR
#undef KILN_CHOICE_ATTR
  return rows;
}

}  // namespace

const OpRegistry& OpRegistry::instance() {
  static const OpRegistry registry = [] {
    OpRegistry r;
    r.ops_ = table_rows();
    for (size_t i = 0; i < r.ops_.size(); ++i) {
      KILN_CHECK(static_cast<size_t>(r.ops_[i].id) == i) << "op table out of order at " << i;
      KILN_CHECK(r.find(r.ops_[i].name) == &r.ops_[i])
          << "op '" << r.ops_[i].name << "' is in the table twice";
    }
    register_gradient_rules(r);
    return r;
  }();
  return registry;
}

std::optional<int> AttrSpec::choice_index(std::string_view value) const {
  for (size_t i = 0; i < choices.size(); ++i)
    if (choices[i] == value) return static_cast<int>(i);
  return std::nullopt;
}

const OpDef* OpRegistry::find(std::string_view name) const {
  const std::optional<OpId> id = find_op_id(name);
  return id ? &get(*id) : nullptr;
}

namespace type_rules {
Types infer_kernel(const InferContext&) {
  throw OpError{"a kernel's result types come from its body"};
}
}  // namespace type_rules

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
    if (!spec.choices.empty()) {
      const std::string& value = std::get<std::string>(it->second);
      if (!spec.choice_index(value)) {
        std::string allowed;
        for (const std::string& choice : spec.choices)
          allowed += (allowed.empty() ? "\"" : " or \"") + choice + "\"";
        throw OpError{"attribute '" + spec.name + "' must be " + allowed + ", got \"" + value +
                          "\"",
                      -1, spec.name};
      }
    }
  }
  return def.infer(InferContext{def.name, inputs, attrs});
}

std::vector<TensorType> infer_op(OpId op, const std::vector<Value*>& inputs, AttrMap& attrs) {
  std::vector<TensorType> types;
  for (const Value* input : inputs) types.push_back(input->type);
  return infer_op(OpRegistry::instance().get(op), types, attrs);
}

void reinfer_results(Node& node) {
  std::vector<TensorType> types;
  for (const Value* input : node.inputs) types.push_back(input->type);
  const std::vector<TensorType> results = infer_op(*node.def, types, node.attrs);
  KILN_CHECK(results.size() == node.results.size()) << node.describe() << ": result count changed";
  for (size_t i = 0; i < results.size(); ++i) node.results[i]->type = results[i];
}

}  // namespace kiln::ir
