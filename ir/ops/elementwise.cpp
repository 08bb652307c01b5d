// Elementwise and broadcasting ops: arithmetic, activations, unary math, cast, dropout.
#include <limits>

#include "ir/ops/op_helpers.h"

namespace kiln::ir {
namespace {

using ops::require_float;
using ops::require_numeric;
using ops::require_same_dtype;

std::vector<TensorType> infer_binary(const InferContext& ctx) {
  require_numeric(ctx, 0);
  require_numeric(ctx, 1);
  require_same_dtype(ctx, 0, 1);
  const Shape& a = ctx.inputs[0].shape;
  const Shape& b = ctx.inputs[1].shape;
  std::optional<Shape> out = broadcast_shapes(a, b);
  if (!out)
    throw OpError{"shapes " + shape_to_string(a) + " and " + shape_to_string(b) +
                      " cannot be broadcast together",
                  1};
  return {TensorType{ctx.inputs[0].dtype, *out}};
}

std::vector<TensorType> same_as_float_input(const InferContext& ctx) {
  require_float(ctx, 0);
  return {ctx.inputs[0]};
}

std::vector<TensorType> same_as_numeric_input(const InferContext& ctx) {
  require_numeric(ctx, 0);
  return {ctx.inputs[0]};
}

void add_binary(OpRegistry& registry, const char* name, const char* summary) {
  registry.add(OpDef{name, summary, {"a", "b"}, 2, 2, {}, OpKind::Broadcast, infer_binary});
}

void add_unary(OpRegistry& registry, const char* name, const char* summary,
               std::vector<AttrSpec> attrs = {}, InferFn infer = same_as_float_input) {
  registry.add(OpDef{name, summary, {"x"}, 1, 1, std::move(attrs), OpKind::Elementwise,
                     std::move(infer)});
}

}  // namespace

void register_elementwise_ops(OpRegistry& registry) {
  add_binary(registry, "add", "a + b with NumPy broadcasting");
  add_binary(registry, "sub", "a - b with NumPy broadcasting");
  add_binary(registry, "mul", "a * b with NumPy broadcasting");
  add_binary(registry, "div", "a / b with NumPy broadcasting (integers truncate toward zero)");
  add_binary(registry, "maximum", "elementwise max(a, b) with NumPy broadcasting");
  add_binary(registry, "minimum", "elementwise min(a, b) with NumPy broadcasting");

  add_unary(registry, "relu", "max(x, 0)");
  add_unary(registry, "leaky_relu", "x if x >= 0 else alpha * x",
            {{"alpha", AttrType::Float, 0.01}});
  add_unary(registry, "sigmoid", "1 / (1 + exp(-x))");
  add_unary(registry, "tanh", "hyperbolic tangent");
  add_unary(registry, "gelu", "Gaussian error linear unit (erf form, or tanh approximation)",
            {{"approximate", AttrType::String, std::string("none")}},
            [](const InferContext& ctx) {
              const std::string& form = ctx.get_string("approximate");
              if (form != "none" && form != "tanh")
                throw OpError{"attribute 'approximate' must be \"none\" or \"tanh\", got \"" +
                                  form + "\"",
                              -1, "approximate"};
              return same_as_float_input(ctx);
            });
  add_unary(registry, "exp", "e^x");
  add_unary(registry, "log", "natural logarithm");
  add_unary(registry, "sqrt", "square root");
  add_unary(registry, "rsqrt", "1 / sqrt(x)");
  add_unary(registry, "neg", "-x", {}, same_as_numeric_input);
  add_unary(registry, "abs", "|x|", {}, same_as_numeric_input);
  add_unary(registry, "pow", "x ^ exponent (scalar exponent)",
            {{"exponent", AttrType::Float, std::nullopt}});
  add_unary(registry, "clip", "clamp x to [min, max]",
            {{"min", AttrType::Float, -std::numeric_limits<double>::infinity()},
             {"max", AttrType::Float, std::numeric_limits<double>::infinity()}},
            [](const InferContext& ctx) {
              if (ctx.get_float("min") > ctx.get_float("max"))
                throw OpError{"attribute 'min' (" + float_to_string(ctx.get_float("min")) +
                                  ") is greater than 'max' (" +
                                  float_to_string(ctx.get_float("max")) + ")",
                              -1, "min"};
              return same_as_numeric_input(ctx);
            });
  add_unary(registry, "cast", "convert x to the dtype 'to'",
            {{"to", AttrType::String, std::nullopt}}, [](const InferContext& ctx) {
              std::optional<DType> to = parse_dtype(ctx.get_string("to"));
              if (!to)
                throw OpError{"attribute 'to' must be a dtype (f32, f16, bf16, i32, i64, bool), "
                              "got \"" + ctx.get_string("to") + "\"",
                              -1, "to"};
              return std::vector<TensorType>{TensorType{*to, ctx.inputs[0].shape}};
            });
  // Training dropout draws its mask from Philox 4x32-10 (ir/philox.h): element i is kept when
  // the i-th word of the stream (seed, step) is at or above rate * 2^32 (24-bit uniform, see
  // dropout_keeps). `step` is a one-element runtime tensor (the training step counter), so
  // every step draws a new mask without recompiling, and the backward pass (the same op on the
  // gradient) redraws the very same mask instead of storing it.
  registry.add(OpDef{"dropout", "zero elements with probability rate, scale the rest by 1/(1-rate) (identity at inference)",
                     {"x", "step"}, 1, 2,
                     {{"rate", AttrType::Float, 0.5},
                      {"training", AttrType::Bool, false},
                      {"seed", AttrType::Int, int64_t{0}}},
                     OpKind::Elementwise, [](const InferContext& ctx) {
                       const double rate = ctx.get_float("rate");
                       if (!(rate >= 0.0 && rate < 1.0))
                         throw OpError{"attribute 'rate' must be in [0, 1), got " +
                                           float_to_string(rate),
                                       -1, "rate"};
                       const bool training = ctx.get_bool("training");
                       if (training && ctx.inputs.size() != 2)
                         throw OpError{"dropout in training mode needs a step operand (i32[1] "
                                       "or i64[1]: the step counter its random stream reads)"};
                       if (!training && ctx.inputs.size() == 2)
                         throw OpError{"the step operand is only read in training mode", 1};
                       if (training) {
                         const TensorType& step = ctx.inputs[1];
                         if (num_elements(step.shape) != 1 || step.rank() > 1 ||
                             !(step.dtype == DType::I32 || step.dtype == DType::I64))
                           throw OpError{"step must be one i32 or i64 element, got " +
                                             step.to_string(),
                                         1};
                       }
                       return same_as_float_input(ctx);
                     }});
}

}  // namespace kiln::ir
