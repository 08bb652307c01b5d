// Keras model JSON / TensorFlow.js model.json → ir::Graph. See keras_importer.h for the
// contract, keras_topology.cpp for the spellings read and keras_layers.cpp for the layers.
#include "compiler/import/keras/keras_importer.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "compiler/import/keras/keras_model.h"
#include "compiler/json_text.h"
#include "ir/diagnostic.h"
#include "ir/op_registry.h"
#include "ir/verifier.h"

namespace kiln::compiler {

namespace {
using namespace keras_import;

// The keys of the top-level JSON object, found by a scan that skips nested values and strings
// (no parse: every JSON model kiln loads passes through here).
std::set<std::string> top_level_keys(std::string_view text) {
  std::set<std::string> keys;
  size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  if (i >= text.size() || text[i] != '{') return keys;
  int depth = 0;
  bool expect_key = false;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') {
      const size_t start = ++i;
      while (i < text.size() && text[i] != '"') i += text[i] == '\\' ? 2 : 1;
      if (i >= text.size()) break;
      if (depth == 1 && expect_key) keys.insert(std::string(text.substr(start, i - start)));
      expect_key = false;
      continue;
    }
    if (c == '{' || c == '[') ++depth;
    if (c == '}' || c == ']') --depth;
    if (depth == 0) break;
    expect_key = depth == 1 && (c == '{' || c == ',') ? true : (std::isspace(static_cast<unsigned char>(c)) ? expect_key : false);
  }
  return keys;
}

std::string graph_name(const std::string& name) {
  std::string out;
  for (char c : name) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out.empty() ? "keras_model" : out;
}

std::string key_of(const TensorRef& ref) {
  return ref.layer + "\x1f" + std::to_string(ref.node_index) + "\x1f" + std::to_string(ref.tensor_index);
}

class Importer {
 public:
  Importer(std::string file, std::string base_dir, const ImportOptions& options)
      : file_(std::move(file)), base_dir_(std::move(base_dir)), options_(options) {
    b_.file = file_;
  }

  // A model JSON or TensorFlow.js model.json; `model_path` finds HDF5 weights beside a model JSON.
  ir::Graph run(std::string_view text, const std::string& model_path) {
    const json document = parse_json_text(text, file_, JsonLocation::LineColumn, "not valid JSON");
    json model = document;
    try {
      if (document.is_object() && document.contains("modelTopology")) {
        model = document.at("modelTopology");
        // tensorflowjs_converter's output from a Keras file wraps the model in model_config.
        if (model.is_object() && model.contains("model_config")) model = model.at("model_config");
        if (document.contains("weightsManifest")) {
          b_.weights = read_tfjs_weights(document.at("weightsManifest"), base_dir_);
          b_.has_weights = true;
        }
      } else if (!model_path.empty()) {
        read_weights_beside(model_path);
      }
    } catch (const LayerError& e) {
      throw Error(file_, e.message);
    }
    return convert(model);
  }

  // A whole-model HDF5 file.
  ir::Graph run_hdf5(const std::string& path) {
    KerasHdf5 file;
    try {
      file = read_keras_hdf5(path);
    } catch (const LayerError& e) {
      throw Error(file_, e.message);
    }
    if (file.model_config.empty())
      throw Error(file_, "holds Keras weights but no model (no model_config attribute): load the model's "
                         "JSON (model.to_json()) saved as NAME.json beside it, with this file as "
                         "NAME.weights.h5 or NAME.h5");
    b_.weights = std::move(file.weights);
    b_.has_weights = true;
    return convert(parse_json_text(file.model_config, file_ + " (model_config)", JsonLocation::LineColumn,
                                   "model_config is not valid JSON"));
  }

 private:
  // NAME.weights.h5 or NAME.h5 beside NAME.json (model.to_json() and model.save_weights()).
  void read_weights_beside(const std::string& model_path) {
    std::filesystem::path stem = std::filesystem::path(model_path);
    stem.replace_extension();
    for (const std::string suffix : {".weights.h5", ".h5"}) {
      const std::string candidate = stem.string() + suffix;
      std::error_code ec;
      if (!std::filesystem::is_regular_file(candidate, ec)) continue;
      try {
        b_.weights = read_keras_hdf5(candidate).weights;
      } catch (const LayerError& e) {
        throw Error(candidate, e.message);
      }
      b_.has_weights = true;
      return;
    }
  }

  ir::Graph convert(const json& model) {
    try {
      topology_ = read_topology(model);
    } catch (const LayerError& e) {
      throw Error(file_, e.message);
    }
    b_.graph.name = graph_name(topology_.name);
    check_unused_hints();
    for (const Layer& layer : topology_.layers) layers_[layer.name] = &layer;
    for (const TensorRef& input : topology_.inputs) add_input(input);
    if (batch_bound() > 0 && errors_.empty() && b_.graph.symbols.empty())
      throw Error("--dim batch", "no input of the model leaves its batch open (None)");
    convert_layers();
    for (const TensorRef& output : topology_.outputs) add_output(output);
    if (!errors_.empty()) report();
    ir::verify(b_.graph);
    return std::move(b_.graph);
  }

  void error(const Layer* layer, const std::string& message) {
    errors_.push_back(Diagnostic{file_ + (layer ? ": " + layer->where() : std::string()), message, {}});
  }

  // The bound --dim batch=MAX (or kiln serve's leading_dim_bound) gives a Keras model's batch
  // (its None first dim); 0 when absent.
  int64_t batch_bound() const {
    auto it = options_.dim_bounds.find("batch");
    return it == options_.dim_bounds.end() ? options_.leading_dim_bound : it->second;
  }

  void check_unused_hints() {
    for (const auto& bound : options_.dim_bounds)
      if (bound.first != "batch")
        throw Error("--dim " + bound.first, "a Keras model's only symbolic dim is its batch: use --dim batch=MAX");

    for (const auto& [name, shape] : options_.input_shapes) {
      bool known = false;
      for (const TensorRef& input : topology_.inputs) known |= input.layer == name;
      if (!known) throw Error("--input-shape " + name, "the model has no input '" + escape_for_message(name) + "'");
    }
  }

  void add_input(const TensorRef& ref) {
    auto it = layers_.find(ref.layer);
    if (it == layers_.end()) {
      errors_.push_back(Diagnostic{file_ + ": input_layers", "names no layer '" + escape_for_message(ref.layer) + "'", {}});
      return;
    }
    const Layer& layer = *it->second;
    failed_.insert(layer.name);  // until it succeeds
    if (layer.class_name != "InputLayer") return error(&layer, "a model input must be an InputLayer");
    const json& config = layer.config;
    json shape;
    for (const char* key : {"batch_input_shape", "batch_shape"})
      if (config.contains(key) && config.at(key).is_array()) shape = config.at(key);
    if (shape.is_null() || shape.empty() || shape.size() > 8)
      return error(&layer, "no batch_input_shape (a list of 1 to 8 dims, the first the batch)");
    const json dtype = config.value("dtype", json("float32"));
    // A string, or a DTypePolicy object whose config names it (Keras 3); anything else: float32.
    const json policy_name = dtype.is_object() && dtype.value("config", json::object()).is_object()
                                 ? dtype.value("config", json::object()).value("name", json("float32"))
                                 : json("float32");
    const std::string dtype_name = dtype.is_string() ? dtype.get<std::string>()
                                   : policy_name.is_string() ? policy_name.get<std::string>() : "not a string";
    // Integer inputs are token ids (an Embedding's): kept as integers, not read as floats.
    const ir::DType input_dtype = dtype_name == "int32" ? ir::DType::I32
                                  : dtype_name == "int64" ? ir::DType::I64 : ir::DType::F32;
    if (dtype_name != "float32" && input_dtype == ir::DType::F32)
      return error(&layer, "input dtype '" + escape_for_message(dtype_name) +
                               "' is not supported (float32, int32, int64)");
    ir::Shape dims;
    bool dynamic_batch = false;
    const auto hint = options_.input_shapes.find(layer.name);
    if (hint != options_.input_shapes.end() && hint->second.size() != shape.size())
      return error(&layer, "the model gives it rank " + std::to_string(shape.size()) + ", the given shape " +
                               ir::shape_to_string(hint->second) + " has rank " + std::to_string(hint->second.size()));
    for (size_t d = 0; d < shape.size(); ++d) {
      const json& dim = shape[d];
      if (dim.is_number_integer() && dim.get<int64_t>() >= 1 && dim.get<int64_t>() <= (int64_t{1} << 31)) {
        if (hint != options_.input_shapes.end() && hint->second[d] != dim.get<int64_t>())
          return error(&layer, "dimension " + std::to_string(d) + " is " + dim.dump() + " in the model, the given shape " +
                                   ir::shape_to_string(hint->second) + " says " + std::to_string(hint->second[d]));
        dims.push_back(dim.get<int64_t>());
      } else if (!dim.is_null()) {
        return error(&layer, "dimension " + std::to_string(d) + " (" + describe_json(dim) + ") is not a size");
      } else if (hint != options_.input_shapes.end()) {
        dims.push_back(hint->second[d]);
      } else if (d == 0 && batch_bound() > 0) {
        // --dim batch=MAX: the batch stays dynamic up to MAX (ir/dynamic_dims.h).
        dims.push_back(batch_bound());
        dynamic_batch = true;
      } else if (d == 0) {
        // The batch: the size of the input given to `kiln run`, else the training batch, else 1.
        dims.push_back(options_.symbolic_dim_size > 0 ? options_.symbolic_dim_size : 1);
      } else {
        return error(&layer, "dimension " + std::to_string(d) + " is unknown (None); give its size with --input-shape " +
                                 layer.name + "=DIMS (NHWC, e.g. 1x224x224x3)");
      }
    }
    if (!ir::checked_num_elements(dims)) return error(&layer, "shape " + ir::shape_to_string(dims) + " is too large");
    ir::Value* input = b_.graph.add_input(b_.unique_name(layer.name), ir::TensorType{input_dtype, dims}, b_.loc(layer));
    if (dynamic_batch) {
      if (b_.graph.symbols.empty()) b_.graph.symbols.push_back({"batch", batch_bound()});
      input->dynamic_dims.assign(dims.size(), ir::DynamicDim{});
      input->dynamic_dims[0] = {0, 1, 1};
    }
    LayerContext context(b_, layer, 0);
    try {
      values_[key_of(ref)] = context.from_keras_order(input);
    } catch (const LayerError& e) {
      return error(&layer, e.message);
    }
    failed_.erase(layer.name);
  }

  // Calls in an order where each one's inputs exist: the file's order, repeated while a shared
  // layer's later call waits for a layer listed after it.
  void convert_layers() {
    std::set<std::pair<int, int>> done;
    std::set<std::string> reported;
    bool progress = true;
    while (progress) {
      progress = false;
      for (const Layer& layer : topology_.layers) {
        if (layer.class_name == "InputLayer" && layer.calls.empty()) continue;
        for (int call = 0; call < static_cast<int>(layer.calls.size()); ++call) {
          if (done.count({layer.index, call})) continue;
          const auto state = try_call(layer, call, reported);
          if (state == CallState::Waiting) continue;
          done.insert({layer.index, call});
          progress = true;
        }
        if (layer.calls.empty() && !layer.error.empty() && reported.insert(layer.name).second) {
          error(&layer, layer.error);
          failed_.insert(layer.name);
        }
      }
    }
    for (const Layer& layer : topology_.layers)
      for (int call = 0; call < static_cast<int>(layer.calls.size()); ++call)
        if (!done.count({layer.index, call}) && reported.insert(layer.name).second) {
          error(&layer, "its inputs are never computed (a cycle, or a layer the model does not list)");
          failed_.insert(layer.name);
        }
  }

  enum class CallState { Waiting, Done };

  CallState try_call(const Layer& layer, int call, std::set<std::string>& reported) {
    const auto fail = [&](const std::string& message) {
      failed_.insert(layer.name);
      if (reported.insert(layer.name).second) error(&layer, message);
      return CallState::Done;
    };
    if (!layer.error.empty()) return fail(layer.error);
    std::vector<KTensor> inputs;
    bool upstream_failed = false;
    for (const TensorRef& ref : layer.calls[call].inputs) {
      if (failed_.count(ref.layer)) {
        upstream_failed = true;
        continue;
      }
      auto it = values_.find(key_of(ref));
      if (it == values_.end()) {
        if (!layers_.count(ref.layer))
          return fail("input '" + escape_for_message(ref.layer) + "' is not a layer of the model");
        return CallState::Waiting;
      }
      inputs.push_back(it->second);
    }
    const Call& args = layer.calls[call];
    for (size_t i = 0; i < args.inputs.size(); ++i)
      if (!args.keywords[i].empty() && layer.class_name != "MultiHeadAttention")
        return fail("its call passes a tensor as keyword argument '" + escape_for_message(args.keywords[i]) +
                    "', which kiln does not read for " + escape_for_message(layer.class_name));
    const LayerConverter* converter = find_converter(layer.class_name);
    if (!converter) return fail("layer " + escape_for_message(layer.class_name) + " is not supported");
    if (upstream_failed) {  // reported at its source
      failed_.insert(layer.name);
      return CallState::Done;
    }
    if (failed_.count(layer.name)) return CallState::Done;  // an earlier call failed
    LayerContext context(b_, layer, call);
    try {
      std::vector<KTensor> outputs = (*converter)(context, inputs);
      for (size_t i = 0; i < outputs.size(); ++i)
        values_[key_of(TensorRef{layer.name, call, static_cast<int>(i)})] = outputs[i];
    } catch (const LayerError& e) {
      return fail(e.message);
    } catch (const Error& e) {
      return fail(e.diagnostic().message);
    } catch (const ir::OpError& e) {
      return fail(e.message);
    }
    return CallState::Done;
  }

  void add_output(const TensorRef& ref) {
    if (failed_.count(ref.layer)) return;
    auto it = values_.find(key_of(ref));
    auto layer = layers_.find(ref.layer);
    if (it == values_.end() || layer == layers_.end()) {
      errors_.push_back(Diagnostic{file_ + ": output_layers",
                                   "'" + escape_for_message(ref.layer) + "' [" + std::to_string(ref.node_index) + ", " +
                                       std::to_string(ref.tensor_index) + "] is not produced by any layer",
                                   {}});
      return;
    }
    LayerContext context(b_, *layer->second, ref.node_index);
    try {
      ir::Value* value = context.keras_order(it->second);
      if (value->role != ir::ValueRole::NodeResult || b_.graph.is_output(value))
        value = context.emit(ir::OpId::Reshape, {value}, {{"shape", value->type.shape}});
      b_.graph.outputs.push_back(value);
      std::string name = ref.layer;
      if (ref.node_index > 0 || ref.tensor_index > 0)
        name += "_" + std::to_string(ref.node_index) + "_" + std::to_string(ref.tensor_index);
      b_.graph.output_names.push_back(name);
    } catch (const LayerError& e) {
      error(layer->second, e.message);
    }
  }

  [[noreturn]] void report() {
    Diagnostic first = errors_.front();
    for (size_t i = 1; i < errors_.size(); ++i) first.message += "\n" + errors_[i].render();
    if (errors_.size() > 1)
      first.notes.push_back(std::to_string(errors_.size()) + " problems in " + file_ +
                            "; docs/import.md lists the Keras layers kiln imports");
    throw Error(std::move(first));
  }

  std::string file_;
  std::string base_dir_;
  const ImportOptions& options_;
  Builder b_;
  Topology topology_;
  std::map<std::string, const Layer*> layers_;
  std::map<std::string, KTensor> values_;
  std::set<std::string> failed_;  // layers that failed (reported there); their users are skipped
  std::vector<Diagnostic> errors_;
};

}  // namespace

KerasFormat detect_keras(std::string_view text) {
  const std::set<std::string> keys = top_level_keys(text);
  // modelTopology alone: TensorFlow.js's model.toJSON() (no weights: initializers).
  if (keys.count("modelTopology")) return KerasFormat::TfjsLayers;
  if (keys.count("class_name") && keys.count("config") && !keys.count("nodes")) return KerasFormat::ModelJson;
  return KerasFormat::None;
}

ir::Graph import_keras(std::string_view text, const std::string& display_name, const std::string& base_dir,
                       const ImportOptions& options, const std::string& model_path) {
  return Importer(display_name, base_dir, options).run(text, model_path);
}

bool looks_like_keras_hdf5(std::string_view head) { return looks_like_hdf5(head); }

ir::Graph import_keras_hdf5(const std::string& path, const std::string& display_name, const ImportOptions& options) {
  return Importer(display_name, ".", options).run_hdf5(path);
}

}  // namespace kiln::compiler
