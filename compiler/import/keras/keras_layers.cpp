// Keras layers → kiln ops, one converter per layer class. Tensors arrive in kiln's layout
// (keras_model.h's KTensor: 4-D as NCHW); weights are converted from Keras's layouts (conv
// kernels HWIO → OIHW, Dense kernels [in, out] → [out, in]).
#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "compiler/import/keras/keras_model.h"
#include "compiler/json_text.h"
#include "ir/diagnostic.h"

namespace kiln::compiler::keras_import {

ir::Tensor permuted(const ir::Tensor& from, const ir::Shape& to_shape,
                    const std::function<int64_t(const std::vector<int64_t>&)>& source) {
  ir::Tensor out(ir::TensorType{ir::DType::F32, to_shape});
  const auto* src = reinterpret_cast<const float*>(from.data());
  auto* dst = reinterpret_cast<float*>(out.data());
  std::vector<int64_t> index(to_shape.size(), 0);
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    dst[i] = src[source(index)];
    for (int d = static_cast<int>(to_shape.size()) - 1; d >= 0; --d) {
      if (++index[d] < to_shape[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

namespace {
using ir::OpId;
using Ints = std::vector<int64_t>;
using Outputs = std::vector<KTensor>;
using Inputs = std::vector<KTensor>;

const KTensor& one_input(LayerContext& c, const Inputs& in) {
  if (in.size() != 1) c.fail("expects 1 input, got " + std::to_string(in.size()));
  return in[0];
}

// A 4-D (image) input, stored NCHW.
const KTensor& image_input(LayerContext& c, const Inputs& in) {
  const KTensor& x = one_input(c, in);
  if (!x.channels_first)
    c.fail("expects a 4-D input (batch, height, width, channels), got " + x.value->type.to_string());
  return x;
}


// Keras conv kernel [kh, kw, in, out] → kiln [out, in, kh, kw].
ir::Tensor hwio_to_oihw(const ir::Tensor& k) {
  const ir::Shape& s = k.shape();
  return permuted(k, {s[3], s[2], s[0], s[1]},
                  [&](const Ints& i) { return ((i[2] * s[1] + i[3]) * s[2] + i[1]) * s[3] + i[0]; });
}

// Keras depthwise kernel [kh, kw, C, m] → kiln grouped conv weight [C*m, 1, kh, kw]; output
// channel c*m + j, as TensorFlow orders them.
ir::Tensor depthwise_to_oihw(const ir::Tensor& k) {
  const ir::Shape& s = k.shape();
  return permuted(k, {s[2] * s[3], 1, s[0], s[1]}, [&](const Ints& i) {
    const int64_t c = i[0] / s[3], j = i[0] % s[3];
    return ((i[2] * s[1] + i[3]) * s[2] + c) * s[3] + j;
  });
}

ir::Tensor same(const ir::Tensor& t) { return t; }

// Padding [top, left, bottom, right] for "valid" or "same" (TensorFlow: the odd pixel at the
// bottom and right) of `in` [H, W].
Ints window_pads(LayerContext& c, const ir::Shape& x, const Ints& kernel, const Ints& stride, const Ints& dilation) {
  const std::string padding = c.get_string("padding", "valid");
  if (padding == "valid") return {0, 0, 0, 0};
  if (padding != "same") c.fail("padding '" + escape_for_message(padding) + "' is not supported (valid, same)");
  Ints pads(4, 0);
  for (int d = 0; d < 2; ++d) {
    const int64_t in = x[2 + d];
    const int64_t out = (in + stride[d] - 1) / stride[d];
    const int64_t total = std::max<int64_t>(0, (out - 1) * stride[d] + (kernel[d] - 1) * dilation[d] + 1 - in);
    pads[d] = total / 2;
    pads[d + 2] = total - total / 2;
  }
  return pads;
}

// Pending zero padding (ZeroPadding2D) becomes part of the convolution's own padding.
Ints conv_pads(LayerContext& c, const KTensor& x, const Ints& kernel, const Ints& stride, const Ints& dilation) {
  ir::Shape shape = x.value->type.shape;
  const Ints pending = x.pad.empty() ? Ints(4, 0) : x.pad;
  shape[2] += pending[0] + pending[2];
  shape[3] += pending[1] + pending[3];
  Ints pads = window_pads(c, shape, kernel, stride, dilation);
  for (int i = 0; i < 4; ++i) pads[i] += pending[i];
  return pads;
}

ir::Value* bias(LayerContext& c, int64_t size) {
  return c.param("bias", {size}, {size}, same, "bias_initializer");
}

Outputs finish(LayerContext& c, ir::Value* y) {
  KTensor out{c.activation(y, c.get_string("activation", "linear"), y->type.rank() == 4 ? 1 : -1)};
  out.channels_first = out.value->type.rank() == 4;
  return {out};
}

Outputs conv2d(LayerContext& c, const Inputs& in) {
  const KTensor& x = image_input(c, in);
  c.require_channels_last();
  const int64_t filters = c.get_int("filters", 0);
  const int64_t groups = c.get_int("groups", 1);
  const int64_t channels = x.value->type.shape[1];
  if (filters < 1) c.fail("filters must be positive");
  if (groups < 1 || channels % groups != 0 || filters % groups != 0)
    c.fail("groups " + std::to_string(groups) + " must divide the " + std::to_string(channels) +
           " input channels and the " + std::to_string(filters) + " filters");
  const Ints kernel = c.get_ints("kernel_size", 2, {});
  if (kernel.empty()) c.fail("kernel_size is missing");
  const Ints stride = c.get_ints("strides", 2, {1, 1});
  const Ints dilation = c.get_ints("dilation_rate", 2, {1, 1});
  std::vector<ir::Value*> operands{
      x.value, c.param("kernel", {kernel[0], kernel[1], channels / groups, filters},
                       {filters, channels / groups, kernel[0], kernel[1]}, hwio_to_oihw, "kernel_initializer")};
  if (c.get_bool("use_bias", true)) operands.push_back(bias(c, filters));
  return finish(c, c.emit(OpId::Conv2d, operands,
                          {{"stride", stride}, {"pad", conv_pads(c, x, kernel, stride, dilation)},
                           {"dilation", dilation}, {"groups", groups}}));
}

// The depthwise step of DepthwiseConv2D and SeparableConv2D: a conv with one group per channel.
ir::Value* depthwise(LayerContext& c, const KTensor& x, bool with_bias) {
  c.require_channels_last();
  const int64_t channels = x.value->type.shape[1];
  const int64_t multiplier = c.get_int("depth_multiplier", 1);
  if (multiplier < 1 || multiplier > 4096) c.fail("depth_multiplier must be positive");
  const Ints kernel = c.get_ints("kernel_size", 2, {});
  if (kernel.empty()) c.fail("kernel_size is missing");
  const Ints stride = c.get_ints("strides", 2, {1, 1});
  const Ints dilation = c.get_ints("dilation_rate", 2, {1, 1});
  std::vector<ir::Value*> operands{
      x.value, c.param("depthwise_kernel", {kernel[0], kernel[1], channels, multiplier},
                       {channels * multiplier, 1, kernel[0], kernel[1]}, depthwise_to_oihw, "depthwise_initializer")};
  if (with_bias) operands.push_back(bias(c, channels * multiplier));
  return c.emit(OpId::Conv2d, operands,
                {{"stride", stride}, {"pad", conv_pads(c, x, kernel, stride, dilation)},
                 {"dilation", dilation}, {"groups", channels}});
}

Outputs depthwise_conv2d(LayerContext& c, const Inputs& in) {
  const KTensor& x = image_input(c, in);
  return finish(c, depthwise(c, x, c.get_bool("use_bias", true)));
}

Outputs separable_conv2d(LayerContext& c, const Inputs& in) {
  const KTensor& x = image_input(c, in);
  ir::Value* y = depthwise(c, x, false);
  const int64_t channels = y->type.shape[1];
  const int64_t filters = c.get_int("filters", 0);
  if (filters < 1) c.fail("filters must be positive");
  std::vector<ir::Value*> operands{
      y, c.param("pointwise_kernel", {1, 1, channels, filters}, {filters, channels, 1, 1}, hwio_to_oihw,
                 "pointwise_initializer")};
  if (c.get_bool("use_bias", true)) operands.push_back(bias(c, filters));
  return finish(c, c.emit(OpId::Conv2d, operands));
}

// Dense on [batch, features]. After a Flatten of an NCHW tensor the features arrive in c,h,w
// order; the kernel's rows (Keras: h,w,c order) are permuted to match instead of the data.
// On a sequence [batch, ..., features] it applies to the last axis: the leading dims are
// folded into the batch and unfolded again.
Outputs dense(LayerContext& c, const Inputs& in) {
  const KTensor& x = one_input(c, in);
  const int rank = x.value->type.rank();
  if (rank > 2 && !x.channels_first && x.pad.empty()) {
    const ir::Shape& shape = x.value->type.shape;
    KTensor rows{c.emit(OpId::Reshape, {x.value}, {{"shape", Ints{ir::num_elements(shape) / shape.back(), shape.back()}}})};
    KTensor y = dense(c, {rows})[0];
    Ints out_shape(shape.begin(), shape.end() - 1);
    out_shape.push_back(y.value->type.shape.back());
    return {KTensor{c.emit(OpId::Reshape, {y.value}, {{"shape", out_shape}})}};
  }
  if (rank != 2)
    c.fail("Dense on a rank-" + std::to_string(rank) +
           " image input is not supported (flatten or pool it first)");
  const int64_t units = c.get_int("units", 0);
  if (units < 1) c.fail("units must be positive");
  const int64_t features = x.value->type.shape[1];
  const ir::Shape chw = x.flattened_from;
  const auto convert = [&](const ir::Tensor& k) {
    return permuted(k, {units, features}, [&](const Ints& i) {
      int64_t row = i[1];
      if (!chw.empty()) {  // kiln's feature i[1] = (c, h, w) is Keras's row (h, w, c)
        const int64_t ch = row / (chw[1] * chw[2]), h = row / chw[2] % chw[1], w = row % chw[2];
        row = (h * chw[2] + w) * chw[0] + ch;
      }
      return row * units + i[0];
    });
  };
  std::vector<ir::Value*> operands{
      x.value, c.param("kernel", {features, units}, {units, features}, convert, "kernel_initializer")};
  if (c.get_bool("use_bias", true)) operands.push_back(bias(c, units));
  return finish(c, c.emit(OpId::Dense, operands));
}

Outputs pooling(LayerContext& c, const Inputs& in, OpId op) {
  const KTensor x = c.apply_pad(image_input(c, in));
  c.require_channels_last();
  const Ints kernel = c.get_ints("pool_size", 2, {2, 2});
  const Ints stride = c.get_ints("strides", 2, kernel);
  const Ints pads = window_pads(c, x.value->type.shape, kernel, stride, {1, 1});
  ir::AttrMap attrs{{"kernel", kernel}, {"stride", stride}, {"pad", pads}};
  if (op == OpId::AvgPool2d) attrs["count_include_pad"] = false;  // TensorFlow averages real pixels
  KTensor out{c.emit(op, {x.value}, std::move(attrs))};
  out.channels_first = true;
  return {out};
}

Outputs global_pooling(LayerContext& c, const Inputs& in, OpId op) {
  const KTensor x = c.apply_pad(image_input(c, in));
  c.require_channels_last();
  const bool keepdims = c.get_bool("keepdims", false);
  KTensor out{c.emit(op, {x.value}, {{"axes", Ints{2, 3}}, {"keepdims", keepdims}})};
  out.channels_first = keepdims;
  return {out};
}

// Where Keras's axis `axis` of `t` lives in kiln's layout.
int64_t stored_axis(LayerContext& c, const KTensor& t, int64_t axis) {
  const int rank = t.value->type.rank();
  if (axis < -rank || axis >= rank) c.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  if (axis < 0) axis += rank;
  if (!t.channels_first) return axis;
  static constexpr int64_t kNhwcToNchw[4] = {0, 2, 3, 1};
  return kNhwcToNchw[axis];
}

int64_t single_axis(LayerContext& c, const std::string& key, int64_t fallback) {
  const json* axis = c.get(key);
  if (axis && axis->is_array() && axis->size() == 1 && (*axis)[0].is_number_integer()) return (*axis)[0].get<int64_t>();
  return c.get_int(key, fallback);
}

Outputs batch_norm(LayerContext& c, const Inputs& in) {
  KTensor x = c.apply_pad(one_input(c, in));
  if (!x.flattened_from.empty()) x = KTensor{c.keras_order(x)};
  const int64_t axis = stored_axis(c, x, single_axis(c, "axis", -1));
  if (axis != 1 || x.value->type.rank() < 2)
    c.fail("normalizing axis " + std::to_string(single_axis(c, "axis", -1)) +
           " is not supported (the channels: the last axis)");
  const int64_t channels = x.value->type.shape[1];
  const ir::Shape shape{channels};
  const auto [gamma, beta] = c.gamma_beta(channels);
  ir::Value* mean = c.param("moving_mean", shape, shape, same, "moving_mean_initializer");
  ir::Value* variance = c.param("moving_variance", shape, shape, same, "moving_variance_initializer");
  // Keras's momentum weighs the old average (0.99); kiln's, like PyTorch's, the new batch.
  KTensor out = x;
  out.value = c.emit(OpId::BatchNorm, {x.value, gamma, beta, mean, variance},
                     {{"epsilon", c.get_float("epsilon", 1e-3)}, {"momentum", 1.0 - c.get_float("momentum", 0.99)}});
  return {out};
}

// Elementwise layers keep the layout (and a flatten's order) of their input.
Outputs elementwise(LayerContext& c, const Inputs& in, const std::function<ir::Value*(ir::Value*)>& op) {
  KTensor out = c.apply_pad(one_input(c, in));
  out.value = op(out.value);
  return {out};
}

Outputs dropout(LayerContext& c, const Inputs& in) {
  if (c.get("noise_shape")) c.fail("noise_shape is not supported");
  const double rate = c.get_float("rate", 0.5);
  if (!(rate >= 0 && rate < 1)) c.fail("rate must be in [0, 1)");
  if (rate == 0) return {c.apply_pad(one_input(c, in))};
  return elementwise(c, in, [&](ir::Value* x) { return c.emit(OpId::Dropout, {x}, {{"rate", rate}}); });
}

Outputs activation_layer(LayerContext& c, const Inputs& in) {
  const KTensor x = c.apply_pad(one_input(c, in));
  const std::string name = c.get_string("activation", "linear");
  KTensor out = x;
  if ((name == "softmax" || name == "log_softmax") && !x.flattened_from.empty()) out = KTensor{c.keras_order(x)};
  out.value = c.activation(out.value, name, stored_axis(c, out, -1));
  return {out};
}

Outputs relu_layer(LayerContext& c, const Inputs& in) {
  if (c.get_float("threshold", 0.0) != 0.0) c.fail("threshold != 0 is not supported");
  const double slope = c.get_float("negative_slope", 0.0);
  const json* max_value = c.get("max_value");
  if (max_value && !max_value->is_number()) c.fail("config 'max_value' must be a number");
  return elementwise(c, in, [&](ir::Value* x) {
    ir::Value* y = slope == 0 ? c.emit(OpId::Relu, {x}) : c.emit(OpId::LeakyRelu, {x}, {{"alpha", slope}});
    if (max_value) y = c.emit(OpId::Clip, {y}, {{"max", max_value->get<double>()}});
    return y;
  });
}

Outputs elu_layer(LayerContext& c, const Inputs& in) {
  const double alpha = c.get_float("alpha", 1.0);
  return elementwise(c, in, [&](ir::Value* x) { return c.emit(OpId::Elu, {x}, {{"alpha", alpha}}); });
}

Outputs leaky_relu_layer(LayerContext& c, const Inputs& in) {
  const double alpha = c.get_float("alpha", c.get_float("negative_slope", 0.3));
  return elementwise(c, in, [&](ir::Value* x) { return c.emit(OpId::LeakyRelu, {x}, {{"alpha", alpha}}); });
}

Outputs softmax_layer(LayerContext& c, const Inputs& in) {
  KTensor x = c.apply_pad(one_input(c, in));
  if (!x.flattened_from.empty()) x = KTensor{c.keras_order(x)};
  const int64_t axis = stored_axis(c, x, single_axis(c, "axis", -1));
  x.value = c.emit(OpId::Softmax, {x.value}, {{"axis", axis}});
  return {x};
}

// Inputs of a merge in one common layout: as they are when they agree, else Keras's order.
std::vector<KTensor> common_layout(LayerContext& c, const Inputs& in) {
  if (in.size() < 2) c.fail("a merge layer needs at least 2 inputs, got " + std::to_string(in.size()));
  std::vector<KTensor> out;
  bool agree = true;
  for (const KTensor& t : in) {
    out.push_back(c.apply_pad(t));
    agree &= out.back().channels_first == out.front().channels_first &&
             out.back().flattened_from == out.front().flattened_from;
  }
  if (agree) return out;
  for (KTensor& t : out) t = c.from_keras_order(c.keras_order(t));
  return out;
}

Outputs merge(LayerContext& c, const Inputs& in, OpId op, double final_scale = 1.0) {
  std::vector<KTensor> xs = common_layout(c, in);
  KTensor out = xs[0];
  for (size_t i = 1; i < xs.size(); ++i) out.value = c.emit(op, {out.value, xs[i].value});
  if (final_scale != 1.0) out.value = c.emit(OpId::Scale, {out.value}, {{"factor", final_scale}});
  return {out};
}

Outputs concatenate(LayerContext& c, const Inputs& in) {
  std::vector<KTensor> xs = common_layout(c, in);
  if (!xs[0].flattened_from.empty())
    for (KTensor& t : xs) t = KTensor{c.keras_order(t)};
  const int64_t axis = stored_axis(c, xs[0], c.get_int("axis", -1));
  std::vector<ir::Value*> values;
  for (const KTensor& t : xs) values.push_back(t.value);
  KTensor out = xs[0];
  out.value = c.emit(OpId::Concat, values, {{"axis", axis}});
  return {out};
}

// Padding is kept pending: a following convolution takes it as its own padding (no copy, and
// no constant that depends on the batch size); anything else concatenates zeros.
Outputs zero_padding(LayerContext& c, const Inputs& in) {
  KTensor x = image_input(c, in);
  c.require_channels_last();
  const json* padding = c.get("padding");
  Ints pad(4, 1);  // top, left, bottom, right
  const auto size = [&](const json& v) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > (1 << 20))
      c.fail("padding must hold non-negative integers, got " + padding->dump());
    return v.get<int64_t>();
  };
  if (padding && padding->is_number()) {
    pad.assign(4, size(*padding));
  } else if (padding && padding->is_array() && padding->size() == 2 && (*padding)[0].is_number()) {
    pad = {size((*padding)[0]), size((*padding)[1]), size((*padding)[0]), size((*padding)[1])};
  } else if (padding && padding->is_array() && padding->size() == 2 && (*padding)[0].is_array() &&
             (*padding)[0].size() == 2 && (*padding)[1].is_array() && (*padding)[1].size() == 2) {
    pad = {size((*padding)[0][0]), size((*padding)[1][0]), size((*padding)[0][1]), size((*padding)[1][1])};
  } else if (padding) {
    c.fail("padding must be an integer, [rows, cols] or [[top, bottom], [left, right]]");
  }
  if (x.pad.empty()) x.pad.assign(4, 0);
  for (int i = 0; i < 4; ++i) x.pad[i] += pad[i];
  return {x};
}

Outputs reshape(LayerContext& c, const Inputs& in) {
  ir::Value* x = c.keras_order(one_input(c, in));
  const json* target = c.get("target_shape");
  if (!target || !target->is_array() || target->empty() || target->size() > 7)
    c.fail("target_shape must be a list of 1 to 7 dims");
  const int64_t total = ir::num_elements(x->type.shape, 1, x->type.rank());
  ir::Shape shape{x->type.shape[0]};
  int unknown = -1;
  int64_t known = 1;
  for (const json& dim : *target) {
    if (dim.is_number_integer() && dim.get<int64_t>() == -1 && unknown < 0) {
      unknown = static_cast<int>(shape.size());
      shape.push_back(1);
      continue;
    }
    if (!dim.is_number_integer() || dim.get<int64_t>() < 1 || dim.get<int64_t>() > total)
      c.fail("target_shape " + describe_json(*target) + " does not fit " + std::to_string(total) + " elements");
    shape.push_back(dim.get<int64_t>());
    known *= dim.get<int64_t>();
  }
  if (unknown >= 0) {
    if (total % known != 0) c.fail("target_shape " + describe_json(*target) + " does not divide " + std::to_string(total) + " elements");
    shape[unknown] = total / known;
  }
  if (ir::num_elements(shape, 1, static_cast<int>(shape.size())) != total)
    c.fail("target_shape " + describe_json(*target) + " holds a different number of elements than " + std::to_string(total));
  return {c.from_keras_order(c.emit(OpId::Reshape, {x}, {{"shape", shape}}))};
}

// Flatten of an NCHW tensor flattens in c,h,w order and remembers it (KTensor::flattened_from).
Outputs flatten(LayerContext& c, const Inputs& in) {
  c.require_channels_last();
  const KTensor x = c.apply_pad(one_input(c, in));
  if (x.value->type.rank() <= 2 && x.flattened_from.empty() && !x.channels_first) return {x};
  if (!x.channels_first) return {KTensor{c.emit(OpId::Flatten, {c.keras_order(x)})}};
  KTensor out{c.emit(OpId::Flatten, {x.value})};
  const ir::Shape& s = x.value->type.shape;
  out.flattened_from = {s[1], s[2], s[3]};
  return {out};
}

Outputs identity(LayerContext& c, const Inputs& in) { return {c.apply_pad(one_input(c, in))}; }

const std::unordered_map<std::string, LayerConverter>& converters() {
  static const std::unordered_map<std::string, LayerConverter> table = {
      {"Conv2D", conv2d},
      {"Convolution2D", conv2d},
      {"DepthwiseConv2D", depthwise_conv2d},
      {"SeparableConv2D", separable_conv2d},
      {"SeparableConvolution2D", separable_conv2d},
      {"Dense", dense},
      {"MaxPooling2D", [](LayerContext& c, const Inputs& in) { return pooling(c, in, OpId::MaxPool2d); }},
      {"MaxPool2D", [](LayerContext& c, const Inputs& in) { return pooling(c, in, OpId::MaxPool2d); }},
      {"AveragePooling2D", [](LayerContext& c, const Inputs& in) { return pooling(c, in, OpId::AvgPool2d); }},
      {"AvgPool2D", [](LayerContext& c, const Inputs& in) { return pooling(c, in, OpId::AvgPool2d); }},
      {"GlobalAveragePooling2D", [](LayerContext& c, const Inputs& in) { return global_pooling(c, in, OpId::ReduceMean); }},
      {"GlobalAvgPool2D", [](LayerContext& c, const Inputs& in) { return global_pooling(c, in, OpId::ReduceMean); }},
      {"GlobalMaxPooling2D", [](LayerContext& c, const Inputs& in) { return global_pooling(c, in, OpId::ReduceMax); }},
      {"GlobalMaxPool2D", [](LayerContext& c, const Inputs& in) { return global_pooling(c, in, OpId::ReduceMax); }},
      {"BatchNormalization", batch_norm},
      {"Dropout", dropout},
      {"Activation", activation_layer},
      {"ReLU", relu_layer},
      {"ELU", elu_layer},
      {"LeakyReLU", leaky_relu_layer},
      {"Softmax", softmax_layer},
      {"Add", [](LayerContext& c, const Inputs& in) { return merge(c, in, OpId::Add); }},
      {"Subtract", [](LayerContext& c, const Inputs& in) {
         if (in.size() != 2) c.fail("Subtract needs exactly 2 inputs");
         return merge(c, in, OpId::Sub);
       }},
      {"Multiply", [](LayerContext& c, const Inputs& in) { return merge(c, in, OpId::Mul); }},
      {"Average", [](LayerContext& c, const Inputs& in) { return merge(c, in, OpId::Add, 1.0 / double(in.size())); }},
      {"Maximum", [](LayerContext& c, const Inputs& in) { return merge(c, in, OpId::Maximum); }},
      {"Minimum", [](LayerContext& c, const Inputs& in) { return merge(c, in, OpId::Minimum); }},
      {"Concatenate", concatenate},
      {"ZeroPadding2D", zero_padding},
      {"Reshape", reshape},
      {"Flatten", flatten},
      {"Identity", identity},
      {"Embedding", embedding_layer},
      {"LayerNormalization", layer_normalization_layer},
      {"MultiHeadAttention", multi_head_attention_layer},
  };
  return table;
}

}  // namespace

const LayerConverter* find_converter(const std::string& class_name) {
  auto it = converters().find(class_name);
  return it == converters().end() ? nullptr : &it->second;
}

std::vector<std::string> weight_order(const std::string& class_name, const json& config) {
  const auto flag = [&](const char* key) {
    return !config.is_object() || !config.contains(key) || !config.at(key).is_boolean() || config.at(key).get<bool>();
  };
  std::vector<std::string> names;
  if (class_name == "BatchNormalization" || class_name == "LayerNormalization") {
    if (flag("scale")) names.push_back("gamma");
    if (flag("center")) names.push_back("beta");
    if (class_name == "BatchNormalization") names.insert(names.end(), {"moving_mean", "moving_variance"});
    return names;
  }
  if (class_name == "Embedding") return {"embeddings"};
  if (class_name == "DepthwiseConv2D") names = {"depthwise_kernel"};
  else if (class_name == "SeparableConv2D" || class_name == "SeparableConvolution2D") names = {"depthwise_kernel", "pointwise_kernel"};
  else if (class_name == "Conv2D" || class_name == "Convolution2D" || class_name == "Dense") names = {"kernel"};
  else return names;
  if (flag("use_bias")) names.push_back("bias");
  return names;
}

std::vector<std::string> supported_layers() {
  std::vector<std::string> names;
  for (const auto& [name, converter] : converters()) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace kiln::compiler::keras_import
