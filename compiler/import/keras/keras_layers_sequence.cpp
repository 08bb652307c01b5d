// Keras layers of sequence models → kiln ops: Embedding and LayerNormalization. Their tensors
// are [batch, steps, features] (or [batch, features]), which kiln stores as Keras does: no
// layout conversion, only the image layers (keras_layers.cpp) keep NCHW.
#include "compiler/import/keras/keras_model.h"

namespace kiln::compiler::keras_import {

namespace {
using ir::OpId;
using Ints = std::vector<int64_t>;

ir::Tensor same(const ir::Tensor& t) { return t; }

// The input in Keras's order: a Flatten of an image (stored c,h,w) is put back in h,w,c order,
// as per-feature weights (gamma, beta) expect.
KTensor sequence_input(LayerContext& c, const std::vector<KTensor>& in) {
  if (in.size() != 1) c.fail("expects 1 input, got " + std::to_string(in.size()));
  if (in[0].channels_first || !in[0].pad.empty())
    c.fail("expects a sequence or a vector, got an image tensor " + in[0].value->type.to_string() +
           " (flatten or pool it first)");
  if (!in[0].flattened_from.empty()) return KTensor{c.keras_order(in[0])};
  return in[0];
}
}  // namespace

// Embedding: token ids [batch, ...] → rows of the table [input_dim, output_dim], appended as a
// last axis. A lookup is gather_elements on the table's rows (the ids broadcast along the
// features), which trains through gather_elements_grad. Float ids (Keras casts its input) are
// truncated to integers as tf.cast does.
std::vector<KTensor> embedding_layer(LayerContext& c, const std::vector<KTensor>& in) {
  const KTensor ids = sequence_input(c, in);
  const int64_t vocabulary = c.get_int("input_dim", 0), width = c.get_int("output_dim", 0);
  if (vocabulary < 1 || width < 1)
    c.fail("input_dim and output_dim must be positive, got " + std::to_string(vocabulary) + " and " +
           std::to_string(width));
  if (c.get_bool("mask_zero", false))
    c.fail("mask_zero is not supported (kiln has no masks between layers): pad with a real token");
  ir::Value* table = c.param("embeddings", {vocabulary, width}, {vocabulary, width}, same,
                             "embeddings_initializer");
  ir::Value* index = ids.value;
  if (!ir::is_integer(index->type.dtype)) index = c.emit(OpId::Cast, {index}, {{"to", std::string("i32")}});
  const ir::Shape& shape = index->type.shape;
  const int64_t lookups = ir::num_elements(shape);
  index = c.emit(OpId::Reshape, {index}, {{"shape", Ints{lookups, 1}}});
  index = c.emit(OpId::BroadcastTo, {index}, {{"shape", Ints{lookups, width}}});
  ir::Value* rows = c.emit(OpId::GatherElements, {table, index}, {{"axis", int64_t{0}}});
  Ints out_shape(shape.begin(), shape.end());
  out_shape.push_back(width);
  return {KTensor{c.emit(OpId::Reshape, {rows}, {{"shape", out_shape}})}};
}

// LayerNormalization over the last axis (Keras's default, and what transformers use), with
// gamma and beta where `scale` and `center` say.
std::vector<KTensor> layer_normalization_layer(LayerContext& c, const std::vector<KTensor>& in) {
  const KTensor x = sequence_input(c, in);
  const int rank = x.value->type.rank();
  const json* axis = c.get("axis");
  int64_t last = -1;
  if (axis && axis->is_array() && axis->size() == 1 && (*axis)[0].is_number_integer()) last = (*axis)[0].get<int64_t>();
  else if (axis && axis->is_number_integer()) last = axis->get<int64_t>();
  else if (axis) c.fail("axis " + axis->dump() + " is not supported (the last axis alone)");
  if (last != -1 && last != rank - 1)
    c.fail("normalizing axis " + std::to_string(last) + " of a rank-" + std::to_string(rank) +
           " input is not supported (the last axis alone)");
  const auto [gamma, beta] = c.gamma_beta(x.value->type.shape.back());
  return {KTensor{c.emit(OpId::LayerNorm, {x.value, gamma, beta},
                         {{"axis", int64_t{-1}}, {"epsilon", c.get_float("epsilon", 1e-3)}})}};
}

}  // namespace kiln::compiler::keras_import
