// Internal to the Keras importer: the model's topology read from its JSON (every spelling
// reduced to one form), the weights read from a weight store, and what a layer converter sees.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "ir/tensor.h"

namespace kiln::compiler::keras_import {

using json = nlohmann::json;

// Thrown by topology parsing and converters: what is wrong with this layer. The importer adds
// the location ("model.json: layer 3 'lstm_1' (LSTM)").
struct LayerError {
  std::string message;
};

// An input of a layer call: output `tensor_index` of call `node_index` of layer `layer`.
struct TensorRef {
  std::string layer;
  int node_index = 0;
  int tensor_index = 0;
};

// One application of a layer: its tensor arguments, positional first, then the keyword ones
// (MultiHeadAttention's value=, key=, attention_mask=), and its other keyword arguments
// (use_causal_mask, training…).
struct Call {
  std::vector<TensorRef> inputs;
  std::vector<std::string> keywords;  // per input: "" when positional, else its keyword
  json options = json::object();
};

struct Layer {
  int index = 0;  // position in the model's layer list, for messages
  std::string name;
  std::string class_name;
  json config;
  std::vector<Call> calls;  // one entry per time the layer is applied
  std::string error;  // its inbound nodes did not parse (reported with the layer's location)
  std::string where() const;  // "layer 3 'lstm_1' (LSTM)"
};

struct Topology {
  std::string name;
  std::vector<Layer> layers;
  std::vector<TensorRef> inputs, outputs;
};

// Reads {"class_name": "Sequential" | "Functional" | "Model", "config": ...}. A layer whose
// inbound nodes do not parse keeps the reason in Layer::error; problems of the whole model throw
// LayerError.
Topology read_topology(const json& model);

// Weights by (layer name, weight name): "conv2d_1" + "kernel".
class WeightStore {
 public:
  void add(const std::string& full_name, ir::Tensor tensor);
  // Keyed explicitly: a sublayer's weight of MultiHeadAttention is ("mha", "query/kernel").
  void add(const std::string& layer, const std::string& weight, const std::string& full_name, ir::Tensor tensor);
  const ir::Tensor* find(const std::string& layer, const std::string& weight) const;
  bool empty() const { return by_name_.empty(); }
  // Weights no layer asked for (a sign of a name mismatch), for a message.
  std::vector<std::string> unused() const;

 private:
  std::map<std::pair<std::string, std::string>, ir::Tensor> by_name_;
  mutable std::unordered_set<std::string> used_;
  std::map<std::pair<std::string, std::string>, std::string> full_names_;
};

// Reads a TensorFlow.js weightsManifest: groups of weights laid out in order in the
// concatenation of each group's shard files (resolved against `base_dir`).
WeightStore read_tfjs_weights(const json& manifest, const std::string& base_dir);

// A Keras HDF5 file: the model JSON (whole-model files; empty for weights-only files) and the
// weights. keras_hdf5.cpp.
struct KerasHdf5 {
  std::string model_config;
  WeightStore weights;
};
bool looks_like_hdf5(std::string_view head);
KerasHdf5 read_keras_hdf5(const std::string& path);

// Keras 3's .weights.h5 numbers a layer's variables (creation order, trainable first) instead
// of naming them: the names in that order, for the layer's class and config.
std::vector<std::string> weight_order(const std::string& class_name, const json& config);
// Where Keras 3 keeps a sublayer's weight that Keras 2 names "query/kernel": the names it may
// have in the store ("query_dense/#0"); empty for a weight of the layer's own.
std::vector<std::string> keras3_sublayer_weight(const std::string& class_name, const std::string& weight);

// A tensor during import. 4-D tensors (Keras NHWC) are stored NCHW (channels_first); a
// flattened NCHW tensor remembers [C, H, W] so that a Dense layer permutes its weight rows to
// match, and anything else restores Keras's order first. Zero padding waits in `pad` [top,
// left, bottom, right] for a convolution or pooling that takes it as its own padding.
struct KTensor {
  KTensor() = default;
  explicit KTensor(ir::Value* stored) : value(stored) {}

  ir::Value* value = nullptr;
  bool channels_first = false;
  ir::Shape flattened_from;
  std::vector<int64_t> pad;  // empty: none pending

  int keras_rank() const { return value->type.rank(); }
};

struct Builder;

// One call of one layer.
class LayerContext {
 public:
  LayerContext(Builder& builder, const Layer& layer, int call) : b_(builder), layer_(layer), call_(call) {}

  const Layer& layer() const { return layer_; }
  [[noreturn]] void fail(const std::string& message) const { throw LayerError{message}; }

  // --- config -------------------------------------------------------------------------------
  bool has(const std::string& key) const;
  const json* get(const std::string& key) const;  // nullptr when absent or null
  int64_t get_int(const std::string& key, int64_t fallback) const;
  double get_float(const std::string& key, double fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
  // An int or a list of `count` ints ([3, 3] or 3).
  std::vector<int64_t> get_ints(const std::string& key, int count, std::vector<int64_t> fallback) const;
  // Fails unless data_format is channels_last (or absent).
  void require_channels_last() const;

  // --- building -----------------------------------------------------------------------------
  ir::Value* emit(ir::OpId op, const std::vector<ir::Value*>& inputs, ir::AttrMap attrs = {});
  // The layer's weight `weight` (Keras shape `keras_shape`) converted to kiln's layout by
  // `convert`, as a parameter named "layer.weight". Without weights in the file, a parameter
  // drawn from the layer's `<initializer_key>` with kiln shape `kiln_shape`.
  ir::Value* param(const std::string& weight, const ir::Shape& keras_shape, const ir::Shape& kiln_shape,
                   const std::function<ir::Tensor(const ir::Tensor&)>& convert, const std::string& initializer_key);
  ir::Value* constant(ir::Tensor tensor, const std::string& suffix);
  // A normalization's gamma and beta [size]: the layer's weights where its `scale` and `center`
  // say so (the default), else constants 1 and 0.
  std::pair<ir::Value*, ir::Value*> gamma_beta(int64_t size);

  // --- layout -------------------------------------------------------------------------------
  // The tensor as Keras sees it (NHWC for 4-D, flatten in h,w,c order), materialized.
  ir::Value* keras_order(const KTensor& t);
  // Pending zero padding applied (concatenated zeros).
  KTensor apply_pad(const KTensor& t);
  // From a Keras-ordered value: 4-D becomes channels_first.
  KTensor from_keras_order(ir::Value* value);
  // Activation by name ("relu", "linear"…) applied to a stored tensor; `channel_axis` is where
  // softmax's last axis lives.
  ir::Value* activation(ir::Value* x, const std::string& name, int64_t softmax_axis);

  Builder& builder() { return b_; }
  int call() const { return call_; }
  // This call's keyword arguments: per input, its keyword ("" when positional); the others.
  const std::vector<std::string>& input_keywords() const;
  const json& call_options() const;

 private:
  Builder& b_;
  const Layer& layer_;
  int call_;
  int emitted_ = 0;
};

// A float tensor of `to_shape` whose element at each index is `from`'s element at flat index
// `source(index)`: how kernels move to kiln's layouts (HWIO → OIHW, [in, out] → [out, in]).
ir::Tensor permuted(const ir::Tensor& from, const ir::Shape& to_shape,
                    const std::function<int64_t(const std::vector<int64_t>&)>& source);

// Converts one call of a layer: its inputs → its outputs.
using LayerConverter = std::function<std::vector<KTensor>(LayerContext&, const std::vector<KTensor>&)>;
// The sequence layers (keras_layers_sequence.cpp).
std::vector<KTensor> embedding_layer(LayerContext& c, const std::vector<KTensor>& in);
std::vector<KTensor> layer_normalization_layer(LayerContext& c, const std::vector<KTensor>& in);
// MultiHeadAttention (keras_layers_attention.cpp).
std::vector<KTensor> multi_head_attention_layer(LayerContext& c, const std::vector<KTensor>& in);
const LayerConverter* find_converter(const std::string& class_name);
std::vector<std::string> supported_layers();  // sorted, for messages

// The graph under construction, shared by every layer.
struct Builder {
  ir::Graph graph;
  std::string file;
  WeightStore weights;
  bool has_weights = false;  // the file carries weights (else: initializers)
  std::unordered_set<std::string> used_names;
  std::string unique_name(const std::string& base);
  ir::SourceLoc loc(const Layer& layer) const { return ir::SourceLoc{file, layer.where(), 0, 0}; }
};

}  // namespace kiln::compiler::keras_import
