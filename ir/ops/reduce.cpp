// Reductions over a set of axes: sum, mean, max; pairwise_sum over the first axis.
#include <string>

#include "ir/ops/op_helpers.h"
#include "ir/ops/type_rules.h"

namespace kiln::ir::type_rules {
namespace {

using ops::require_axes;
using ops::require_float;
using ops::require_numeric;

// The result keeps the input dtype (torch.sum would widen i32 to i64; kiln does not).
std::vector<TensorType> infer_reduce(const InferContext& ctx) {
  const TensorType& x = ctx.inputs[0];
  std::vector<bool> reduced(x.rank(), true);  // no axes: reduce all
  const std::vector<int64_t>& axes = ctx.get_ints("axes");
  if (!axes.empty()) {
    reduced.assign(x.rank(), false);
    for (int axis : require_axes(axes, x.rank(), "axes")) reduced[axis] = true;
  }
  const bool keepdims = ctx.get_bool("keepdims");
  Shape out;
  for (int d = 0; d < x.rank(); ++d) {
    if (!reduced[d]) out.push_back(x.shape[d]);
    else if (keepdims) out.push_back(1);
  }
  return {TensorType{x.dtype, std::move(out)}};
}

}  // namespace

Types infer_reduce_numeric(const InferContext& ctx) {
  require_numeric(ctx, 0);
  return infer_reduce(ctx);
}

Types infer_reduce_float(const InferContext& ctx) {
  require_float(ctx, 0);
  return infer_reduce(ctx);
}

Types infer_pairwise_sum(const InferContext& ctx) {
  require_float(ctx, 0);
  const TensorType& x = ctx.inputs[0];
  if (x.rank() < 1) throw OpError{"x must have rank >= 1 (its rows are summed), got a scalar", 0, ""};
  return {TensorType{x.dtype, Shape(x.shape.begin() + 1, x.shape.end())}};
}

}  // namespace kiln::ir::type_rules
