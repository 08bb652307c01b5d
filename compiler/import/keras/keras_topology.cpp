// Reading a Keras model's topology (every spelling → Topology) and TensorFlow.js weights.
//
// Spellings: Sequential's config is {"layers": [...]} (Keras 2.2.5+, Keras 3, tfjs) or the list
// itself (Keras 2.2.4 and older). A Functional layer's inbound_nodes are
// [[["conv", 0, 0, {}], ...], ...] in Keras 2 and tfjs, and [{"args": [...keras tensors...],
// "kwargs": {}}] with {"class_name": "__keras_tensor__", "config": {"keras_history": ["conv", 0,
// 0]}} in Keras 3. input_layers/output_layers are lists of [name, node, tensor], or one such
// triple (Keras 3 with one input).
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "compiler/import/keras/keras_model.h"
#include "ir/diagnostic.h"

namespace kiln::compiler::keras_import {

std::string Layer::where() const {
  return "layer " + std::to_string(index) + " '" + escape_for_message(name) + "' (" +
         escape_for_message(class_name) + ")";
}

namespace {

[[noreturn]] void fail(const std::string& message) { throw LayerError{message}; }

const json& member(const json& object, const char* key, const std::string& what) {
  if (!object.is_object() || !object.contains(key)) fail(what + " has no \"" + key + "\"");
  return object.at(key);
}

std::string string_of(const json& value, const std::string& what) {
  if (!value.is_string()) fail(what + " must be a string");
  return value.get<std::string>();
}

int small_int(const json& value, const std::string& what) {
  if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > 1000000)
    fail(what + " must be a non-negative integer");
  return static_cast<int>(value.get<int64_t>());
}

// ["name", node, tensor, ...] (a fourth entry, the call's keyword arguments, is read by
// inbound_calls).
TensorRef triple(const json& value, const std::string& what) {
  if (!value.is_array() || value.size() < 3) fail(what + " must be [layer, node index, tensor index]");
  return TensorRef{string_of(value[0], what + " layer"), small_int(value[1], what + " node index"),
                   small_int(value[2], what + " tensor index")};
}

std::vector<TensorRef> triples(const json& value, const std::string& what) {
  if (value.is_array() && !value.empty() && value[0].is_string()) return {triple(value, what)};
  if (!value.is_array()) fail(what + " must be a list of [layer, node index, tensor index]");
  std::vector<TensorRef> refs;
  for (const json& entry : value) refs.push_back(triple(entry, what));
  return refs;
}

// Keras 3: every keras tensor in args, nested lists included, in order.
void collect_keras_tensors(const json& value, std::vector<TensorRef>& out, int depth = 0) {
  if (depth > 8) fail("inbound node arguments are nested too deeply");
  if (value.is_array()) {
    for (const json& item : value) collect_keras_tensors(item, out, depth + 1);
    return;
  }
  if (!value.is_object() || value.value("class_name", json()) != "__keras_tensor__") return;
  const json& config = member(value, "config", "a keras tensor");
  out.push_back(triple(member(config, "keras_history", "a keras tensor"), "keras_history"));
}

// A keyword argument that is a tensor: [layer, node, tensor] in Keras 2, a keras tensor object
// in Keras 3.
bool is_tensor_argument(const json& value) {
  if (value.is_object()) return value.value("class_name", json()) == "__keras_tensor__";
  return value.is_array() && value.size() == 3 && value[0].is_string() && value[1].is_number_integer() &&
         value[2].is_number_integer();
}

// Splits keyword arguments into keyword tensors (appended to the call's inputs) and options.
void read_keywords(const json& kwargs, Call& call) {
  if (kwargs.is_null()) return;
  if (!kwargs.is_object()) fail("an inbound node's keyword arguments must be an object");
  for (const auto& [key, value] : kwargs.items()) {
    if (!is_tensor_argument(value)) {
      call.options[key] = value;
      continue;
    }
    std::vector<TensorRef> refs;
    if (value.is_object()) collect_keras_tensors(value, refs);
    else refs.push_back(triple(value, "keyword argument '" + escape_for_message(key) + "'"));
    call.inputs.push_back(refs.at(0));
    call.keywords.push_back(key);
  }
}

std::vector<Call> inbound_calls(const json& nodes) {
  std::vector<Call> calls;
  if (nodes.is_null()) return calls;
  if (!nodes.is_array()) fail("inbound_nodes must be a list");
  for (const json& node : nodes) {
    Call call;
    if (node.is_object()) {  // Keras 3
      collect_keras_tensors(node.value("args", json::array()), call.inputs);
      call.keywords.assign(call.inputs.size(), "");
      read_keywords(node.value("kwargs", json()), call);
    } else if (node.is_array()) {
      for (const json& entry : node) call.inputs.push_back(triple(entry, "an inbound node"));
      call.keywords.assign(call.inputs.size(), "");
      // Keras 2 repeats the call's keyword arguments as each input's fourth entry.
      if (!node.empty() && node[0].is_array() && node[0].size() > 3) read_keywords(node[0][3], call);
    } else {
      fail("an inbound node must be a list or an object");
    }
    calls.push_back(std::move(call));
  }
  return calls;
}

Layer read_layer(const json& entry, int index) {
  Layer layer;
  layer.index = index;
  if (!entry.is_object()) fail("layer " + std::to_string(index) + " must be an object");
  layer.class_name = string_of(member(entry, "class_name", "layer " + std::to_string(index)), "class_name");
  layer.config = entry.value("config", json::object());
  if (!layer.config.is_object()) fail("layer " + std::to_string(index) + ": config must be an object");
  const json& name = entry.contains("name") ? entry.at("name") : layer.config.value("name", json());
  layer.name = name.is_string() ? name.get<std::string>() : layer.class_name + "_" + std::to_string(index);
  return layer;
}

// The input shape Sequential's first layer declares, when there is no InputLayer.
json declared_input_shape(const Layer& first) {
  const json& config = first.config;
  for (const char* key : {"batch_input_shape", "batch_shape"})
    if (config.contains(key) && config.at(key).is_array()) return config.at(key);
  for (const char* key : {"input_shape", "inputShape"}) {
    if (config.contains(key) && config.at(key).is_array()) {
      json shape = json::array({nullptr});
      for (const json& dim : config.at(key)) shape.push_back(dim);
      return shape;
    }
  }
  return json();
}

Topology read_sequential(const json& config) {
  Topology topology;
  const json& layers = config.is_array() ? config : member(config, "layers", "the Sequential config");
  topology.name = config.is_object() && config.contains("name") ? string_of(config.at("name"), "the Sequential model's name")
                                                                : "sequential";
  if (!layers.is_array() || layers.empty()) fail("the Sequential model has no layers");
  std::vector<Layer> read;
  for (size_t i = 0; i < layers.size(); ++i) read.push_back(read_layer(layers[i], static_cast<int>(i)));
  if (read.front().class_name != "InputLayer") {
    Layer input;
    input.index = -1;
    input.class_name = "InputLayer";
    input.name = read.front().name + "_input";
    json shape = declared_input_shape(read.front());
    if (shape.is_null() && read.front().config.contains("build_config") && read.front().config.at("build_config").is_object())
      shape = read.front().config.at("build_config").value("input_shape", json());
    if (shape.is_null())
      fail("the Sequential model's first layer '" + escape_for_message(read.front().name) +
           "' declares no input shape (batch_input_shape)");
    input.config = {{"batch_input_shape", shape}, {"name", input.name}};
    read.insert(read.begin(), std::move(input));
  }
  for (size_t i = 1; i < read.size(); ++i) read[i].calls.push_back(Call{{TensorRef{read[i - 1].name, 0, 0}}, {""}});
  topology.layers = std::move(read);
  topology.inputs = {TensorRef{topology.layers.front().name, 0, 0}};
  topology.outputs = {TensorRef{topology.layers.back().name, 0, 0}};
  return topology;
}

Topology read_functional(const json& config) {
  Topology topology;
  topology.name = config.contains("name") ? string_of(config.at("name"), "the Functional model's name") : "model";
  const json& layers = member(config, "layers", "the model config");
  if (!layers.is_array() || layers.empty()) fail("the model has no layers");
  for (size_t i = 0; i < layers.size(); ++i) {
    Layer layer = read_layer(layers[i], static_cast<int>(i));
    try {
      layer.calls = inbound_calls(layers[i].value("inbound_nodes", json()));
    } catch (const LayerError& e) {
      layer.error = e.message;
    }
    topology.layers.push_back(std::move(layer));
  }
  topology.inputs = triples(member(config, "input_layers", "the model config"), "input_layers");
  topology.outputs = triples(member(config, "output_layers", "the model config"), "output_layers");
  return topology;
}

}  // namespace

Topology read_topology(const json& model) {
  if (!model.is_object()) fail("the model must be a JSON object");
  const std::string class_name = string_of(member(model, "class_name", "the model"), "class_name");
  const json& config = member(model, "config", "the model");
  Topology topology;
  if (class_name == "Sequential") {
    topology = read_sequential(config);
  } else if (class_name == "Functional" || class_name == "Model") {
    topology = read_functional(config);
  } else {
    fail("model class '" + escape_for_message(class_name) +
         "' is not supported (Sequential, Functional or Model)");
  }
  if (topology.inputs.empty()) fail("the model has no inputs");
  if (topology.outputs.empty()) fail("the model has no outputs");
  return topology;
}

// --- weights ------------------------------------------------------------------------------------

void WeightStore::add(const std::string& full_name, ir::Tensor tensor) {
  std::string name = full_name;
  if (auto colon = name.rfind(':'); colon != std::string::npos) name.erase(colon);  // "kernel:0"
  std::string layer, weight = name;
  if (auto slash = name.rfind('/'); slash != std::string::npos) {
    weight = name.substr(slash + 1);
    layer = name.substr(0, slash);
    if (auto outer = layer.rfind('/'); outer != std::string::npos) layer = layer.substr(outer + 1);
  }
  add(layer, weight, full_name, std::move(tensor));
}

void WeightStore::add(const std::string& layer, const std::string& weight, const std::string& full_name,
                      ir::Tensor tensor) {
  full_names_[{layer, weight}] = full_name;
  by_name_.insert_or_assign({layer, weight}, std::move(tensor));
}

const ir::Tensor* WeightStore::find(const std::string& layer, const std::string& weight) const {
  auto it = by_name_.find({layer, weight});
  if (it == by_name_.end()) return nullptr;
  used_.insert(full_names_.at({layer, weight}));
  return &it->second;
}

std::vector<std::string> WeightStore::unused() const {
  std::vector<std::string> names;
  for (const auto& [key, full] : full_names_)
    if (!used_.count(full)) names.push_back(full);
  return names;
}

namespace {

std::string read_shard(const std::string& base_dir, const std::string& path) {
  if (path.empty()) fail("a weights path is empty");
  const std::filesystem::path full = std::filesystem::path(base_dir) / path;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(full, ec))
    fail("weights file '" + escape_for_message(full.string()) + "' is missing or not a regular file");
  std::ifstream in(full, std::ios::binary);
  if (!in) fail("cannot open weights file '" + escape_for_message(full.string()) + "' (" + std::strerror(errno) + ")");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

ir::Shape weight_shape(const json& spec, const std::string& what) {
  const json& shape = member(spec, "shape", what);
  if (!shape.is_array() || shape.size() > 8) fail(what + ": shape must be a list of at most 8 dims");
  ir::Shape dims;
  for (const json& dim : shape) {
    if (!dim.is_number_integer() || dim.get<int64_t>() < 0 || dim.get<int64_t>() > (int64_t{1} << 40))
      fail(what + ": shape " + spec.at("shape").dump() + " is not a list of sizes");
    dims.push_back(dim.get<int64_t>());
  }
  if (!ir::checked_num_elements(dims)) fail(what + ": shape is too large");
  return dims;
}

}  // namespace

WeightStore read_tfjs_weights(const json& manifest, const std::string& base_dir) {
  WeightStore store;
  if (!manifest.is_array()) fail("weightsManifest must be a list of weight groups");
  for (size_t g = 0; g < manifest.size(); ++g) {
    const json& group = manifest[g];
    const std::string where = "weightsManifest[" + std::to_string(g) + "]";
    const json& paths = member(group, "paths", where);
    const json& weights = member(group, "weights", where);
    if (!paths.is_array() || !weights.is_array()) fail(where + ": paths and weights must be lists");
    std::string bytes;
    for (const json& path : paths) bytes += read_shard(base_dir, string_of(path, where + " path"));
    size_t offset = 0;
    for (size_t w = 0; w < weights.size(); ++w) {
      const json& spec = weights[w];
      const std::string name = string_of(member(spec, "name", where + " weight " + std::to_string(w)), "a weight name");
      const std::string what = "weight '" + escape_for_message(name) + "'";
      const ir::Shape shape = weight_shape(spec, what);
      const std::string dtype = spec.contains("dtype") ? string_of(spec.at("dtype"), what + "'s dtype") : "float32";
      const int64_t count = ir::num_elements(shape);
      std::string stored = dtype;
      double scale = 1.0, minimum = 0.0;
      if (spec.contains("quantization") && !spec.at("quantization").is_null()) {
        const json& q = spec.at("quantization");
        stored = string_of(member(q, "dtype", what + " quantization"), what + " quantization dtype");
        if (stored != "float16") {
          if (!q.value("scale", json()).is_number() || !q.value("min", json()).is_number())
            fail(what + ": quantization needs a numeric scale and min");
          scale = q.at("scale").get<double>();
          minimum = q.at("min").get<double>();
        }
      }
      const size_t element = stored == "float32" || stored == "int32" ? 4
                             : stored == "uint16" || stored == "float16" ? 2
                             : stored == "uint8" || stored == "bool"     ? 1
                                                                         : 0;
      if (element == 0) fail(what + ": dtype '" + escape_for_message(stored) + "' is not supported");
      const size_t size = static_cast<size_t>(count) * element;
      if (size > bytes.size() - offset)
        fail(what + ": needs " + std::to_string(size) + " bytes at offset " + std::to_string(offset) +
             ", the shards of " + where + " hold " + std::to_string(bytes.size()));
      ir::Tensor tensor(ir::TensorType{ir::DType::F32, shape});
      auto* out = reinterpret_cast<float*>(tensor.data());
      const char* in = bytes.data() + offset;
      for (int64_t i = 0; i < count; ++i) {
        if (stored == "float32") {
          std::memcpy(&out[i], in + 4 * i, 4);
        } else if (stored == "int32") {
          int32_t v;
          std::memcpy(&v, in + 4 * i, 4);
          out[i] = static_cast<float>(v);
        } else if (stored == "float16") {
          uint16_t v;
          std::memcpy(&v, in + 2 * i, 2);
          out[i] = ir::half_bits_to_float(v);
        } else if (stored == "uint16") {
          uint16_t v;
          std::memcpy(&v, in + 2 * i, 2);
          out[i] = static_cast<float>(minimum + scale * v);
        } else {
          const uint8_t v = static_cast<uint8_t>(in[i]);
          out[i] = stored == "bool" ? (v != 0) : static_cast<float>(minimum + scale * v);
        }
      }
      offset += size;
      store.add(name, std::move(tensor));
    }
  }
  return store;
}

}  // namespace kiln::compiler::keras_import
