// ONNX index-building ops → kiln ops: OneHot (equal against the positions, then where),
// EyeLike (a constant: only the input's static shape matters) and Compress (the kept positions
// are known at import, then a gather).
#include <cmath>
#include <numbers>

#include "compiler/import/onnx/onnx_ops.h"
#include "compiler/import/onnx/onnx_tensor.h"

namespace kiln::compiler::onnx_import {

namespace {
using ir::OpId;
using Outputs = std::vector<Operand>;

// out[..., j, ...] = on where j == index (negative indices count from depth), off elsewhere;
// the one-hot dim is inserted at `axis` (default -1: last).
Outputs one_hot(NodeContext& node) {
  const Operand& indices = node.input(0);
  const std::vector<double> depth_value = node.const_doubles(1, "depth");
  const std::vector<double> values = node.const_doubles(2, "values");
  if (depth_value.size() != 1 || values.size() != 2)
    node.fail("depth must be one value and values two (off, on)");
  const int64_t depth = static_cast<int64_t>(depth_value[0]);
  if (depth < 1) node.fail("depth must be >= 1, got " + std::to_string(depth));
  const ir::Shape& shape = indices.type().shape;
  const int rank = static_cast<int>(shape.size()) + 1;
  const int axis = normalize_axis_or_fail(node, node.attr_int("axis", -1), rank, "axis");

  // Indices as i64 (float indices truncate), negative ones wrapped once.
  Operand index = indices;
  if (index.type().dtype != ir::DType::I64)
    index = node.emit(OpId::Cast, {index}, {{"to", std::string("i64")}});
  const Operand negative = node.emit(OpId::Less, {index, node.scalar(ir::DType::I64, 0.0)});
  const Operand wrapped = node.emit(OpId::Add, {index, node.scalar(ir::DType::I64, static_cast<double>(depth))});
  index = node.emit(OpId::Where, {negative, wrapped, index});
  ir::Shape unit_at_axis(shape);
  unit_at_axis.insert(unit_at_axis.begin() + axis, 1);
  index = node.reshape(index, unit_at_axis);

  const Operand iota = node.positions(rank, axis, depth);
  const Operand hot = node.emit(OpId::Equal, {index, iota});
  const ir::DType dtype = node.input(2).type().dtype;
  return {node.emit(OpId::Where, {hot, node.scalar(dtype, values[1]), node.scalar(dtype, values[0])})};
}

// 1 on the k-th diagonal of a 2-D shape, 0 elsewhere, in `dtype` (default: the input's).
Outputs eye_like(NodeContext& node) {
  const ir::TensorType& x = node.input(0).type();
  if (x.rank() != 2) node.fail("input must be 2-D, got " + x.to_string());
  ir::DType dtype = x.dtype;
  if (node.has_attr("dtype")) {
    const int onnx_type = static_cast<int>(node.attr_int("dtype", 0));
    const auto converted = dtype_from_onnx(onnx_type);
    if (!converted) node.fail("dtype " + onnx_dtype_name(onnx_type) + " is not supported");
    dtype = *converted;
  }
  const int64_t k = node.attr_int("k", 0);
  const int64_t rows = x.shape[0], cols = x.shape[1];
  node.check_fold_size({dtype, x.shape}, "the identity matrix");
  std::vector<double> eye(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) eye[i * cols + j] = j - i == k ? 1.0 : 0.0;
  return {node.constant(ir::Tensor::from_doubles(ir::TensorType{dtype, x.shape}, eye), "eye")};
}

// The slices along `axis` (the flattened input without one) where condition is true. The
// result's size depends on the condition, so it must be known at import.
Outputs compress(NodeContext& node) {
  Operand x = node.input(0);
  const std::vector<double> condition = node.const_doubles(1, "condition");
  int axis = 0;
  if (node.has_attr("axis")) {
    axis = normalize_axis_or_fail(node, node.attr_int("axis", 0), x.type().rank(), "axis");
  } else {
    x = node.reshape(x, {ir::num_elements(x.type().shape)});
  }
  const int64_t dim = x.type().shape[axis];
  std::vector<double> kept;
  for (size_t i = 0; i < condition.size() && static_cast<int64_t>(i) < dim; ++i)
    if (condition[i] != 0) kept.push_back(static_cast<double>(i));
  if (kept.empty()) node.fail("the condition keeps nothing (kiln tensors have at least one element)");
  const Operand positions = node.constant(
      ir::Tensor::from_doubles(ir::TensorType{ir::DType::I64, {static_cast<int64_t>(kept.size())}}, kept),
      "kept");
  return {gather_along(node, x, positions, axis)};
}

constexpr int kLast = kMaxOpset;

// HannWindow, HammingWindow, BlackmanWindow: a cosine sum of `size` points, built at import
// (the size is a constant, or a graph input whose value the import was given).
Outputs cosine_window(NodeContext& node, const std::vector<double>& terms) {
  const int64_t size = node.const_ints(0, "size").at(0);
  if (size < 1 || size > (int64_t{1} << 24)) node.fail("size must lie in [1, 2^24], got " + std::to_string(size));
  const bool periodic = node.attr_int("periodic", 1) != 0;
  const int onnx_type = static_cast<int>(node.attr_int("output_datatype", 1));
  const auto dtype = dtype_from_onnx(onnx_type);
  if (!dtype) node.fail("output_datatype " + onnx_dtype_name(onnx_type) + " is not supported");
  const double period = periodic ? double(size) : double(size - 1);
  std::vector<double> window(static_cast<size_t>(size));
  for (int64_t n = 0; n < size; ++n) {
    double value = 0;
    for (size_t k = 0; k < terms.size(); ++k)
      value += (k % 2 ? -1 : 1) * terms[k] * (period == 0 ? 1.0 : std::cos(2 * std::numbers::pi * double(k * n) / period));
    window[n] = value;
  }
  return {node.constant(ir::Tensor::from_doubles({*dtype, {size}}, window), "window")};
}

Outputs hann_window(NodeContext& node) { return cosine_window(node, {0.5, 0.5}); }
Outputs hamming_window(NodeContext& node) { return cosine_window(node, {25.0 / 46, 21.0 / 46}); }
Outputs blackman_window(NodeContext& node) { return cosine_window(node, {0.42, 0.5, 0.08}); }

const OpRule kRules[] = {
    {"HannWindow", 17, kLast, hann_window},
    {"HammingWindow", 17, kLast, hamming_window},
    {"BlackmanWindow", 17, kLast, blackman_window},
    {"OneHot", 9, kLast, one_hot},
    {"EyeLike", 9, kLast, eye_like},
    {"Compress", 9, kLast, compress},
};
}  // namespace

std::span<const OpRule> index_rules() { return kRules; }

}  // namespace kiln::compiler::onnx_import
