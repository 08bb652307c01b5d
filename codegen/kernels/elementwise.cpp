// Kernel emitters for elementwise and broadcasting ops: arithmetic, activations, unary math,
// clip, cast, dropout. Every op is a map kernel (codegen/kernels/elementwise_util.h); this
// file says what `apply` computes for each op and dtype. Activations and unary math are rows of
// scalar expressions in ir/ops.def: their `apply` is the row's expression, the very text the
// reference evaluator compiles (scalar_row_fn).
//
// Results must match the reference evaluator (ir/eval), which computes in double and rounds
// once:
//   - float ops compute in float (f16/bf16 load to float, round once on store): within a few
//     ulp of f32, so tests compare with a relative tolerance of 1e-5;
//   - formulas avoid cancellation where a textbook form would lose the result's relative
//     precision (sigmoid and GELU for large negative inputs);
//   - integer results saturate as the reference's store does, at every width (i8 to u64);
//     integer division truncates, and division by zero (a run-time error in the reference)
//     yields 0 on the GPU.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <utility>

#include "codegen/kernels/elementwise_util.h"
#include "ir/diagnostic.h"
#include "ir/op_registry.h"

namespace kiln::codegen {
namespace {

using ir::DType;
using Statements = std::vector<std::string>;

// The range of an integer dtype as literals of its compute type.
std::pair<std::string, std::string> limit_literals(DType dtype) {
  switch (dtype) {
    case DType::I8: return {"-128", "127"};
    case DType::U8: return {"0", "255"};
    case DType::I16: return {"-32768", "32767"};
    case DType::U16: return {"0", "65535"};
    case DType::I32: return {"-2147483647 - 1", "2147483647"};
    case DType::U32: return {"0LL", "4294967295LL"};
    case DType::I64: return {"-9223372036854775807LL - 1", "9223372036854775807LL"};
    case DType::U64: return {"0ULL", "18446744073709551615ULL"};
    default: break;
  }
  KILN_CHECK(false) << ir::dtype_name(dtype) << " is not an integer type";
  return {};
}

// The names integer lambdas give their type's range: kI32Min, kU8Max, ...
std::string limit_name(DType dtype, bool max) {
  std::string name(ir::dtype_name(dtype));
  for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return "k" + name + (max ? "Max" : "Min");
}

// Prepends the declarations of the limits `body` mentions (integer lambdas capture nothing, and
// an unused constexpr draws a warning).
Statements with_limits(DType dtype, Statements body) {
  const auto [lo, hi] = limit_literals(dtype);
  const std::string names[] = {limit_name(dtype, false), limit_name(dtype, true)};
  const std::string values[] = {lo, hi};
  Statements used;
  for (int k = 0; k < 2; ++k)
    for (const std::string& statement : body)
      if (statement.substr(0, statement.find("//")).find(names[k]) != std::string::npos) {
        used.push_back(fmt::format("constexpr {} {} = {};", compute_type(dtype), names[k], values[k]));
        break;
      }
  body.insert(body.begin(), used.begin(), used.end());
  return body;
}

// +, -, * on an integer type of up to 32 bits: exact in 64 bits (u32 products, up to
// (2^32 - 1)^2, in unsigned 64 bits), then saturated as the reference's store does.
Statements saturating_narrow(DType dtype, const std::string& op) {
  const std::string lo = limit_name(dtype, false);
  const std::string hi = limit_name(dtype, true);
  if (dtype == DType::U32 && op == "*")
    return with_limits(dtype, {"const unsigned long long wide = static_cast<unsigned long long>(lhs) "
                               "* static_cast<unsigned long long>(rhs);",
                               fmt::format("return wide > static_cast<unsigned long long>({0}) ? {0} "
                                           ": static_cast<long long>(wide);",
                                           hi)});
  return with_limits(
      dtype, {fmt::format("const long long wide = static_cast<long long>(lhs) {} rhs;", op),
              fmt::format("return wide < {0} ? {0} : (wide > {1} ? {1} : static_cast<{2}>(wide));",
                          lo, hi, compute_type(dtype))});
}

// i64 +, -, *: wrap in unsigned arithmetic (defined behaviour), detect the overflow, saturate.
Statements saturating_i64(const std::string& op) {
  const std::string wrapped = "static_cast<long long>(static_cast<unsigned long long>(lhs) " + op +
                              " static_cast<unsigned long long>(rhs))";
  if (op == "+")
    return with_limits(DType::I64,
                       {"const long long sum = " + wrapped + ";",
                        "// Overflow gives a result whose sign differs from both operands'.",
                        "if (((lhs ^ sum) & (rhs ^ sum)) < 0) return lhs < 0 ? kI64Min : kI64Max;",
                        "return sum;"});
  if (op == "-")
    return with_limits(DType::I64,
                       {"const long long difference = " + wrapped + ";",
                        "// Overflow needs operands of different signs and flips lhs's sign.",
                        "if (((lhs ^ rhs) & (lhs ^ difference)) < 0) "
                        "return lhs < 0 ? kI64Min : kI64Max;",
                        "return difference;"});
  return with_limits(
      DType::I64,
      {"const long long product = " + wrapped + ";",
       "// The product is exact iff dividing it back gives the other factor",
       "// (-1 * kI64Min is tested first: its check would overflow itself).",
       "const bool overflow = "
       "lhs != 0 && ((lhs == -1 && rhs == kI64Min) || product / lhs != rhs);",
       "if (overflow) return (lhs < 0) != (rhs < 0) ? kI64Min : kI64Max;", "return product;"});
}

// u64 +, -, *: unsigned arithmetic wraps; detect it and saturate (below zero is 0).
Statements saturating_u64(const std::string& op) {
  if (op == "+")
    return with_limits(DType::U64, {"const unsigned long long sum = lhs + rhs;",
                                    "// A wrapped sum is smaller than either operand.",
                                    "return sum < lhs ? kU64Max : sum;"});
  if (op == "-") return {"return lhs < rhs ? 0ULL : lhs - rhs;"};
  return with_limits(DType::U64, {"if (lhs != 0 && rhs > kU64Max / lhs) return kU64Max;",
                                  "return lhs * rhs;"});
}

Statements saturating_arithmetic(DType dtype, const std::string& op) {
  if (dtype == DType::I64) return saturating_i64(op);
  if (dtype == DType::U64) return saturating_u64(op);
  return saturating_narrow(dtype, op);
}

Statements integer_div(DType dtype) {
  Statements body = {
      "// Division by zero is a run-time error in the reference; on the GPU it gives 0.",
      "if (rhs == 0) return 0;"};
  if (ir::is_unsigned(dtype)) {
    body.push_back("return lhs / rhs;  // truncates; never overflows");
  } else if (dtype == DType::I64) {
    body.push_back("// Truncates toward zero; kI64Min / -1 overflows: saturate.");
    body.push_back("if (lhs == kI64Min && rhs == -1) return kI64Max;");
    body.push_back("return lhs / rhs;");
  } else {
    const std::string hi = limit_name(dtype, true);
    body.push_back(fmt::format(
        "// Truncates toward zero; {} / -1 is the one quotient that overflows.",
        limit_name(dtype, false)));
    body.push_back("const long long quotient = static_cast<long long>(lhs) / rhs;");
    body.push_back(fmt::format("return quotient > {0} ? {0} : static_cast<{1}>(quotient);", hi,
                               compute_type(dtype)));
  }
  return with_limits(dtype, std::move(body));
}

// A floating literal of `value` in the compute type of `dtype` (float or double).
std::string floating_literal(DType dtype, double value) {
  if (dtype != DType::F64) return literal(DType::F32, value);
  std::string text = fmt::format("{:.17g}", value);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

// The remainder with the divisor's sign (fmod = false) or the dividend's (fmod = true).
Statements mod_statements(DType dtype, bool fmod) {
  Statements body;
  if (ir::is_floating(dtype)) {
    body.push_back("T r = fmod(lhs, rhs);");
  } else if (ir::is_unsigned(dtype)) {
    body.push_back("// Modulo by zero is a run-time error in the reference; on the GPU it gives 0.");
    body.push_back("if (rhs == 0) return 0;");
    body.push_back("return lhs % rhs;  // no signs to reconcile");
    body.insert(body.begin(), fmt::format("using T = {};", compute_type(dtype)));
    return body;
  } else {
    body.push_back("// Modulo by zero is a run-time error in the reference; on the GPU it gives 0.");
    body.push_back("// x % -1 is 0 (and kMin % -1 would overflow).");
    body.push_back("if (rhs == 0 || rhs == -1) return 0;");
    body.push_back("T r = lhs % rhs;");
  }
  if (!fmod) {
    body.push_back("// The remainder takes the divisor's sign (Python's %).");
    body.push_back("if (r != 0 && ((r < 0) != (rhs < 0))) r += rhs;");
  }
  body.push_back("return r;");
  body.insert(body.begin(), fmt::format("using T = {};", compute_type(dtype)));
  return body;
}

// BitShift on an unsigned type of `dtype`'s width: bits shifted out are lost, and a shift by the
// width or more gives 0 (where C++'s << is undefined).
Statements bit_shift_statements(DType dtype, bool left) {
  const size_t bits = 8 * ir::dtype_size(dtype);
  Statements body{fmt::format("using T = {};", compute_type(dtype)), "using U = unsigned long long;",
                   fmt::format("if (U(rhs) >= {}) return 0;", bits)};
  if (!left) {
    body.push_back("return T(U(lhs) >> U(rhs));");
  } else if (bits == 64) {
    body.push_back("return T(U(lhs) << U(rhs));");
  } else {
    body.push_back(fmt::format("return T((U(lhs) << U(rhs)) & ((U(1) << {}) - 1));", bits));
  }
  return body;
}

// Comparisons, logic on bool and the float predicates: bool results (int in compute type).
std::optional<ElementFn> predicate_fn(const ir::Node& node) {
  using ir::OpId;
  const char* symbol = nullptr;
  switch (node.op) {
    case OpId::Equal: symbol = "=="; break;
    case OpId::Less: symbol = "<"; break;
    case OpId::LessEqual: symbol = "<="; break;
    case OpId::Greater: symbol = ">"; break;
    case OpId::GreaterEqual: symbol = ">="; break;
    case OpId::LogicalAnd: return ElementFn{"logical_and of two bools", {"return lhs && rhs;"}};
    case OpId::LogicalOr: return ElementFn{"logical_or of two bools", {"return lhs || rhs;"}};
    case OpId::LogicalXor:
      return ElementFn{"logical_xor of two bools", {"return (lhs != 0) != (rhs != 0);"}};
    case OpId::LogicalNot: return ElementFn{"logical_not of a bool", {"return value == 0;"}};
    // Written as a comparison (no fast-math on either compiler keeps it): NaN is unequal to itself.
    case OpId::IsNan: return ElementFn{"is_nan", {"return value != value;"}};
    case OpId::IsInf: {
      const bool positive = attr<bool>(node, "detect_positive");
      const bool negative = attr<bool>(node, "detect_negative");
      std::string test = positive && negative ? "value == INFINITY || value == -INFINITY"
                         : positive           ? "value == INFINITY"
                         : negative           ? "value == -INFINITY"
                                              : "";
      const std::string summary = fmt::format(
          "is_inf (detect_positive = {}, detect_negative = {})", positive, negative);
      if (test.empty()) return ElementFn{summary, {"(void)value;", "return false;"}};
      return ElementFn{summary, {"return " + test + ";"}};
    }
    default: return std::nullopt;
  }
  return ElementFn{fmt::format("{} of one element pair, in {}; NaN compares false", node.op,
                               compute_type(node.inputs[0]->type.dtype)),
                   {fmt::format("return lhs {} rhs;", symbol)}};
}

ElementFn binary_fn(ir::OpId op, DType dtype) {
  const bool is_float = ir::is_floating(dtype);
  const std::string summary = fmt::format("{} of one element pair, in {}", op, compute_type(dtype));
  if (op == ir::OpId::Power) return {summary, {"return pow(lhs, rhs);"}};
  if (op == ir::OpId::Maximum || op == ir::OpId::Minimum) {
    if (dtype == DType::F64)  // kiln_max and kiln_min are float functions: the same test, inline
      return {summary + "; NaN propagates as in torch." + ir::to_string(op),
              {fmt::format("return (lhs != lhs || lhs {} rhs) ? lhs : rhs;",
                           op == ir::OpId::Maximum ? ">" : "<")}};
    if (is_float)
      return {summary + "; NaN propagates as in torch." + ir::to_string(op),
              {fmt::format("return {}(lhs, rhs);", op == ir::OpId::Maximum ? "kiln_max" : "kiln_min")}};
    return {summary, {fmt::format("return lhs {} rhs ? lhs : rhs;", op == ir::OpId::Maximum ? ">" : "<")}};
  }
  const std::string symbol = op == ir::OpId::Add ? "+" : op == ir::OpId::Sub ? "-" : op == ir::OpId::Mul ? "*" : "/";
  if (is_float) return {summary, {fmt::format("return lhs {} rhs;", symbol)}};
  if (op == ir::OpId::Div) return {summary + ", truncating", integer_div(dtype)};
  return {summary + ", saturating to " + std::string(ir::dtype_name(dtype)),
          saturating_arithmetic(dtype, symbol)};
}

// A row of scalar expressions (ir/ops.def: an activation, its backward op, or unary math):
// its attributes as named constants, its operands under the names the expression uses, then
// the expression itself, instantiated with T = float (T = double for f64, as the reference
// evaluator does). ir/scalar_math.h (pasted into every translation unit) defines the kiln_*
// helpers the expressions call.
ElementFn scalar_row_fn(const ir::Node& node) {
  const ir::OpDef& def = *node.def;
  KILN_CHECK(!def.forward_expr.empty()) << node.describe() << " is not a scalar-expression row";
  const bool in_double = node.results[0]->type.dtype == DType::F64;
  Statements body = {in_double ? "using T = double;" : "using T = float;"};
  for (const ir::AttrSpec& spec : def.attrs) {
    const ir::Attribute& value = node.attrs.at(spec.name);
    if (!spec.choices.empty()) {
      const std::string& choice = std::get<std::string>(value);
      const std::optional<int> index = spec.choice_index(choice);
      KILN_CHECK(index.has_value()) << node.describe() << ": attribute '" << spec.name
                                    << "' has value " << choice << " outside its choices";
      body.push_back(fmt::format("constexpr int {} = {};  // \"{}\"", spec.name, *index,
                                 choice));
    } else if (const auto* number = std::get_if<double>(&value)) {
      body.push_back(fmt::format("constexpr {} {} = {};", in_double ? "double" : "float", spec.name,
                                 floating_literal(in_double ? DType::F64 : DType::F32, *number)));
    } else if (const auto* integer = std::get_if<int64_t>(&value)) {
      body.push_back(fmt::format("constexpr long long {} = {}LL;", spec.name, *integer));
    } else {
      body.push_back(fmt::format("constexpr bool {} = {};", spec.name,
                                 std::get<bool>(value) ? "true" : "false"));
    }
  }
  if (node.inputs.size() == 1) {
    body.push_back("const T x = value;");
  } else {
    body.push_back("const T dy = lhs;");
    body.push_back(fmt::format("const T {} = rhs;", def.input_names[1]));
  }
  body.push_back("return " + def.forward_expr + ";");
  return {fmt::format("{}: {}", def.name, def.summary), body};
}

ElementFn integer_unary_fn(ir::OpId op, DType dtype) {
  KILN_CHECK(op == ir::OpId::Neg || op == ir::OpId::Abs) << "no integer element function for " << op;
  if (ir::is_unsigned(dtype)) {
    if (op == ir::OpId::Abs) return {"abs of an unsigned value: the identity", {"return value;"}};
    return {"neg of an unsigned value: -x <= 0 saturates to 0 (the reference's store)",
            {"(void)value;", "return 0;"}};
  }
  const std::string lo = limit_name(dtype, false);
  const std::string hi = limit_name(dtype, true);
  if (op == ir::OpId::Neg)
    return {fmt::format("neg, saturating: -{}Min does not fit", lo.substr(0, lo.size() - 3)),
            with_limits(dtype, {fmt::format("return value == {} ? {} : -value;", lo, hi)})};
  return {fmt::format("abs, saturating: |{}Min| does not fit", lo.substr(0, lo.size() - 3)),
          with_limits(dtype, {fmt::format("if (value == {}) return {};", lo, hi),
                              "return value < 0 ? -value : value;"})};
}

// An integer dtype's range as doubles (rounded where the type is wider than a double's mantissa).
std::pair<double, double> integer_range(DType dtype) {
  if (dtype == DType::Bool) return {0.0, 1.0};
  return {ir::integer_min(dtype), ir::integer_max(dtype)};
}

// torch.clamp written as comparisons so NaN passes through; an infinite bound is dropped.
// On integers the bounds truncate toward zero (saturating): truncation is monotonic, so
// clamping to the truncated bounds equals truncating the real-valued clamp, as the reference.
ElementFn clip_fn(const ir::Node& node) {
  const DType dtype = node.inputs[0]->type.dtype;
  const double lo = attr<double>(node, "min");
  const double hi = attr<double>(node, "max");
  const std::string type(compute_type(dtype));
  auto bound = [&](double value) {
    if (ir::is_floating(dtype)) return floating_literal(dtype, value);
    const auto [type_min, type_max] = integer_range(dtype);
    const double truncated = std::trunc(value);
    if (truncated <= type_min) return limit_literals(dtype).first;
    if (truncated >= type_max) return limit_literals(dtype).second;
    return literal(dtype, truncated);
  };
  Statements body;
  std::string result = "value";
  if (!std::isinf(hi)) {
    body.push_back(fmt::format("constexpr {} kMax = {};", type, bound(hi)));
    result = "(value > kMax ? kMax : value)";
  }
  if (!std::isinf(lo)) {
    body.push_back(fmt::format("constexpr {} kMin = {};", type, bound(lo)));
    result = "value < kMin ? kMin : " + result;
  }
  body.push_back("return " + result + ";");
  return {"clip to [min, max]; comparisons let NaN through, as torch.clamp", body};
}

// Conversions between compute types, saturating like the reference's store: float -> int
// truncates toward zero (NaN -> 0), int -> narrower int clamps, anything -> bool is `!= 0`
// (the store adds it), NaN included.
ElementFn cast_fn(DType from, DType to) {
  const std::string summary =
      fmt::format("cast {} -> {}", ir::dtype_name(from), ir::dtype_name(to));
  if (ir::is_floating(to)) {
    // A 16-bit result rounds here, not only at a store: a consumer in the same fused kernel
    // must read the rounded value (cast to bf16 and back is a rounding, not a no-op).
    const auto round_to = [&](const std::string& value) {
      return "return " + load(to, store(to, value)) + ";";
    };
    if (from == DType::F64 && (to == DType::F16 || to == DType::BF16))
      return {summary + ": rounded to odd in float, then to nearest even, as one rounding",
              {"// Rounding to nearest float, then to f16 or bf16, could round twice. Truncating",
               "// toward zero and setting the last bit when bits were lost (\"round to odd\")",
               "// keeps the information a single rounding of the double needs: float has 13",
               "// (f16) or 16 (bf16) more mantissa bits than the target.",
               "const float rounded = static_cast<float>(value);",
               "if (value != value || rounded == INFINITY || rounded == -INFINITY ||",
               "    static_cast<double>(rounded) == value)",
               "  " + round_to("rounded"),
               "int bits = __float_as_int(rounded);",
               "if (fabs(static_cast<double>(rounded)) > fabs(value)) bits -= 1;  // toward zero",
               round_to("__int_as_float(bits | 1)")}};
    if (ir::is_floating(from) && from != to && (to == DType::F16 || to == DType::BF16))
      return {summary + ": rounded to nearest even", {round_to("value")}};
    if (ir::is_floating(from))
      return {summary + (from == DType::F64 && to == DType::F32 ? ": rounded to nearest" : ": exact"),
              {"return value;"}};
    return {summary, {fmt::format("return static_cast<{}>(value);", compute_type(to))}};
  }
  if (to == DType::Bool) return {summary + ": nonzero (and NaN) is true", {"return value != 0;"}};
  const std::string target(compute_type(to));
  const std::string lo = limit_name(to, false);
  const std::string hi = limit_name(to, true);
  if (ir::is_floating(from)) {
    if (from != DType::F64 && (to == DType::I32 || to == DType::I64))
      return {summary + ", truncating toward zero and saturating (NaN -> 0)",
              {fmt::format("return {}(value);",
                           to == DType::I32 ? "kiln_float_to_i32" : "kiln_float_to_i64")}};
    const auto [type_min, type_max] = integer_range(to);
    return {summary + ", truncating toward zero and saturating (NaN -> 0)",
            with_limits(to, {"if (value != value) return 0;",
                             fmt::format("if (value <= {}) return {};",
                                         floating_literal(from, type_min), lo),
                             fmt::format("if (value >= {}) return {};",
                                         floating_literal(from, type_max), hi),
                             fmt::format("return static_cast<{}>(value);", target)})};
  }
  const auto [from_min, from_max] = integer_range(from);
  const auto [to_min, to_max] = integer_range(to);
  if (from_min >= to_min && from_max <= to_max)
    return {summary + ": exact", {fmt::format("return static_cast<{}>(value);", target)}};
  // Each comparison below is made in a type that holds both operands exactly.
  if (from == DType::U64)
    return {summary + ", saturating",
            with_limits(to, {fmt::format("return value > static_cast<unsigned long long>({0}) ? "
                                         "{0} : static_cast<{1}>(value);",
                                         hi, target)})};
  if (to == DType::U64)
    return {summary + ", saturating (negative -> 0)",
            {"return value < 0 ? 0ULL : static_cast<unsigned long long>(value);"}};
  return {summary + ", saturating",
          with_limits(to, {fmt::format("return value < {0} ? {0} : (value > {1} ? {1} : "
                                       "static_cast<{2}>(value));",
                                       lo, hi, target)})};
}

KernelSpec emit_binary(const KernelRequest& request) {
  return emit_map_kernel(request, binary_fn(request.node.op, request.node.inputs[0]->type.dtype));
}

KernelSpec emit_scalar_row(const KernelRequest& request) {
  return emit_map_kernel(request, scalar_row_fn(request.node));
}

// neg and abs accept integers too.
ElementFn numeric_unary_fn(const ir::Node& node) {
  const DType dtype = node.inputs[0]->type.dtype;
  if (!ir::is_floating(dtype)) return integer_unary_fn(node.op, dtype);
  if (node.op == ir::OpId::Neg) return {"neg", {"return -value;"}};
  return {"abs", {dtype == DType::F64 ? "return fabs(value);" : "return fabsf(value);"}};
}

KernelSpec emit_numeric_unary(const KernelRequest& request) {
  return emit_map_kernel(request, numeric_unary_fn(request.node));
}

KernelSpec emit_cast(const KernelRequest& request) {
  const DType from = request.node.inputs[0]->type.dtype;
  const DType to = request.node.results[0]->type.dtype;
  if (from == to) return emit_copy_kernel(request, "cast to the same dtype: a copy");
  return emit_map_kernel(request, cast_fn(from, to));
}

KernelSpec emit_dropout(const KernelRequest& request) {
  const ir::Node& node = request.node;
  if (attr<bool>(node, "training")) return emit_philox_dropout(request);
  return emit_copy_kernel(request, "dropout at inference is the identity: a copy");
}

}  // namespace

std::optional<ElementFn> element_fn(const ir::Node& node) {
  using ir::OpId;
  if (!node.def->forward_expr.empty()) return scalar_row_fn(node);
  const DType dtype = node.inputs[0]->type.dtype;
  if (std::optional<ElementFn> fn = predicate_fn(node)) return fn;
  switch (node.op) {
    case OpId::Power: return binary_fn(node.op, dtype);
    case OpId::Mod: {
      const bool fmod = attr<bool>(node, "fmod");
      return ElementFn{fmt::format("mod of one element pair, in {} (fmod = {})", compute_type(dtype),
                                   fmod),
                       mod_statements(dtype, fmod)};
    }
    case OpId::BitShift: {
      const bool left = attr<std::string>(node, "direction") == "left";
      return ElementFn{fmt::format("bit shift {} of one element pair, {}", left ? "left" : "right", ir::dtype_name(dtype)),
                       bit_shift_statements(dtype, left)};
    }
    case OpId::Where:
      return ElementFn{"where: a where the condition holds, else b", {"return cond ? lhs : rhs;"}};
    case OpId::Add:
    case OpId::Sub:
    case OpId::Mul:
    case OpId::Div:
    case OpId::Maximum:
    case OpId::Minimum: return binary_fn(node.op, dtype);
    case OpId::BiasAdd: return binary_fn(OpId::Add, dtype);
    case OpId::Neg:
    case OpId::Abs: return numeric_unary_fn(node);
    case OpId::Clip: return clip_fn(node);
    case OpId::Cast: return cast_fn(dtype, node.results[0]->type.dtype);
    case OpId::Dropout:
      if (attr<bool>(node, "training")) return std::nullopt;
      return ElementFn{"dropout at inference: the identity", {"return value;"}};
    default: return grad_element_fn(node);
  }
}

void add_elementwise_emitters(EmitterTable& table) {
  using ir::OpId;
  for (const OpId op : {OpId::Add, OpId::Sub, OpId::Mul, OpId::Div, OpId::Maximum, OpId::Minimum})
    table.emplace_back(op, emit_binary);
  // Every row of scalar expressions (activations, their backward ops, unary math).
  for (const ir::OpDef& def : ir::OpRegistry::instance().all())
    if (!def.forward_expr.empty()) table.emplace_back(def.id, emit_scalar_row);
  table.emplace_back(OpId::Neg, emit_numeric_unary);
  table.emplace_back(OpId::Abs, emit_numeric_unary);
  table.emplace_back(OpId::Clip, [](const KernelRequest& request) {
    return emit_map_kernel(request, clip_fn(request.node));
  });
  table.emplace_back(OpId::Cast, emit_cast);
  // Power, mod, comparisons, logic, where, is_nan, is_inf: map kernels of their element_fn.
  for (const OpId op : {OpId::Power, OpId::Mod, OpId::BitShift, OpId::Equal, OpId::Less, OpId::LessEqual,
                        OpId::Greater, OpId::GreaterEqual, OpId::LogicalAnd, OpId::LogicalOr,
                        OpId::LogicalXor, OpId::LogicalNot, OpId::Where, OpId::IsNan, OpId::IsInf})
    table.emplace_back(op, [](const KernelRequest& request) {
      return emit_map_kernel(request, *element_fn(request.node));
    });
  table.emplace_back(OpId::Dropout, emit_dropout);
}

}  // namespace kiln::codegen
