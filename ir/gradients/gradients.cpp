#include "ir/gradients/gradients.h"

#include "ir/diagnostic.h"

namespace kiln::ir {
namespace gradients {

void set_rule(OpRegistry& registry, OpId op, std::string words, GradFn rule) {
  OpDef& def = registry.get_mutable(op);
  KILN_CHECK(def.grad == nullptr) << "op '" << def.name << "' has two gradient rules";
  def.grad = std::move(rule);
  def.grad_words = std::move(words);
}

namespace {
// An activation row's rule: its backward op of (dy, x or y) with the forward's attributes.
// relu's reads the result (y > 0 exactly where x > 0): then the pre-activation has no use left
// in the backward pass, and the forward producer can fuse the relu (a GEMM epilogue) instead of
// storing both x and y.
void add_activation_rules(OpRegistry& registry) {
  for (const OpDef& def : registry.all()) {
    if (!def.has_grad_op) continue;
    const OpId backward = def.grad_op;
    const bool saves_result = def.grad_saves_result;
    const OpDef& backward_def = registry.get(backward);
    set_rule(registry, def.id,
             backward_def.name + "(dy, " + (saves_result ? "y" : "x") + ") = `" +
                 def.gradient_expr + "`",
             [backward, saves_result](GradBuilder& b, const Node& node,
                                      const std::vector<Value*>& dy) -> std::vector<Value*> {
               Value* saved = saves_result ? node.results[0] : node.inputs[0];
               return {b.op(backward, {dy[0], saved}, node.attrs)};
             });
  }
}
}  // namespace

}  // namespace gradients

void register_gradient_rules(OpRegistry& registry) {
  gradients::add_activation_rules(registry);
  gradients::add_elementwise_rules(registry);
  gradients::add_shape_reduce_rules(registry);
  gradients::add_nn_rules(registry);
  gradients::add_norm_rules(registry);
}

}  // namespace kiln::ir
