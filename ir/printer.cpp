#include "ir/printer.h"

#include <fmt/format.h>
#include <set>
#include <sstream>
#include <unordered_map>

#include "ir/lexer.h"
#include "ir/op_registry.h"

namespace kiln::ir {

std::string quoted_string(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

namespace {

std::string sigil_name(char sigil, std::string_view name) {
  return std::string(1, sigil) + (is_plain_name(name) ? std::string(name) : quoted_string(name));
}

// Assigns every value the name it prints under: its own when it has one, else a number
// that no named value uses.
class ValueNamer {
 public:
  explicit ValueNamer(const Graph& graph) {
    std::set<std::string> taken;
    for (const auto& value : graph.values())
      if (!value->name.empty()) taken.insert(value->name);
    int next = 0;
    for (const auto& value : graph.values()) {
      if (!value->name.empty()) {
        names_[value.get()] = value->name;
        continue;
      }
      while (taken.count(std::to_string(next))) ++next;
      names_[value.get()] = std::to_string(next++);
    }
  }
  std::string operator()(const Value* value) const {
    auto it = names_.find(value);
    return sigil_name('%', it == names_.end() ? "<null>" : it->second);
  }

 private:
  std::unordered_map<const Value*, std::string> names_;
};

std::string attrs_to_string(const AttrMap& attrs, const OpDef* def) {
  std::string out;
  for (const auto& [name, value] : attrs) {
    const AttrSpec* spec = def ? def->find_attr(name) : nullptr;
    if (spec && spec->default_value && *spec->default_value == value) continue;
    out += (out.empty() ? "" : ", ") + name + " = " + attribute_to_string(value);
  }
  return out;
}

// The trailing comment naming the arena slices of a node's planned results: "  // arena[0:+256]",
// or with the value names when the node has several results; empty when none is planned.
std::string slices_comment(const Node& node, const MemoryPlan& plan, const ValueNamer& name_of) {
  std::string slices;
  for (const Value* result : node.results) {
    const MemorySlice* slice = plan.find(result);
    if (!slice) continue;
    if (!slices.empty()) slices += ", ";
    if (node.results.size() > 1) slices += name_of(result) + " ";
    slices += fmt::format("arena[{}:+{}]", slice->offset, slice->bytes);
  }
  return slices.empty() ? "" : "  // " + slices;
}

// The name a kernel prints under: its base name and its position in the graph, which is also
// the index codegen gives its CUDA kernel ("conv2d_bias_relu_3").
std::string kernel_label(const Node& kernel, size_t position) {
  return kernel.name + "_" + std::to_string(position);
}

void print_node(std::ostream& out, const Node& node, const ValueNamer& name_of,
                const MemoryPlan* plan, int depth, size_t position = 0) {
  const std::string indent(2 * static_cast<size_t>(depth), ' ');
  out << indent;
  for (size_t i = 0; i < node.results.size(); ++i)
    out << (i ? ", " : "") << name_of(node.results[i]);
  out << " = " << node.op_name();
  if (node.is_kernel()) out << " " << sigil_name('@', kernel_label(node, position));
  out << "(";
  for (size_t i = 0; i < node.inputs.size(); ++i)
    out << (i ? ", " : "") << name_of(node.inputs[i]);
  out << ")";
  const std::string attrs = attrs_to_string(node.attrs, node.def);
  if (!attrs.empty()) out << " {" << attrs << "}";
  out << " : ";
  for (size_t i = 0; i < node.results.size(); ++i)
    out << (i ? ", " : "") << node.results[i]->type.to_string();
  if (node.is_kernel()) {
    // The body, one level deeper; its values print under their own names.
    out << " {\n";
    const ValueNamer body_name_of(*node.body);
    for (const auto& inner : node.body->nodes())
      print_node(out, *inner, body_name_of, nullptr, depth + 1);
    out << indent << "  return";
    for (size_t i = 0; i < node.body->outputs.size(); ++i)
      out << (i ? ", " : " ") << body_name_of(node.body->outputs[i]);
    out << "\n" << indent << "}";
  } else if (!node.name.empty()) {
    out << " loc(" << quoted_string(node.name) << ")";
  }
  if (plan) out << slices_comment(node, *plan, name_of);
  out << "\n";
}

}  // namespace

std::string param_source_to_string(const ParamSource& source) {
  if (const auto* init = std::get_if<InitializerSpec>(&source)) {
    std::string args;
    for (const auto& [name, value] : init->args)
      args += (args.empty() ? "" : ", ") + name + " = " + attribute_to_string(value);
    return init->kind + "(" + args + ")";
  }
  if (const auto* data = std::get_if<InlineData>(&source))
    return "dense<" + attribute_to_string(data->values) + ">";
  const auto& file = std::get<ExternalData>(source);
  return "file(" + quoted_string(file.path) + ", " + quoted_string(file.key) + ")";
}

void print_graph(std::ostream& out, const Graph& graph) {
  const ValueNamer name_of(graph);
  const std::string typed_list_indent = "           ";
  const MemoryPlan* plan = graph.memory_plan ? &*graph.memory_plan : nullptr;

  if (plan) {
    out << fmt::format("// memory plan: arena {} B, naive {} B, lower bound {} B, "
                       "planned/lower bound {:.2f}\n",
                       plan->arena_bytes, plan->naive_bytes, plan->lower_bound_bytes,
                       plan->ratio());
    if (!plan->state_in_place.empty()) {
      int64_t bytes = 0;
      for (const auto& [next, param] : plan->state_in_place) bytes += tensor_bytes(next->type);
      out << fmt::format("// state in place: {} next.* outputs ({} B) are written over their "
                         "parameters\n",
                         plan->state_in_place.size(), bytes);
    }
  }

  out << "graph " << sigil_name('@', graph.name.empty() ? "main" : graph.name) << "(";
  for (size_t i = 0; i < graph.inputs.size(); ++i)
    out << (i ? ", " : "") << name_of(graph.inputs[i]) << ": "
        << type_with_dims(std::string(dtype_name(graph.inputs[i]->type.dtype)),
                          graph.inputs[i]->type.shape, graph.inputs[i]->dynamic_dims, graph.symbols);
  out << ")\n";
  if (!graph.parameters.empty()) {
    out << "    params(";
    for (size_t i = 0; i < graph.parameters.size(); ++i) {
      const Value* param = graph.parameters[i];
      if (i) out << ",\n" << typed_list_indent;
      out << name_of(param) << ": " << param->type.to_string();
      if (param->source) out << " = " << param_source_to_string(*param->source);
    }
    out << ")\n";
  }
  out << "    -> (";
  for (size_t i = 0; i < graph.outputs.size(); ++i)
    out << (i ? ", " : "") << graph.outputs[i]->type.to_string();
  out << ") {\n";

  for (size_t i = 0; i < graph.nodes().size(); ++i)
    print_node(out, *graph.nodes()[i], name_of, plan, 1, i);
  out << "  return";
  for (size_t i = 0; i < graph.outputs.size(); ++i)
    out << (i ? ", " : " ") << name_of(graph.outputs[i]);
  out << "\n}\n";
}

std::string print_graph(const Graph& graph) {
  std::ostringstream out;
  print_graph(out, graph);
  return out.str();
}

}  // namespace kiln::ir
