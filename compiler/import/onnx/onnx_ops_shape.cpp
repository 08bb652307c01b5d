// ONNX shape ops: constants and shape arithmetic (folded at import), and layout ops (reshape,
// transpose, slice, concat, pad) → kiln ops. kiln shapes are static, so every shape, axis and
// index operand must be known at import.
#include <onnx/onnx_pb.h>

#include <cmath>

#include "compiler/import/onnx/onnx_ops.h"
#include "compiler/import/onnx/onnx_tensor.h"

namespace kiln::compiler::onnx_import {

namespace {
using ir::OpId;
using Outputs = std::vector<Operand>;
using Ints = std::vector<int64_t>;

Operand ints_constant(NodeContext& node, const Ints& values, ir::Shape shape, const char* what) {
  ir::Tensor tensor(ir::TensorType{ir::DType::I64, std::move(shape)});
  std::memcpy(tensor.data(), values.data(), values.size() * sizeof(int64_t));
  return node.constant(std::move(tensor), what);
}

Outputs constant(NodeContext& node) {
  if (const onnx::TensorProto* value = node.attr_tensor("value")) {
    if (has_zero_dim(*value)) {
      Operand empty;
      empty.empty = true;
      return {empty};
    }
    try {
      return {node.constant(tensor_from_proto(*value, "."), "value")};
    } catch (const ConvertError& e) {
      node.fail(e.message);
    }
  }
  if (node.has_attr("value_float"))
    return {node.constant(ir::Tensor::from_doubles({ir::DType::F32, {}}, {node.attr_float("value_float", 0)}))};
  if (node.has_attr("value_int")) return {ints_constant(node, {node.attr_int("value_int", 0)}, {}, "value")};
  if (node.has_attr("value_floats")) {
    const auto values = node.attr_floats("value_floats");
    return {node.constant(ir::Tensor::from_doubles({ir::DType::F32, {int64_t(values.size())}}, values))};
  }
  if (node.has_attr("value_ints")) {
    const Ints values = node.attr_ints("value_ints");
    return {ints_constant(node, values, {int64_t(values.size())}, "value")};
  }
  node.fail("only tensor, float and int values are supported (not sparse or string ones)");
}

Outputs constant_of_shape(NodeContext& node) {
  const Ints shape = node.const_ints(0, "shape");
  ir::Tensor value = ir::Tensor::from_doubles({ir::DType::F32, {}}, {0.0});
  if (const onnx::TensorProto* proto = node.attr_tensor("value")) {
    try {
      value = tensor_from_proto(*proto, ".");
    } catch (const ConvertError& e) {
      node.fail(e.message);
    }
  }
  for (int64_t dim : shape)
    if (dim < 1) node.fail("shape " + ir::shape_to_string(shape) + " has no elements; kiln tensors need at least one element");
  if (value.num_elements() != 1) node.fail("value must hold one element, got " + value.type().to_string());
  // A broadcast of the one value: folded now when small, filled at run time when not.
  const Operand scalar = node.reshape(node.constant(std::move(value), "value"), {});
  if (shape.empty()) return {scalar};
  return {node.emit(OpId::BroadcastTo, {scalar}, {{"shape", shape}})};
}

Outputs shape(NodeContext& node) {
  const ir::Shape& s = node.input(0).type().shape;
  const int rank = static_cast<int>(s.size());
  int64_t start = node.attr_int("start", 0), end = node.attr_int("end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, start, rank);
  const Ints dims(s.begin() + start, s.begin() + end);
  if (dims.empty()) node.fail("an empty shape slice has no elements; kiln tensors need one");
  return {ints_constant(node, dims, {int64_t(dims.size())}, "shape")};
}

Outputs size(NodeContext& node) {
  return {ints_constant(node, {ir::num_elements(node.input(0).type().shape)}, {}, "size")};
}

Outputs cast(NodeContext& node) {
  const int to = static_cast<int>(node.attr_int("to", 0));
  const auto dtype = dtype_from_onnx(to);
  if (!dtype) node.fail("cast to " + onnx_dtype_name(to) + " is not supported");
  const Operand& x = node.input(0);
  if (x.type().dtype == *dtype) return {x};
  return {node.emit(OpId::Cast, {x}, {{"to", std::string(ir::dtype_name(*dtype))}})};
}

Outputs cast_like(NodeContext& node) {
  const Operand& x = node.input(0);
  const ir::DType dtype = node.input(1).type().dtype;
  if (x.type().dtype == dtype) return {x};
  return {node.emit(OpId::Cast, {x}, {{"to", std::string(ir::dtype_name(dtype))}})};
}

// Computes Reshape's target shape: 0 copies the input dim (unless allowzero), -1 is inferred.
ir::Shape reshape_target(NodeContext& node, const ir::Shape& in, Ints shape, bool allow_zero) {
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allow_zero) {
      if (i >= in.size()) node.fail("shape has 0 at position " + std::to_string(i) + " past the input's rank");
      shape[i] = in[i];
    }
    if (shape[i] == -1) {
      if (infer >= 0) node.fail("shape has more than one -1");
      infer = static_cast<int>(i);
      continue;
    }
    if (shape[i] < 1) node.fail("shape dimension " + std::to_string(shape[i]) + " is not supported");
    if (shape[i] > ir::kMaxElements / known)
      node.fail("shape " + ir::shape_to_string(shape) + " has more than 2^48 elements");
    known *= shape[i];
  }
  const int64_t total = ir::num_elements(in);
  if (infer >= 0) {
    if (known == 0 || total % known != 0)
      node.fail("cannot infer -1: " + std::to_string(total) + " elements into " + std::to_string(known));
    shape[infer] = total / known;
  }
  return shape;
}

Outputs reshape(NodeContext& node) {
  const Ints target = node.opset() < 5 ? node.attr_ints("shape") : node.const_ints(1, "shape");
  const Operand& x = node.input(0);
  return {node.reshape(x, reshape_target(node, x.type().shape, target, node.attr_int("allowzero", 0) != 0))};
}

Outputs flatten(NodeContext& node) {
  const Operand& x = node.input(0);
  const int rank = x.type().rank();
  int64_t axis = node.attr_int("axis", 1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis > rank) node.fail("axis out of range");
  return {node.reshape(x, {ir::num_elements(x.type().shape, 0, axis), ir::num_elements(x.type().shape, axis, rank)})};
}

Ints axes_of(NodeContext& node, int input_opset) {
  if (node.opset() >= input_opset) return node.has_input(1) ? node.const_ints(1, "axes") : Ints{};
  return node.attr_ints("axes");
}

Outputs squeeze(NodeContext& node) {
  const Operand& x = node.input(0);
  const Ints axes = axes_of(node, 13);
  std::vector<bool> drop(x.type().rank(), false);
  for (int64_t axis : axes) drop.at(normalize_axis_or_fail(node, axis, x.type().rank(), "axis")) = true;
  ir::Shape shape;
  for (int d = 0; d < x.type().rank(); ++d) {
    const bool squeezed = axes.empty() ? x.type().shape[d] == 1 : drop[d];
    if (squeezed && x.type().shape[d] != 1) node.fail("cannot squeeze axis " + std::to_string(d) + " of size " + std::to_string(x.type().shape[d]));
    if (!squeezed) shape.push_back(x.type().shape[d]);
  }
  return {node.reshape(x, shape)};
}

Outputs unsqueeze(NodeContext& node) {
  const Operand& x = node.input(0);
  const Ints axes = axes_of(node, 13);
  const int rank = x.type().rank() + static_cast<int>(axes.size());
  std::vector<bool> inserted(rank, false);
  for (int64_t axis : axes) {
    const int at = normalize_axis_or_fail(node, axis, rank, "axis");
    if (inserted[at]) node.fail("axis " + std::to_string(axis) + " is listed twice");
    inserted[at] = true;
  }
  ir::Shape shape;
  size_t next = 0;
  for (int d = 0; d < rank; ++d) shape.push_back(inserted[d] ? 1 : x.type().shape.at(next++));
  return {node.reshape(x, shape)};
}

Outputs transpose(NodeContext& node) {
  const Operand& x = node.input(0);
  Ints perm = node.attr_ints("perm");
  if (perm.empty())
    for (int d = x.type().rank() - 1; d >= 0; --d) perm.push_back(d);
  return {node.emit(OpId::Transpose, {x}, {{"perm", perm}})};
}

Outputs concat(NodeContext& node) {
  std::vector<Operand> parts;
  for (const Operand& input : node.inputs())
    if (input.present()) parts.push_back(input);
  if (parts.empty()) node.fail("every input is empty (kiln tensors have at least one element)");
  if (parts.size() == 1) return {parts[0]};
  return {node.emit(OpId::Concat, parts, {{"axis", node.attr_int("axis", node.opset() < 4 ? 1 : 0)}})};
}

Operand slice_axis(NodeContext& node, const Operand& x, int axis, int64_t start, int64_t end) {
  return node.emit(OpId::Slice, {x}, {{"starts", Ints{start}}, {"ends", Ints{end}}, {"axes", Ints{axis}}, {"steps", Ints{1}}});
}

Outputs slice(NodeContext& node) {
  const Operand& x = node.input(0);
  Ints starts, ends, axes, steps;
  if (node.opset() < 10) {
    starts = node.attr_ints("starts");
    ends = node.attr_ints("ends");
    axes = node.attr_ints("axes");
  } else {
    starts = node.const_ints(1, "starts");
    ends = node.const_ints(2, "ends");
    if (node.has_input(3)) axes = node.const_ints(3, "axes");
    if (node.has_input(4)) steps = node.const_ints(4, "steps");
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    node.fail("starts, ends, axes and steps must have as many values");
  // kiln's slice steps forward; an axis with a negative step (x[::-1]) is a gather of the
  // positions it visits, computed here, after the forward slice of the other axes.
  Ints forward_starts, forward_ends, forward_axes, forward_steps;
  std::vector<std::pair<int, Ints>> backward;
  for (size_t i = 0; i < starts.size(); ++i) {
    if (steps[i] > 0) {
      // A forward slice that selects nothing is an empty tensor (Concat skips it, as in the
      // shape arithmetic of exported LayerNorms); anything else reading it fails.
      const int axis = normalize_axis_or_fail(node, axes[i], x.type().rank(), "axes");
      const int64_t dim = x.type().shape[axis];
      const int64_t start = std::clamp<int64_t>(starts[i] < 0 ? std::max(starts[i], -dim) + dim : starts[i], 0, dim);
      const int64_t end = std::clamp<int64_t>(ends[i] < 0 ? std::max(ends[i], -dim) + dim : ends[i], 0, dim);
      if (start >= end) {
        Operand empty;
        empty.empty = true;
        return {empty};
      }
      forward_starts.push_back(starts[i]);
      forward_ends.push_back(ends[i]);
      forward_axes.push_back(axes[i]);
      forward_steps.push_back(steps[i]);
      continue;
    }
    if (steps[i] == 0) node.fail("steps must not be 0");
    const int axis = normalize_axis_or_fail(node, axes[i], x.type().rank(), "axes");
    const int64_t dim = x.type().shape[axis];
    const int64_t step = std::max(steps[i], -ir::kMaxElements);
    const int64_t start = std::clamp<int64_t>(starts[i] < 0 ? std::max(starts[i], -dim) + dim : starts[i], 0, dim - 1);
    const int64_t end = std::clamp<int64_t>(ends[i] < 0 ? std::max(ends[i], -dim - 1) + dim : ends[i], -1, dim - 1);
    const int64_t count = start > end ? (start - end - 1) / -step + 1 : 0;
    node.check_fold_size({ir::DType::I64, {std::max<int64_t>(count, 1)}}, "the positions of a backward slice");
    Ints positions;
    for (int64_t at = start; at > end; at += step) positions.push_back(at);
    if (positions.empty()) node.fail("the slice of axis " + std::to_string(axis) + " selects nothing");
    backward.push_back({axis, positions});
  }
  Operand y = x;
  if (!forward_starts.empty())
    y = node.emit(OpId::Slice, {x}, {{"starts", forward_starts}, {"ends", forward_ends}, {"axes", forward_axes},
                                     {"steps", forward_steps}});
  for (const auto& [axis, positions] : backward)
    y = gather_along(node, y, ints_constant(node, positions, {int64_t(positions.size())}, "positions"), axis);
  return {y};
}

Outputs split(NodeContext& node) {
  const Operand& x = node.input(0);
  const int axis = normalize_axis_or_fail(node, node.attr_int("axis", 0), x.type().rank(), "axis");
  const int64_t length = x.type().shape[axis];
  Ints sizes = node.opset() >= 13 ? (node.has_input(1) ? node.const_ints(1, "split") : Ints{}) : node.attr_ints("split");
  const int outputs = node.num_outputs();
  if (sizes.empty()) {
    const int64_t parts = node.has_attr("num_outputs") ? node.attr_int("num_outputs", outputs) : outputs;
    const int64_t chunk = (length + parts - 1) / parts;
    for (int64_t begin = 0; begin < length; begin += chunk) sizes.push_back(std::min(chunk, length - begin));
  }
  Outputs results;
  int64_t begin = 0;
  for (int64_t part : sizes) {
    results.push_back(slice_axis(node, x, axis, begin, begin + part));
    begin += part;
  }
  if (begin != length) node.fail("split sizes add up to " + std::to_string(begin) + ", the axis has " + std::to_string(length));
  return results;
}

// Gather with every operand known: computed here for any dtype.
Operand gather_constant(NodeContext& node, const ir::Tensor& data, const Ints& indices,
                        const ir::Shape& index_shape, int axis) {
  const ir::Shape& s = data.shape();
  ir::Shape out(s.begin(), s.begin() + axis);
  out.insert(out.end(), index_shape.begin(), index_shape.end());
  out.insert(out.end(), s.begin() + axis + 1, s.end());
  if (out.empty() && data.num_elements() == 0) node.fail("empty gather");
  const int64_t outer = ir::num_elements(s, 0, axis), inner = ir::num_elements(s, axis + 1, s.size());
  const size_t elem = ir::dtype_size(data.dtype());
  std::vector<std::byte> bytes;
  bytes.reserve(outer * indices.size() * inner * elem);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t index : indices) {
      const int64_t i = index < 0 ? index + s[axis] : index;
      if (i < 0 || i >= s[axis]) node.fail("index " + std::to_string(index) + " out of range for a dim of " + std::to_string(s[axis]));
      const std::byte* src = data.data() + ((o * s[axis] + i) * inner) * elem;
      bytes.insert(bytes.end(), src, src + inner * elem);
    }
  return node.constant(ir::Tensor(ir::TensorType{data.dtype(), out}, std::move(bytes)), "gathered");
}

Outputs gather(NodeContext& node) {
  const Operand& data = node.input(0);
  const int axis = normalize_axis_or_fail(node, node.attr_int("axis", 0), data.type().rank(), "axis");
  const Operand& index_operand = node.input(1);
  if (!index_operand.is_constant() && !index_operand.given)
    return {gather_along(node, data, index_operand, axis)};
  const Ints indices = node.const_ints(1, "indices");
  const ir::Shape& index_shape = node.input(1).type().shape;
  if (data.is_constant()) return {gather_constant(node, *data.constant, indices, index_shape, axis)};
  std::vector<Operand> parts;
  for (int64_t index : indices) {
    const int64_t i = index < 0 ? index + data.type().shape[axis] : index;
    parts.push_back(slice_axis(node, data, axis, i, i + 1));
  }
  Operand joined = parts.size() == 1 ? parts[0] : node.emit(OpId::Concat, parts, {{"axis", int64_t{axis}}});
  const ir::Shape& s = data.type().shape;
  ir::Shape out(s.begin(), s.begin() + axis);
  out.insert(out.end(), index_shape.begin(), index_shape.end());
  out.insert(out.end(), s.begin() + axis + 1, s.end());
  return {node.reshape(joined, out)};
}

// Trilu keeps the upper (j - i >= k) or lower (j - i <= k) triangle of the last two dims: a
// where against a mask computed at import.
Outputs trilu(NodeContext& node) {
  const Operand& x = node.input(0);
  const ir::Shape& shape = x.type().shape;
  if (shape.size() < 2) node.fail("input must have rank >= 2, got " + x.type().to_string());
  const bool upper = node.attr_int("upper", 1) != 0;
  const int64_t k = node.has_input(1) ? node.const_ints(1, "k").at(0) : 0;
  const int64_t rows = shape[shape.size() - 2], cols = shape.back();
  node.check_fold_size({ir::DType::Bool, {rows, cols}}, "the triangle mask");
  std::vector<double> keep(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) keep[i * cols + j] = upper ? j - i >= k : j - i <= k;
  const Operand mask =
      node.constant(ir::Tensor::from_doubles(ir::TensorType{ir::DType::Bool, {rows, cols}}, keep), "mask");
  return {node.emit(OpId::Where, {mask, x, node.scalar(x.type().dtype, 0.0)})};
}

Outputs expand(NodeContext& node) {
  const Operand& x = node.input(0);
  const Ints shape = node.const_ints(1, "shape");
  const auto target = ir::broadcast_shapes(x.type().shape, shape);
  if (!target) node.fail("shape " + ir::shape_to_string(shape) + " does not broadcast with " + x.type().to_string());
  if (*target == x.type().shape) return {x};
  return {node.emit(OpId::BroadcastTo, {x}, {{"shape", *target}})};
}

Outputs tile(NodeContext& node) {
  Operand x = node.input(0);
  const Ints repeats = node.const_ints(1, "repeats");
  if (static_cast<int>(repeats.size()) != x.type().rank()) node.fail("repeats must have one value per dim");
  // Each repeated dim n becomes [r, n] by a broadcast of a unit dim before it, then r*n.
  const ir::Shape& s = x.type().shape;
  ir::Shape unit, spread, tiled;
  for (int d = 0; d < x.type().rank(); ++d) {
    if (repeats[d] < 1) node.fail("repeats must be >= 1");
    if (repeats[d] > ir::kMaxElements / s[d]) node.fail("the result would have more than 2^48 elements");
    unit.insert(unit.end(), {1, s[d]});
    spread.insert(spread.end(), {repeats[d], s[d]});
    tiled.push_back(repeats[d] * s[d]);
  }
  if (tiled == s) return {x};
  return {node.reshape(node.emit(OpId::BroadcastTo, {node.reshape(x, unit)}, {{"shape", spread}}), tiled)};
}

Outputs range(NodeContext& node) {
  const Operand& start = node.input(0);
  const double first = node.const_doubles(0, "start").at(0), limit = node.const_doubles(1, "limit").at(0),
               delta = node.const_doubles(2, "delta").at(0);
  if (delta == 0) node.fail("delta must not be 0");
  const double steps = std::ceil((limit - first) / delta);
  if (!(steps >= 1)) node.fail("the range is empty; kiln tensors need one element");
  if (steps > double(kMaxFoldedBytes)) node.fail("the range has more than 2^26 elements, too many to build at import");
  const int64_t count = static_cast<int64_t>(steps);
  node.check_fold_size({start.type().dtype, {count}}, "the range");
  std::vector<double> values;
  for (int64_t i = 0; i < count; ++i) values.push_back(first + i * delta);
  return {node.constant(ir::Tensor::from_doubles({start.type().dtype, {count}}, values), "range")};
}

// Pad: each padded axis becomes a concat of the padding (constant blocks, or edge / reflected
// slices of the input) around the input; negative pads slice.
Outputs pad(NodeContext& node) {
  Operand x = node.input(0);
  const int rank = x.type().rank();
  const std::string mode = node.attr_string("mode", "constant");
  Ints pads;
  double value = 0;
  if (node.opset() < 11) {
    pads = node.attr_ints(node.opset() < 2 ? "paddings" : "pads");
    value = node.attr_float("value", 0.0);
  } else {
    pads = node.const_ints(1, "pads");
    if (node.has_input(2)) value = node.const_doubles(2, "constant_value").at(0);
  }
  Ints axes;
  if (node.has_input(3)) axes = node.const_ints(3, "axes");
  else for (int d = 0; d < rank; ++d) axes.push_back(d);
  if (pads.size() != 2 * axes.size()) node.fail("pads must have two values per padded axis");
  if (mode != "constant" && mode != "edge" && mode != "reflect") node.fail("mode '" + mode + "' is not supported");
  for (size_t a = 0; a < axes.size(); ++a) {
    const int d = normalize_axis_or_fail(node, axes[a], rank, "axis");
    const int64_t before = pads[a], after = pads[a + axes.size()];
    int64_t n = x.type().shape[d];
    if (before < 0 || after < 0) {
      x = slice_axis(node, x, d, std::max<int64_t>(0, -before), n - std::max<int64_t>(0, -after));
      n = x.type().shape[d];
    }
    // The block of `count` slices added before (or after) the axis: `value`, copies of the edge
    // slice (a broadcast), or the mirrored slices (a gather of their positions).
    auto block = [&](int64_t count, bool at_start) {
      ir::Shape shape = x.type().shape;
      shape[d] = count;
      if (!ir::checked_num_elements(shape)) node.fail("the padded tensor would have more than 2^48 elements");
      if (mode == "constant") return node.fill(x.type().dtype, shape, value);
      if (mode == "edge") {
        const int64_t edge = at_start ? 0 : n - 1;
        return node.emit(OpId::BroadcastTo, {slice_axis(node, x, d, edge, edge + 1)}, {{"shape", shape}});
      }
      if (count > n - 1) node.fail("reflect padding larger than the axis");
      node.check_fold_size({ir::DType::I64, {count}}, "the mirrored positions");
      Ints mirrored;
      for (int64_t k = 0; k < count; ++k) mirrored.push_back(at_start ? count - k : n - 2 - k);
      return gather_along(node, x, ints_constant(node, mirrored, {count}, "mirrored"), d);
    };
    std::vector<Operand> pieces;
    if (before > 0) pieces.push_back(block(before, true));
    pieces.push_back(x);
    if (after > 0) pieces.push_back(block(after, false));
    if (pieces.size() > 1) x = node.emit(OpId::Concat, pieces, {{"axis", int64_t{d}}});
  }
  return {x};
}

Outputs depth_to_space(NodeContext& node) {
  const Operand& x = node.input(0);
  if (x.type().rank() != 4) node.fail("input must be 4-D");
  const int64_t bs = node.attr_int("blocksize", 0);
  const ir::Shape& s = x.type().shape;
  if (bs < 1 || bs > (int64_t{1} << 24) || s[1] % (bs * bs) != 0) node.fail("channels must be divisible by blocksize^2");
  const int64_t c = s[1] / (bs * bs);
  const bool crd = node.attr_string("mode", "DCR") == "CRD";
  const Operand split = node.reshape(x, crd ? ir::Shape{s[0], c, bs, bs, s[2], s[3]} : ir::Shape{s[0], bs, bs, c, s[2], s[3]});
  const Ints perm = crd ? Ints{0, 1, 4, 2, 5, 3} : Ints{0, 3, 4, 1, 5, 2};
  const Operand moved = node.emit(OpId::Transpose, {split}, {{"perm", perm}});
  return {node.reshape(moved, {s[0], c, s[2] * bs, s[3] * bs})};
}

Outputs space_to_depth(NodeContext& node) {
  const Operand& x = node.input(0);
  if (x.type().rank() != 4) node.fail("input must be 4-D");
  const int64_t bs = node.attr_int("blocksize", 0);
  const ir::Shape& s = x.type().shape;
  if (bs < 1 || s[2] % bs != 0 || s[3] % bs != 0) node.fail("height and width must be divisible by blocksize");
  const Operand split = node.reshape(x, {s[0], s[1], s[2] / bs, bs, s[3] / bs, bs});
  const Operand moved = node.emit(OpId::Transpose, {split}, {{"perm", Ints{0, 3, 5, 1, 2, 4}}});
  return {node.reshape(moved, {s[0], s[1] * bs * bs, s[2] / bs, s[3] / bs})};
}

constexpr int kLast = kMaxOpset;

const OpRule kRules[] = {
    {"Constant", 1, kLast, constant},
    {"ConstantOfShape", 9, kLast, constant_of_shape},
    {"Shape", 1, kLast, shape},
    {"Size", 1, kLast, size},
    {"Cast", 6, kLast, cast},
    {"CastLike", 15, kLast, cast_like},
    {"Reshape", 1, kLast, reshape},
    {"Flatten", 1, kLast, flatten},
    {"Squeeze", 1, kLast, squeeze},
    {"Unsqueeze", 1, kLast, unsqueeze},
    {"Transpose", 1, kLast, transpose},
    {"Concat", 1, kLast, concat},
    {"Slice", 1, kLast, slice},
    {"Split", 1, kLast, split},
    {"Gather", 1, kLast, gather},
    {"Trilu", 14, kLast, trilu},
    {"Expand", 8, kLast, expand},
    {"Tile", 6, kLast, tile},
    {"Range", 11, kLast, range},
    {"Pad", 1, kLast, pad},
    {"DepthToSpace", 1, kLast, depth_to_space},
    {"SpaceToDepth", 1, kLast, space_to_depth},
};
}  // namespace

// Gather as gather_elements on data viewed as [outer, dim, inner], the indices flattened and
// broadcast to [outer, count, inner]: run-time indices (an embedding lookup) need nothing else.
Operand gather_along(NodeContext& node, const Operand& data, const Operand& indices, int axis) {
  const ir::Shape& s = data.type().shape;
  const ir::Shape& index_shape = indices.type().shape;
  const int64_t outer = ir::num_elements(s, 0, axis), inner = ir::num_elements(s, axis + 1, s.size());
  const int64_t count = ir::num_elements(index_shape);
  const Operand view = node.reshape(data, {outer, s[axis], inner});
  Operand positions = node.reshape(indices, {1, count, 1});
  if (outer != 1 || inner != 1)
    positions = node.emit(ir::OpId::BroadcastTo, {positions}, {{"shape", ir::Shape{outer, count, inner}}});
  const Operand picked = node.emit(ir::OpId::GatherElements, {view, positions}, {{"axis", int64_t{1}}});
  ir::Shape out(s.begin(), s.begin() + axis);
  out.insert(out.end(), index_shape.begin(), index_shape.end());
  out.insert(out.end(), s.begin() + axis + 1, s.end());
  return node.reshape(picked, out);
}

std::span<const OpRule> shape_rules() { return kRules; }

}  // namespace kiln::compiler::onnx_import
