// ModelProto → ir::Graph. See onnx_importer.h for the contract and onnx_ops.h for the op table.
#include "compiler/import/onnx/onnx_importer.h"
#include "compiler/tensor_file_util.h"

#include <google/protobuf/io/coded_stream.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <climits>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "compiler/import/onnx/onnx_context.h"
#include "compiler/import/onnx/onnx_ops.h"
#include "compiler/import/onnx/onnx_tensor.h"
#include "ir/diagnostic.h"
#include "ir/op_registry.h"
#include "ir/utf8.h"
#include "ir/verifier.h"

namespace kiln::compiler {

namespace {
using namespace onnx_import;

// Protobuf wire format: the first field of a serialized ModelProto is ir_version (field 1,
// varint: tag 0x08) in every exporter kiln knows, followed by a small version number; text
// never starts with a backspace byte.
bool starts_like_model_proto(std::string_view bytes) {
  return bytes.size() >= 2 && bytes[0] == '\x08' && bytes[1] >= 1 && bytes[1] <= 30;
}

std::string graph_name(const std::string& name) {
  std::string out;
  for (char c : name) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out.empty() ? "model" : out;
}

// Control flow is inlined at import (If branches, every Scan step): at most this many subgraph
// nodes in all, so nested loops cannot multiply into a graph nobody can build.
constexpr int64_t kMaxInlinedNodes = int64_t{1} << 17;

class Importer : public SubgraphImporter {
 public:
  Importer(std::string file, std::string base_dir, const ImportOptions& options, std::string model_path)
      : file_(std::move(file)), base_dir_(std::move(base_dir)), options_(options) {
    builder_.file = file_;
    builder_.model_path = std::move(model_path);
    builder_.subgraphs = this;
  }

  std::optional<std::vector<Operand>> import_subgraph(const onnx::GraphProto& body,
                                                      const std::vector<std::pair<std::string, Operand>>& bound,
                                                      const std::string& scope) override {
    // The names the subgraph binds or defines, with what they meant outside, restored after:
    // a subgraph's names are its own (a Scan body defines the same ones at every step).
    std::vector<std::pair<std::string, std::optional<Operand>>> outer;
    auto shadow = [&](const std::string& name) {
      if (name.empty()) return;
      const auto it = values_.find(name);
      outer.emplace_back(name, it == values_.end() ? std::nullopt : std::optional<Operand>(it->second));
    };
    for (const auto& [name, operand] : bound) shadow(name);
    for (const auto& init : body.initializer()) shadow(init.name());
    for (const auto& node : body.node())
      for (const std::string& output : node.output()) shadow(output);
    const size_t errors_before = errors_.size();
    // Nested Scans multiply: every inlined node counts against one budget for the whole import.
    inlined_nodes_ += std::max(body.node_size(), 1);  // an empty body still costs a step
    if (inlined_nodes_ > kMaxInlinedNodes) {
      error(scope, "inlining the subgraphs would take over " + std::to_string(kMaxInlinedNodes) +
                       " nodes in all (nested Scan bodies multiply); kiln inlines control flow at import");
      return std::nullopt;
    }
    const std::string outer_scope = scope_;
    scope_ = scope + ": ";
    for (const auto& [name, operand] : bound) values_[name] = operand;
    for (const auto& init : body.initializer()) {
      // A Scan body is imported once per step: its initializers are read once and shared, so
      // a weight in the body becomes one parameter, not one per step.
      if (const auto cached = inlined_initializers_.find(&init); cached != inlined_initializers_.end()) {
        values_[init.name()] = cached->second;
        continue;
      }
      add_initializer(init);
      if (const auto it = values_.find(init.name()); it != values_.end()) {
        // Not a reference into the model file by name: OnnxInitializers reads the main graph's
        // initializers only, and sibling subgraphs may reuse a name. Its data travels instead.
        it->second.initializer = false;
        inlined_initializers_[&init] = it->second;
      }
    }
    for (int i = 0; i < body.node_size(); ++i) add_node(i, body.node(i));
    std::vector<Operand> outputs;
    for (const auto& output : body.output()) {
      const auto it = values_.find(output.name());
      if (it != values_.end() && !poisoned_.count(output.name())) outputs.push_back(it->second);
      else if (!poisoned_.count(output.name())) error(scope_ + "output '" + output.name() + "'", "is not produced by any node");
    }
    scope_ = outer_scope;
    for (auto it = outer.rbegin(); it != outer.rend(); ++it) {
      if (it->second) values_[it->first] = *it->second;
      else values_.erase(it->first);
    }
    if (errors_.size() != errors_before || outputs.size() != static_cast<size_t>(body.output_size())) return std::nullopt;
    return outputs;
  }

  ir::Graph run(const std::string& bytes) {
    parse(bytes);
    read_opset();
    check_names();
    const onnx::GraphProto& graph = model_.graph();
    builder_.graph.name = graph_name(graph.name());
    for (const auto& init : graph.initializer()) add_initializer(init);
    for (const auto& input : graph.input())
      if (!values_.count(input.name()) && !poisoned_.count(input.name())) add_input(input);
    check_unused_hints(graph);
    for (int i = 0; i < graph.node_size(); ++i) add_node(i, graph.node(i));
    for (const auto& output : graph.output()) add_output(output);
    if (!errors_.empty()) report();
    ir::verify(builder_.graph);
    return std::move(builder_.graph);
  }

 private:
  void parse(const std::string& bytes) {
    google::protobuf::io::CodedInputStream stream(reinterpret_cast<const uint8_t*>(bytes.data()),
                                                  static_cast<int>(std::min<size_t>(bytes.size(), INT_MAX)));
    stream.SetTotalBytesLimit(INT_MAX);
    if (!model_.ParseFromCodedStream(&stream) || !stream.ConsumedEntireMessage())
      throw Error(file_, "not a valid ONNX model: the protobuf message does not parse");
    if (!model_.has_graph()) throw Error(file_, "the ONNX model has no graph");
  }

  void read_opset() {
    for (const auto& entry : model_.opset_import())
      if (entry.domain().empty() || entry.domain() == "ai.onnx") opset_ = static_cast<int>(entry.version());
    if (opset_ == 0 && model_.opset_import_size() == 0) opset_ = 1;  // IR version 2 and older
    if (opset_ > kMaxOpset)
      throw Error(file_, "the model imports opset " + std::to_string(opset_) +
                             "; kiln supports opsets " + std::to_string(kMinOpset) + " to " +
                             std::to_string(kMaxOpset));
  }

  // ONNX names are proto2 strings, which protobuf does not check: a corrupt file can hold any
  // bytes there, which would reach the JSON kiln writes (and its terminals) half-formed.
  void check_names() {
    const onnx::GraphProto& graph = model_.graph();
    auto check = [&](const std::string& name, const std::string& where) {
      if (const std::optional<size_t> at = invalid_utf8_at(name))
        error(where, "name '" + escape_for_message(name) + "' is not valid UTF-8 (at byte " + std::to_string(*at) + ")");
    };
    for (int i = 0; i < graph.input_size(); ++i) check(graph.input(i).name(), "graph input " + std::to_string(i));
    for (int i = 0; i < graph.output_size(); ++i) check(graph.output(i).name(), "graph output " + std::to_string(i));
    for (int i = 0; i < graph.initializer_size(); ++i) check(graph.initializer(i).name(), "initializer " + std::to_string(i));
    for (int i = 0; i < graph.node_size(); ++i) {
      const onnx::NodeProto& node = graph.node(i);
      const std::string where = "node " + std::to_string(i);
      check(node.name(), where);
      for (const std::string& name : node.input()) check(name, where + " input");
      for (const std::string& name : node.output()) check(name, where + " output");
    }
    if (!errors_.empty()) report();
  }

  void error(const std::string& where, const std::string& message) {
    errors_.push_back(Diagnostic{file_ + ": " + where, message, {}});
  }

  void add_initializer(const onnx::TensorProto& init) {
    try {
      Operand operand;
      if (has_zero_dim(init)) {
        operand.empty = true;
        operand.name = init.name();
        values_[init.name()] = operand;
        return;
      }
      operand.constant = std::make_shared<const ir::Tensor>(tensor_from_proto(init, base_dir_));
      operand.name = init.name();
      operand.initializer = true;
      values_[init.name()] = operand;
    } catch (const ConvertError& e) {
      error("initializer '" + init.name() + "'", e.message);
      poisoned_.insert(init.name());
    }
  }

  void add_input(const onnx::ValueInfoProto& input) {
    const std::string where = "input '" + input.name() + "'";
    const auto fail = [&](const std::string& message) {
      error(where, message);
      poisoned_.insert(input.name());
    };
    if (!input.type().has_tensor_type()) return fail("only tensor inputs are supported");
    const auto& tensor_type = input.type().tensor_type();
    const auto dtype = dtype_from_onnx(tensor_type.elem_type());
    if (!dtype) return fail("element type " + onnx_dtype_name(tensor_type.elem_type()) + " is not supported");
    ir::TensorType type{*dtype, {}};
    const auto hint = options_.input_shapes.find(input.name());
    const auto& dims = tensor_type.shape().dim();
    if (hint != options_.input_shapes.end()) {
      if (tensor_type.has_shape() && static_cast<int>(hint->second.size()) != dims.size())
        return fail("the model gives it rank " + std::to_string(dims.size()) + ", the given shape " +
                    ir::shape_to_string(hint->second) + " has rank " + std::to_string(hint->second.size()));
      for (int d = 0; d < dims.size(); ++d)
        if (dims[d].has_dim_value() && dims[d].dim_value() != hint->second[d])
          return fail("dimension " + std::to_string(d) + " is " + std::to_string(dims[d].dim_value()) +
                      " in the model, the given shape " + ir::shape_to_string(hint->second) + " says " +
                      std::to_string(hint->second[d]));
      type.shape = hint->second;
    } else {
      if (!tensor_type.has_shape()) return fail("the model gives no shape; pass --input-shape " + input.name() + "=DIMS");
      // A declared zero dim: the input has no elements whatever is fed, so it is known now,
      // as an empty constant (what ONNX reads as "not given": default axes, no scales).
      for (const auto& dim : dims)
        if (dim.has_dim_value() && dim.dim_value() == 0) {
          Operand operand;
          operand.empty = true;
          operand.name = input.name();
          values_[input.name()] = operand;
          return;
        }
      dynamic_dims_.assign(static_cast<size_t>(dims.size()), ir::DynamicDim{});
      for (int d = 0; d < dims.size(); ++d) {
        if (!dims[d].has_dim_value() && dims[d].has_dim_param()) {
          if (auto bound = options_.dim_bounds.find(dims[d].dim_param()); bound != options_.dim_bounds.end()) {
            dynamic_dims_[d] = {declare_symbol(bound->first, bound->second), 1};
            type.shape.push_back(bound->second);
            continue;
          }
        }
        if (d == 0 && !dims[d].has_dim_value() && options_.leading_dim_bound > 0) {
          const std::string name = dims[d].has_dim_param() && !dims[d].dim_param().empty() ? dims[d].dim_param() : "batch";
          dynamic_dims_[d] = {declare_symbol(name, options_.leading_dim_bound), 1};
          type.shape.push_back(options_.leading_dim_bound);
          continue;
        }
        if (!dims[d].has_dim_value() && options_.symbolic_dim_size > 0) {
          type.shape.push_back(options_.symbolic_dim_size);
          continue;
        }
        if (!dims[d].has_dim_value() || dims[d].dim_value() < 1) {
          const std::string dim = dims[d].has_dim_param() ? "'" + dims[d].dim_param() + "'" : "unknown";
          return fail("dimension " + std::to_string(d) + " is " + dim +
                      "; give its size with --input-shape " + input.name() + "=DIMS (e.g. 1x3x224x224) or by the input passed to `kiln run`");
        }
        type.shape.push_back(dims[d].dim_value());
      }
    }
    if (!ir::checked_num_elements(type.shape)) return fail("shape " + ir::shape_to_string(type.shape) + " is not supported");
    Operand operand;
    operand.value = builder_.graph.add_input(builder_.unique_value_name(input.name()), type,
                                             ir::SourceLoc{file_, where, 0, 0});
    if (ir::has_dynamic_dims(dynamic_dims_)) operand.value->dynamic_dims = std::move(dynamic_dims_);
    dynamic_dims_.clear();
    operand.name = input.name();
    if (auto given = options_.input_values.find(input.name()); given != options_.input_values.end()) {
      // f64 data (NumPy's default) for an f32 input is rounded to it, as `kiln run` binds it.
      ir::Tensor value = compiler::conform_input(given->second, type, "input '" + input.name() + "'");
      if (value.type() == type) operand.given = std::make_shared<const ir::Tensor>(std::move(value));
    }
    values_[input.name()] = operand;
  }

  // The graph's dynamic dim `name` (declared on first use).
  int declare_symbol(const std::string& name, int64_t bound) {
    std::vector<ir::DimSymbol>& symbols = builder_.graph.symbols;
    for (size_t i = 0; i < symbols.size(); ++i)
      if (symbols[i].name == name) return static_cast<int>(i);
    symbols.push_back({name, bound});
    return static_cast<int>(symbols.size()) - 1;
  }

  void check_unused_hints(const onnx::GraphProto& graph) {
    for (const auto& [name, shape] : options_.input_shapes) {
      bool known = false;
      for (const auto& input : graph.input()) known |= input.name() == name;
      if (!known) throw Error("--input-shape " + name, "the model has no input '" + name + "'");
    }
    for (const auto& bound : options_.dim_bounds) {
      const std::string& name = bound.first;  // (clang 14 cannot capture a structured binding)
      const auto& symbols = builder_.graph.symbols;
      if (std::none_of(symbols.begin(), symbols.end(), [&](const ir::DimSymbol& s) { return s.name == name; }))
        throw Error("--dim " + name, "no input of the model has a dim named '" + name + "'");
    }
  }

  void add_node(int index, const onnx::NodeProto& node) {
    const std::string name = node.name().empty() ? node.op_type() + "_" + std::to_string(index) : node.name();
    const std::string where = scope_ + "node " + std::to_string(index) +
                              (node.name().empty() ? "" : " '" + node.name() + "'") + " (" +
                              node.op_type() + ", opset " + std::to_string(opset_) + ")";
    const auto poison = [&] {
      for (const std::string& output : node.output()) poisoned_.insert(output);
    };
    if (!node.domain().empty() && node.domain() != "ai.onnx") {
      error(where, "domain '" + node.domain() + "' is not supported (only the default ai.onnx domain)");
      return poison();
    }
    std::string why;
    const OpRule* rule = find_rule(node.op_type(), opset_, why);
    if (opset_ == 0) why = "the model imports no opset of the default ai.onnx domain";
    std::vector<Operand> inputs;
    bool upstream_failed = false;
    for (const std::string& input : node.input()) {
      if (input.empty()) {
        inputs.emplace_back();
        continue;
      }
      if (poisoned_.count(input)) {
        upstream_failed = true;
        inputs.emplace_back();
        continue;
      }
      auto it = values_.find(input);
      if (it == values_.end()) {
        error(where, "input '" + input + "' is not defined by an earlier node, an input or an initializer");
        return poison();
      }
      inputs.push_back(it->second);
    }
    if (!rule) {
      error(where, why);
      return poison();
    }
    if (upstream_failed) return poison();  // reported at its source
    NodeContext context(builder_, node, builder_.unique_node_name(name), opset_, std::move(inputs),
                        ir::SourceLoc{file_, where, 0, 0});
    // The context reserved the node name for its first kiln node; release it so emit takes it.
    builder_.used_node_names.erase(context.node_name());
    std::vector<Operand> outputs;
    try {
      outputs = rule->convert(context);
    } catch (const ConvertError& e) {
      error(where, e.message);
      return poison();
    } catch (const Error& e) {
      error(where, e.diagnostic().message);
      return poison();
    } catch (const ir::OpError& e) {  // a type rule outside emit (a bug, but located)
      error(where, e.message);
      return poison();
    }
    for (int i = 0; i < node.output_size(); ++i) {
      const std::string& output = node.output(i);
      if (output.empty()) continue;
      if (i >= static_cast<int>(outputs.size()) || (!outputs[i].present() && !outputs[i].empty)) {
        error(where, "output " + std::to_string(i) + " '" + output + "' is not supported");
        poisoned_.insert(output);
        continue;
      }
      Operand result = outputs[i];
      if (result.value && result.value->role == ir::ValueRole::NodeResult && !renamed_.count(result.value) &&
          builder_.used_value_names.insert(output).second) {
        result.value->name = output;
        renamed_.insert(result.value);
      }
      if (result.is_constant() && !result.initializer) result.name = output;
      values_[output] = result;
    }
  }

  // A graph output must be a node result: a constant or an input passing straight through is
  // copied by a reshape to its own shape.
  void add_output(const onnx::ValueInfoProto& output) {
    if (poisoned_.count(output.name())) return;
    auto it = values_.find(output.name());
    if (it == values_.end()) {
      error("output '" + output.name() + "'", "is not produced by any node");
      return;
    }
    if (it->second.empty) {
      error("output '" + output.name() + "'", "is an empty tensor (kiln tensors have at least one element)");
      return;
    }
    ir::Value* value = builder_.materialize(it->second);
    if (value->role != ir::ValueRole::NodeResult || builder_.graph.is_output(value)) {
      ir::AttrMap attrs{{"shape", value->type.shape}};
      std::vector<ir::TensorType> types;
      try {
        types = ir::infer_op(ir::OpId::Reshape, {value}, attrs);
      } catch (const ir::OpError& e) {
        error("output '" + output.name() + "'", "cannot copy " + value->type.to_string() + ": " + e.message);
        return;
      }
      ir::Node* copy = builder_.graph.add_node(
          ir::OpId::Reshape, builder_.unique_node_name(output.name() + ".copy"), {value}, attrs,
          {{builder_.unique_value_name(output.name() + ".copy"), types[0]}},
          ir::SourceLoc{file_, "output '" + output.name() + "'", 0, 0});
      value = copy->results[0];
    }
    builder_.graph.outputs.push_back(value);
    builder_.graph.output_names.push_back(output.name());
  }

  [[noreturn]] void report() {
    Diagnostic first = errors_.front();
    for (size_t i = 1; i < errors_.size(); ++i) first.message += "\n" + errors_[i].render();
    if (errors_.size() > 1)
      first.notes.push_back(std::to_string(errors_.size()) + " problems in " + file_ +
                            "; docs/onnx-support.md lists what kiln imports");
    throw Error(std::move(first));
  }

  std::string file_;
  std::string base_dir_;
  const ImportOptions& options_;
  onnx::ModelProto model_;
  int opset_ = 0;
  GraphBuilder builder_;
  std::unordered_map<std::string, Operand> values_;
  ir::DimMap dynamic_dims_;  // the input being added: its dims kept dynamic (dim_bounds)
  std::unordered_set<std::string> poisoned_;  // names whose producer failed (reported there)
  std::unordered_set<const ir::Value*> renamed_;
  std::vector<Diagnostic> errors_;
  int64_t inlined_nodes_ = 0;  // subgraph nodes imported so far (If branches, Scan steps)
  std::unordered_map<const onnx::TensorProto*, Operand> inlined_initializers_;  // read once, shared
  std::string scope_;  // where a subgraph being imported sits ("node 3 'If_0' (If, opset 13) then_branch: ")
};
}  // namespace

namespace onnx_import {
const OpRule* find_rule(std::string_view op_type, int opset, std::string& why) {
  std::string ranges;
  for (auto rules : {math_rules(), nn_rules(), shape_rules(), loss_rules(), index_rules(), axis_matrix_rules(), recurrent_rules(), quantize_rules(), einsum_rules(), sort_rules(), text_rules(), sample_rules(), spectral_rules(), control_rules(), linalg_rules()}) {
    for (const OpRule& rule : rules) {
      if (rule.op_type != op_type) continue;
      if (opset >= rule.first_opset && opset <= rule.last_opset) return &rule;
      ranges += (ranges.empty() ? "" : ", ") + std::to_string(rule.first_opset) + "-" +
                std::to_string(rule.last_opset);
    }
  }
  why = ranges.empty() ? "op " + std::string(op_type) + " is not supported"
                       : "op " + std::string(op_type) + " is supported at opsets " + ranges +
                             ", not " + std::to_string(opset);
  return nullptr;
}

int normalize_axis_or_fail(NodeContext& node, int64_t axis, int rank, const char* what) {
  auto normalized = ir::normalize_axis(axis, rank);
  if (!normalized)
    node.fail(std::string(what) + " " + std::to_string(axis) + " is out of range for rank " +
              std::to_string(rank));
  return *normalized;
}
}  // namespace onnx_import

bool looks_like_onnx(std::string_view bytes) { return starts_like_model_proto(bytes); }

ir::Graph import_onnx(const std::string& bytes, const std::string& display_name,
                      const std::string& base_dir, const ImportOptions& options,
                      const std::string& model_path) {
  return Importer(display_name, base_dir, options, model_path).run(bytes);
}

struct OnnxInitializers::Model {
  onnx::ModelProto proto;
  std::map<std::string, const onnx::TensorProto*> by_name;
};

OnnxInitializers::~OnnxInitializers() = default;

std::shared_ptr<const OnnxInitializers> OnnxInitializers::open(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path, "cannot open the ONNX model");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  const std::string text = bytes.str();
  auto result = std::make_shared<OnnxInitializers>();
  result->path_ = path;
  result->model_ = std::make_unique<Model>();
  google::protobuf::io::CodedInputStream stream(reinterpret_cast<const uint8_t*>(text.data()),
                                                static_cast<int>(std::min<size_t>(text.size(), INT_MAX)));
  stream.SetTotalBytesLimit(INT_MAX);
  if (!result->model_->proto.ParseFromCodedStream(&stream))
    throw Error(path, "not a valid ONNX model: the protobuf message does not parse");
  for (const auto& init : result->model_->proto.graph().initializer())
    result->model_->by_name.emplace(init.name(), &init);
  return result;
}

std::vector<std::string> OnnxInitializers::names() const {
  std::vector<std::string> names;
  for (const auto& [name, proto] : model_->by_name) names.push_back(name);
  return names;
}

bool OnnxInitializers::contains(const std::string& name) const { return model_->by_name.count(name) > 0; }

ir::Tensor OnnxInitializers::read(const std::string& name) const {
  auto it = model_->by_name.find(name);
  if (it == model_->by_name.end()) throw Error(path_, "no initializer '" + name + "'");
  try {
    return tensor_from_proto(*it->second, std::filesystem::path(path_).parent_path().string());
  } catch (const ConvertError& e) {
    throw Error(path_, e.message);
  }
}

}  // namespace kiln::compiler
