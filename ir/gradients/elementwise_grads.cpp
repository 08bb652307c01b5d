// Gradient rules of the elementwise ops (ir/ops/elementwise.cpp).
//
// Binary ops broadcast, so each operand's gradient is summed back to its own shape
// (GradBuilder::sum_to). Unary rules read whichever forward value makes the derivative
// cheapest: y for exp, sigmoid, tanh and sqrt, x for the rest. Where one existing op says it,
// the rule uses it; otherwise a backward op from ir/ops/grad_ops.cpp.
#include <string>

#include "ir/diagnostic.h"
#include "ir/gradients/gradients.h"

namespace kiln::ir::gradients {
namespace {

using Grads = std::vector<Value*>;

Value* x_of(const Node& node) { return node.inputs[0]; }
Value* y_of(const Node& node) { return node.results[0]; }
const Shape& shape_of(const Node& node, int i) { return node.inputs[i]->type.shape; }

// A unary op whose gradient is one backward op of (dy, saved) with some of the forward attrs.
GradFn unary_backward_op(OpId op, bool saves_result, std::vector<std::string> attrs = {}) {
  return [op, saves_result, attrs](GradBuilder& b, const Node& node, const Grads& dy) -> Grads {
    AttrMap copied;
    for (const std::string& name : attrs) copied[name] = node.attrs.at(name);
    return {b.op(op, {dy[0], saves_result ? y_of(node) : x_of(node)}, std::move(copied))};
  };
}

// The derivatives of the trigonometric and hyperbolic functions, written with the ops
// themselves (no constants needed): the inverse functions' derivatives read the result y, as
// 1 / sqrt(1 - x^2) = 1 / cos(asin x), 1 / (1 + x^2) = cos(atan x)^2, and so on.
void add_trigonometric_rules(OpRegistry& registry) {
  auto unary = [](OpId op) {
    return [op](GradBuilder& b, Value* v) { return b.op(op, {v}); };
  };
  auto sin = unary(OpId::Sin), cos = unary(OpId::Cos), sinh = unary(OpId::Sinh),
       cosh = unary(OpId::Cosh);
  auto square = [](GradBuilder& b, Value* v) { return b.op(OpId::Mul, {v, v}); };
  set_rule(registry, OpId::Sin, "dy * cos(x)",
           [=](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    return {b.op(OpId::Mul, {dy[0], cos(b, x_of(n))})};
  });
  set_rule(registry, OpId::Cos, "-(dy * sin(x))",
           [=](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    return {b.op(OpId::Neg, {b.op(OpId::Mul, {dy[0], sin(b, x_of(n))})})};
  });
  set_rule(registry, OpId::Tan, "dy / cos(x)^2",
           [=](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    return {b.op(OpId::Div, {dy[0], square(b, cos(b, x_of(n)))})};
  });
  set_rule(registry, OpId::Asin, "dy / cos(y)",
           [=](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    return {b.op(OpId::Div, {dy[0], cos(b, y_of(n))})};
  });
  set_rule(registry, OpId::Acos, "-(dy / sin(y))",
           [=](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    return {b.op(OpId::Neg, {b.op(OpId::Div, {dy[0], sin(b, y_of(n))})})};
  });
  set_rule(registry, OpId::Atan, "dy * cos(y)^2",
           [=](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    return {b.op(OpId::Mul, {dy[0], square(b, cos(b, y_of(n)))})};
  });
  set_rule(registry, OpId::Sinh, "dy * cosh(x)",
           [=](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    return {b.op(OpId::Mul, {dy[0], cosh(b, x_of(n))})};
  });
  set_rule(registry, OpId::Cosh, "dy * sinh(x)",
           [=](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    return {b.op(OpId::Mul, {dy[0], sinh(b, x_of(n))})};
  });
  set_rule(registry, OpId::Asinh, "dy / cosh(y)",
           [=](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    return {b.op(OpId::Div, {dy[0], cosh(b, y_of(n))})};
  });
  set_rule(registry, OpId::Acosh, "dy / sinh(y)",
           [=](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    return {b.op(OpId::Div, {dy[0], sinh(b, y_of(n))})};
  });
  set_rule(registry, OpId::Atanh, "dy * cosh(y)^2",
           [=](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    return {b.op(OpId::Mul, {dy[0], square(b, cosh(b, y_of(n)))})};
  });
}

}  // namespace

void add_elementwise_rules(OpRegistry& registry) {
  set_rule(registry, OpId::Add,
           "da = unbroadcast(dy), db = unbroadcast(dy)",
           [](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    return {b.sum_to(dy[0], shape_of(n, 0)), b.sum_to(dy[0], shape_of(n, 1))};
  });
  set_rule(registry, OpId::Sub,
           "da = unbroadcast(dy), db = -unbroadcast(dy)",
           [](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    return {b.sum_to(dy[0], shape_of(n, 0)), b.op(OpId::Neg, {b.sum_to(dy[0], shape_of(n, 1))})};
  });
  set_rule(registry, OpId::Mul,
           "da = unbroadcast(dy * b), db = unbroadcast(dy * a)",
           [](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    return {b.sum_to(b.op(OpId::Mul, {dy[0], n.inputs[1]}), shape_of(n, 0)),
            b.sum_to(b.op(OpId::Mul, {dy[0], n.inputs[0]}), shape_of(n, 1))};
  });
  // d(a/b)/db = -a/b^2 = -(1/b) * y: reuses the quotient dy/b and the forward result.
  set_rule(registry, OpId::Div,
           "da = unbroadcast(dy / b), db = -unbroadcast(dy / b * y)",
           [](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    Value* quotient = b.op(OpId::Div, {dy[0], n.inputs[1]});
    return {b.sum_to(quotient, shape_of(n, 0)),
            b.sum_to(b.op(OpId::Neg, {b.op(OpId::Mul, {quotient, y_of(n)})}), shape_of(n, 1))};
  });
  // dy goes to the larger (smaller) operand, split evenly on ties as torch.maximum's backward:
  // the share ops weigh it per element, then each share is summed back to its operand's shape.
  for (const auto& [op, share] : {std::pair{OpId::Maximum, OpId::MaximumShare},
                                 std::pair{OpId::Minimum, OpId::MinimumShare}}) {
    const std::string share_name = registry.get(share).name;
    set_rule(registry, op,
             "da = unbroadcast(dy * " + share_name + "(a, b)), db = unbroadcast(dy * " +
                 share_name + "(b, a)); none for integers",
             [share = share](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
      if (!is_floating(n.inputs[0]->type.dtype)) return {nullptr, nullptr};
      Value* to_a = b.op(OpId::Mul, {dy[0], b.op(share, {n.inputs[0], n.inputs[1]})});
      Value* to_b = b.op(OpId::Mul, {dy[0], b.op(share, {n.inputs[1], n.inputs[0]})});
      return {b.sum_to(to_a, shape_of(n, 0)), b.sum_to(to_b, shape_of(n, 1))};
    });
  }
  // scale (a backward op that forward graphs may hold too) is linear.
  set_rule(registry, OpId::Scale,
           "scale(dy, factor)",
           [](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    return {b.scale(dy[0], std::get<double>(n.attrs.at("factor")))};
  });

  set_rule(registry, OpId::Abs, "abs_grad(dy, x)", unary_backward_op(OpId::AbsGrad, false));
  set_rule(registry, OpId::Clip,
           "clip_grad(dy, x) with min, max",
           unary_backward_op(OpId::ClipGrad, false, {"min", "max"}));

  set_rule(registry, OpId::Exp,
           "dy * y",
           [](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    return {b.op(OpId::Mul, {dy[0], y_of(n)})};
  });
  set_rule(registry, OpId::Log,
           "dy / x",
           [](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    return {b.op(OpId::Div, {dy[0], x_of(n)})};
  });
  // sqrt' = 1 / (2 sqrt(x)) = 0.5 / y.
  set_rule(registry, OpId::Sqrt,
           "0.5 * dy / y",
           [](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    return {b.op(OpId::Div, {b.scale(dy[0], 0.5), y_of(n)})};
  });
  // rsqrt' = -0.5 x^(-3/2) = -0.5 * y / x.
  set_rule(registry, OpId::Rsqrt,
           "-0.5 * dy * y / x",
           [](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    return {b.scale(b.op(OpId::Mul, {dy[0], b.op(OpId::Div, {y_of(n), x_of(n)})}), -0.5)};
  });
  set_rule(registry, OpId::Neg, "-dy", [](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    return {b.op(OpId::Neg, {dy[0]})};
  });
  // pow' = p * x^(p-1). p = 0 is constant: a zero gradient, which also avoids 0 * inf at x = 0.
  set_rule(registry, OpId::Pow,
           "exponent * dy * pow(x, exponent - 1) (0 for exponent 0)",
           [](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    const double p = std::get<double>(n.attrs.at("exponent"));
    if (p == 0.0) return {b.scale(dy[0], 0.0)};
    if (p == 1.0) return {dy[0]};
    Value* power = b.op(OpId::Pow, {x_of(n)}, {{"exponent", p - 1.0}});
    return {b.scale(b.op(OpId::Mul, {dy[0], power}), p)};
  });
  add_trigonometric_rules(registry);
  // The condition selects which operand each element of dy goes to; it has no gradient.
  set_rule(registry, OpId::Where,
           "da = unbroadcast(where(condition, dy, 0)), db = unbroadcast(where(condition, 0, dy))",
           [](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    Value* zeros = b.scale(dy[0], 0.0);
    return {nullptr, b.sum_to(b.op(OpId::Where, {n.inputs[0], dy[0], zeros}), shape_of(n, 1)),
            b.sum_to(b.op(OpId::Where, {n.inputs[0], zeros, dy[0]}), shape_of(n, 2))};
  });
  // A float-to-float cast's gradient is cast back; integer operands get none.
  set_rule(registry, OpId::Cast,
           "cast(dy) back to the dtype of x (float x only)",
           [](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    if (!is_floating(x_of(n)->type.dtype)) return {nullptr};
    return {b.op(OpId::Cast, {dy[0]}, {{"to", std::string(dtype_name(x_of(n)->type.dtype))}})};
  });
  // Inference dropout is the identity. Training dropout multiplies by mask / (1 - rate), and
  // the mask is a pure function of (seed, step, index): the gradient is the same dropout
  // applied to dy, which redraws the identical mask instead of saving it. The step operand is
  // an integer: no gradient.
  set_rule(registry, OpId::Dropout,
           "the same dropout applied to dy (the same mask); identity at inference",
           [](GradBuilder& b, const Node& n, const Grads& dy) -> Grads {
    if (!std::get<bool>(n.attrs.at("training"))) return {dy[0]};
    return {b.op(OpId::Dropout, {dy[0], n.inputs[1]}, n.attrs), nullptr};
  });
}

}  // namespace kiln::ir::gradients
