// What a Keras layer converter sees: config accessors, node and parameter building, the NCHW
// layout bookkeeping (keras_model.h's KTensor) and the activations by name.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "compiler/import/keras/keras_model.h"
#include "ir/diagnostic.h"
#include "ir/op_registry.h"

namespace kiln::compiler::keras_import {

std::string Builder::unique_name(const std::string& base) {
  const std::string name = base.empty() ? std::string("value") : base;
  if (used_names.insert(name).second) return name;
  for (int i = 1;; ++i) {
    std::string candidate = name + "." + std::to_string(i);
    if (used_names.insert(candidate).second) return candidate;
  }
}

// --- config -------------------------------------------------------------------------------------

const std::vector<std::string>& LayerContext::input_keywords() const {
  static const std::vector<std::string> none;
  return call_ < static_cast<int>(layer_.calls.size()) ? layer_.calls[call_].keywords : none;
}

const json& LayerContext::call_options() const {
  static const json none = json::object();
  return call_ < static_cast<int>(layer_.calls.size()) ? layer_.calls[call_].options : none;
}

bool LayerContext::has(const std::string& key) const { return get(key) != nullptr; }

const json* LayerContext::get(const std::string& key) const {
  const json& config = layer_.config;
  if (!config.is_object()) return nullptr;
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return nullptr;
  return &*it;
}

int64_t LayerContext::get_int(const std::string& key, int64_t fallback) const {
  const json* value = get(key);
  if (!value) return fallback;
  if (value->is_number_integer()) return value->get<int64_t>();
  if (value->is_number_float() && std::trunc(value->get<double>()) == value->get<double>() &&
      std::abs(value->get<double>()) < 1e15)
    return static_cast<int64_t>(value->get<double>());
  fail("config '" + key + "' must be an integer, got " + value->dump());
}

double LayerContext::get_float(const std::string& key, double fallback) const {
  const json* value = get(key);
  if (!value) return fallback;
  if (!value->is_number()) fail("config '" + key + "' must be a number");
  return value->get<double>();
}

bool LayerContext::get_bool(const std::string& key, bool fallback) const {
  const json* value = get(key);
  if (!value) return fallback;
  if (!value->is_boolean()) fail("config '" + key + "' must be true or false");
  return value->get<bool>();
}

std::string LayerContext::get_string(const std::string& key, const std::string& fallback) const {
  const json* value = get(key);
  if (!value) return fallback;
  if (!value->is_string()) fail("config '" + key + "' must be a string");
  return value->get<std::string>();
}

std::vector<int64_t> LayerContext::get_ints(const std::string& key, int count, std::vector<int64_t> fallback) const {
  const json* value = get(key);
  if (!value) return fallback;
  const auto positive = [&](const json& v) {
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > (int64_t{1} << 30))
      fail("config '" + key + "' must hold positive integers, got " + value->dump());
    return v.get<int64_t>();
  };
  if (value->is_number()) return std::vector<int64_t>(count, positive(*value));
  if (!value->is_array() || static_cast<int>(value->size()) != count)
    fail("config '" + key + "' must be an integer or a list of " + std::to_string(count));
  std::vector<int64_t> out;
  for (const json& v : *value) out.push_back(positive(v));
  return out;
}

void LayerContext::require_channels_last() const {
  const std::string format = get_string("data_format", "channels_last");
  if (format != "channels_last")
    fail("data_format '" + format + "' is not supported (channels_last only)");
}

// --- building -----------------------------------------------------------------------------------

ir::Value* LayerContext::emit(ir::OpId op, const std::vector<ir::Value*>& inputs, ir::AttrMap attrs) {
  std::vector<ir::TensorType> types;
  try {
    types = ir::infer_op(op, inputs, attrs);
  } catch (const ir::OpError& error) {
    fail(std::string(ir::op_name(op)) + ": " + error.message);
  }
  KILN_CHECK(!types.empty()) << ir::op_name(op) << " has no results";
  std::string base = layer_.name + (call_ > 0 ? "_call" + std::to_string(call_) : "");
  if (emitted_++ > 0) base += "." + std::string(ir::op_name(op));
  const std::string name = b_.unique_name(base);
  // An op's further results (attention's log-sum-exp) are named after the first; the layers
  // read only the first.
  std::vector<std::pair<std::string, ir::TensorType>> results{{name, types[0]}};
  for (size_t i = 1; i < types.size(); ++i) results.emplace_back(b_.unique_name(name + "." + std::to_string(i)), types[i]);
  ir::Node* node = b_.graph.add_node(op, name, inputs, std::move(attrs), std::move(results), b_.loc(layer_));
  for (ir::Value* result : node->results) result->loc = b_.loc(layer_);
  return node->results[0];
}

ir::Value* LayerContext::constant(ir::Tensor tensor, const std::string& suffix) {
  auto data = std::make_shared<const ir::Tensor>(std::move(tensor));
  ir::Value* value = b_.graph.add_parameter(b_.unique_name(layer_.name + "." + suffix), data->type(),
                                            ir::InlineData{data->to_doubles()}, b_.loc(layer_));
  value->data = data;
  return value;
}

std::pair<ir::Value*, ir::Value*> LayerContext::gamma_beta(int64_t size) {
  const ir::Shape shape{size};
  const auto weight_or = [&](const char* flag, const char* name, double fallback) {
    if (get_bool(flag, true))
      return param(name, shape, shape, [](const ir::Tensor& t) { return t; }, std::string(name) + "_initializer");
    ir::Tensor t(ir::TensorType{ir::DType::F32, shape});
    for (int64_t i = 0; i < size; ++i) t.set(i, fallback);
    return constant(std::move(t), name);
  };
  ir::Value* gamma = weight_or("scale", "gamma", 1.0);
  return {gamma, weight_or("center", "beta", 0.0)};
}

namespace {

// Keras's fans (keras.initializers.VarianceScaling): the last two dims are input and output,
// the rest the receptive field.
std::pair<double, double> keras_fans(const ir::Shape& shape) {
  if (shape.empty()) return {1, 1};
  if (shape.size() == 1) return {double(shape[0]), double(shape[0])};
  double receptive = 1;
  for (size_t i = 0; i + 2 < shape.size(); ++i) receptive *= double(shape[i]);
  return {double(shape[shape.size() - 2]) * receptive, double(shape.back()) * receptive};
}

std::string normalized_class(std::string name) {
  std::string out;
  for (char c : name) if (c != '_') out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

// A Keras initializer as a kiln one. The variance-scaling family (Glorot, He, LeCun) is computed
// with Keras's fans of the Keras shape; truncated normals are drawn untruncated with the
// truncated distribution's standard deviation (a documented approximation: kiln has no
// truncated normal).
static ir::InitializerSpec initializer(LayerContext& c, const std::string& key, const ir::Shape& keras_shape,
                                       const std::string& weight, const std::string& fallback) {
  const json* value = c.get(key);
  std::string name = fallback;
  json config = json::object();
  if (value && value->is_string()) {
    name = value->get<std::string>();
  } else if (value && value->is_object()) {
    if (!value->value("class_name", json()).is_string()) c.fail("config '" + key + "' has no class_name");
    name = value->at("class_name").get<std::string>();
    config = value->value("config", json::object());
    if (!config.is_object()) config = json::object();
  } else if (value) {
    c.fail("config '" + key + "' must be an initializer");
  }
  const auto number = [&](const char* field, double fallback_value) {
    const json v = config.value(field, json());
    return v.is_number() ? v.get<double>() : fallback_value;
  };
  // Keras leaves the seed null (a fresh draw each time); kiln draws deterministically, from the
  // layer's index and the weight.
  int64_t seed = 0;
  if (config.value("seed", json()).is_number_integer()) {
    seed = std::abs(config.at("seed").get<int64_t>()) % 1000000007;
  } else {
    seed = 1000 + 16 * (c.layer().index + 1) + static_cast<int64_t>(std::hash<std::string>{}(weight) % 16);
  }
  const std::string kind = normalized_class(name);
  if (kind == "zeros" || kind == "zero") return {"zeros", {}};
  if (kind == "ones" || kind == "one") return {"ones", {}};
  if (kind == "constant") return {"constant", {{"value", number("value", 0.0)}}};
  if (kind == "randomuniform" || kind == "uniform")
    return {"uniform", {{"low", number("minval", -0.05)}, {"high", number("maxval", 0.05)}, {"seed", seed}}};
  if (kind == "randomnormal" || kind == "normal" || kind == "truncatednormal") {
    const double std_dev = number("stddev", 0.05) * (kind == "truncatednormal" ? 0.87962566103423978 : 1.0);
    return {"normal", {{"mean", number("mean", 0.0)}, {"std", std_dev}, {"seed", seed}}};
  }
  double scale = 1;
  std::string mode = "fan_in", distribution = "truncated_normal";
  if (kind == "glorotuniform") mode = "fan_avg", distribution = "uniform";
  else if (kind == "glorotnormal") mode = "fan_avg";
  else if (kind == "heuniform") scale = 2, distribution = "uniform";
  else if (kind == "henormal") scale = 2;
  else if (kind == "lecununiform") distribution = "uniform";
  else if (kind == "lecunnormal") {}
  else if (kind == "variancescaling") {
    scale = number("scale", 1.0);
    mode = config.value("mode", json("fan_in")).is_string() ? config.at("mode").get<std::string>() : "fan_in";
    distribution = config.value("distribution", json("truncated_normal")).is_string()
                       ? config.at("distribution").get<std::string>() : "truncated_normal";
  } else {
    c.fail("initializer '" + escape_for_message(name) + "' (" + key + ") is not supported; give the weights");
  }
  const auto [fan_in, fan_out] = keras_fans(keras_shape);
  const double fan = mode == "fan_in" ? fan_in : mode == "fan_out" ? fan_out : (fan_in + fan_out) / 2;
  const double variance = scale / std::max(1.0, fan);
  if (distribution == "uniform") {
    const double limit = std::sqrt(3 * variance);
    return {"uniform", {{"low", -limit}, {"high", limit}, {"seed", seed}}};
  }
  // "normal" is Keras 2's and TensorFlow.js's spelling of the truncated normal.
  const double std_dev = std::sqrt(variance) * (distribution == "untruncated_normal" ? 1.0 : 0.87962566103423978);
  return {"normal", {{"mean", 0.0}, {"std", std_dev}, {"seed", seed}}};
}

ir::Value* LayerContext::param(const std::string& weight, const ir::Shape& keras_shape, const ir::Shape& kiln_shape,
                               const std::function<ir::Tensor(const ir::Tensor&)>& convert,
                               const std::string& initializer_key) {
  std::string dotted = weight;  // "query/kernel" → "mha.query.kernel"
  std::replace(dotted.begin(), dotted.end(), '/', '.');
  const std::string name = b_.unique_name(layer_.name + "." + dotted);
  const ir::Tensor* stored = b_.weights.find(layer_.name, weight);
  if (!stored) {  // Keras 3 .weights.h5: numbered in creation order
    const std::vector<std::string> order = weight_order(layer_.class_name, layer_.config);
    const auto it = std::find(order.begin(), order.end(), weight);
    if (it != order.end()) stored = b_.weights.find(layer_.name, "#" + std::to_string(it - order.begin()));
  }
  for (const std::string& alias : keras3_sublayer_weight(layer_.class_name, weight)) {
    if (stored) break;
    stored = b_.weights.find(layer_.name, alias);
  }
  if (stored) {
    if (stored->shape() != keras_shape)
      fail("weight '" + weight + "' has shape " + ir::shape_to_string(stored->shape()) + ", the layer needs " +
           ir::shape_to_string(keras_shape));
    auto data = std::make_shared<const ir::Tensor>(convert(*stored));
    KILN_CHECK(data->shape() == kiln_shape) << "converted " << weight << " has the wrong shape";
    ir::Value* value = b_.graph.add_parameter(name, data->type(), ir::InlineData{data->to_doubles()}, b_.loc(layer_));
    value->data = data;
    return value;
  }
  if (b_.has_weights)
    fail("the weights have no '" + escape_for_message(layer_.name) + "/" + weight + "' (shape " +
         ir::shape_to_string(keras_shape) + ")");
  const std::string fallback = initializer_key.find("kernel") != std::string::npos ? "GlorotUniform"
                               : initializer_key.find("variance") != std::string::npos ||
                                         initializer_key.find("gamma") != std::string::npos
                                   ? "Ones"
                                   : "Zeros";
  return b_.graph.add_parameter(name, ir::TensorType{ir::DType::F32, kiln_shape},
                                initializer(*this, initializer_key, keras_shape, weight, fallback), b_.loc(layer_));
}

// --- layout -------------------------------------------------------------------------------------

KTensor LayerContext::apply_pad(const KTensor& t) {
  if (t.pad.empty()) return t;
  KTensor out = t;
  out.pad.clear();
  const ir::TensorType& type = t.value->type;
  // Zeros concatenated along H (axis 2) and W (axis 3): [top, left, bottom, right].
  for (int axis : {2, 3}) {
    const int64_t before = t.pad[axis - 2], after = t.pad[axis];
    if (before == 0 && after == 0) continue;
    std::vector<ir::Value*> parts;
    const auto zeros = [&](int64_t size) {
      ir::Shape shape = out.value->type.shape;
      shape[axis] = size;
      parts.push_back(constant(ir::Tensor(ir::TensorType{type.dtype, shape}), "zeros"));
    };
    if (before > 0) zeros(before);
    parts.push_back(out.value);
    if (after > 0) zeros(after);
    out.value = emit(ir::OpId::Concat, parts, {{"axis", int64_t{axis}}});
  }
  return out;
}

// A transpose, or a reshape when the permutation moves only dims of size 1 (a one-channel image:
// NHWC and NCHW hold the same bytes), which costs no kernel.
static ir::Value* permute(LayerContext& c, ir::Value* x, const std::vector<int64_t>& perm) {
  const ir::Shape& shape = x->type.shape;
  ir::Shape permuted;
  std::vector<int64_t> moved;  // the axes of size > 1, in their new order
  for (int64_t axis : perm) {
    permuted.push_back(shape[axis]);
    if (shape[axis] > 1) moved.push_back(axis);
  }
  if (std::is_sorted(moved.begin(), moved.end())) return c.emit(ir::OpId::Reshape, {x}, {{"shape", permuted}});
  return c.emit(ir::OpId::Transpose, {x}, {{"perm", perm}});
}

ir::Value* LayerContext::keras_order(const KTensor& tensor) {
  const KTensor t = apply_pad(tensor);
  if (t.channels_first) return permute(*this, t.value, {0, 2, 3, 1});
  if (t.flattened_from.empty()) return t.value;
  const ir::Shape& chw = t.flattened_from;
  const int64_t n = t.value->type.shape[0];
  ir::Value* x = emit(ir::OpId::Reshape, {t.value}, {{"shape", ir::Shape{n, chw[0], chw[1], chw[2]}}});
  x = permute(*this, x, {0, 2, 3, 1});
  return emit(ir::OpId::Reshape, {x}, {{"shape", ir::Shape{n, chw[0] * chw[1] * chw[2]}}});
}

KTensor LayerContext::from_keras_order(ir::Value* value) {
  if (value->type.rank() != 4) return KTensor{value};
  KTensor t{permute(*this, value, {0, 3, 1, 2})};
  t.channels_first = true;
  return t;
}

ir::Value* LayerContext::activation(ir::Value* x, const std::string& name, int64_t softmax_axis) {
  using ir::OpId;
  if (name == "linear" || name.empty()) return x;
  if (name == "relu") return emit(OpId::Relu, {x});
  if (name == "sigmoid") return emit(OpId::Sigmoid, {x});
  if (name == "tanh") return emit(OpId::Tanh, {x});
  if (name == "softmax") return emit(OpId::Softmax, {x}, {{"axis", softmax_axis}});
  if (name == "log_softmax") return emit(OpId::LogSoftmax, {x}, {{"axis", softmax_axis}});
  if (name == "elu") return emit(OpId::Elu, {x}, {{"alpha", 1.0}});
  if (name == "selu") return emit(OpId::Selu, {x});
  if (name == "softplus") return emit(OpId::Softplus, {x});
  if (name == "swish" || name == "silu") return emit(OpId::Silu, {x});
  if (name == "gelu") return emit(OpId::Gelu, {x});
  if (name == "mish") return emit(OpId::Mish, {x});
  if (name == "exponential") return emit(OpId::Exp, {x});
  if (name == "relu6") return emit(OpId::Clip, {x}, {{"min", 0.0}, {"max", 6.0}});
  if (name == "leaky_relu") return emit(OpId::LeakyRelu, {x}, {{"alpha", 0.2}});
  if (name == "hard_swish" || name == "hard_silu") return emit(OpId::HardSwish, {x});
  // Keras 2 and TensorFlow.js: clip(0.2 x + 0.5, 0, 1).
  if (name == "hard_sigmoid") return emit(OpId::HardSigmoid, {x}, {{"alpha", 0.2}, {"beta", 0.5}});
  fail("activation '" + escape_for_message(name) + "' is not supported");
}

}  // namespace kiln::compiler::keras_import
