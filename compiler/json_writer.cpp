#include "compiler/json_writer.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>

#include "compiler/json_frontend.h"
#include "compiler/output_file.h"
#include "compiler/safetensors.h"
#include "ir/diagnostic.h"
#include "ir/op_registry.h"

namespace kiln::compiler {

namespace {
using nlohmann::ordered_json;

ordered_json attribute_json(const ir::Attribute& value) {
  return std::visit([](const auto& v) { return ordered_json(v); }, value);
}

ordered_json type_json(const std::string& name, const ir::TensorType& type) {
  return ordered_json{{"name", name}, {"dtype", std::string(ir::dtype_name(type.dtype))}, {"shape", type.shape}};
}

// The name each value is written under. kiln JSON names a model's outputs by their values, so
// an output whose model name differs from its value's (a Keras layer's output is the last of
// the ops it emitted, its name the layer's) is written under the model name, and a value that
// already held that name moves aside. Inputs and parameters keep theirs (users and weight
// files refer to them).
std::unordered_map<const ir::Value*, std::string> written_names(const ir::Graph& graph) {
  std::unordered_map<const ir::Value*, std::string> names;
  std::unordered_set<std::string> taken;
  for (const ir::Value* v : graph.inputs) taken.insert(names[v] = v->name);
  for (const ir::Value* v : graph.parameters) taken.insert(names[v] = v->name);
  for (size_t i = 0; i < graph.outputs.size(); ++i) {
    const ir::Value* output = graph.outputs[i];
    if (names.count(output) || taken.count(graph.output_name(i))) continue;
    taken.insert(names[output] = graph.output_name(i));
  }
  for (const auto& node : graph.nodes())
    for (const ir::Value* result : node->results) {
      if (names.count(result)) continue;
      std::string name = result->name;
      for (int suffix = 1; taken.count(name); ++suffix) name = result->name + "." + std::to_string(suffix);
      taken.insert(names[result] = name);
    }
  return names;
}
}  // namespace

void write_json_model(const ir::Graph& graph, const std::string& json_path,
                      const std::string& weights_path) {
  ordered_json root;
  root["format"] = std::string(kModelFormat);
  root["version"] = kModelFormatVersion;
  root["name"] = graph.name;
  const std::filesystem::path json_dir = std::filesystem::absolute(json_path).parent_path();
  root["weights"] = std::filesystem::absolute(weights_path).lexically_relative(json_dir).string();
  if (!graph.symbols.empty()) {
    root["dims"] = ordered_json::object();
    for (const ir::DimSymbol& symbol : graph.symbols) root["dims"][symbol.name] = symbol.bound;
  }
  root["inputs"] = ordered_json::array();
  for (const ir::Value* input : graph.inputs) {
    ordered_json item = type_json(input->name, input->type);
    for (size_t d = 0; d < input->dynamic_dims.size(); ++d)
      if (input->dynamic_dims[d].is_dynamic())
        item["shape"][d] = graph.symbols[static_cast<size_t>(input->dynamic_dims[d].symbol)].name;
    root["inputs"].push_back(std::move(item));
  }
  root["parameters"] = ordered_json::array();
  std::map<std::string, ir::Tensor> tensors;
  for (const ir::Value* param : graph.parameters) {
    KILN_CHECK(param->data != nullptr) << "parameter '" << param->name << "' has no data loaded";
    root["parameters"].push_back(type_json(param->name, param->type));
    tensors.emplace(param->name, *param->data);
  }
  const std::unordered_map<const ir::Value*, std::string> names = written_names(graph);
  root["nodes"] = ordered_json::array();
  for (const auto& node : graph.nodes()) {
    ordered_json item{{"op", std::string(node->op_name())}, {"name", node->name}};
    item["inputs"] = ordered_json::array();
    for (const ir::Value* input : node->inputs) item["inputs"].push_back(names.at(input));
    item["outputs"] = ordered_json::array();
    for (const ir::Value* result : node->results) item["outputs"].push_back(names.at(result));
    if (!node->attrs.empty()) {
      ordered_json attrs = ordered_json::object();
      for (const auto& [name, value] : node->attrs) {
        // Defaults are left out: shorter, and JSON has no infinity (clip's open bounds).
        const ir::AttrSpec* spec = node->def ? node->def->find_attr(name) : nullptr;
        if (spec && spec->default_value && *spec->default_value == value) continue;
        if (const double* number = std::get_if<double>(&value); number && !std::isfinite(*number))
          throw Error(json_path, node->describe() + ": attribute '" + name +
                                     "' is not finite, which JSON cannot hold");
        attrs[name] = attribute_json(value);
      }
      item["attrs"] = attrs;
    }
    root["nodes"].push_back(item);
  }
  root["outputs"] = ordered_json::array();
  for (const ir::Value* output : graph.outputs) root["outputs"].push_back(names.at(output));
  write_safetensors(weights_path, tensors);
  write_file_atomically(json_path, root.dump(2) + "\n");
}

}  // namespace kiln::compiler
