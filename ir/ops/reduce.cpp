// Reductions over a set of axes: sum, mean, max.
#include <string>

#include "ir/ops/op_helpers.h"

namespace kiln::ir {
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

void add_reduce(OpRegistry& registry, const char* name, const char* summary, bool float_only) {
  registry.add(OpDef{name, summary, {"x"}, 1, 1,
                     {{"axes", AttrType::Ints, std::vector<int64_t>{}},
                      {"keepdims", AttrType::Bool, false}},
                     OpKind::Reduce, [float_only](const InferContext& ctx) {
                       if (float_only) require_float(ctx, 0);
                       else require_numeric(ctx, 0);
                       return infer_reduce(ctx);
                     }});
}

}  // namespace

void register_reduce_ops(OpRegistry& registry) {
  add_reduce(registry, "reduce_sum", "sum over axes (all by default)", false);
  add_reduce(registry, "reduce_mean", "mean over axes (all by default)", true);
  add_reduce(registry, "reduce_max", "maximum over axes (all by default)", false);
}

}  // namespace kiln::ir
