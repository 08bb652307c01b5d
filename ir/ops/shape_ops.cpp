// Shape ops: reshape, flatten, transpose, concat, slice. All are injective (each output element
// reads one input element) and accept any dtype, bool included.
#include <algorithm>
#include <string>

#include "ir/ops/op_helpers.h"
#include "ir/ops/type_rules.h"

namespace kiln::ir::type_rules {
namespace {

using ops::checked_result;
using ops::ints_to_string;
using ops::require_axes;
using ops::require_axis;
using ops::require_same_dtype;
using Ints = std::vector<int64_t>;

using ops::str;

std::string count_text(const Shape& shape) {
  std::optional<int64_t> count = checked_num_elements(shape);
  return count ? str(*count) + " elements" : "more than 2^48 elements";
}

}  // namespace

Types infer_reshape(const InferContext& ctx) {
  const TensorType& x = ctx.inputs[0];
  const Ints& target = ctx.get_ints("shape");
  int inferred = -1;
  Shape known;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == -1) {
      if (inferred >= 0)
        throw OpError{"attribute 'shape' may contain at most one -1, got " +
                          ints_to_string(target),
                      -1, "shape"};
      inferred = static_cast<int>(i);
      continue;
    }
    if (target[i] < 1)
      throw OpError{"attribute 'shape' dims must be >= 1 (or -1 to infer one dim), got " +
                        ints_to_string(target),
                    -1, "shape"};
    known.push_back(target[i]);
  }
  const int64_t total = num_elements(x.shape);
  const std::string from =
      "reshape from " + shape_to_string(x.shape) + " (" + str(total) + " elements) to " +
      ints_to_string(target);
  std::optional<int64_t> known_count = checked_num_elements(known);
  Shape out(target.begin(), target.end());
  if (inferred < 0) {
    if (known_count != total) throw OpError{from + " (" + count_text(known) + ")", -1, "shape"};
    return {TensorType{x.dtype, std::move(out)}};
  }
  if (!known_count)
    throw OpError{from + ": the other dims hold more than 2^48 elements", -1, "shape"};
  if (total % *known_count != 0)
    throw OpError{from + ": " + str(total) + " is not divisible by " + str(*known_count), -1,
                  "shape"};
  out[inferred] = total / *known_count;
  return {TensorType{x.dtype, std::move(out)}};
}

Types infer_flatten(const InferContext& ctx) {
  const TensorType& x = ctx.inputs[0];
  const int64_t axis = ctx.get_int("axis");
  // axis == rank is allowed (everything in the first dim), so normalize_axis does not apply.
  if (axis < 0 || axis > x.rank())
    throw OpError{"attribute 'axis' must be in [0, " + str(x.rank()) + "] for input " +
                      x.to_string() + ", got " + str(axis),
                  -1, "axis"};
  const Shape outer(x.shape.begin(), x.shape.begin() + axis);
  const Shape inner(x.shape.begin() + axis, x.shape.end());
  return {TensorType{x.dtype, {num_elements(outer), num_elements(inner)}}};
}

Types infer_transpose(const InferContext& ctx) {
  const TensorType& x = ctx.inputs[0];
  const int rank = x.rank();
  Ints perm = ctx.get_ints("perm");
  if (perm.empty()) {
    for (int i = rank - 1; i >= 0; --i) perm.push_back(i);
  }
  Ints sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  bool valid = static_cast<int>(perm.size()) == rank;
  for (int i = 0; valid && i < rank; ++i) valid = sorted[i] == i;
  if (!valid) {
    const std::string want =
        rank == 0 ? "must be [] for rank 0" : "must be a permutation of 0.." + str(rank - 1);
    throw OpError{"attribute 'perm' " + want + ", got " + ints_to_string(perm), -1, "perm"};
  }
  Shape out(rank);
  for (int i = 0; i < rank; ++i) out[i] = x.shape[perm[i]];
  return {TensorType{x.dtype, std::move(out)}};
}

Types infer_concat(const InferContext& ctx) {
  const TensorType& first = ctx.inputs[0];
  const int axis = require_axis(ctx.get_int("axis"), first.rank(), "axis");
  Shape out = first.shape;
  for (int i = 1; i < static_cast<int>(ctx.inputs.size()); ++i) {
    const TensorType& x = ctx.inputs[i];
    require_same_dtype(ctx, 0, i);
    const std::string both = " (" + x.to_string() + " and " + first.to_string() + ")";
    if (x.rank() != first.rank())
      throw OpError{"operand " + str(i) + " has rank " + str(x.rank()) + ", operand 0 has rank " +
                        str(first.rank()) + both,
                    i};
    for (int d = 0; d < first.rank(); ++d) {
      if (d == axis || x.shape[d] == first.shape[d]) continue;
      throw OpError{"operand " + str(i) + " has size " + str(x.shape[d]) + " in dim " + str(d) +
                        ", operand 0 has " + str(first.shape[d]) + both + "; only axis " +
                        str(axis) + " may differ",
                    i};
    }
    out[axis] += x.shape[axis];  // each term <= 2^48, checked below before the next add
    if (out[axis] > kMaxElements)
      throw OpError{"concatenated size along axis " + str(axis) + " exceeds 2^48", i};
  }
  return {checked_result(first.dtype, std::move(out))};
}

namespace {

// ONNX Slice's rule for positive steps: a negative index counts from the end, then the index
// is clamped to [0, dim].
int64_t clamp_index(int64_t index, int64_t dim) {
  if (index < 0) index += dim;  // index >= INT64_MIN and dim > 0: cannot overflow
  return std::clamp<int64_t>(index, 0, dim);
}

void require_slice_length(const Ints& values, size_t count, const std::string& attr) {
  if (!values.empty() && values.size() != count)
    throw OpError{"attribute '" + attr + "' must have one value per start (" + str(count) +
                      "), got " + ints_to_string(values),
                  -1, attr};
}

}  // namespace

Types infer_slice(const InferContext& ctx) {
  const TensorType& x = ctx.inputs[0];
  const Ints& starts = ctx.get_ints("starts");
  const Ints& ends = ctx.get_ints("ends");
  const Ints& steps = ctx.get_ints("steps");
  Ints axes = ctx.get_ints("axes");
  if (ends.size() != starts.size())
    throw OpError{"attributes 'starts' and 'ends' must have the same length, got " +
                      str(starts.size()) + " and " + str(ends.size()),
                  -1, "ends"};
  require_slice_length(axes, starts.size(), "axes");
  require_slice_length(steps, starts.size(), "steps");
  if (axes.empty()) {
    if (static_cast<int>(starts.size()) > x.rank())
      throw OpError{"attribute 'starts' has " + str(starts.size()) + " values, input " +
                        x.to_string() + " has rank " + str(x.rank()),
                    -1, "starts"};
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  const std::vector<int> normalized = require_axes(axes, x.rank(), "axes");
  for (int64_t step : steps)
    if (step < 1)
      throw OpError{"attribute 'steps' values must be >= 1, got " + ints_to_string(steps), -1,
                    "steps"};

  Shape out = x.shape;
  for (size_t i = 0; i < starts.size(); ++i) {
    const int axis = normalized[i];
    const int64_t dim = x.shape[axis];
    const int64_t step = steps.empty() ? 1 : steps[i];
    const int64_t start = clamp_index(starts[i], dim);
    const int64_t end = clamp_index(ends[i], dim);
    if (end <= start)
      throw OpError{"slice selects nothing on axis " + str(axis) + " (size " + str(dim) +
                        "): start " + str(starts[i]) + ", end " + str(ends[i]) + ", step " +
                        str(step),
                    -1, "starts"};
    out[axis] = (end - start - 1) / step + 1;
  }
  return {TensorType{x.dtype, std::move(out)}};
}

}  // namespace kiln::ir::type_rules
