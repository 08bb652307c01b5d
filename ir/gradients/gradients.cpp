#include "ir/gradients/gradients.h"

#include "ir/diagnostic.h"

namespace kiln::ir {
namespace gradients {

void set_rule(OpRegistry& registry, std::string_view op, GradFn rule) {
  OpDef* def = registry.find_mutable(op);
  KILN_CHECK(def != nullptr) << "gradient rule for unregistered op '" << op << "'";
  KILN_CHECK(def->grad == nullptr) << "op '" << op << "' has two gradient rules";
  def->grad = std::move(rule);
}

}  // namespace gradients

void register_gradient_rules(OpRegistry& registry) {
  gradients::add_elementwise_rules(registry);
  gradients::add_shape_reduce_rules(registry);
  gradients::add_nn_rules(registry);
  gradients::add_norm_rules(registry);
}

}  // namespace kiln::ir
