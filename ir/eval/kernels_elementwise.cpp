// Reference kernels for elementwise and broadcasting ops: arithmetic, activations, unary math,
// cast and dropout. Semantics follow docs/ops.md (PyTorch's, computed in double).
#include <cmath>
#include <limits>
#include <numbers>

#include "ir/philox.h"
#include "ir/eval/kernel_util.h"

namespace kiln::eval {
namespace {

using Inputs = std::vector<const ir::Tensor*>;
using Results = std::vector<ir::Tensor>;

// NumPy-broadcast `fn` over operands 0 and 1.
template <typename Fn>
Results map_binary(const ir::Node& node, const Inputs& in, Fn fn) {
  const ir::Shape& out_shape = ref::result_type(node).shape;
  const std::vector<double> a = in[0]->to_doubles();
  const std::vector<double> b = in[1]->to_doubles();
  std::vector<double> values(static_cast<size_t>(ir::num_elements(out_shape)));
  for (size_t i = 0; i < values.size(); ++i) {
    const std::vector<int64_t> index = ref::unravel(static_cast<int64_t>(i), out_shape);
    values[i] = fn(a[ref::broadcast_source(index, in[0]->shape())],
                   b[ref::broadcast_source(index, in[1]->shape())]);
  }
  return {ref::make_result(node, values)};
}

template <typename Fn>
Results map_unary(const ir::Node& node, const Inputs& in, Fn fn) {
  std::vector<double> values = in[0]->to_doubles();
  for (double& v : values) v = fn(v);
  return {ref::make_result(node, values)};
}

// A kernel from a stateless double -> double function.
ReferenceKernel unary(double (*fn)(double)) {
  return [fn](const ir::Node& node, const Inputs& in) { return map_unary(node, in, fn); };
}

ReferenceKernel binary(double (*fn)(double, double)) {
  return [fn](const ir::Node& node, const Inputs& in) { return map_binary(node, in, fn); };
}

// torch.maximum / torch.minimum propagate NaN, unlike std::max / std::fmax.
double maximum(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return a > b ? a : b;
}
double minimum(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  return a < b ? a : b;
}

// Integer division truncates toward zero (C++ and CUDA semantics, torch's rounding_mode
// "trunc"). It is done on int64 rather than as trunc(a / b) in double, where a quotient just
// below an integer could round up to it for large i64 operands.
Results integer_div(const ir::Node& node, const Inputs& in) {
  return map_binary(node, in, [&node](double a, double b) {
    if (b == 0) ref::node_error(node, "integer division by zero");
    return static_cast<double>(static_cast<int64_t>(a) / static_cast<int64_t>(b));
  });
}

double gelu_erf(double x) { return 0.5 * x * (1.0 + std::erf(x / std::numbers::sqrt2)); }

// The tanh approximation of Hendrycks & Gimpel (2016), as torch's approximate="tanh".
double gelu_tanh(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

}  // namespace

void add_elementwise_kernels(KernelTable& table) {
  table["add"] = binary([](double a, double b) { return a + b; });
  table["sub"] = binary([](double a, double b) { return a - b; });
  table["mul"] = binary([](double a, double b) { return a * b; });
  table["div"] = [](const ir::Node& node, const Inputs& in) {
    if (ir::is_integer(in[0]->dtype())) return integer_div(node, in);
    return map_binary(node, in, [](double a, double b) { return a / b; });
  };
  table["maximum"] = binary(maximum);
  table["minimum"] = binary(minimum);

  // `x < 0 ? 0 : x` rather than max(x, 0) keeps NaN, as torch.relu does.
  table["relu"] = unary([](double x) { return x < 0 ? 0.0 : x; });
  table["leaky_relu"] = [](const ir::Node& node, const Inputs& in) {
    const double alpha = ref::attr_float(node, "alpha");
    return map_unary(node, in, [alpha](double x) { return x >= 0 ? x : alpha * x; });
  };
  table["sigmoid"] = unary([](double x) { return 1.0 / (1.0 + std::exp(-x)); });
  table["tanh"] = unary([](double x) { return std::tanh(x); });
  table["gelu"] = [](const ir::Node& node, const Inputs& in) {
    const bool tanh_form = ref::attr<std::string>(node, "approximate") == "tanh";
    return map_unary(node, in, tanh_form ? gelu_tanh : gelu_erf);
  };
  table["exp"] = unary([](double x) { return std::exp(x); });
  table["log"] = unary([](double x) { return std::log(x); });
  table["sqrt"] = unary([](double x) { return std::sqrt(x); });
  table["rsqrt"] = unary([](double x) { return 1.0 / std::sqrt(x); });
  table["neg"] = unary([](double x) { return -x; });
  table["abs"] = unary([](double x) { return std::fabs(x); });
  table["pow"] = [](const ir::Node& node, const Inputs& in) {
    const double exponent = ref::attr_float(node, "exponent");
    return map_unary(node, in, [exponent](double x) { return std::pow(x, exponent); });
  };
  table["clip"] = [](const ir::Node& node, const Inputs& in) {
    const double lo = ref::attr_float(node, "min");
    const double hi = ref::attr_float(node, "max");
    // Written as comparisons so NaN passes through, as in torch.clamp.
    return map_unary(node, in, [lo, hi](double x) { return x < lo ? lo : (x > hi ? hi : x); });
  };
  // Tensor::set already converts as a cast should: round to nearest for floats, truncate
  // toward zero for integers, x != 0 for bool.
  table["cast"] = [](const ir::Node& node, const Inputs& in) {
    return Results{ref::make_result(node, in[0]->to_doubles())};
  };
  // Training mode: the mask is Philox word i of the stream (seed, step), as in every backend
  // (ir/philox.h); kept elements are scaled by 1 / (1 - rate).
  table["dropout"] = [](const ir::Node& node, const Inputs& in) {
    if (!ref::attr_bool(node, "training")) return Results{*in[0]};
    const double rate = ref::attr_float(node, "rate");
    const uint64_t seed = static_cast<uint64_t>(std::get<int64_t>(node.attrs.at("seed")));
    const uint64_t step = static_cast<uint64_t>(in[1]->to_doubles().at(0));
    const uint32_t threshold = ir::philox::dropout_threshold(rate);
    const std::vector<double> x = in[0]->to_doubles();
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      y[i] = ir::philox::dropout_keeps(seed, step, i, threshold) ? x[i] / (1.0 - rate) : 0.0;
    return Results{ref::make_result(node, y)};
  };
}

}  // namespace kiln::eval
