// Neural-network ops: convolution, matrix products, pooling, normalization, softmax.
//
// conv2d and the pools share PyTorch's output-size rule (floor rounding, ceil_mode=False):
//   out = (in + pad_lo + pad_hi - dilation * (kernel - 1) - 1) / stride + 1
// kiln has no zero-size dims, so a window that does not fit in the padded input even once is
// an error rather than an empty result.
#include <algorithm>
#include <string>

#include "ir/image_layout.h"
#include "ir/ops/op_helpers.h"
#include "ir/ops/type_rules.h"

namespace kiln::ir::type_rules {
namespace {

using ops::checked_result;
using ops::ints_to_string;
using ops::require_axis;
using ops::require_epsilon;
using ops::require_float;
using ops::require_float_operands;
using ops::require_rank;
using ops::require_same_dtype;
using ops::str;
using Ints = std::vector<int64_t>;

void require_min_rank(const InferContext& ctx, int input, int rank, const char* role) {
  if (ctx.inputs[input].rank() < rank)
    throw OpError{std::string(role) + " must have rank >= " + str(rank) + ", got " +
                      ctx.inputs[input].to_string(),
                  input};
}

// A per-channel (or per-feature) vector operand such as a bias must be exactly [size].
void require_vector(const InferContext& ctx, int input, const char* role, int64_t size,
                    const std::string& why) {
  if (ctx.inputs[input].shape != Shape{size})
    throw OpError{std::string(role) + " must have shape [" + str(size) + "] (" + why + "), got " +
                      ctx.inputs[input].to_string(),
                  input};
}

// ---- windows (conv2d, max_pool2d, avg_pool2d) ----

constexpr const char* kPairLayout = "[height, width]";
constexpr const char* kPadLayout = "[top, left, bottom, right]";
constexpr const char* kDimName[] = {"height", "width"};

struct Window {
  Ints kernel, stride, dilation, pad;
  bool has_dilation = true;  // avg_pool2d has no dilation attribute; don't mention it
};

// The upper bound keeps the output-size arithmetic in int64: a padded extent is at most 3 * 2^48.
Ints require_window_list(const InferContext& ctx, const std::string& attr,
                         size_t count, const char* layout, int64_t min_value) {
  const std::vector<int64_t>& values = ctx.get_ints(attr);
  if (values.size() != count)
    throw OpError{"attribute '" + attr + "' must have " + str(count) + " values " + layout +
                      ", got " + str(values.size()),
                  -1, attr};
  for (int64_t value : values) {
    if (value < min_value)
      throw OpError{"attribute '" + attr + "' values must be >= " + str(min_value) + ", got " +
                        ints_to_string(values),
                    -1, attr};
    if (value > kMaxElements)
      throw OpError{"attribute '" + attr + "' values must be at most 2^48, got " +
                        ints_to_string(values),
                    -1, attr};
  }
  return values;
}

// One spatial output dim (dim 0: height, 1: width) of a window op over an input of size `in`.
int64_t window_output(const Window& w, int dim, int64_t in) {
  const int64_t pad_lo = w.pad[dim];
  const int64_t pad_hi = w.pad[dim + 2];
  const int64_t padded = in + pad_lo + pad_hi;
  const int64_t span = w.kernel[dim] - 1;
  const int64_t dilation = w.dilation[dim];
  // dilation * span may overflow, so test "dilation * span + 1 <= padded" by division.
  if (span == 0 || dilation <= (padded - 1) / span)
    return (padded - 1 - dilation * span) / w.stride[dim] + 1;
  const std::string name = kDimName[dim];
  std::string message = "output " + name + " would be 0: input " + name + " " + str(in) +
                        " with kernel " + str(w.kernel[dim]);
  if (w.has_dilation) message += ", dilation " + str(dilation);
  message += " and padding " + str(pad_lo) + "+" + str(pad_hi);
  throw OpError{message, 0};
}

// The op's image layout (attribute 'layout'): where its 4-D operands keep their channels.
ImageLayout read_layout(const InferContext& ctx) {
  const std::string& text = ctx.get_string(std::string(kLayoutAttribute));
  if (auto layout = parse_image_layout(text)) return *layout;
  throw OpError{"attribute 'layout' must be \"nchw\" or \"nhwc\", got \"" + text + "\"", -1,
                std::string(kLayoutAttribute)};
}

// [N, channels, OH, OW] for an input x ([N, C, H, W] whatever its layout), in `layout`.
TensorType window_result(const InferContext& ctx, const Shape& x, const Window& w, int64_t channels,
                         ImageLayout layout) {
  return checked_result(ctx.inputs[0].dtype,
                        from_nchw({x[0], channels, window_output(w, 0, x[2]), window_output(w, 1, x[3])}, layout));
}

// ---- ops ----

}  // namespace

Types infer_conv2d(const InferContext& ctx) {
  require_rank(ctx, 0, 4, "input");
  require_rank(ctx, 1, 4, "weight");
  require_float_operands(ctx);
  const ImageLayout layout = read_layout(ctx);
  // The checks below read [N, C, H, W] and [O, C/groups, KH, KW] in either layout.
  const Shape x = to_nchw(ctx.inputs[0].shape, layout);
  const Shape weight = to_nchw(ctx.inputs[1].shape, layout);
  const int64_t groups = ctx.get_int("groups");
  if (groups < 1)
    throw OpError{"attribute 'groups' must be >= 1, got " + str(groups), -1, "groups"};
  if (x[1] % groups != 0)
    throw OpError{"input has " + str(x[1]) + " channels, which is not divisible by groups = " +
                      str(groups),
                  -1, "groups"};
  if (weight[0] % groups != 0)
    throw OpError{"weight has " + str(weight[0]) +
                      " output channels, which is not divisible by groups = " + str(groups),
                  -1, "groups"};
  if (weight[1] != x[1] / groups)
    throw OpError{"weight has " + str(weight[1]) + " input channels per group, input has " +
                      str(x[1]) + " channels (groups = " + str(groups) + ")",
                  1};
  if (ctx.inputs.size() == 3) require_vector(ctx, 2, "bias", weight[0], "one per output channel");

  Window w;
  w.kernel = {weight[2], weight[3]};
  w.stride = require_window_list(ctx, "stride", 2, kPairLayout, 1);
  w.dilation = require_window_list(ctx, "dilation", 2, kPairLayout, 1);
  w.pad = require_window_list(ctx, "pad", 4, kPadLayout, 0);
  const TensorType out = window_result(ctx, x, w, weight[0], layout);
  const int64_t chunk = ctx.get_int("k_chunk");
  if (chunk < 0) throw OpError{"attribute 'k_chunk' must be >= 0, got " + str(chunk), -1, "k_chunk"};
  if (chunk == 0) return {out};
  // Split-K: one partial result per chunk of the patch's C/groups * KH * KW terms.
  if (ctx.inputs.size() == 3)
    throw OpError{"a split-K convolution (k_chunk " + str(chunk) +
                      ") makes partial sums and takes no bias: add it after their sum",
                  2};
  Shape partials{(weight[1] * weight[2] * weight[3] + chunk - 1) / chunk};
  partials.insert(partials.end(), out.shape.begin(), out.shape.end());
  return {checked_result(accumulation_dtype(out.dtype), partials)};
}

Types infer_matmul(const InferContext& ctx) {
  require_min_rank(ctx, 0, 2, "a");
  require_min_rank(ctx, 1, 2, "b");
  require_float_operands(ctx);
  const bool transpose_a = ctx.get_bool("transpose_a");
  const bool transpose_b = ctx.get_bool("transpose_b");
  Shape a = ctx.inputs[0].shape;
  Shape b = ctx.inputs[1].shape;
  if (transpose_a) std::swap(a[a.size() - 2], a[a.size() - 1]);
  if (transpose_b) std::swap(b[b.size() - 2], b[b.size() - 1]);
  const int64_t k_a = a[a.size() - 1];
  const int64_t k_b = b[b.size() - 2];
  if (k_a != k_b)
    throw OpError{"inner dims differ: a " + ctx.inputs[0].to_string() +
                      (transpose_a ? " (transposed)" : "") + " has K = " + str(k_a) + ", b " +
                      ctx.inputs[1].to_string() + (transpose_b ? " (transposed)" : "") +
                      " has K = " + str(k_b),
                  1};
  const Shape batch_a(a.begin(), a.end() - 2);
  const Shape batch_b(b.begin(), b.end() - 2);
  std::optional<Shape> batch = broadcast_shapes(batch_a, batch_b);
  if (!batch)
    throw OpError{"batch dims " + shape_to_string(batch_a) + " of a and " +
                      shape_to_string(batch_b) + " of b cannot be broadcast together",
                  1};
  Shape out = std::move(*batch);
  out.push_back(a[a.size() - 2]);
  out.push_back(b[b.size() - 1]);
  const int64_t chunk = ctx.get_int("k_chunk");
  if (chunk < 0) throw OpError{"attribute 'k_chunk' must be >= 0, got " + str(chunk), -1, "k_chunk"};
  // Split-K: one partial result per chunk of the K terms.
  if (chunk == 0) return {checked_result(ctx.inputs[0].dtype, std::move(out))};
  out.insert(out.begin(), (k_a + chunk - 1) / chunk);
  return {checked_result(accumulation_dtype(ctx.inputs[0].dtype), std::move(out))};
}

Types infer_expand_two_four(const InferContext& ctx) {
  require_float(ctx, 0);
  require_rank(ctx, 0, 2, "kept");
  require_rank(ctx, 1, 2, "positions");
  const TensorType& kept = ctx.inputs[0];
  const TensorType& positions = ctx.inputs[1];
  const Shape& shape = ctx.get_ints("shape");
  if (shape.size() < 2 || std::any_of(shape.begin(), shape.end(), [](int64_t d) { return d < 1; }))
    throw OpError{"'shape' " + ints_to_string(shape) + " must have rank 2 or more and positive dims", -1, "shape"};
  const int64_t rows = shape[0];
  const int64_t k = num_elements(shape) / rows;
  if (k % 4 != 0)
    throw OpError{"'shape' " + ints_to_string(shape) + " has rows of " + str(k) +
                      " elements, not a multiple of 4 (2:4 groups)",
                  -1, "shape"};
  if (kept.shape != Shape{rows, k / 2})
    throw OpError{"kept must be [" + str(rows) + ", " + str(k / 2) + "] for 'shape' " + ints_to_string(shape) +
                      " (half of each row), got " + kept.to_string(),
                  0};
  if (positions.dtype != DType::U16 || positions.shape != Shape{rows, (k + 15) / 16})
    throw OpError{"positions must be u16[" + str(rows) + ", " + str((k + 15) / 16) + "] for 'shape' " +
                      ints_to_string(shape) + " (eight 2-bit positions a word), got " + positions.to_string(),
                  1};
  return {checked_result(kept.dtype, shape)};
}

Types infer_dense(const InferContext& ctx) {
  require_min_rank(ctx, 0, 1, "input");
  require_rank(ctx, 1, 2, "weight");
  require_float_operands(ctx);
  Shape out = ctx.inputs[0].shape;
  const Shape& weight = ctx.inputs[1].shape;
  if (weight[1] != out.back())
    throw OpError{"weight has " + str(weight[1]) + " input features (" +
                      ctx.inputs[1].to_string() + "), input has " + str(out.back()) + " (" +
                      ctx.inputs[0].to_string() + ")",
                  1};
  if (ctx.inputs.size() == 3) require_vector(ctx, 2, "bias", weight[0], "one per output feature");
  out.back() = weight[0];
  const int64_t chunk = ctx.get_int("k_chunk");
  if (chunk < 0) throw OpError{"attribute 'k_chunk' must be >= 0, got " + str(chunk), -1, "k_chunk"};
  if (chunk > 0) {
    // Split-K: one partial result per chunk of the K input features.
    if (ctx.inputs.size() == 3)
      throw OpError{"a split-K dense (k_chunk " + str(chunk) +
                        ") makes partial sums and takes no bias: add it after their sum",
                    2};
    out.insert(out.begin(), (weight[1] + chunk - 1) / chunk);
    return {checked_result(accumulation_dtype(ctx.inputs[0].dtype), std::move(out))};
  }
  return {checked_result(ctx.inputs[0].dtype, std::move(out))};
}

Types infer_bias_add(const InferContext& ctx) {
  require_float_operands(ctx);
  const TensorType& x = ctx.inputs[0];
  const int axis = require_axis(ctx.get_int("axis"), x.rank(), "axis");
  require_vector(ctx, 1, "bias", x.shape[axis],
                 "the size of axis " + str(axis) + " of input " + x.to_string());
  return {x};
}

namespace {

Window read_pool_window(const InferContext& ctx, bool has_dilation) {
  Window w;
  w.has_dilation = has_dilation;
  w.kernel = require_window_list(ctx, "kernel", 2, kPairLayout, 1);
  // An empty stride means "stride = kernel" (PyTorch's default); attrs are const here, so the
  // interpreter and codegen apply the same rule when they read the attribute.
  w.stride = ctx.get_ints("stride").empty()
                 ? w.kernel
                 : require_window_list(ctx, "stride", 2, kPairLayout, 1);
  w.dilation = has_dilation ? require_window_list(ctx, "dilation", 2, kPairLayout, 1)
                            : Ints{1, 1};
  w.pad = require_window_list(ctx, "pad", 4, kPadLayout, 0);
  // PyTorch's limit: padding beyond half the (undilated) kernel would let a window see only
  // padding, which is -inf for max pooling.
  const std::vector<int64_t> limit = {w.kernel[0] / 2, w.kernel[1] / 2, w.kernel[0] / 2,
                                      w.kernel[1] / 2};
  for (int i = 0; i < 4; ++i)
    if (w.pad[i] > limit[i])
      throw OpError{"attribute 'pad' must be at most half the kernel on each side, " +
                        ints_to_string(limit) + " for kernel " + ints_to_string(w.kernel) +
                        ", got " + ints_to_string(w.pad),
                    -1, "pad"};
  return w;
}

std::vector<TensorType> infer_pool(const InferContext& ctx, bool has_dilation) {
  require_rank(ctx, 0, 4, "input");
  require_float(ctx, 0);
  const ImageLayout layout = read_layout(ctx);
  const Window w = read_pool_window(ctx, has_dilation);
  const Shape x = to_nchw(ctx.inputs[0].shape, layout);
  return {window_result(ctx, x, w, x[1], layout)};
}

}  // namespace

Types infer_global_avg_pool(const InferContext& ctx) {
  require_rank(ctx, 0, 4, "input");
  require_float(ctx, 0);
  const Shape& x = ctx.inputs[0].shape;
  return {TensorType{ctx.inputs[0].dtype, {x[0], x[1], 1, 1}}};
}

Types infer_batch_norm(const InferContext& ctx) {
  require_min_rank(ctx, 0, 2, "input");
  require_float_operands(ctx);
  const TensorType& x = ctx.inputs[0];
  const int64_t channels = x.shape[1];
  const char* roles[] = {"scale", "bias", "mean", "var"};
  for (int i = 1; i <= 4; ++i)
    require_vector(ctx, i, roles[i - 1], channels,
                   "one per channel of input " + x.to_string());
  require_epsilon(ctx);
  const double momentum = ctx.get_float("momentum");
  if (!(momentum >= 0.0 && momentum <= 1.0))
    throw OpError{"attribute 'momentum' must be in [0, 1], got " + float_to_string(momentum), -1,
                  "momentum"};
  // Batch statistics of a single value per channel are meaningless; PyTorch refuses them too.
  const int64_t per_channel = num_elements(x.shape) / channels;
  if (ctx.get_bool("training") && per_channel < 2)
    throw OpError{"training needs more than 1 value per channel, input " + x.to_string() +
                      " has " + str(per_channel),
                  0};
  return {x};
}

Types infer_layer_norm(const InferContext& ctx) {
  require_float_operands(ctx);
  const TensorType& x = ctx.inputs[0];
  const int axis = require_axis(ctx.get_int("axis"), x.rank(), "axis");
  const Shape normalized(x.shape.begin() + axis, x.shape.end());
  const std::string why = "dims " + str(axis) + ".. of input " + x.to_string();
  for (int i = 1; i < static_cast<int>(ctx.inputs.size()); ++i) {  // scale, and layer_norm's bias
    if (ctx.inputs[static_cast<size_t>(i)].shape != normalized)
      throw OpError{std::string(i == 1 ? "scale" : "bias") + " must have shape " +
                        shape_to_string(normalized) + " (" + why + "), got " +
                        ctx.inputs[static_cast<size_t>(i)].to_string(),
                    i};
  }
  require_epsilon(ctx);
  return {x};
}

Types infer_softmax(const InferContext& ctx) {
  require_float(ctx, 0);
  require_axis(ctx.get_int("axis"), ctx.inputs[0].rank(), "axis");
  return {ctx.inputs[0]};
}

Types infer_max_pool2d(const InferContext& ctx) { return infer_pool(ctx, true); }
Types infer_avg_pool2d(const InferContext& ctx) { return infer_pool(ctx, false); }

}  // namespace kiln::ir::type_rules
