// Scaled dot-product attention and its backward op.
//
// attention(q, k, v[, mask]) {scale, causal} -> (out, lse) computes, per batch index (heads are
// batch dims) and query row i,
//   s_ij = scale * q_i . k_j  (+ mask_ij if the mask is float; -inf where a bool mask is false,
//                               or where causal and j > i)
//   out_i = sum_j softmax(s_i)_j v_j,   lse_i = log(sum_j exp(s_ij))
// scale 0 means 1 / sqrt(D), the usual choice (Vaswani et al. 2017). causal aligns the diagonal
// at the top left (key j attends to query i when j <= i), as torch's is_causal does. A row whose
// every key is masked has no softmax: its output is NaN, as in PyTorch.
//
// attention_grad(dy, q, k, v, out, lse[, mask]) -> (dq, dk, dv) is the backward op. It recomputes
// p_ij = exp(s_ij - lse_i) instead of storing the S x S probabilities (Dao et al. 2022, FlashAttention,
// algorithm 4), with delta_i = dy_i . out_i:
//   dv_j = sum_i p_ij dy_i,  ds_ij = p_ij (dy_i . v_j - delta_i),
//   dq_i = scale sum_j ds_ij k_j,  dk_j = scale sum_i ds_ij q_i.
#include <string>

#include "ir/ops/op_helpers.h"
#include "ir/ops/type_rules.h"

namespace kiln::ir::type_rules {
namespace {

using ops::require_float;
using ops::require_same_dtype;
using ops::str;

Shape batch_dims(const Shape& shape) { return Shape(shape.begin(), shape.end() - 2); }

void require_matrix(const InferContext& ctx, int input, const char* role) {
  if (ctx.inputs[static_cast<size_t>(input)].rank() < 2)
    throw OpError{std::string(role) + " must have rank >= 2 ([..., rows, features]), got " +
                      ctx.inputs[static_cast<size_t>(input)].to_string(),
                  input};
}

// Checks q, k, v at operand offset `first` (0 for attention, 1 for its backward op) and the
// optional mask at `mask`; returns the scores' shape [..., Sq, Sk].
Shape check_operands(const InferContext& ctx, int first, int mask) {
  const char* roles[] = {"q", "k", "v"};
  for (int i = 0; i < 3; ++i) require_matrix(ctx, first + i, roles[i]);
  require_float(ctx, first);
  require_same_dtype(ctx, first, first + 1);
  require_same_dtype(ctx, first, first + 2);
  const TensorType& q = ctx.inputs[static_cast<size_t>(first)];
  const TensorType& k = ctx.inputs[static_cast<size_t>(first + 1)];
  const TensorType& v = ctx.inputs[static_cast<size_t>(first + 2)];
  const Shape batch = batch_dims(q.shape);
  for (int i = 1; i < 3; ++i) {
    const TensorType& t = ctx.inputs[static_cast<size_t>(first + i)];
    if (batch_dims(t.shape) != batch)
      throw OpError{std::string(roles[i]) + " " + t.to_string() + " must have q's batch dims " +
                        shape_to_string(batch) + " (q is " + q.to_string() + ")",
                    first + i};
  }
  if (k.shape.back() != q.shape.back())
    throw OpError{"k " + k.to_string() + " must have q's feature size D = " +
                      str(q.shape.back()) + " in its last dim",
                  first + 1};
  const int64_t keys = k.shape[k.shape.size() - 2];
  if (v.shape[v.shape.size() - 2] != keys)
    throw OpError{"v " + v.to_string() + " must have one row per key (" + str(keys) +
                      ", the rows of k " + k.to_string() + ")",
                  first + 2};
  Shape scores = batch;
  scores.push_back(q.shape[q.shape.size() - 2]);
  scores.push_back(keys);
  if (static_cast<int>(ctx.inputs.size()) > mask) {
    const TensorType& m = ctx.inputs[static_cast<size_t>(mask)];
    if (m.dtype != DType::Bool && m.dtype != q.dtype)
      throw OpError{"mask must be bool (true attends) or q's dtype " +
                        std::string(dtype_name(q.dtype)) + " (added to the scores), got " +
                        m.to_string(),
                    mask};
    const std::optional<Shape> joint = broadcast_shapes(m.shape, scores);
    if (m.rank() > static_cast<int>(scores.size()) || !joint || *joint != scores)
      throw OpError{"mask " + m.to_string() + " does not broadcast to the scores " +
                        shape_to_string(scores) + " ([..., Sq, Sk])",
                    mask};
  }
  const double scale = ctx.get_float("scale");
  if (!(scale >= 0.0) || scale == INFINITY)  // also rejects NaN
    throw OpError{"attribute 'scale' must be finite and >= 0 (0: 1/sqrt(D)), got " +
                      float_to_string(scale),
                  -1, "scale"};
  return scores;
}

Shape without_last(Shape shape) {
  shape.pop_back();
  return shape;
}

}  // namespace

Types infer_attention(const InferContext& ctx) {
  const Shape scores = check_operands(ctx, 0, 3);
  Shape out = without_last(scores);
  out.push_back(ctx.inputs[2].shape.back());
  return {ops::checked_result(ctx.inputs[0].dtype, out),
          ops::checked_result(DType::F32, without_last(scores))};
}

Types infer_attention_grad(const InferContext& ctx) {
  const Shape scores = check_operands(ctx, 1, 6);
  Shape out = without_last(scores);
  out.push_back(ctx.inputs[3].shape.back());
  const TensorType& q = ctx.inputs[1];
  for (const auto& [i, role] : {std::pair{0, "dy"}, std::pair{4, "out"}}) {
    const TensorType& t = ctx.inputs[static_cast<size_t>(i)];
    if (t.dtype != q.dtype || t.shape != out)
      throw OpError{std::string(role) + " must be " +
                        TensorType{q.dtype, out}.to_string() + " (attention's output), got " +
                        t.to_string(),
                    i};
  }
  const TensorType lse{DType::F32, without_last(scores)};
  if (ctx.inputs[5] != lse)
    throw OpError{"lse must be " + lse.to_string() + " (attention's second result), got " +
                      ctx.inputs[5].to_string(),
                  5};
  return {ctx.inputs[1], ctx.inputs[2], ctx.inputs[3]};
}

}  // namespace kiln::ir::type_rules
