// ONNX elementwise ops, activations and reductions → kiln ops.
// Semantics per opset: https://github.com/onnx/onnx/blob/main/docs/Operators.md
#include <cmath>

#include "compiler/import/onnx/onnx_ops.h"

namespace kiln::compiler::onnx_import {

namespace {
using ir::OpId;
using Outputs = std::vector<Operand>;

// Binary ops broadcast NumPy-style from opset 7 on. Before that, broadcast = 1 matches B's dims
// to A's starting at `axis` (default: B's trailing dims), which a reshape of B to A's rank with
// unit dims after them turns into NumPy broadcasting.
Operand legacy_broadcast_operand(NodeContext& node, const Operand& a, const Operand& b) {
  if (node.opset() >= 7 || node.attr_int("broadcast", 0) == 0 || !node.has_attr("axis")) return b;
  const int rank_a = a.type().rank(), rank_b = b.type().rank();
  const int axis = normalize_axis_or_fail(node, node.attr_int("axis", 0), rank_a, "axis");
  if (axis + rank_b > rank_a) node.fail("B does not fit into A at axis " + std::to_string(axis));
  ir::Shape shape(b.type().shape);
  shape.resize(rank_a - axis, 1);
  return node.reshape(b, shape);
}

template <OpId Op>
Outputs binary(NodeContext& node) {
  const Operand& a = node.input(0);
  return {node.emit(Op, {a, legacy_broadcast_operand(node, a, node.input(1))})};
}

// Max, Min, Sum: variadic, folded pairwise.
template <OpId Op>
Outputs variadic(NodeContext& node) {
  Operand acc = node.input(0);
  for (int i = 1; i < node.num_inputs(); ++i) acc = node.emit(Op, {acc, node.input(i)});
  return {acc};
}

Outputs mean(NodeContext& node) {
  Operand acc = node.input(0);
  for (int i = 1; i < node.num_inputs(); ++i) acc = node.emit(OpId::Add, {acc, node.input(i)});
  if (node.num_inputs() == 1) return {acc};
  return {node.emit(OpId::Scale, {acc}, {{"factor", 1.0 / node.num_inputs()}})};
}

template <OpId Op>
Outputs unary(NodeContext& node) {
  node.check_attrs({});
  return {node.emit(Op, {node.input(0)})};
}

Outputs identity(NodeContext& node) { return {node.input(0)}; }

Outputs leaky_relu(NodeContext& node) {
  return {node.emit(OpId::LeakyRelu, {node.input(0)}, {{"alpha", node.attr_float("alpha", 0.01)}})};
}

Outputs elu(NodeContext& node) {
  return {node.emit(OpId::Elu, {node.input(0)}, {{"alpha", node.attr_float("alpha", 1.0)}})};
}

// selu(x) = gamma * (x > 0 ? x : alpha * (exp(x) - 1)); kiln's selu has the standard constants.
Outputs selu(NodeContext& node) {
  const double alpha = node.attr_float("alpha", 1.67326319217681884765625);
  const double gamma = node.attr_float("gamma", 1.05070102214813232421875);
  if (std::abs(alpha - 1.67326319217681884765625) < 1e-6 && std::abs(gamma - 1.05070102214813232421875) < 1e-6)
    return {node.emit(OpId::Selu, {node.input(0)})};
  const Operand e = node.emit(OpId::Elu, {node.input(0)}, {{"alpha", alpha}});
  return {node.emit(OpId::Scale, {e}, {{"factor", gamma}})};
}

// celu(x) = max(0, x) + min(0, alpha * (exp(x / alpha) - 1)) = alpha * elu(x / alpha).
Outputs celu(NodeContext& node) {
  const double alpha = node.attr_float("alpha", 1.0);
  const Operand scaled = node.emit(OpId::Scale, {node.input(0)}, {{"factor", 1.0 / alpha}});
  const Operand e = node.emit(OpId::Elu, {scaled}, {{"alpha", 1.0}});
  return {node.emit(OpId::Scale, {e}, {{"factor", alpha}})};
}

// x where x > alpha, else 0.
Outputs thresholded_relu(NodeContext& node) {
  const Operand& x = node.input(0);
  const ir::DType dtype = x.type().dtype;
  const Operand above = node.emit(OpId::Greater, {x, node.scalar(dtype, node.attr_float("alpha", 1.0))});
  return {node.emit(OpId::Where, {above, x, node.scalar(dtype, 0.0)})};
}

// x + bias below -lambd, x - bias above lambd, 0 between.
Outputs shrink(NodeContext& node) {
  const Operand& x = node.input(0);
  const ir::DType dtype = x.type().dtype;
  const double lambd = node.attr_float("lambd", 0.5);
  const double bias = node.attr_float("bias", 0.0);
  const Operand below = node.emit(OpId::Less, {x, node.scalar(dtype, -lambd)});
  const Operand above = node.emit(OpId::Greater, {x, node.scalar(dtype, lambd)});
  const Operand outer = node.emit(OpId::Where, {above, node.emit(OpId::Sub, {x, node.scalar(dtype, bias)}),
                                                node.scalar(dtype, 0.0)});
  return {node.emit(OpId::Where, {below, node.emit(OpId::Add, {x, node.scalar(dtype, bias)}), outer})};
}

Outputs hard_sigmoid(NodeContext& node) {
  return {node.emit(OpId::HardSigmoid, {node.input(0)},
                    {{"alpha", node.attr_float("alpha", 0.2)}, {"beta", node.attr_float("beta", 0.5)}})};
}

Outputs gelu(NodeContext& node) {
  const std::string approximate = node.attr_string("approximate", "none");
  return {node.emit(OpId::Gelu, {node.input(0)}, {{"approximate", approximate}})};
}

// prelu(x) = relu(x) + slope * min(x, 0); the slope broadcasts (unidirectionally) to x. Before
// opset 7 a 1-D slope of x's channel count is per channel (dim 1).
Outputs prelu(NodeContext& node) {
  const Operand& x = node.input(0);
  Operand slope = node.input(1);
  if (node.opset() < 7 && slope.type().rank() == 1 && x.type().rank() > 2 &&
      slope.type().shape[0] == x.type().shape[1] && slope.type().shape[0] != 1) {
    ir::Shape channel(x.type().rank() - 1, 1);
    channel[0] = slope.type().shape[0];
    slope = node.reshape(slope, channel);
  }
  const Operand positive = node.emit(OpId::Relu, {x});
  const Operand negative = node.emit(OpId::Minimum, {x, node.scalar(x.type().dtype, 0.0)});
  const Operand sloped = node.emit(OpId::Mul, {slope, negative});
  return {node.emit(OpId::Add, {positive, sloped})};
}

Outputs softsign(NodeContext& node) {
  const Operand& x = node.input(0);
  const Operand denominator = node.emit(OpId::Add, {node.emit(OpId::Abs, {x}), node.scalar(x.type().dtype, 1.0)});
  return {node.emit(OpId::Div, {x, denominator})};
}

Outputs reciprocal(NodeContext& node) {
  const Operand& x = node.input(0);
  return {node.emit(OpId::Div, {node.scalar(x.type().dtype, 1.0), x})};
}

Operand cast_to(NodeContext& node, const Operand& x, ir::DType dtype) {
  if (x.type().dtype == dtype) return x;
  return node.emit(OpId::Cast, {x}, {{"to", std::string(ir::dtype_name(dtype))}});
}

// A float base with a scalar exponent known at import maps to kiln's pow (x * x for 2, sqrt for
// 0.5); any other exponent to power, the exponent cast to the base's dtype (ONNX lets them
// differ). An integer base computes in f32 and truncates back, as numpy's power of the cast
// operands (exact while the result stays below 2^24).
Outputs pow(NodeContext& node) {
  const Operand& base = node.input(0);
  const Operand& exponent = node.input(1);
  const ir::DType dtype = base.type().dtype;
  const bool float_base = ir::is_floating(dtype);
  const bool scalar_exponent = ir::num_elements(exponent.type().shape) == 1 &&
                               exponent.type().rank() <= base.type().rank();
  if (float_base && scalar_exponent && exponent.is_constant()) {
    const double value = node.const_doubles(1, "exponent").at(0);
    if (value == 1.0) return {base};
    if (value == 0.5) return {node.emit(OpId::Sqrt, {base})};
    return {node.emit(OpId::Pow, {base}, {{"exponent", value}})};
  }
  const ir::DType compute = float_base ? dtype : ir::DType::F32;
  const Operand widened = cast_to(node, legacy_broadcast_operand(node, base, exponent), compute);
  const Operand result = node.emit(OpId::Power, {cast_to(node, base, compute), widened});
  return {cast_to(node, result, dtype)};
}

// Mod: fmod = 0 (the default) is Python's remainder, defined by ONNX for integers only.
Outputs mod(NodeContext& node) {
  const bool fmod = node.attr_int("fmod", 0) != 0;
  if (!fmod && ir::is_floating(node.input(0).type().dtype))
    node.fail("fmod = 0 is only defined for integer inputs (ONNX Mod)");
  return {node.emit(OpId::Mod, {node.input(0), node.input(1)}, {{"fmod", fmod}})};
}

Outputs bit_shift(NodeContext& node) {
  node.check_attrs({"direction"});
  const std::string direction = node.attr_string("direction", "");
  if (direction != "LEFT" && direction != "RIGHT") node.fail("direction must be LEFT or RIGHT, got '" + direction + "'");
  return {node.emit(OpId::BitShift, {node.input(0), node.input(1)},
                    {{"direction", std::string(direction == "LEFT" ? "left" : "right")}})};
}

Outputs where(NodeContext& node) {
  return {node.emit(OpId::Where, {node.input(0), node.input(1), node.input(2)})};
}

Outputs is_inf(NodeContext& node) {
  return {node.emit(OpId::IsInf, {node.input(0)},
                    {{"detect_positive", node.attr_int("detect_positive", 1) != 0},
                     {"detect_negative", node.attr_int("detect_negative", 1) != 0}})};
}

// ArgMax / ArgMin: select_last_index from opset 12 (before it, ties resolve to the first).
template <OpId Op>
Outputs arg_reduce(NodeContext& node) {
  return {node.emit(Op, {node.input(0)},
                    {{"axis", node.attr_int("axis", 0)},
                     {"keepdims", node.attr_int("keepdims", 1) != 0},
                     {"select_last_index", node.attr_int("select_last_index", 0) != 0}})};
}

Outputs gather_elements(NodeContext& node) {
  return {node.emit(OpId::GatherElements, {node.input(0), node.input(1)},
                    {{"axis", node.attr_int("axis", 0)}})};
}

Outputs clip_attrs(NodeContext& node) {  // opset 1-10: min and max are attributes
  return {node.emit(OpId::Clip, {node.input(0)},
                    {{"min", node.attr_float("min", -INFINITY)}, {"max", node.attr_float("max", INFINITY)}})};
}

Outputs clip_inputs(NodeContext& node) {  // opset 11+: optional min and max inputs
  double low = -INFINITY, high = INFINITY;
  if (node.has_input(1)) low = node.const_doubles(1, "min").at(0);
  if (node.has_input(2)) high = node.const_doubles(2, "max").at(0);
  return {node.emit(OpId::Clip, {node.input(0)}, {{"min", low}, {"max", high}})};
}

// --- reductions -----------------------------------------------------------------------------------

struct ReduceArgs {
  std::vector<int64_t> axes;
  bool keepdims;
  bool identity;  // noop_with_empty_axes and no axes: the input passes through
};

// Axes come from an attribute up to `axes_input_opset` - 1 and from input 1 after.
ReduceArgs reduce_args(NodeContext& node, int axes_input_opset) {
  ReduceArgs args{{}, node.attr_int("keepdims", 1) != 0, false};
  if (node.opset() >= axes_input_opset) {
    if (node.has_input(1)) args.axes = node.const_ints(1, "axes");
    args.identity = args.axes.empty() && node.attr_int("noop_with_empty_axes", 0) != 0;
  } else {
    args.axes = node.attr_ints("axes");
  }
  return args;
}

Operand reduce(NodeContext& node, OpId op, const Operand& x, const ReduceArgs& args) {
  return node.emit(op, {x}, {{"axes", args.axes}, {"keepdims", args.keepdims}});
}

template <int AxesInputOpset>
Outputs reduce_sum(NodeContext& node) {
  const ReduceArgs args = reduce_args(node, AxesInputOpset);
  if (args.identity) return {node.input(0)};
  return {reduce(node, OpId::ReduceSum, node.input(0), args)};
}

Outputs reduce_mean(NodeContext& node) {
  const ReduceArgs args = reduce_args(node, 18);
  if (args.identity) return {node.input(0)};
  return {reduce(node, OpId::ReduceMean, node.input(0), args)};
}

Outputs reduce_max(NodeContext& node) {
  const ReduceArgs args = reduce_args(node, 18);
  if (args.identity) return {node.input(0)};
  return {reduce(node, OpId::ReduceMax, node.input(0), args)};
}

Outputs reduce_min(NodeContext& node) {  // min(x) = -max(-x)
  const ReduceArgs args = reduce_args(node, 18);
  if (args.identity) return {node.input(0)};
  const Operand negated = node.emit(OpId::Neg, {node.input(0)});
  return {node.emit(OpId::Neg, {reduce(node, OpId::ReduceMax, negated, args)})};
}

Outputs reduce_sum_square(NodeContext& node) {
  const ReduceArgs args = reduce_args(node, 18);
  const Operand& x = node.input(0);
  const Operand squared = node.emit(OpId::Mul, {x, x});
  if (args.identity) return {squared};
  return {reduce(node, OpId::ReduceSum, squared, args)};
}

Outputs reduce_l1(NodeContext& node) {
  const ReduceArgs args = reduce_args(node, 18);
  const Operand magnitude = node.emit(OpId::Abs, {node.input(0)});
  if (args.identity) return {magnitude};
  return {reduce(node, OpId::ReduceSum, magnitude, args)};
}

Outputs reduce_l2(NodeContext& node) {
  const ReduceArgs args = reduce_args(node, 18);
  const Operand& x = node.input(0);
  const Operand squared = node.emit(OpId::Mul, {x, x});
  if (args.identity) return {node.emit(OpId::Sqrt, {squared})};
  return {node.emit(OpId::Sqrt, {reduce(node, OpId::ReduceSum, squared, args)})};
}

Outputs reduce_log_sum(NodeContext& node) {
  const ReduceArgs args = reduce_args(node, 18);
  if (args.identity) return {node.emit(OpId::Log, {node.input(0)})};
  return {node.emit(OpId::Log, {reduce(node, OpId::ReduceSum, node.input(0), args)})};
}

// log(sum(exp(x))) computed as max + log(sum(exp(x - max))) so large inputs do not overflow.
Outputs reduce_log_sum_exp(NodeContext& node) {
  ReduceArgs args = reduce_args(node, 18);
  const Operand& x = node.input(0);
  if (args.identity) return {x};
  ReduceArgs kept = args;
  kept.keepdims = true;
  const Operand max = reduce(node, OpId::ReduceMax, x, kept);
  const Operand shifted = node.emit(OpId::Exp, {node.emit(OpId::Sub, {x, max})});
  Operand result = node.emit(OpId::Add, {node.emit(OpId::Log, {reduce(node, OpId::ReduceSum, shifted, kept)}), max});
  if (!args.keepdims) {
    ir::Shape shape;
    std::vector<bool> reduced(x.type().rank(), args.axes.empty());
    for (int64_t axis : args.axes) reduced.at(normalize_axis_or_fail(node, axis, x.type().rank(), "axis")) = true;
    for (int d = 0; d < x.type().rank(); ++d)
      if (!reduced[d]) shape.push_back(x.type().shape[d]);
    result = node.reshape(result, shape);
  }
  return {result};
}

// prod(x) = exp(sum(log|x|)) with the sign of (-1)^(number of negative elements): a zero
// gives exp(-inf) = 0, NaN and inf * 0 give NaN as the product would. The relative error grows
// with |sum(log|x|)| times the dtype's epsilon (about 1e-13 for f64, 1e-5 for f32 at typical
// sizes). Integers are refused: this form would round them.
Outputs reduce_prod(NodeContext& node) {
  const ReduceArgs args = reduce_args(node, 18);
  const Operand& x = node.input(0);
  const ir::DType dtype = x.type().dtype;
  if (!ir::is_floating(dtype)) node.fail("ReduceProd of " + x.type().to_string() + " is not supported (float only)");
  if (args.identity) return {x};
  const Operand log_magnitude = node.emit(OpId::Log, {node.emit(OpId::Abs, {x})});
  const Operand magnitude = node.emit(OpId::Exp, {reduce(node, OpId::ReduceSum, log_magnitude, args)});
  const Operand negative = node.emit(OpId::Cast, {node.emit(OpId::Less, {x, node.scalar(dtype, 0.0)})},
                                     {{"to", std::string(ir::dtype_name(dtype))}});
  const Operand negatives = reduce(node, OpId::ReduceSum, negative, args);
  const Operand odd = node.emit(OpId::Mod, {negatives, node.scalar(dtype, 2.0)}, {{"fmod", true}});
  const Operand sign = node.emit(OpId::Sub, {node.scalar(dtype, 1.0), node.emit(OpId::Scale, {odd}, {{"factor", 2.0}})});
  return {node.emit(OpId::Mul, {magnitude, sign})};
}

constexpr int kLast = kMaxOpset;

const OpRule kRules[] = {
    {"Add", 1, kLast, binary<OpId::Add>},
    {"Sub", 1, kLast, binary<OpId::Sub>},
    {"Mul", 1, kLast, binary<OpId::Mul>},
    {"Div", 1, kLast, binary<OpId::Div>},
    {"Max", 1, kLast, variadic<OpId::Maximum>},
    {"Min", 1, kLast, variadic<OpId::Minimum>},
    {"Sum", 1, kLast, variadic<OpId::Add>},
    {"Mean", 1, kLast, mean},
    {"Pow", 1, kLast, pow},
    {"Mod", 10, kLast, mod},
    {"BitShift", 11, kLast, bit_shift},
    {"Equal", 1, kLast, binary<OpId::Equal>},
    {"Less", 1, kLast, binary<OpId::Less>},
    {"LessOrEqual", 12, kLast, binary<OpId::LessEqual>},
    {"Greater", 1, kLast, binary<OpId::Greater>},
    {"GreaterOrEqual", 12, kLast, binary<OpId::GreaterEqual>},
    {"And", 1, kLast, binary<OpId::LogicalAnd>},
    {"Or", 1, kLast, binary<OpId::LogicalOr>},
    {"Xor", 1, kLast, binary<OpId::LogicalXor>},
    {"Not", 1, kLast, unary<OpId::LogicalNot>},
    {"Where", 9, kLast, where},
    {"IsNaN", 9, kLast, unary<OpId::IsNan>},
    {"IsInf", 10, kLast, is_inf},
    {"Sin", 7, kLast, unary<OpId::Sin>},
    {"Cos", 7, kLast, unary<OpId::Cos>},
    {"Tan", 7, kLast, unary<OpId::Tan>},
    {"Asin", 7, kLast, unary<OpId::Asin>},
    {"Acos", 7, kLast, unary<OpId::Acos>},
    {"Atan", 7, kLast, unary<OpId::Atan>},
    {"Sinh", 9, kLast, unary<OpId::Sinh>},
    {"Cosh", 9, kLast, unary<OpId::Cosh>},
    {"Asinh", 9, kLast, unary<OpId::Asinh>},
    {"Acosh", 9, kLast, unary<OpId::Acosh>},
    {"Atanh", 9, kLast, unary<OpId::Atanh>},
    {"Floor", 1, kLast, unary<OpId::Floor>},
    {"Ceil", 1, kLast, unary<OpId::Ceil>},
    {"Round", 11, kLast, unary<OpId::Round>},
    {"Sign", 9, kLast, unary<OpId::Sign>},
    {"ArgMax", 1, kLast, arg_reduce<OpId::Argmax>},
    {"ArgMin", 1, kLast, arg_reduce<OpId::Argmin>},
    {"GatherElements", 11, kLast, gather_elements},
    {"Identity", 1, kLast, identity},
    {"Relu", 1, kLast, unary<OpId::Relu>},
    {"Sigmoid", 1, kLast, unary<OpId::Sigmoid>},
    {"Tanh", 1, kLast, unary<OpId::Tanh>},
    {"Softplus", 1, kLast, unary<OpId::Softplus>},
    {"Mish", 18, kLast, unary<OpId::Mish>},
    {"HardSwish", 14, kLast, unary<OpId::HardSwish>},
    {"Erf", 9, kLast, unary<OpId::Erf>},
    {"Exp", 1, kLast, unary<OpId::Exp>},
    {"Log", 1, kLast, unary<OpId::Log>},
    {"Sqrt", 1, kLast, unary<OpId::Sqrt>},
    {"Neg", 1, kLast, unary<OpId::Neg>},
    {"Abs", 1, kLast, unary<OpId::Abs>},
    {"Reciprocal", 1, kLast, reciprocal},
    {"Softsign", 1, kLast, softsign},
    {"LeakyRelu", 1, kLast, leaky_relu},
    {"Elu", 1, kLast, elu},
    {"Selu", 1, kLast, selu},
    {"Celu", 12, kLast, celu},
    {"HardSigmoid", 1, kLast, hard_sigmoid},
    {"ThresholdedRelu", 10, kLast, thresholded_relu},
    {"Shrink", 9, kLast, shrink},
    {"Gelu", 20, kLast, gelu},
    {"PRelu", 1, kLast, prelu},
    {"Clip", 1, 10, clip_attrs},
    {"Clip", 11, kLast, clip_inputs},
    {"ReduceSum", 1, 12, reduce_sum<13>},
    {"ReduceSum", 13, kLast, reduce_sum<13>},
    {"ReduceMean", 1, kLast, reduce_mean},
    {"ReduceMax", 1, kLast, reduce_max},
    {"ReduceMin", 1, kLast, reduce_min},
    {"ReduceSumSquare", 1, kLast, reduce_sum_square},
    {"ReduceL1", 1, kLast, reduce_l1},
    {"ReduceL2", 1, kLast, reduce_l2},
    {"ReduceLogSum", 1, kLast, reduce_log_sum},
    {"ReduceLogSumExp", 1, kLast, reduce_log_sum_exp},
    {"ReduceProd", 1, kLast, reduce_prod},
};
}  // namespace

std::span<const OpRule> math_rules() { return kRules; }

}  // namespace kiln::compiler::onnx_import
