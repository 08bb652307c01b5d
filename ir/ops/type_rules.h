// Type rules: one function per op (or per family of ops that type alike), named in the op
// table's rows (ir/ops.def). Each reads the operand types and the complete attribute map (see
// InferContext) and returns the result types, or throws OpError. They live with their family
// under ir/ops/.
#pragma once

#include <vector>

#include "ir/op_registry.h"

namespace kiln::ir::type_rules {

using Types = std::vector<TensorType>;

// elementwise.cpp
Types infer_binary(const InferContext& ctx);
Types infer_float_unary(const InferContext& ctx);
Types infer_numeric_unary(const InferContext& ctx);
Types infer_clip(const InferContext& ctx);
Types infer_cast(const InferContext& ctx);
Types infer_dropout(const InferContext& ctx);
// nn.cpp
Types infer_conv2d(const InferContext& ctx);
Types infer_matmul(const InferContext& ctx);
Types infer_dense(const InferContext& ctx);
Types infer_bias_add(const InferContext& ctx);
Types infer_max_pool2d(const InferContext& ctx);
Types infer_avg_pool2d(const InferContext& ctx);
Types infer_global_avg_pool(const InferContext& ctx);
Types infer_batch_norm(const InferContext& ctx);
Types infer_layer_norm(const InferContext& ctx);
Types infer_softmax(const InferContext& ctx);
// shape_ops.cpp
Types infer_reshape(const InferContext& ctx);
Types infer_flatten(const InferContext& ctx);
Types infer_transpose(const InferContext& ctx);
Types infer_concat(const InferContext& ctx);
Types infer_slice(const InferContext& ctx);
// reduce.cpp
Types infer_reduce_numeric(const InferContext& ctx);
Types infer_reduce_float(const InferContext& ctx);
// loss.cpp
Types infer_softmax_cross_entropy(const InferContext& ctx);
Types infer_mse_loss(const InferContext& ctx);
// optimizer.cpp
Types infer_sgd(const InferContext& ctx);
Types infer_adam(const InferContext& ctx);
// grad_ops.cpp
Types infer_like_dy(const InferContext& ctx);
Types infer_broadcast_to(const InferContext& ctx);
Types infer_share(const InferContext& ctx);
Types infer_slice_grad(const InferContext& ctx);
Types infer_softmax_like_grad(const InferContext& ctx);
Types infer_softmax_cross_entropy_grad(const InferContext& ctx);
// nn_grad_ops.cpp
Types infer_conv2d_grad_input(const InferContext& ctx);
Types infer_conv2d_grad_weight(const InferContext& ctx);
Types infer_max_pool2d_grad(const InferContext& ctx);
Types infer_avg_pool2d_grad(const InferContext& ctx);
// norm_train_ops.cpp
Types infer_batch_norm_train(const InferContext& ctx);
Types infer_batch_norm_train_grad(const InferContext& ctx);
Types infer_layer_norm_grad(const InferContext& ctx);
// op_registry.cpp: a kernel's result types come from its body (ir/kernel_region.h).
Types infer_kernel(const InferContext& ctx);

}  // namespace kiln::ir::type_rules
