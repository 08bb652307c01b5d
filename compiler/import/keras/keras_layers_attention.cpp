// Keras MultiHeadAttention → kiln's `attention` op, with its four projections as Dense ops.
//
// Keras (keras/layers/attention/multi_head_attention.py) on query [B, T, E] and value/key
// [B, S, E']: einsum projections to [B, T, H, Dk] (query, key) and [B, S, H, Dv] (value), each
// with a bias [H, D]; scores = (query / sqrt(Dk)) · key per head, softmax over the keys with
// the attention mask added as (1 - mask) · -1e9 (Keras's Softmax), the weighted sum of values,
// and an einsum back to [B, T, E_out] with kernel [H, Dv, E_out] and bias [E_out]. Here each
// projection is a Dense on the rows [B·T, E] with its kernel reshaped to [H·D, E], the heads
// become a batch dim by a transpose, and the attention itself is one op.
#include <cmath>

#include "compiler/import/keras/keras_model.h"

namespace kiln::compiler::keras_import {

namespace {
using ir::OpId;
using Ints = std::vector<int64_t>;

// A Keras einsum kernel whose first `input_axes` dims are contracted ([E, H, D] for a
// projection, [H, Dv, E] for the output) as a Dense weight [outputs, inputs].
ir::Tensor dense_weight(const ir::Tensor& kernel, size_t input_axes) {
  const ir::Shape& s = kernel.shape();
  const int64_t inputs = ir::num_elements(s, 0, input_axes);
  const int64_t outputs = kernel.num_elements() / inputs;
  return permuted(kernel, {outputs, inputs}, [&](const Ints& i) { return i[1] * outputs + i[0]; });
}

// A bias [H, D] as [H·D].
ir::Tensor flattened(const ir::Tensor& t) {
  return ir::Tensor(ir::TensorType{t.dtype(), {t.num_elements()}}, t.bytes());
}

// A sequence [B, T, E]: not an image, not a flattened one.
const KTensor& sequence(LayerContext& c, const KTensor& t, const char* role) {
  if (t.channels_first || !t.pad.empty() || !t.flattened_from.empty() || t.value->type.rank() != 3)
    c.fail(std::string(role) + " must be a sequence [batch, steps, features], got " + t.value->type.to_string() +
           (t.value->type.rank() == 3 ? "" : " (attention over more than one axis is not supported)"));
  return t;
}

// x [B, T, E] → [B, H, T, D]: Dense over the rows with the sublayer's kernel [E, H, D] and bias [H, D].
ir::Value* project(LayerContext& c, ir::Value* x, const std::string& sublayer, int64_t heads, int64_t size,
                   bool bias) {
  const ir::Shape& s = x->type.shape;
  const int64_t batch = s[0], steps = s[1], features = s[2];
  ir::Value* rows = c.emit(OpId::Reshape, {x}, {{"shape", Ints{batch * steps, features}}});
  std::vector<ir::Value*> operands{
      rows, c.param(sublayer + "/kernel", {features, heads, size}, {heads * size, features},
                    [](const ir::Tensor& t) { return dense_weight(t, 1); },
                    "kernel_initializer")};
  if (bias)
    operands.push_back(c.param(sublayer + "/bias", {heads, size}, {heads * size}, flattened, "bias_initializer"));
  ir::Value* y = c.emit(OpId::Dense, operands);
  y = c.emit(OpId::Reshape, {y}, {{"shape", Ints{batch, steps, heads, size}}});
  return c.emit(OpId::Transpose, {y}, {{"perm", Ints{0, 2, 1, 3}}});
}

// The attention mask [B, T, S] (true or 1: attend) as Keras's additive (1 - mask) · -1e9,
// broadcast over the heads as [B, 1, T, S].
ir::Value* additive_mask(LayerContext& c, const KTensor& mask, int64_t batch, int64_t queries, int64_t keys) {
  ir::Value* m = mask.value;
  const ir::Shape& s = m->type.shape;
  if (mask.channels_first || !mask.pad.empty() || s.size() != 3 || s[1] != queries || s[2] != keys ||
      (s[0] != batch && s[0] != 1))
    c.fail("attention_mask " + m->type.to_string() + " must be [batch, " + std::to_string(queries) + ", " +
           std::to_string(keys) + "] (query steps × key steps)");
  if (m->type.dtype != ir::DType::F32) m = c.emit(OpId::Cast, {m}, {{"to", std::string("f32")}});
  const ir::TensorType scalar{ir::DType::F32, {}};
  m = c.emit(OpId::Sub, {m, c.constant(ir::Tensor::from_doubles(scalar, {1.0}), "one")});
  m = c.emit(OpId::Mul, {m, c.constant(ir::Tensor::from_doubles(scalar, {1e9}), "large")});
  return c.emit(OpId::Reshape, {m}, {{"shape", Ints{s[0], 1, queries, keys}}});
}

// The input passed as `keyword`, else the positional one at `position` (Keras 3 keeps value
// and key positional; Keras 2 turns every argument after the first into a keyword).
const KTensor* argument(LayerContext& c, const std::vector<KTensor>& in, const std::string& keyword, size_t position) {
  const std::vector<std::string>& keywords = c.input_keywords();
  for (size_t i = 0; i < in.size() && i < keywords.size(); ++i)
    if (keywords[i] == keyword) return &in[i];
  size_t positional = 0;
  for (size_t i = 0; i < in.size(); ++i)
    if (i >= keywords.size() || keywords[i].empty())
      if (positional++ == position) return &in[i];
  return nullptr;
}

}  // namespace

std::vector<KTensor> multi_head_attention_layer(LayerContext& c, const std::vector<KTensor>& in) {
  const std::vector<std::string>& keywords = c.input_keywords();
  for (const std::string& keyword : keywords)
    if (!keyword.empty() && keyword != "query" && keyword != "value" && keyword != "key" && keyword != "attention_mask")
      c.fail("keyword argument '" + keyword + "' is not supported (query, value, key and attention_mask are)");
  size_t positional = 0;
  for (size_t i = 0; i < in.size(); ++i) positional += i >= keywords.size() || keywords[i].empty();
  if (positional > 3)
    c.fail("takes query, value and key as tensors, got " + std::to_string(positional) +
           " positional tensors (pass masks as attention_mask)");
  const KTensor* query_arg = argument(c, in, "query", 0);
  const KTensor* value_arg = argument(c, in, "value", 1);
  if (!query_arg || !value_arg) c.fail("needs a query and a value (called as mha(query, value))");
  const KTensor* key_arg = argument(c, in, "key", 2);
  const KTensor& query = sequence(c, *query_arg, "the query");
  const KTensor& value = sequence(c, *value_arg, "the value");
  const KTensor& key = key_arg ? sequence(c, *key_arg, "the key") : value;

  const json& options = c.call_options();
  for (const auto& [name, setting] : options.items()) {
    if (name == "return_attention_scores" && setting.is_boolean() && setting.get<bool>())
      c.fail("return_attention_scores=True is not supported (kiln's attention never forms the scores)");
    if (name == "query_mask" || name == "value_mask" || name == "key_mask")
      if (!setting.is_null()) c.fail(name + " is not supported (pass attention_mask)");
  }
  bool causal = false;
  if (options.contains("use_causal_mask")) {
    const json& flag = options.at("use_causal_mask");
    if (!flag.is_boolean()) c.fail("use_causal_mask must be true or false, got " + flag.dump());
    causal = flag.get<bool>();
  }

  const int64_t heads = c.get_int("num_heads", 0), key_dim = c.get_int("key_dim", 0);
  const int64_t value_dim = c.has("value_dim") ? c.get_int("value_dim", 0) : key_dim;
  const bool bias = c.get_bool("use_bias", true);
  if (heads < 1 || key_dim < 1 || value_dim < 1)
    c.fail("num_heads, key_dim and value_dim must be positive, got " + std::to_string(heads) + ", " +
           std::to_string(key_dim) + " and " + std::to_string(value_dim));
  if (const json* axes = c.get("attention_axes")) {
    const json& axis = axes->is_array() && axes->size() == 1 ? (*axes)[0] : *axes;  // 1 or [1]
    const bool steps_axis = axis.is_number_integer() && (axis.get<int64_t>() == 1 || axis.get<int64_t>() == -2);
    if (!steps_axis) c.fail("attention_axes " + axes->dump() + " is not supported (attention over the steps axis, 1)");
  }
  const int64_t batch = query.value->type.shape[0], queries = query.value->type.shape[1];
  const int64_t keys = key.value->type.shape[1];
  if (value.value->type.shape[1] != keys || value.value->type.shape[0] != key.value->type.shape[0])
    c.fail("the value " + value.value->type.to_string() + " and the key " + key.value->type.to_string() +
           " must have the same batch and steps");
  if (key.value->type.shape[0] != batch)
    c.fail("the query " + query.value->type.to_string() + " and the value " + value.value->type.to_string() +
           " must have the same batch");
  int64_t out_features = query.value->type.shape[2];
  if (const json* shape = c.get("output_shape")) {
    if (shape->is_number_integer()) out_features = shape->get<int64_t>();
    else if (shape->is_array() && shape->size() == 1 && (*shape)[0].is_number_integer()) out_features = (*shape)[0].get<int64_t>();
    else c.fail("output_shape " + shape->dump() + " is not supported (one size, or null)");
    if (out_features < 1) c.fail("output_shape must be positive, got " + shape->dump());
  }

  ir::Value* q = project(c, query.value, "query", heads, key_dim, bias);
  ir::Value* k = project(c, key.value, "key", heads, key_dim, bias);
  ir::Value* v = project(c, value.value, "value", heads, value_dim, bias);
  std::vector<ir::Value*> operands{q, k, v};
  if (const KTensor* mask = argument(c, in, "attention_mask", 3)) operands.push_back(additive_mask(c, *mask, batch, queries, keys));
  ir::Value* attended = c.emit(OpId::Attention, operands,
                            {{"scale", 1.0 / std::sqrt(static_cast<double>(key_dim))}, {"causal", causal}});
  ir::Value* merged = c.emit(OpId::Transpose, {attended}, {{"perm", Ints{0, 2, 1, 3}}});
  merged = c.emit(OpId::Reshape, {merged}, {{"shape", Ints{batch * queries, heads * value_dim}}});
  std::vector<ir::Value*> out{
      merged, c.param("attention_output/kernel", {heads, value_dim, out_features},
                      {out_features, heads * value_dim}, [](const ir::Tensor& t) { return dense_weight(t, 2); },
                      "kernel_initializer")};
  if (bias) out.push_back(c.param("attention_output/bias", {out_features}, {out_features}, flattened, "bias_initializer"));
  ir::Value* y = c.emit(OpId::Dense, out);
  return {KTensor{c.emit(OpId::Reshape, {y}, {{"shape", Ints{batch, queries, out_features}}})}};
}

std::vector<std::string> keras3_sublayer_weight(const std::string& class_name, const std::string& weight) {
  if (class_name != "MultiHeadAttention") return {};
  const size_t slash = weight.find('/');
  if (slash == std::string::npos) return {};
  std::string sublayer = weight.substr(0, slash), variable = weight.substr(slash + 1);
  if (sublayer == "attention_output") sublayer = "output";
  const std::string index = variable == "kernel" ? "#0" : variable == "bias" ? "#1" : "";
  if (index.empty()) return {};
  // Keras 3 saves a sublayer under its public property (query_dense) or its attribute (_query_dense).
  return {sublayer + "_dense/" + index, "_" + sublayer + "_dense/" + index};
}

}  // namespace kiln::compiler::keras_import
