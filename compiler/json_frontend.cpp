// JSON model → ir::Graph. Nodes may be listed in any order: they are sorted topologically
// (depth-first, keeping the file's order where it is already valid), and a cycle is reported
// with its path. Each node is checked against the op registry as it is added.
#include "compiler/json_frontend.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "compiler/json_attr.h"
#include "compiler/json_text.h"
#include "compiler/parameters.h"
#include "ir/diagnostic.h"
#include "ir/op_registry.h"
#include "ir/verifier.h"

namespace kiln::compiler {

namespace {

using nlohmann::json;

class Frontend {
 public:
  Frontend(std::string file, std::string base_dir)
      : file_(std::move(file)), base_dir_(std::move(base_dir)) {}

  ir::Graph build(std::string_view text) {
    json root = parse_text(text);
    if (!root.is_object()) fail("", "the model must be a JSON object, got " + kind(root));
    check_keys(root, "", {"format", "version", "name", "weights", "dims", "inputs", "parameters",
                          "nodes", "outputs", "metadata"});
    check_format(root);
    graph_.name = root.contains("name") ? get_string(root["name"], "/name") : "model";
    if (root.contains("weights"))
      weights_file_ = resolve(get_string(root["weights"], "/weights"));

    read_dims(root);
    for_each_item(root, "inputs", /*required=*/true, [&](const json& item, const std::string& at) {
      check_keys(item, at, {"name", "dtype", "shape"});
      const std::string name = get_name(item, at);
      ir::DimMap dims;
      ir::Value* input = graph_.add_input(name, get_type(item, at, &dims), loc(at));
      if (ir::has_dynamic_dims(dims)) input->dynamic_dims = std::move(dims);
      define(name, at, input);
    });
    for_each_item(root, "parameters", false, [&](const json& item, const std::string& at) {
      add_parameter(item, at);
    });
    if (root.contains("nodes")) {
      const json& nodes = root["nodes"];  // a reference: node items point into the document
      if (!nodes.is_array()) fail("/nodes", "must be a list of nodes, got " + kind(nodes));
      for (size_t i = 0; i < nodes.size(); ++i) declare_node(nodes[i], "/nodes/" + std::to_string(i));
    }
    for (size_t i = 0; i < node_items_.size(); ++i) add_node_sorted(i);
    add_outputs(root);

    check_parameter_sources(graph_);
    ir::verify(graph_);
    return std::move(graph_);
  }

 private:
  struct NodeItem {
    const json* item = nullptr;
    std::string at;             // JSON pointer
    std::string op;
    std::string name;
    std::vector<std::string> inputs;
    std::vector<std::string> outputs;
    enum class State { Pending, Visiting, Done } state = State::Pending;
  };

  // --- diagnostics ------------------------------------------------------------------------------
  // Names, keys and values from the file are the user's strings: escaped, so that a newline or
  // a NUL in one cannot split or cut the error line (no frontend message spans lines).
  [[noreturn]] void fail(const std::string& at, const std::string& message) const {
    throw Error(file_ + ": " + escape_for_message(at.empty() ? "/" : at, 400),
                escape_for_message(message, 1000));
  }
  ir::SourceLoc loc(const std::string& at) const { return ir::SourceLoc{file_, at, 0, 0}; }
  static std::string kind(const json& value) { return std::string(value.type_name()); }

  json parse_text(std::string_view text) const {
    return parse_json_text(text, file_, JsonLocation::LineColumn, "not valid JSON");
  }

  void check_keys(const json& object, const std::string& at,
                  const std::vector<std::string>& known) const {
    if (!object.is_object()) fail(at, "expected an object, got " + kind(object));
    for (const auto& [key, value] : object.items()) {
      if (std::find(known.begin(), known.end(), key) != known.end()) continue;
      std::string message = "unknown key '" + key + "'";
      if (auto hint = ir::closest_name(key, known)) message += "; did you mean '" + *hint + "'?";
      fail(at + "/" + key, message);
    }
  }

  void check_format(const json& root) const {
    if (!root.contains("format"))
      fail("", "missing \"format\": \"" + std::string(kModelFormat) + "\" (is this a kiln model?)");
    if (!root["format"].is_string() || root["format"] != kModelFormat)
      fail("/format", "expected \"" + std::string(kModelFormat) + "\", got " + describe_json(root["format"]));
    if (!root.contains("version")) fail("", "missing \"version\"");
    const json& version = root["version"];
    if (!version.is_number_integer() || version.get<int64_t>() < 1)
      fail("/version", "must be a positive integer, got " + describe_json(version));
    if (version.get<int64_t>() > kModelFormatVersion)
      fail("/version", "format version " + describe_json(version) + " is newer than this kiln supports (" +
                           std::to_string(kModelFormatVersion) + ")");
  }

  std::string get_string(const json& value, const std::string& at) const {
    if (!value.is_string()) fail(at, "expected a string, got " + kind(value));
    return value.get<std::string>();
  }

  std::string get_name(const json& item, const std::string& at) const {
    if (!item.contains("name")) fail(at, "missing \"name\"");
    std::string name = get_string(item["name"], at + "/name");
    if (name.empty()) fail(at + "/name", "name must not be empty");
    return name;
  }

  // "dims": {"batch": 64}: the dynamic dims inputs may name, with their bounds
  // (ir/dynamic_dims.h).
  void read_dims(const json& root) {
    if (!root.contains("dims")) return;
    const json& dims = root["dims"];
    if (!dims.is_object())
      fail("/dims", "expected an object of dim names and bounds such as {\"batch\": 64}, got " +
                        kind(dims));
    for (const auto& [name, bound] : dims.items()) {
      const std::string at = "/dims/" + name;
      if (name.empty()) fail(at, "a dynamic dim needs a name");
      if (!bound.is_number_integer() || bound.get<int64_t>() < 1 ||
          (bound.is_number_unsigned() && bound.get<uint64_t>() > INT64_MAX))
        fail(at, "the bound of dynamic dim '" + name + "' must be an integer >= 1, got " +
                     describe_json(bound));
      graph_.symbols.push_back({name, bound.get<int64_t>()});
    }
  }

  // `dims`: an input's type, whose dims may name a dynamic dim of "dims" instead of a number.
  ir::TensorType get_type(const json& item, const std::string& at, ir::DimMap* dims = nullptr) const {
    ir::TensorType type;
    if (item.contains("dtype")) {
      const std::string dtype = get_string(item["dtype"], at + "/dtype");
      auto parsed = ir::parse_dtype(dtype);
      if (!parsed)
        fail(at + "/dtype", "unknown dtype '" + dtype + "'; expected one of " +
                               std::string(ir::dtype_names_list()));
      type.dtype = *parsed;
    }
    if (!item.contains("shape")) fail(at, "missing \"shape\"");
    const json& shape = item["shape"];
    if (!shape.is_array()) fail(at + "/shape", "expected a list of dimensions, got " + kind(shape));
    for (size_t i = 0; i < shape.size(); ++i) {
      const std::string dim_at = at + "/shape/" + std::to_string(i);
      if (dims) dims->push_back({});
      if (dims && shape[i].is_string()) {
        const std::string name = shape[i].get<std::string>();
        const auto symbol = std::find_if(graph_.symbols.begin(), graph_.symbols.end(),
                                         [&](const ir::DimSymbol& s) { return s.name == name; });
        if (symbol == graph_.symbols.end())
          fail(dim_at, "dynamic dim '" + name + "' is not declared; give its bound in \"dims\", "
                       "e.g. \"dims\": {\"" + name + "\": 64}");
        dims->back() = {static_cast<int>(symbol - graph_.symbols.begin()), 1};
        type.shape.push_back(symbol->bound);
        continue;
      }
      if (!shape[i].is_number_integer() ||
          (shape[i].is_number_unsigned() && shape[i].get<uint64_t>() > INT64_MAX))
        fail(dim_at, std::string("dimension must be an integer") + (dims ? " or the name of a dynamic dim" : "") + ", got " + describe_json(shape[i]));
      const int64_t dim = shape[i].get<int64_t>();
      if (dim < 1) fail(dim_at, "dimension must be at least 1, got " + std::to_string(dim));
      type.shape.push_back(dim);
    }
    if (!ir::checked_num_elements(type.shape))
      fail(at + "/shape", "shape " + ir::shape_to_string(type.shape) +
                              " has more than 2^48 elements");
    return type;
  }

  std::string resolve(const std::string& path) const {
    std::filesystem::path p(path);
    if (p.is_relative()) p = std::filesystem::path(base_dir_) / p;
    return std::filesystem::absolute(p).lexically_normal().string();
  }

  template <typename F>
  void for_each_item(const json& root, const char* key, bool required, F&& visit) {
    const std::string at = std::string("/") + key;
    if (!root.contains(key)) {
      if (required) fail("", std::string("missing \"") + key + "\"");
      return;
    }
    const json& list = root[key];
    if (!list.is_array()) fail(at, "expected a list, got " + kind(list));
    for (size_t i = 0; i < list.size(); ++i) visit(list[i], at + "/" + std::to_string(i));
  }

  void define(const std::string& name, const std::string& at, ir::Value* value) {
    auto [it, inserted] = values_.emplace(name, std::make_pair(value, at));
    if (!inserted) fail(at, "name '" + name + "' is already defined at " + it->second.second);
  }

  // --- parameters -------------------------------------------------------------------------------
  void add_parameter(const json& item, const std::string& at) {
    check_keys(item, at, {"name", "dtype", "shape", "init", "data", "file", "key"});
    const std::string name = get_name(item, at);
    const ir::TensorType type = get_type(item, at);
    const int sources = int(item.contains("init")) + int(item.contains("data")) +
                        int(item.contains("file") || item.contains("key"));
    if (sources > 1) fail(at, "parameter '" + name + "': give only one of init, data, file");
    ir::ParamSource source;
    if (item.contains("init")) {
      source = get_initializer(item["init"], at + "/init");
    } else if (item.contains("data")) {
      source = get_inline_data(item["data"], at + "/data", name, type);
    } else {
      ir::ExternalData external;
      if (item.contains("file")) external.path = resolve(get_string(item["file"], at + "/file"));
      else if (weights_file_) external.path = *weights_file_;
      else
        fail(at, "parameter '" + name + "' has no data: give \"init\", \"data\", \"file\", or a "
                 "model-level \"weights\" file");
      external.key = item.contains("key") ? get_string(item["key"], at + "/key") : name;
      source = external;
    }
    define(name, at, graph_.add_parameter(name, type, std::move(source), loc(at)));
  }

  ir::InitializerSpec get_initializer(const json& init, const std::string& at) const {
    if (!init.is_object()) fail(at, "expected an object such as {\"kind\": \"zeros\"}, got " + kind(init));
    if (!init.contains("kind")) fail(at, "missing \"kind\"");
    ir::InitializerSpec spec{get_string(init["kind"], at + "/kind"), {}};
    for (const auto& [key, value] : init.items()) {
      if (key == "kind") continue;
      std::string why;
      auto attr = attribute_from_json(value, why);
      if (!attr) fail(at + "/" + key, why);
      spec.args[key] = *attr;
    }
    return spec;  // checked against its kind by check_parameter_sources
  }

  ir::InlineData get_inline_data(const json& data, const std::string& at, const std::string& name,
                                 const ir::TensorType& type) const {
    if (!data.is_array()) fail(at, "expected a flat list of numbers, got " + kind(data));
    ir::InlineData inline_data;
    for (size_t i = 0; i < data.size(); ++i) {
      const std::string item_at = at + "/" + std::to_string(i);
      if (!data[i].is_number() && !data[i].is_boolean())
        fail(item_at, "expected a number, got " + kind(data[i]));
      const double value = data[i].get<double>();
      if (!ir::fits_dtype(value, type.dtype))
        fail(item_at, "parameter '" + name + "': " + describe_json(data[i]) + " does not fit " +
                          std::string(ir::dtype_name(type.dtype)) +
                          (ir::is_floating(type.dtype) ? " (beyond its largest finite value)"
                                                       : " (not an integer in its range)"));
      inline_data.values.push_back(value);
    }
    const int64_t want = ir::num_elements(type.shape);
    if (static_cast<int64_t>(inline_data.values.size()) != want)
      fail(at, "parameter '" + name + "': " + std::to_string(inline_data.values.size()) +
                   " values, but " + type.to_string() + " has " + std::to_string(want) + " elements");
    return inline_data;
  }

  // --- nodes ------------------------------------------------------------------------------------
  std::vector<std::string> get_names(const json& item, const char* key, const std::string& at) const {
    const json& list = item[key];
    const std::string list_at = at + "/" + key;
    if (!list.is_array()) fail(list_at, "expected a list of value names, got " + kind(list));
    std::vector<std::string> names;
    for (size_t i = 0; i < list.size(); ++i)
      names.push_back(get_string(list[i], list_at + "/" + std::to_string(i)));
    return names;
  }

  void declare_node(const json& item, const std::string& at) {
    check_keys(item, at, {"op", "name", "inputs", "outputs", "attrs"});
    NodeItem node;
    node.item = &item;
    node.at = at;
    if (!item.contains("op")) fail(at, "missing \"op\"");
    node.op = get_string(item["op"], at + "/op");
    node.name = item.contains("name") ? get_string(item["name"], at + "/name")
                                      : node.op + "_" + std::to_string(node_items_.size());
    node.inputs = item.contains("inputs") ? get_names(item, "inputs", at) : std::vector<std::string>{};
    node.outputs = item.contains("outputs") ? get_names(item, "outputs", at)
                                            : std::vector<std::string>{node.name};
    if (node.outputs.empty()) fail(at + "/outputs", "a node needs at least one output name");
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      const std::string out_at = at + "/outputs/" + std::to_string(i);
      if (node.outputs[i].empty()) fail(out_at, "name must not be empty");
      if (auto it = values_.find(node.outputs[i]); it != values_.end())
        fail(out_at, "name '" + node.outputs[i] + "' is already defined at " + it->second.second);
      auto [prev, inserted] = producer_.emplace(node.outputs[i], node_items_.size());
      if (!inserted)
        fail(out_at, "name '" + node.outputs[i] + "' is already defined at " +
                         node_items_[prev->second].at + "/outputs");
    }
    if (!node_names_.emplace(node.name, at).second)
      fail(at + "/name", "node name '" + node.name + "' is already used at " + node_names_[node.name]);
    node_items_.push_back(std::move(node));
  }

  std::string describe(const NodeItem& node) const { return node.op + " '" + node.name + "'"; }

  // Adds node `root` after the producers of its operands, depth first with an explicit stack:
  // a chain of 100,000 nodes listed consumers first must not exhaust the call stack. path_
  // holds the nodes being visited (for report_cycle), next_input the next operand of each.
  void add_node_sorted(size_t root) {
    if (node_items_[root].state == NodeItem::State::Done) return;
    std::vector<size_t> next_input;
    auto enter = [&](size_t index) {
      node_items_[index].state = NodeItem::State::Visiting;
      path_.push_back(index);
      next_input.push_back(0);
    };
    enter(root);
    while (!path_.empty()) {
      NodeItem& node = node_items_[path_.back()];
      if (next_input.back() < node.inputs.size()) {
        const std::string& input = node.inputs[next_input.back()++];
        auto it = producer_.find(input);
        if (it == producer_.end()) continue;
        const NodeItem::State state = node_items_[it->second].state;
        if (state == NodeItem::State::Done) continue;
        if (state == NodeItem::State::Visiting) report_cycle(it->second);
        enter(it->second);
        continue;
      }
      path_.pop_back();
      next_input.pop_back();
      add_node(node);
      node.state = NodeItem::State::Done;
    }
  }

  [[noreturn]] void report_cycle(size_t index) const {
    std::string cycle;
    auto start = std::find(path_.begin(), path_.end(), index);
    for (auto it = start; it != path_.end(); ++it) cycle += describe(node_items_[*it]) + " -> ";
    cycle += describe(node_items_[index]);
    fail(node_items_[index].at, "the graph has a cycle: " + cycle);
  }

  void add_node(const NodeItem& node) {
    const std::string who = describe(node);
    const ir::OpDef* def = ir::OpRegistry::instance().find(node.op);
    if (!def) {
      std::string message = "unknown op '" + node.op + "'";
      if (auto hint = ir::OpRegistry::instance().suggest(node.op))
        message += "; did you mean '" + *hint + "'?";
      fail(node.at + "/op", message);
    }
    std::vector<ir::Value*> operands;
    std::vector<ir::TensorType> operand_types;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      auto it = values_.find(node.inputs[i]);
      if (it == values_.end()) {
        std::vector<std::string> known;
        for (const auto& [name, value] : values_) known.push_back(name);
        std::string message = who + ": unknown value '" + node.inputs[i] + "'";
        if (auto hint = ir::closest_name(node.inputs[i], known))
          message += "; did you mean '" + *hint + "'?";
        fail(node.at + "/inputs/" + std::to_string(i), message);
      }
      operands.push_back(it->second.first);
      operand_types.push_back(it->second.first->type);
    }
    ir::AttrMap attrs;
    if (node.item->contains("attrs")) {
      const json& attrs_json = (*node.item)["attrs"];
      if (!attrs_json.is_object())
        fail(node.at + "/attrs", who + ": expected an object, got " + kind(attrs_json));
      for (const auto& [key, value] : attrs_json.items()) {
        std::string why;
        auto attr = attribute_from_json(value, why);
        if (!attr) fail(node.at + "/attrs/" + key, who + ": attribute '" + key + "': " + why);
        attrs[key] = *attr;
      }
    }
    std::vector<ir::TensorType> types;
    try {
      types = ir::infer_op(*def, operand_types, attrs);
    } catch (const ir::OpError& error) {
      std::string at = node.at;
      if (error.input_index >= 0) at += "/inputs/" + std::to_string(error.input_index);
      else if (!error.attr.empty() && node.item->contains("attrs") &&
               (*node.item)["attrs"].contains(error.attr))
        at += "/attrs/" + error.attr;
      fail(at, who + ": " + error.message);
    }
    if (types.size() != node.outputs.size())
      fail(node.at + "/outputs", who + ": the op has " + std::to_string(types.size()) +
                                     " result(s), " + std::to_string(node.outputs.size()) + " named");
    std::vector<std::pair<std::string, ir::TensorType>> results;
    for (size_t i = 0; i < types.size(); ++i) results.push_back({node.outputs[i], types[i]});
    ir::Node* added = graph_.add_node(def->id, node.name, std::move(operands), std::move(attrs),
                                      results, loc(node.at));
    added->def = def;
    for (size_t i = 0; i < added->results.size(); ++i) {
      added->results[i]->loc = loc(node.at + "/outputs/" + std::to_string(i));
      define(node.outputs[i], node.at + "/outputs/" + std::to_string(i), added->results[i]);
    }
  }

  void add_outputs(const json& root) {
    if (!root.contains("outputs")) fail("", "missing \"outputs\"");
    const std::vector<std::string> names = get_names(root, "outputs", "");
    if (names.empty()) fail("/outputs", "a model needs at least one output");
    for (size_t i = 0; i < names.size(); ++i) {
      auto it = values_.find(names[i]);
      if (it == values_.end()) {
        std::vector<std::string> known;
        for (const auto& [name, value] : values_) known.push_back(name);
        std::string message = "unknown value '" + names[i] + "'";
        if (auto hint = ir::closest_name(names[i], known)) message += "; did you mean '" + *hint + "'?";
        fail("/outputs/" + std::to_string(i), message);
      }
      graph_.outputs.push_back(it->second.first);
      graph_.output_names.push_back(names[i]);
    }
  }

  std::string file_;
  std::string base_dir_;
  std::optional<std::string> weights_file_;
  ir::Graph graph_;
  std::unordered_map<std::string, std::pair<ir::Value*, std::string>> values_;  // name → value, pointer
  std::unordered_map<std::string, size_t> producer_;                             // name → node item
  std::unordered_map<std::string, std::string> node_names_;
  std::vector<NodeItem> node_items_;
  std::vector<size_t> path_;
};

}  // namespace

ir::Graph parse_json_model(std::string_view text, const std::string& display_name,
                           const std::string& base_dir) {
  return Frontend(display_name, base_dir).build(text);
}

}  // namespace kiln::compiler
