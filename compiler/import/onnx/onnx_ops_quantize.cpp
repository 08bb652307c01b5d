// ONNX's linear quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, and the
// integer and quantized matmul and conv (MatMulInteger, ConvInteger, QLinearMatMul,
// QLinearConv), decomposed into kiln ops at import.
//
//   quantize(x)   = saturate(round_half_even(x / scale) + zero_point)   (to the zero point's type)
//   dequantize(q) = (q - zero_point) * scale
//
// The integer products are computed in f64, where every product and sum of 8- and 16-bit
// integers is exact (f32 would round sums past 2^24); the result is cast back to the integer
// type ONNX names. A scale or zero point with one value per channel is applied along `axis`.
#include <optional>
#include <utility>
#include <string>

#include "compiler/import/onnx/onnx_ops.h"
#include "compiler/import/onnx/onnx_tensor.h"

namespace kiln::compiler::onnx_import {
namespace {

using ir::DType;
using ir::OpId;
using Outputs = std::vector<Operand>;

Operand cast(NodeContext& node, const Operand& x, DType dtype) {
  if (x.type().dtype == dtype) return x;
  return node.emit(OpId::Cast, {x}, {{"to", std::string(ir::dtype_name(dtype))}});
}

// A scale or zero point (scalar, [1] or one value per channel of `axis`) shaped to broadcast
// against a tensor of rank `rank`.
Operand along_axis(NodeContext& node, const Operand& v, int rank, int axis, int64_t channels, const char* what) {
  const ir::TensorType& type = v.type();
  const int64_t count = ir::num_elements(type.shape);
  if (type.rank() == 0 || count == 1) return type.rank() == 0 ? v : node.reshape(v, {});
  if (type.rank() != 1 || count != channels)
    node.fail(std::string(what) + " " + type.to_string() + " must be a scalar or have one value per element of axis " +
              std::to_string(axis) + " (" + std::to_string(channels) + ")");
  ir::Shape shape(static_cast<size_t>(rank), 1);
  shape[static_cast<size_t>(axis)] = channels;
  return node.reshape(v, shape);
}

void check_quantized_type(NodeContext& node, DType dtype, const char* what) {
  if (dtype != DType::U8 && dtype != DType::I8 && dtype != DType::U16 && dtype != DType::I16 && dtype != DType::I32)
    node.fail(std::string(what) + " has type " + std::string(ir::dtype_name(dtype)) +
              "; kiln quantizes to int8, uint8, int16, uint16 (and reads int32)");
}

// saturate(round(x / scale) + zero_point) in `compute`, cast to `to`; scale and zero point
// already shaped to broadcast.
Operand quantize(NodeContext& node, const Operand& x, const Operand& scale, const Operand* zero_point, DType to,
                 DType compute) {
  Operand q = node.emit(OpId::Round, {node.emit(OpId::Div, {cast(node, x, compute), cast(node, scale, compute)})});
  if (zero_point) q = node.emit(OpId::Add, {q, cast(node, *zero_point, compute)});
  q = node.emit(OpId::Clip, {q}, {{"min", ir::integer_min(to)}, {"max", ir::integer_max(to)}});
  return cast(node, q, to);
}

// (q - zero_point) * scale in `compute`.
Operand dequantize(NodeContext& node, const Operand& q, const Operand& scale, const Operand* zero_point,
                   DType compute) {
  Operand v = cast(node, q, compute);
  if (zero_point) v = node.emit(OpId::Sub, {v, cast(node, *zero_point, compute)});
  return node.emit(OpId::Mul, {v, cast(node, scale, compute)});
}

// The axis a per-channel scale runs along, and its length; (0, 1) for a per-tensor scale,
// whose `axis` attribute (default 1, even for a rank-1 input) means nothing.
std::pair<int, int64_t> quantization_axis(NodeContext& node, const Operand& x, const Operand& scale) {
  if (ir::num_elements(scale.type().shape) == 1 || x.type().rank() == 0) return {0, 1};
  const int64_t raw = node.opset() < 13 ? 1 : node.attr_int("axis", 1);
  const int axis = normalize_axis_or_fail(node, raw, x.type().rank(), "axis");
  return {axis, x.type().shape[static_cast<size_t>(axis)]};
}

void refuse_blocks(NodeContext& node) {
  if (node.attr_int("block_size", 0) != 0) node.fail("blocked quantization (block_size) is not supported");
}

Outputs quantize_linear(NodeContext& node) {
  node.check_attrs({"axis", "saturate", "block_size", "output_dtype"});
  refuse_blocks(node);
  const Operand& x = node.input(0);
  if (!ir::is_floating(x.type().dtype)) node.fail("x must be floating point, not " + x.type().to_string());
  const int rank = x.type().rank();
  const auto [axis, channels] = quantization_axis(node, x, node.input(1));
  const Operand scale = along_axis(node, node.input(1), rank, axis, channels, "y_scale");
  DType to = DType::U8;
  std::optional<Operand> zero_point;
  if (node.has_input(2)) {
    zero_point = along_axis(node, node.input(2), rank, axis, channels, "y_zero_point");
    to = zero_point->type().dtype;
  } else if (node.has_attr("output_dtype")) {
    const auto dtype = dtype_from_onnx(static_cast<int>(node.attr_int("output_dtype", 0)));
    if (!dtype) node.fail("output_dtype " + onnx_dtype_name(static_cast<int>(node.attr_int("output_dtype", 0))) + " is not supported");
    to = *dtype;
  }
  check_quantized_type(node, to, "y_zero_point");
  if (to == DType::I32) node.fail("quantizing to int32 is not defined by ONNX");
  return {quantize(node, x, scale, zero_point ? &*zero_point : nullptr, to, DType::F32)};
}

Outputs dequantize_linear(NodeContext& node) {
  node.check_attrs({"axis", "block_size", "output_dtype"});
  refuse_blocks(node);
  const Operand& x = node.input(0);
  check_quantized_type(node, x.type().dtype, "x");
  const int rank = x.type().rank();
  const auto [axis, channels] = quantization_axis(node, x, node.input(1));
  const Operand scale = along_axis(node, node.input(1), rank, axis, channels, "x_scale");
  std::optional<Operand> zero_point;
  if (node.has_input(2)) zero_point = along_axis(node, node.input(2), rank, axis, channels, "x_zero_point");
  const DType out = scale.type().dtype;
  if (!ir::is_floating(out)) node.fail("x_scale must be floating point");
  // Exact in f64, rounded once to the scale's type.
  return {cast(node, dequantize(node, x, scale, zero_point ? &*zero_point : nullptr, DType::F64), out)};
}

// y_scale = (max(0, max x) - min(0, min x)) / 255, y_zero_point = saturate(round(-min / y_scale)),
// y = saturate(round(x / y_scale) + y_zero_point), all uint8.
Outputs dynamic_quantize_linear(NodeContext& node) {
  node.check_attrs({});
  const Operand& x = node.input(0);
  if (x.type().dtype != DType::F32) node.fail("x must be f32, not " + x.type().to_string());
  std::vector<int64_t> all(static_cast<size_t>(x.type().rank()));
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
  const ir::AttrMap reduce{{"axes", all}, {"keepdims", false}};
  const Operand min_x = node.emit(OpId::Neg, {node.emit(OpId::ReduceMax, {node.emit(OpId::Neg, {x})}, reduce)});
  Operand low = node.emit(OpId::Minimum, {min_x, node.scalar(DType::F32, 0.0)});
  Operand high = node.emit(OpId::Maximum, {node.emit(OpId::ReduceMax, {x}, reduce), node.scalar(DType::F32, 0.0)});
  const Operand scale = node.emit(OpId::Div, {node.emit(OpId::Sub, {high, low}), node.scalar(DType::F32, 255.0)});
  const Operand zero_point = quantize(node, node.emit(OpId::Neg, {low}), scale, nullptr, DType::U8, DType::F32);
  const Operand y = quantize(node, x, scale, &zero_point, DType::U8, DType::F32);
  return {y, scale, zero_point};
}

// A zero point of MatMulInteger's A: scalar, or one per row ([M], or [..., M, 1]).
Operand row_zero_point(NodeContext& node, const Operand& a, const Operand& zp) {
  const int64_t count = ir::num_elements(zp.type().shape);
  if (count == 1) return node.reshape(zp, {});
  const int64_t rows = a.type().rank() >= 2 ? a.type().shape[a.type().rank() - 2] : 1;
  if (count != rows) node.fail("a_zero_point " + zp.type().to_string() + " must be a scalar or have one value per row of A");
  return node.reshape(zp, {rows, 1});
}

Outputs matmul_integer(NodeContext& node) {
  node.check_attrs({});
  const Operand& a = node.input(0);
  const Operand& b = node.input(1);
  check_quantized_type(node, a.type().dtype, "A");
  check_quantized_type(node, b.type().dtype, "B");
  Operand left = cast(node, a, DType::F64), right = cast(node, b, DType::F64);
  if (node.has_input(2)) left = node.emit(OpId::Sub, {left, cast(node, row_zero_point(node, a, node.input(2)), DType::F64)});
  if (node.has_input(3)) {
    Operand zp = node.input(3);
    if (ir::num_elements(zp.type().shape) == 1) zp = node.reshape(zp, {});  // else [N]: per column
    right = node.emit(OpId::Sub, {right, cast(node, zp, DType::F64)});
  }
  return {cast(node, matmul(node, left, right), DType::I32)};
}

// A weight's zero point or scale: scalar, or one per output channel (shaped [M, 1, ...]).
Operand per_output_channel(NodeContext& node, const Operand& weight, const Operand& v, const char* what) {
  return along_axis(node, v, weight.type().rank(), 0, weight.type().shape[0], what);
}

Outputs conv_integer(NodeContext& node) {
  node.check_attrs({"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"});
  const Operand& x = node.input(0);
  const Operand& w = node.input(1);
  check_quantized_type(node, x.type().dtype, "x");
  check_quantized_type(node, w.type().dtype, "w");
  if (w.type().rank() < 3) node.fail("w must have rank >= 3");
  // The zero point is subtracted before the padding, so padded positions contribute nothing:
  // as padding x with its zero point.
  Operand input = cast(node, x, DType::F64), weight = cast(node, w, DType::F64);
  if (node.has_input(2)) {
    if (ir::num_elements(node.input(2).type().shape) != 1) node.fail("x_zero_point must be a scalar");
    input = node.emit(OpId::Sub, {input, cast(node, node.reshape(node.input(2), {}), DType::F64)});
  }
  if (node.has_input(3))
    weight = node.emit(OpId::Sub, {weight, cast(node, per_output_channel(node, w, node.input(3), "w_zero_point"), DType::F64)});
  return {cast(node, convolve(node, input, weight, nullptr), DType::I32)};
}

// The output's scale and zero point of QLinearMatMul and QLinearConv: per tensor.
Operand scalar_of(NodeContext& node, int index, const char* what) {
  const Operand& v = node.input(index);
  if (ir::num_elements(v.type().shape) != 1) node.fail(std::string(what) + " must be a scalar");
  return node.reshape(v, {});
}

Outputs qlinear_matmul(NodeContext& node) {
  node.check_attrs({});
  const Operand& a = node.input(0);
  const Operand& b = node.input(3);
  check_quantized_type(node, a.type().dtype, "a");
  check_quantized_type(node, b.type().dtype, "b");
  const Operand a_zp = row_zero_point(node, a, node.input(2));
  const Operand a_scale = row_zero_point(node, a, node.input(1));
  Operand b_zp = node.input(5), b_scale = node.input(4);
  if (ir::num_elements(b_zp.type().shape) == 1) b_zp = node.reshape(b_zp, {});
  if (ir::num_elements(b_scale.type().shape) == 1) b_scale = node.reshape(b_scale, {});
  const Operand y_zp = scalar_of(node, 7, "y_zero_point");
  check_quantized_type(node, y_zp.type().dtype, "y_zero_point");
  const Operand product = matmul(node, dequantize(node, a, a_scale, &a_zp, DType::F64),
                                 dequantize(node, b, b_scale, &b_zp, DType::F64));
  return {quantize(node, product, scalar_of(node, 6, "y_scale"), &y_zp, y_zp.type().dtype, DType::F64)};
}

Outputs qlinear_conv(NodeContext& node) {
  node.check_attrs({"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"});
  const Operand& x = node.input(0);
  const Operand& w = node.input(3);
  check_quantized_type(node, x.type().dtype, "x");
  check_quantized_type(node, w.type().dtype, "w");
  if (w.type().rank() < 3) node.fail("w must have rank >= 3");
  const Operand x_scale = scalar_of(node, 1, "x_scale"), x_zp = scalar_of(node, 2, "x_zero_point");
  const Operand w_scale = per_output_channel(node, w, node.input(4), "w_scale");
  const Operand w_zp = per_output_channel(node, w, node.input(5), "w_zero_point");
  const Operand y_zp = scalar_of(node, 7, "y_zero_point");
  check_quantized_type(node, y_zp.type().dtype, "y_zero_point");
  std::optional<Operand> bias;
  if (node.has_input(8)) {
    // int32, quantized with scale x_scale * w_scale and zero point 0.
    const Operand& b = node.input(8);
    const Operand b_scale = node.reshape(node.emit(OpId::Mul, {cast(node, x_scale, DType::F64), cast(node, w_scale, DType::F64)}),
                                         {ir::num_elements(w_scale.type().shape)});
    bias = node.emit(OpId::Mul, {cast(node, b, DType::F64), b_scale});
  }
  const Operand y = convolve(node, dequantize(node, x, x_scale, &x_zp, DType::F64),
                             dequantize(node, w, w_scale, &w_zp, DType::F64), bias ? &*bias : nullptr);
  return {quantize(node, y, scalar_of(node, 6, "y_scale"), &y_zp, y_zp.type().dtype, DType::F64)};
}

constexpr int kLast = kMaxOpset;
constexpr OpRule kRules[] = {
    {"QuantizeLinear", 10, kLast, quantize_linear},
    {"DequantizeLinear", 10, kLast, dequantize_linear},
    {"DynamicQuantizeLinear", 11, kLast, dynamic_quantize_linear},
    {"MatMulInteger", 10, kLast, matmul_integer},
    {"ConvInteger", 10, kLast, conv_integer},
    {"QLinearMatMul", 10, kLast, qlinear_matmul},
    {"QLinearConv", 10, kLast, qlinear_conv},
};

}  // namespace

std::span<const OpRule> quantize_rules() { return kRules; }

}  // namespace kiln::compiler::onnx_import
