// Gradient rules, one file per op family; register_gradient_rules (op_registry.h) attaches
// them all. See OpDef::grad for the contract and ir/grad_builder.h for the helpers.
#pragma once

#include "ir/grad_builder.h"
#include "ir/op_registry.h"

namespace kiln::ir::gradients {

// Sets the rule of the (already registered) op `op`, and `words`, the rule as docs/ops.md
// states it (what each operand's gradient is; `unbroadcast` sums over broadcast dims).
void set_rule(OpRegistry& registry, OpId op, std::string words, GradFn rule);

void add_elementwise_rules(OpRegistry& registry);
void add_shape_reduce_rules(OpRegistry& registry);
void add_nn_rules(OpRegistry& registry);
void add_norm_rules(OpRegistry& registry);  // layer_norm, batch_norm_train

}  // namespace kiln::ir::gradients
