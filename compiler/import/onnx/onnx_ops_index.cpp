// ONNX index-building ops → kiln ops: OneHot (equal against the positions, then where),
// EyeLike (a constant: only the input's static shape matters), Compress (the kept positions
// are known at import, then a gather), GatherND and ReverseSequence (gathers), the scatters
// (one-hot products) and the cosine windows.
#include <cmath>
#include <functional>
#include <numbers>
#include <string>

#include "compiler/import/onnx/onnx_ops.h"
#include "compiler/import/onnx/onnx_tensor.h"

namespace kiln::compiler::onnx_import {

namespace {
using ir::OpId;
using Outputs = std::vector<Operand>;
using Ints = std::vector<int64_t>;

// Integer indices as i64, a negative one counted from the end of a dim of `size` (which may be a
// tensor of sizes that broadcasts against the indices).
Operand wrap_negative(NodeContext& node, Operand index, const Operand& size) {
  if (index.type().dtype != ir::DType::I64) index = node.emit(OpId::Cast, {index}, {{"to", std::string("i64")}});
  const Operand negative = node.emit(OpId::Less, {index, node.scalar(ir::DType::I64, 0.0)});
  return node.emit(OpId::Where, {negative, node.emit(OpId::Add, {index, size}), index});
}

// The flat (row-major) position over `dims` of each index tuple, the last dim of `indices`
// ([tuples..., dims.size()]; negative indices counted from the end), as i64 of shape `tuples`.
Operand tuple_positions(NodeContext& node, const Operand& indices, const ir::Shape& dims, const ir::Shape& tuples) {
  const int64_t last = indices.type().rank() - 1;
  Operand flat = node.fill(ir::DType::I64, tuples, 0.0);
  int64_t stride = 1;
  for (int64_t j = static_cast<int64_t>(dims.size()) - 1; j >= 0; --j) {
    Operand index = node.reshape(
        node.emit(OpId::Slice, {indices}, {{"starts", Ints{j}}, {"ends", Ints{j + 1}}, {"axes", Ints{last}}, {"steps", Ints{1}}}), tuples);
    index = wrap_negative(node, index, node.scalar(ir::DType::I64, static_cast<double>(dims[static_cast<size_t>(j)])));
    flat = node.emit(OpId::Add, {flat, node.emit(OpId::Mul, {index, node.scalar(ir::DType::I64, static_cast<double>(stride))})});
    stride *= dims[static_cast<size_t>(j)];
  }
  return flat;
}

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
  Operand index = wrap_negative(node, indices, node.scalar(ir::DType::I64, static_cast<double>(depth)));
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

// GatherND: each index tuple (the last dim of `indices`) picks a slice of `data`; the first
// batch_dims dims of both are batch dims. The tuples become flat positions into `data` viewed
// as [prod(leading dims), rest...] (batch position included), then one gather along axis 0.
Outputs gather_nd(NodeContext& node) {
  node.check_attrs({"batch_dims"});
  const Operand& data = node.input(0);
  const Operand& indices = node.input(1);
  const ir::Shape& d = data.type().shape;
  const ir::Shape& i = indices.type().shape;
  const int r = data.type().rank(), q = indices.type().rank();
  const int64_t b = node.attr_int("batch_dims", 0);
  if (!ir::is_integer(indices.type().dtype)) node.fail("indices must be integers");
  if (r < 1 || q < 1) node.fail("data and indices must have rank >= 1");
  if (b < 0 || b >= std::min(r, q)) node.fail("batch_dims " + std::to_string(b) + " must be in [0, min(rank(data), rank(indices)))");
  const int64_t k = i.back();
  if (k < 1 || k > r - b) node.fail("index tuples of length " + std::to_string(k) + " do not fit data of rank " + std::to_string(r) + " with " + std::to_string(b) + " batch dims");
  for (int64_t a = 0; a < b; ++a)
    if (d[a] != i[a]) node.fail("batch dim " + std::to_string(a) + " differs: data has " + std::to_string(d[a]) + ", indices " + std::to_string(i[a]));
  const ir::Shape tuples(i.begin(), i.end() - 1);
  const int tuple_rank = q - 1;
  // flat = the tuple's position within its batch entry, plus the batch position's offset.
  Operand flat = tuple_positions(node, indices, ir::Shape(d.begin() + b, d.begin() + b + k), tuples);
  int64_t stride = ir::num_elements(d, static_cast<size_t>(b), static_cast<size_t>(b + k));
  for (int64_t a = b - 1; a >= 0; --a) {
    const Operand position = node.positions(tuple_rank, static_cast<int>(a), d[a]);
    flat = node.emit(OpId::Add, {flat, node.emit(OpId::Mul, {position, node.scalar(ir::DType::I64, static_cast<double>(stride))})});
    stride *= d[a];
  }
  ir::Shape view{stride};
  view.insert(view.end(), d.begin() + b + k, d.end());
  return {gather_along(node, node.reshape(data, view), flat, 0)};
}

// ReverseSequence: along the time axis, each batch entry's first sequence_lens[b] elements
// reversed, the rest kept: output[t] = input[t < len ? len - 1 - t : t], one gather_elements.
Outputs reverse_sequence(NodeContext& node) {
  node.check_attrs({"batch_axis", "time_axis"});
  const Operand& x = node.input(0);
  const int rank = x.type().rank();
  if (rank < 2) node.fail("input must have rank >= 2");
  const int batch_axis = normalize_axis_or_fail(node, node.attr_int("batch_axis", 1), rank, "batch_axis");
  const int time_axis = normalize_axis_or_fail(node, node.attr_int("time_axis", 0), rank, "time_axis");
  if (batch_axis == time_axis) node.fail("batch_axis and time_axis must differ");
  const Operand& lens_in = node.input(1);
  const int64_t batch = x.type().shape[batch_axis], steps = x.type().shape[time_axis];
  if (lens_in.type().shape != ir::Shape{batch} || !ir::is_integer(lens_in.type().dtype))
    node.fail("sequence_lens must be integers of shape [" + std::to_string(batch) + "]");
  if (lens_in.is_constant())
    for (int64_t length : tensor_ints(*lens_in.constant))
      if (length < 1 || length > steps)
        node.fail("sequence_lens holds " + std::to_string(length) + ", outside [1, " + std::to_string(steps) + "]");
  ir::Shape lens_shape(static_cast<size_t>(rank), 1);
  lens_shape[static_cast<size_t>(batch_axis)] = batch;
  Operand lens = node.reshape(lens_in, lens_shape);
  if (lens.type().dtype != ir::DType::I64) lens = node.emit(OpId::Cast, {lens}, {{"to", std::string("i64")}});
  const Operand t = node.positions(rank, time_axis, steps);
  const Operand reversed = node.emit(OpId::Sub, {node.emit(OpId::Sub, {lens, node.scalar(ir::DType::I64, 1.0)}), t});
  Operand source = node.emit(OpId::Where, {node.emit(OpId::Less, {t, lens}), reversed, t});
  if (source.type().shape != x.type().shape)
    source = node.emit(OpId::BroadcastTo, {source}, {{"shape", x.type().shape}});
  return {node.emit(OpId::GatherElements, {x, source}, {{"axis", int64_t{time_axis}}})};
}

// The scatters write `updates` into a copy of `data` at run-time positions. kiln has no scatter
// op yet, so each becomes a one-hot product: a [writers, targets] 0/1 matrix (per position along
// the scatter axis for ScatterElements, per index tuple for ScatterND) that sums the updates
// into each target and counts the writes, then `where` keeps data at targets nobody writes.
// The one-hot matrix costs writers x targets, so large scatters hit the element limit with a
// message; a scatter kernel is later work. Reduction none, add, max and min; mul multiplies the
// writes in one at a time, in order (exact, as ONNX's reference), up to kMaxMultipliedWrites.
enum class Reduction { None, Add, Max, Min, Mul };

constexpr int64_t kMaxMultipliedWrites = 1024;

Reduction read_reduction(NodeContext& node) {
  const std::string reduction = node.attr_string("reduction", "none");
  if (reduction == "none") return Reduction::None;
  if (reduction == "add") return Reduction::Add;
  if (reduction == "max") return Reduction::Max;
  if (reduction == "min") return Reduction::Min;
  if (reduction == "mul") return Reduction::Mul;
  node.fail("reduction '" + reduction + "' is not supported (none, add, max, min, mul)");
}

// data with the writes applied: `hot` [..., writers, targets] (0/1, data's dtype) and `values`
// [..., writers, 1]; the reduction over the writers' axis `axis`.
Operand combine(NodeContext& node, Reduction reduction, const Operand& data, const Operand& hot,
                const Operand& values, int64_t axis, const std::function<Operand(Operand)>& to_data_layout) {
  const ir::DType dtype = data.type().dtype;
  const ir::AttrMap over_writers{{"axes", Ints{axis}}, {"keepdims", false}};
  const Operand written = to_data_layout(node.emit(OpId::Greater, {node.emit(OpId::ReduceSum, {hot}, over_writers),
                                                                   node.scalar(dtype, 0.0)}));
  if (reduction == Reduction::None || reduction == Reduction::Add) {
    const Operand sum = to_data_layout(node.emit(OpId::ReduceSum, {node.emit(OpId::Mul, {hot, values})}, over_writers));
    if (reduction == Reduction::Add) return node.emit(OpId::Add, {data, sum});
    return node.emit(OpId::Where, {written, sum, data});
  }
  if (reduction == Reduction::Mul) {
    const int64_t writers = hot.type().shape[static_cast<size_t>(axis)];
    if (writers > kMaxMultipliedWrites)
      node.fail("reduction 'mul' multiplies " + std::to_string(writers) + " writes in one by one; kiln does up to " +
                std::to_string(kMaxMultipliedWrites));
    auto at_writer = [&](const Operand& v, int64_t w) {
      ir::Shape rest = v.type().shape;
      rest.erase(rest.begin() + axis);
      return node.reshape(node.emit(OpId::Slice, {v}, {{"starts", Ints{w}}, {"ends", Ints{w + 1}}, {"axes", Ints{axis}}, {"steps", Ints{1}}}),
                          rest);
    };
    Operand product = data;
    for (int64_t w = 0; w < writers; ++w) {
      // Where writer w writes, times its value; elsewhere (padding included) times nothing.
      const Operand hit = at_writer(hot, w);
      const Operand mask = node.emit(OpId::Greater, {to_data_layout(hit), node.scalar(dtype, 0.0)});
      const Operand value = to_data_layout(node.emit(OpId::Mul, {hit, at_writer(values, w)}));
      product = node.emit(OpId::Where, {mask, node.emit(OpId::Mul, {product, value}), product});
    }
    return product;
  }
  const bool max = reduction == Reduction::Max;
  const Operand is_hot = node.emit(OpId::Greater, {hot, node.scalar(dtype, 0.0)});
  const Operand masked = node.emit(OpId::Where, {is_hot, values, node.scalar(dtype, max ? -INFINITY : INFINITY)});
  const Operand extreme = max ? node.emit(OpId::ReduceMax, {masked}, over_writers)
                              : node.emit(OpId::Neg, {node.emit(OpId::ReduceMax, {node.emit(OpId::Neg, {masked})}, over_writers)});
  const Operand best = node.emit(max ? OpId::Maximum : OpId::Minimum, {data, to_data_layout(extreme)});
  return node.emit(OpId::Where, {written, best, data});
}

Outputs scatter_elements(NodeContext& node) {
  node.check_attrs({"axis", "reduction"});
  const Operand& data = node.input(0);
  const Operand& indices = node.input(1);
  const Operand& updates = node.input(2);
  const int rank = data.type().rank();
  const ir::Shape& d = data.type().shape;
  const ir::Shape& u = updates.type().shape;
  if (!ir::is_floating(data.type().dtype)) node.fail("data must be floating point (kiln scatters float tensors)");
  if (!ir::is_integer(indices.type().dtype)) node.fail("indices must be integers");
  if (indices.type().shape != u || updates.type().rank() != rank)
    node.fail("indices and updates must have one shape, of data's rank");
  const int axis = normalize_axis_or_fail(node, node.attr_int("axis", 0), rank, "axis");
  for (int k = 0; k < rank; ++k)
    if (k != axis && u[k] > d[k]) node.fail("updates are larger than data along axis " + std::to_string(k));
  const Reduction reduction = read_reduction(node);
  // The scatter axis goes last: [others..., writers] against the targets [0, d[axis]).
  Ints perm;
  for (int k = 0; k < rank; ++k)
    if (k != axis) perm.push_back(k);
  perm.push_back(axis);
  auto to_last = [&](const Operand& v) { return rank == 1 ? v : node.emit(OpId::Transpose, {v}, {{"perm", perm}}); };
  const Operand index = wrap_negative(node, to_last(indices), node.scalar(ir::DType::I64, static_cast<double>(d[axis])));
  ir::Shape column = index.type().shape;
  column.push_back(1);
  const Operand targets = node.positions(rank + 1, rank, d[axis]);
  const Operand hot = node.emit(OpId::Cast, {node.emit(OpId::Equal, {node.reshape(index, column), targets})},
                                {{"to", std::string(ir::dtype_name(data.type().dtype))}});
  const Operand values = node.reshape(to_last(updates), column);
  // Back to data's layout: the target axis to `axis`, the other dims padded to data's sizes.
  Ints inverse(static_cast<size_t>(rank));
  for (int k = 0; k < rank; ++k) inverse[static_cast<size_t>(perm[static_cast<size_t>(k)])] = k;
  auto to_data_layout = [&](Operand v) {
    if (rank > 1) v = node.emit(OpId::Transpose, {v}, {{"perm", inverse}});
    for (int k = 0; k < rank; ++k) {
      const int64_t have = v.type().shape[static_cast<size_t>(k)];
      if (k == axis || have == d[k]) continue;
      ir::Shape rest = v.type().shape;
      rest[static_cast<size_t>(k)] = d[k] - have;
      v = node.emit(OpId::Concat, {v, node.fill(v.type().dtype, rest, 0.0)}, {{"axis", int64_t{k}}});
    }
    return v;
  };
  return {combine(node, reduction, data, hot, values, rank - 1, to_data_layout)};
}

// ScatterND: each index tuple names a slice of data ([prod(data[:k]), rest...] viewed as rows).
Outputs scatter_nd(NodeContext& node) {
  node.check_attrs({"reduction"});
  const Operand& data = node.input(0);
  const Operand& indices = node.input(1);
  const Operand& updates = node.input(2);
  const ir::Shape& d = data.type().shape;
  const ir::Shape& i = indices.type().shape;
  if (!ir::is_floating(data.type().dtype)) node.fail("data must be floating point (kiln scatters float tensors)");
  if (!ir::is_integer(indices.type().dtype) || i.empty()) node.fail("indices must be integers of rank >= 1");
  const int64_t k = i.back();
  if (k < 1 || k > data.type().rank()) node.fail("index tuples of length " + std::to_string(k) + " do not fit data of rank " + std::to_string(d.size()));
  ir::Shape expected(i.begin(), i.end() - 1);
  expected.insert(expected.end(), d.begin() + k, d.end());
  if (updates.type().shape != expected) node.fail("updates must have shape " + ir::shape_to_string(expected));
  const Reduction reduction = read_reduction(node);
  const int64_t writers = ir::num_elements(i, 0, i.size() - 1), rows = ir::num_elements(d, 0, k),
                row = ir::num_elements(d, k, d.size());
  const Operand flat = tuple_positions(node, indices, ir::Shape(d.begin(), d.begin() + k), {writers});
  const ir::DType dtype = data.type().dtype;
  const Operand rows_view = node.reshape(data, {rows, row});
  const Operand hot = node.emit(OpId::Cast, {node.emit(OpId::Equal, {node.reshape(flat, {writers, 1}), node.positions(2, 1, rows)})},
                                {{"to", std::string(ir::dtype_name(dtype))}});
  if (reduction == Reduction::None || reduction == Reduction::Add) {
    // The sums of the writes per row are one matmul, hot^T [rows, writers] x updates [writers, row].
    const Operand sum = node.emit(OpId::Matmul, {hot, node.reshape(updates, {writers, row})}, {{"transpose_a", true}});
    if (reduction == Reduction::Add) return {node.reshape(node.emit(OpId::Add, {rows_view, sum}), d)};
    const Operand count = node.emit(OpId::ReduceSum, {hot}, {{"axes", Ints{0}}, {"keepdims", false}});
    const Operand written = node.reshape(node.emit(OpId::Greater, {count, node.scalar(dtype, 0.0)}), {rows, 1});
    return {node.reshape(node.emit(OpId::Where, {written, sum, rows_view}), d)};
  }
  // max, min and mul: hot [writers, rows, 1] against updates [writers, 1, row], the writers' axis 0.
  auto same = [](Operand v) { return v; };
  return {node.reshape(combine(node, reduction, rows_view, node.reshape(hot, {writers, rows, 1}),
                               node.reshape(updates, {writers, 1, row}), 0, same), d)};
}

const OpRule kRules[] = {
    {"ScatterElements", 11, kLast, scatter_elements},
    {"Scatter", 9, 10, scatter_elements},
    {"ScatterND", 11, kLast, scatter_nd},
    {"GatherND", 11, kLast, gather_nd},
    {"ReverseSequence", 10, kLast, reverse_sequence},
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
