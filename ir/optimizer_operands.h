// Where each operand of an optimizer update (sgd_update, adam_update, adamw_update) sits.
//
// The updates take the parameter and its gradient, their state, and two optional trailing
// scalars that the training graph computes every step:
//   lr_scale    f32[1]: multiplies the lr attribute (a schedule: lr_schedule, torch's LambdaLR)
//   grad_scale  f32[1]: multiplies the gradient before anything else reads it (clipping by
//               global norm: grad_norm_clip, torch.nn.utils.clip_grad_norm_)
// Trailing operands are positional, as ONNX's optional inputs: lr_scale may come alone,
// grad_scale only after it. sgd_update's momentum buffer is present exactly when the momentum
// attribute is not 0, so the positions follow from the op, that attribute and the count.
// The type rule, the reference kernels and the CUDA emitter all read positions from here.
#pragma once

#include <cstddef>
#include <variant>

#include "ir/graph.h"
#include "ir/op_id.h"

namespace kiln::ir {

struct UpdateOperands {
  int state = 2;          // first state operand: momentum_buffer (sgd), m (adam)
  int state_count = 0;    // sgd: 0 or 1; adam: 2 (m, v)
  int step = -1;          // adam's step count, else -1
  int lr_scale = -1;      // -1 when absent
  int grad_scale = -1;    // -1 when absent
  int fixed = 2;          // operands before the optional scales
  int extra = 0;          // optional scales given: num_inputs - fixed (valid in [0, 2])
};

inline UpdateOperands update_operands(OpId op, bool has_momentum, size_t num_inputs) {
  UpdateOperands operands;
  if (op == OpId::SgdUpdate) {
    operands.state_count = has_momentum ? 1 : 0;
    operands.fixed = 2 + operands.state_count;
  } else {
    operands.state_count = 2;
    operands.step = 4;
    operands.fixed = 5;
  }
  operands.extra = static_cast<int>(num_inputs) - operands.fixed;
  if (operands.extra >= 1) operands.lr_scale = operands.fixed;
  if (operands.extra >= 2) operands.grad_scale = operands.fixed + 1;
  return operands;
}

// The same for an update node of a graph (its attributes complete, as after inference).
inline UpdateOperands update_operands(const Node& node) {
  const bool momentum =
      node.op == OpId::SgdUpdate && std::get<double>(node.attrs.at("momentum")) != 0;
  return update_operands(node.op, momentum, node.inputs.size());
}

}  // namespace kiln::ir
