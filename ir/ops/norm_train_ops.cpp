// Normalization for training: batch_norm with batch statistics as results, and the backward
// ops of batch_norm_train and layer_norm.
//
// batch_norm_train(x, scale, bias) -> (y, batch_mean, batch_var) normalizes each channel (dim 1
// of [N, C, ...]) with the mean and BIASED variance over N and the trailing dims, as
// F.batch_norm(training=True) does; it returns the statistics so that the backward op can reuse
// them and the running averages can be updated from them (passes/batch_norm_training.h).
//
// The backward ops return several results where one kernel computes them anyway:
//   batch_norm_train_grad -> (dx, dscale, dbias): one block per channel sums dy and dy * xhat
//     for dx; those two sums ARE dbias[c] and dscale[c].
//   layer_norm_grad -> (dx, dy_xhat): a row kernel has each row's statistics but dscale sums
//     over the rows (a column reduction), so it writes dy * xhat and reduce_sum finishes it.
#include <string>

#include "ir/ops/op_helpers.h"
#include "ir/ops/type_rules.h"

namespace kiln::ir::type_rules {
namespace {

using ops::require_axis;
using ops::require_epsilon;
using ops::require_float;
using ops::require_float_operands;
using ops::require_same_dtype;
using ops::str;

void require_shape(const InferContext& ctx, int input, const char* role, const Shape& shape,
                   const std::string& why) {
  if (ctx.inputs[input].shape != shape)
    throw OpError{std::string(role) + " must have shape " + shape_to_string(shape) + " (" + why +
                      "), got " + ctx.inputs[input].to_string(),
                  input};
}

// x [N, C, ...] of operand `x_index`; operands from `first_vector` on are per-channel [C].
// Returns C.
int64_t require_batch_norm_operands(const InferContext& ctx, int x_index, int first_vector,
                                    const std::vector<const char*>& roles,
                                    bool has_epsilon = true) {
  require_float_operands(ctx);
  const TensorType& x = ctx.inputs[x_index];
  if (x.rank() < 2)
    throw OpError{"x must have rank >= 2 ([N, C, ...]), got " + x.to_string(), x_index};
  const int64_t channels = x.shape[1];
  for (size_t i = 0; i < roles.size(); ++i)
    require_shape(ctx, first_vector + static_cast<int>(i), roles[i], {channels},
                  "one per channel of x " + x.to_string());
  if (has_epsilon) require_epsilon(ctx);
  // The unbiased running variance divides by count - 1, and PyTorch refuses a single value.
  const int64_t per_channel = num_elements(x.shape) / channels;
  if (per_channel < 2)
    throw OpError{"batch statistics need more than 1 value per channel, x " + x.to_string() +
                      " has " + str(per_channel),
                  x_index};
  return channels;
}

// The per-chunk partials [chunks, 2, C] of x (operand `x_index`) for `chunks` chunks of each
// channel's values; throws unless every chunk holds at least one value.
Shape chunk_partials_shape(const InferContext& ctx, int x_index, int64_t chunks) {
  const TensorType& x = ctx.inputs[x_index];
  const int64_t per_channel = num_elements(x.shape) / x.shape[1];
  if (chunks < 1 || (chunks - 1) * ((per_channel + chunks - 1) / chunks) >= per_channel)
    throw OpError{"attribute 'chunks' must cut the " + str(per_channel) +
                      " values of each channel of x " + x.to_string() +
                      " into chunks that are not empty, got " + str(chunks),
                  -1, "chunks"};
  return {chunks, 2, x.shape[1]};
}

// The optional last operand of batch_norm_train and batch_norm_train_grad.
void require_chunk_partials(const InferContext& ctx, int partials, int x_index, const char* role) {
  if (static_cast<int>(ctx.inputs.size()) <= partials) return;
  const TensorType& x = ctx.inputs[x_index];
  const Shape& shape = ctx.inputs[partials].shape;
  if (shape.size() != 3 || shape[1] != 2 || shape[2] != x.shape[1])
    throw OpError{std::string(role) + " must have shape [chunks,2," + str(x.shape[1]) +
                      "] (two partials per chunk and channel of x " + x.to_string() + "), got " +
                      ctx.inputs[partials].to_string(),
                  partials};
  chunk_partials_shape(ctx, x_index, shape[0]);
}

}  // namespace

Types infer_batch_norm_train(const InferContext& ctx) {
  const int64_t channels = require_batch_norm_operands(ctx, 0, 1, {"scale", "bias"});
  require_chunk_partials(ctx, 3, 0, "chunk_stats");
  const TensorType& x = ctx.inputs[0];
  const TensorType stat{x.dtype, {channels}};
  return {x, stat, stat};
}

Types infer_batch_norm_train_grad(const InferContext& ctx) {
  const int64_t channels =
      require_batch_norm_operands(ctx, 1, 2, {"scale", "batch_mean", "batch_var"});
  const TensorType& x = ctx.inputs[1];
  require_shape(ctx, 0, "dy", x.shape, "the shape of x");
  require_chunk_partials(ctx, 5, 1, "chunk_sums");
  const TensorType per_channel{x.dtype, {channels}};
  return {x, per_channel, per_channel};
}

Types infer_batch_norm_chunk_stats(const InferContext& ctx) {
  require_batch_norm_operands(ctx, 0, 1, {}, false);
  const TensorType& x = ctx.inputs[0];
  return {TensorType{x.dtype, chunk_partials_shape(ctx, 0, ctx.get_int("chunks"))}};
}

Types infer_batch_norm_chunk_sums(const InferContext& ctx) {
  require_batch_norm_operands(ctx, 1, 2, {"batch_mean", "batch_var"});
  const TensorType& x = ctx.inputs[1];
  require_shape(ctx, 0, "dy", x.shape, "the shape of x");
  return {TensorType{x.dtype, chunk_partials_shape(ctx, 1, ctx.get_int("chunks"))}};
}

Types infer_layer_norm_grad(const InferContext& ctx) {
  require_float_operands(ctx);
  const TensorType& x = ctx.inputs[1];
  require_shape(ctx, 0, "dy", x.shape, "the shape of x");
  const int axis = require_axis(ctx.get_int("axis"), x.rank(), "axis");
  const Shape normalized(x.shape.begin() + axis, x.shape.end());
  require_shape(ctx, 2, "scale", normalized, "dims " + str(axis) + ".. of x " + x.to_string());
  require_epsilon(ctx);
  return {x, x};
}

}  // namespace kiln::ir::type_rules
