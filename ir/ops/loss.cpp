// Losses: scalar results that average over the whole batch.
#include <string>

#include "ir/ops/op_helpers.h"
#include "ir/ops/type_rules.h"

namespace kiln::ir::type_rules {
namespace {

using ops::require_float;
using ops::require_rank;

}  // namespace

Types infer_softmax_cross_entropy(const InferContext& ctx) {
  require_rank(ctx, 0, 2, "logits");
  require_float(ctx, 0);
  require_rank(ctx, 1, 1, "labels");
  const TensorType& logits = ctx.inputs[0];
  const TensorType& labels = ctx.inputs[1];
  if (!is_integer(labels.dtype))
    throw OpError{"labels must be i32 or i64 class indices, got " + labels.to_string(), 1};
  if (labels.shape[0] != logits.shape[0])
    throw OpError{"labels has " + std::to_string(labels.shape[0]) + " elements, logits " +
                      logits.to_string() + " has batch size " +
                      std::to_string(logits.shape[0]),
                  1};
  return {TensorType{logits.dtype, {}}};
}

namespace {

// F.mse_loss is float-only and warns on broadcasting; kiln requires identical types instead.
}  // namespace

Types infer_mse_loss(const InferContext& ctx) {
  require_float(ctx, 0);
  const TensorType& prediction = ctx.inputs[0];
  const TensorType& target = ctx.inputs[1];
  if (target != prediction)
    throw OpError{"target " + target.to_string() + " must have the same type as prediction " +
                      prediction.to_string(),
                  1};
  return {TensorType{prediction.dtype, {}}};
}

}  // namespace kiln::ir::type_rules
