// Reference kernels for elementwise and broadcasting ops: arithmetic, activations, unary math,
// cast and dropout. Semantics follow docs/ops.md (PyTorch's, computed in double).
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <numbers>

#include "ir/op_registry.h"
#include "ir/philox.h"
#include "ir/eval/kernel_util.h"
#include "ir/scalar_math.h"

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

// An attribute of a scalar-expression row, as the expression reads it.
double number_attr(const ir::Node& node, const char* name) {
  const ir::Attribute& value = node.attrs.at(name);
  if (const auto* number = std::get_if<double>(&value)) return *number;
  if (const auto* integer = std::get_if<int64_t>(&value)) return static_cast<double>(*integer);
  return std::get<bool>(value) ? 1.0 : 0.0;
}

// A string attribute with choices, as the index of its value among them.
int choice_attr(const ir::Node& node, const char* name) {
  const std::string& value = std::get<std::string>(node.attrs.at(name));
  const std::optional<int> index = node.def->find_attr(name)->choice_index(value);
  KILN_CHECK(index.has_value()) << node.describe() << ": attribute '" << name << "' has value "
                                << value << " outside its choices";
  return *index;
}

// The rows of ir/ops.def that are scalar expressions (activations and their backward ops, unary
// math), instantiated with T = double: the same text the CUDA emitter writes into kernels.
// Attributes are bound by name before the expression, as kernels bind them to constants.
#define KILN_ATTR(attr_name, type, ...) [[maybe_unused]] const double attr_name = number_attr(node, #attr_name);
#define KILN_REQUIRED_ATTR(attr_name, type) KILN_ATTR(attr_name, type)
#define KILN_CHOICE_ATTR(attr_name, default_value, choices) \
  [[maybe_unused]] const int attr_name = choice_attr(node, #attr_name);
#define KILN_OP(...)
#define KILN_ACTIVATION(Id, op_name, saved, forward, gradient, in_place, summary, ...)     \
  table[ir::OpId::Id] = [](const ir::Node& node, const Inputs& in) {                      \
    using T = double;                                                                      \
    __VA_ARGS__                                                                            \
    return map_unary(node, in, [&](T x) -> T { return forward; });                         \
  };                                                                                       \
  table[ir::OpId::Id##Grad] = [](const ir::Node& node, const Inputs& in) {                \
    using T = double;                                                                      \
    __VA_ARGS__                                                                            \
    return map_binary(node, in, [&](T dy, T saved) -> T { return gradient; });             \
  };
#define KILN_MATH(Id, op_name, forward, summary, ...)                  \
  table[ir::OpId::Id] = [](const ir::Node& node, const Inputs& in) {  \
    using T = double;                                                  \
    __VA_ARGS__                                                        \
    return map_unary(node, in, [&](T x) -> T { return forward; });     \
  };

void add_scalar_expression_kernels(KernelTable& table) {
#include "ir/ops.def"
}
#undef KILN_ATTR
#undef KILN_REQUIRED_ATTR
#undef KILN_CHOICE_ATTR

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

// A loaded integer back in its integer type. The largest i64 and u64 round up to 2^63 and 2^64
// as doubles, where a plain cast is undefined: those clamp back to the type's maximum.
template <typename Int>
Int to_integer_clamped(double value) {
  if (value >= static_cast<double>(std::numeric_limits<Int>::max()))
    return std::numeric_limits<Int>::max();
  return static_cast<Int>(value);
}

// Integer division truncates toward zero (C++ and CUDA semantics, torch's rounding_mode
// "trunc"). It is done on 64-bit integers rather than as trunc(a / b) in double, where a
// quotient just below an integer could round up to it for large operands; u64 divides unsigned.
Results integer_div(const ir::Node& node, const Inputs& in) {
  const bool is_unsigned = ir::is_unsigned(in[0]->dtype());
  return map_binary(node, in, [&node, is_unsigned](double a, double b) {
    if (b == 0) ref::node_error(node, "integer division by zero");
    if (is_unsigned)
      return static_cast<double>(to_integer_clamped<uint64_t>(a) / to_integer_clamped<uint64_t>(b));
    // kI64Min / -1 overflows (and traps on x86): the quotient is -a, which the store saturates.
    if (b == -1) return -a;
    return static_cast<double>(to_integer_clamped<int64_t>(a) / to_integer_clamped<int64_t>(b));
  });
}

// The remainder of a / b. With fmod it takes a's sign (C's % and fmod); without, b's (Python's
// %, ONNX Mod's integer default).
template <typename T>
T remainder_of(T a, T b, bool fmod) {
  T r;
  if constexpr (std::is_integral_v<T>) {
    // kI64Min % -1 overflows in C; the remainder is 0.
    r = b == -1 ? T(0) : a % b;
  } else {
    r = std::fmod(a, b);
  }
  if (!fmod && r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

// Integers exactly (i64 through its bits, not a double); floats in double.
Results mod(const ir::Node& node, const Inputs& in) {
  const bool fmod = ref::attr_bool(node, "fmod");
  if (in[0]->dtype() != ir::DType::I64) {
    const bool integer = ir::is_integer(in[0]->dtype());
    const bool is_unsigned = ir::is_unsigned(in[0]->dtype());
    return map_binary(node, in, [&](double a, double b) {
      if (!integer) return remainder_of(a, b, fmod);
      if (b == 0) ref::node_error(node, "integer modulo by zero");
      if (is_unsigned)  // no signs to reconcile
        return static_cast<double>(to_integer_clamped<uint64_t>(a) % to_integer_clamped<uint64_t>(b));
      return static_cast<double>(
          remainder_of(static_cast<int64_t>(a), static_cast<int64_t>(b), fmod));
    });
  }
  ir::Tensor out(ref::result_type(node));
  auto get = [](const ir::Tensor& t, int64_t i) {
    int64_t value;
    std::memcpy(&value, t.data() + i * sizeof(int64_t), sizeof(int64_t));
    return value;
  };
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    const std::vector<int64_t> index = ref::unravel(i, out.shape());
    const int64_t a = get(*in[0], ref::broadcast_source(index, in[0]->shape()));
    const int64_t b = get(*in[1], ref::broadcast_source(index, in[1]->shape()));
    if (b == 0) ref::node_error(node, "integer modulo by zero");
    const int64_t r = remainder_of(a, b, fmod);
    std::memcpy(out.data() + i * sizeof(int64_t), &r, sizeof(int64_t));
  }
  return {std::move(out)};
}

// An element of an unsigned tensor, exactly (u64 through its bits, not a double).
uint64_t unsigned_at(const ir::Tensor& t, int64_t i) {
  const size_t size = ir::dtype_size(t.dtype());
  const std::byte* at = t.data() + static_cast<size_t>(i) * size;
  switch (size) {
    case 1: return std::to_integer<uint8_t>(*at);
    case 2: { uint16_t v; std::memcpy(&v, at, 2); return v; }
    case 4: { uint32_t v; std::memcpy(&v, at, 4); return v; }
    default: { uint64_t v; std::memcpy(&v, at, 8); return v; }
  }
}

// BitShift: bits shifted out of the type's width are lost; a shift by the width or more is 0.
Results bit_shift(const ir::Node& node, const Inputs& in) {
  const bool left = std::get<std::string>(node.attrs.at("direction")) == "left";
  ir::Tensor out(ref::result_type(node));
  const size_t size = ir::dtype_size(out.dtype());
  const unsigned bits = static_cast<unsigned>(8 * size);
  const uint64_t mask = bits == 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    const std::vector<int64_t> index = ref::unravel(i, out.shape());
    const uint64_t x = unsigned_at(*in[0], ref::broadcast_source(index, in[0]->shape()));
    const uint64_t shift = unsigned_at(*in[1], ref::broadcast_source(index, in[1]->shape()));
    const uint64_t r = shift >= bits ? 0 : left ? (x << shift) & mask : x >> shift;
    std::byte* to = out.data() + static_cast<size_t>(i) * size;
    switch (size) {
      case 1: *to = static_cast<std::byte>(r); break;
      case 2: { const auto v = static_cast<uint16_t>(r); std::memcpy(to, &v, 2); break; }
      case 4: { const auto v = static_cast<uint32_t>(r); std::memcpy(to, &v, 4); break; }
      default: std::memcpy(to, &r, 8);
    }
  }
  return {std::move(out)};
}

}  // namespace

void add_elementwise_kernels(KernelTable& table) {
  add_scalar_expression_kernels(table);
  table[ir::OpId::Add] = binary([](double a, double b) { return a + b; });
  table[ir::OpId::Sub] = binary([](double a, double b) { return a - b; });
  table[ir::OpId::Mul] = binary([](double a, double b) { return a * b; });
  table[ir::OpId::Div] = [](const ir::Node& node, const Inputs& in) {
    if (ir::is_integer(in[0]->dtype())) return integer_div(node, in);
    return map_binary(node, in, [](double a, double b) { return a / b; });
  };
  table[ir::OpId::Maximum] = binary(maximum);
  table[ir::OpId::Power] = binary([](double a, double b) { return std::pow(a, b); });
  table[ir::OpId::Mod] = mod;
  table[ir::OpId::BitShift] = bit_shift;
  table[ir::OpId::Minimum] = binary(minimum);

  table[ir::OpId::Neg] = unary([](double x) { return -x; });
  table[ir::OpId::Abs] = unary([](double x) { return std::fabs(x); });
  table[ir::OpId::Clip] = [](const ir::Node& node, const Inputs& in) {
    const double lo = ref::attr_float(node, "min");
    const double hi = ref::attr_float(node, "max");
    // Written as comparisons so NaN passes through, as in torch.clamp.
    return map_unary(node, in, [lo, hi](double x) { return x < lo ? lo : (x > hi ? hi : x); });
  };
  // Tensor::set already converts as a cast should: round to nearest for floats, truncate
  // toward zero for integers, x != 0 for bool.
  table[ir::OpId::Cast] = [](const ir::Node& node, const Inputs& in) {
    return Results{ref::make_result(node, in[0]->to_doubles())};
  };
  // Training mode: the mask is Philox word i + word_offset of the stream (seed, step), as in every backend
  // (ir/philox.h); kept elements are scaled by 1 / (1 - rate).
  table[ir::OpId::Dropout] = [](const ir::Node& node, const Inputs& in) {
    if (!ref::attr_bool(node, "training")) return Results{*in[0]};
    const double rate = ref::attr_float(node, "rate");
    const uint64_t seed = static_cast<uint64_t>(std::get<int64_t>(node.attrs.at("seed")));
    const uint64_t step = static_cast<uint64_t>(in[1]->to_doubles().at(0));
    const uint64_t word_offset = static_cast<uint64_t>(std::get<int64_t>(node.attrs.at("word_offset")));
    const uint32_t threshold = ir::philox::dropout_threshold(rate);
    const std::vector<double> x = in[0]->to_doubles();
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      y[i] = ir::philox::dropout_keeps(seed, step, i + word_offset, threshold) ? x[i] / (1.0 - rate) : 0.0;
    return Results{ref::make_result(node, y)};
  };
}

}  // namespace kiln::eval
