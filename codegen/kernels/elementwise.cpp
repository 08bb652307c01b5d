// Kernel emitters for elementwise and broadcasting ops: arithmetic, activations, unary math,
// clip, cast, dropout. Every op is a map kernel (codegen/kernels/elementwise_util.h); this
// file says what `apply` computes for each op and dtype.
//
// Results must match the reference interpreter (runtime/reference/kernels_elementwise.cpp),
// which computes in double and rounds once:
//   - float ops compute in float (f16/bf16 load to float, round once on store): within a few
//     ulp of f32, so tests compare with a relative tolerance of 1e-5;
//   - formulas avoid cancellation where a textbook form would lose the result's relative
//     precision (sigmoid and GELU for large negative inputs);
//   - integer results saturate as the reference's store does; integer division truncates, and
//     division by zero (a run-time error in the reference) yields 0 on the GPU.
#include <cmath>

#include "codegen/kernels/elementwise_util.h"
#include "ir/diagnostic.h"

namespace kiln::codegen {
namespace {

using ir::DType;
using Statements = std::vector<std::string>;

// Constants that integer lambdas need, declared inside the lambda (no captures).
const char* const kI32Limits[] = {"constexpr int kI32Min = -2147483647 - 1;",
                                  "constexpr int kI32Max = 2147483647;"};
const char* const kI64Limits[] = {"constexpr long long kI64Min = -9223372036854775807LL - 1;",
                                  "constexpr long long kI64Max = 9223372036854775807LL;"};

// Prepends the limit constants `body` mentions (an unused constexpr draws a warning).
Statements with_limits(DType dtype, Statements body) {
  const auto& limits = dtype == DType::I64 ? kI64Limits : kI32Limits;
  const char* const names[] = {dtype == DType::I64 ? "kI64Min" : "kI32Min",
                               dtype == DType::I64 ? "kI64Max" : "kI32Max"};
  Statements used;
  for (int k = 0; k < 2; ++k)
    for (const std::string& statement : body)
      if (statement.substr(0, statement.find("//")).find(names[k]) != std::string::npos) {
        used.push_back(limits[k]);
        break;
      }
  body.insert(body.begin(), used.begin(), used.end());
  return body;
}

// i32 +, -, *: exact in 64 bits, then saturated as the reference's store does.
Statements saturating_i32(const char* op) {
  return with_limits(DType::I32,
                     {fmt::format("const long long wide = static_cast<long long>(lhs) {} rhs;", op),
                      "return wide < kI32Min ? kI32Min "
                      ": (wide > kI32Max ? kI32Max : static_cast<int>(wide));"});
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

Statements integer_div(DType dtype) {
  Statements body = {
      "// Division by zero is a run-time error in the reference; on the GPU it gives 0.",
      "if (rhs == 0) return 0;"};
  if (dtype == DType::I32) {
    body.push_back("// Truncates toward zero; kI32Min / -1 is the one quotient that overflows.");
    body.push_back("const long long quotient = static_cast<long long>(lhs) / rhs;");
    body.push_back("return quotient > kI32Max ? kI32Max : static_cast<int>(quotient);");
  } else {
    body.push_back("// Truncates toward zero; kI64Min / -1 overflows: saturate.");
    body.push_back("if (lhs == kI64Min && rhs == -1) return kI64Max;");
    body.push_back("return lhs / rhs;");
  }
  return with_limits(dtype, std::move(body));
}

ElementFn binary_fn(const std::string& op, DType dtype) {
  const bool is_float = ir::is_floating(dtype);
  const std::string summary = fmt::format("{} of one element pair, in {}", op, compute_type(dtype));
  if (op == "maximum" || op == "minimum") {
    if (is_float)
      return {summary + "; NaN propagates as in torch." + op,
              {fmt::format("return {}(lhs, rhs);", op == "maximum" ? "kiln_max" : "kiln_min")}};
    return {summary, {fmt::format("return lhs {} rhs ? lhs : rhs;", op == "maximum" ? ">" : "<")}};
  }
  const std::string symbol = op == "add" ? "+" : op == "sub" ? "-" : op == "mul" ? "*" : "/";
  if (is_float) return {summary, {fmt::format("return lhs {} rhs;", symbol)}};
  if (op == "div") return {summary + ", truncating", integer_div(dtype)};
  if (dtype == DType::I32) return {summary + ", saturating to i32", saturating_i32(symbol.c_str())};
  return {summary + ", saturating to i64", saturating_i64(symbol)};
}

// A stable logistic function: exp of a non-positive argument cannot overflow, and e^x/(1+e^x)
// keeps its relative precision for large negative x, where 1/(1+e^-x) would round to 0 early.
Statements stable_sigmoid(const std::string& arg, const std::string& factor) {
  return {fmt::format("const float e = expf(-fabsf({}));", arg),
          fmt::format("return {}({} >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e));", factor, arg)};
}

ElementFn float_unary_fn(const ir::Node& node) {
  const std::string& op = node.op;
  if (op == "relu")
    return {"relu: x < 0 ? 0 : x keeps NaN, as torch.relu",
            {"return value < 0.0f ? 0.0f : value;"}};
  if (op == "leaky_relu")
    return {"leaky_relu: x if x >= 0 else alpha * x",
            {fmt::format("constexpr float kAlpha = {};",
                         literal(DType::F32, attr<double>(node, "alpha"))),
             "return value >= 0.0f ? value : kAlpha * value;"}};
  if (op == "sigmoid")
    return {"sigmoid, in a form that cannot overflow", stable_sigmoid("value", "")};
  if (op == "tanh") return {"tanh", {"return tanhf(value);"}};
  if (op == "gelu") {
    if (attr<std::string>(node, "approximate") == "tanh") {
      // 0.5 * x * (1 + tanh(u)) == x * sigmoid(2u): no cancellation when tanh(u) is near -1.
      Statements body = {"constexpr float kSqrt2OverPi = 0.797884560802865f;",
                         "constexpr float kCubic = 0.044715f;",
                         "const float cube = value * value * value;",
                         "const float twice_u = 2.0f * kSqrt2OverPi * (value + kCubic * cube);"};
      for (std::string& s : stable_sigmoid("twice_u", "value * ")) body.push_back(std::move(s));
      return {"gelu, tanh approximation, as x * sigmoid(2u) with u = sqrt(2/pi) (x + 0.044715 x^3)",
              body};
    }
    return {
        "gelu: x * Phi(x) = 0.5 x erfc(-x / sqrt 2); erfc keeps precision where 1 + erf "
        "cancels",
        {"constexpr float kInvSqrt2 = 0.707106781186548f;",
         "return 0.5f * value * erfcf(-value * kInvSqrt2);"}};
  }
  if (op == "exp") return {"exp", {"return expf(value);"}};
  if (op == "log") return {"log", {"return logf(value);"}};
  if (op == "sqrt") return {"sqrt", {"return sqrtf(value);"}};
  if (op == "rsqrt")
    return {"rsqrt as 1 / sqrt (correctly rounded steps; rsqrtf is an approximation)",
            {"return 1.0f / sqrtf(value);"}};
  if (op == "neg") return {"neg", {"return -value;"}};
  if (op == "abs") return {"abs", {"return fabsf(value);"}};
  if (op == "pow") {
    const double exponent = attr<double>(node, "exponent");
    if (exponent == 2.0)
      return {"pow with exponent 2: one correctly rounded multiply", {"return value * value;"}};
    return {"pow with a constant exponent",
            {fmt::format("constexpr float kExponent = {};", literal(DType::F32, exponent)),
             "return powf(value, kExponent);"}};
  }
  KILN_CHECK(false) << "no float element function for " << op;
  return {};
}

ElementFn integer_unary_fn(const std::string& op, DType dtype) {
  const std::string limit = dtype == DType::I64 ? "kI64" : "kI32";
  if (op == "neg")
    return {
        fmt::format("neg, saturating: -{}Min does not fit", limit),
        with_limits(dtype, {fmt::format("return value == {}Min ? {}Max : -value;", limit, limit)})};
  KILN_CHECK(op == "abs") << "no integer element function for " << op;
  return {fmt::format("abs, saturating: |{}Min| does not fit", limit),
          with_limits(dtype, {fmt::format("if (value == {}Min) return {}Max;", limit, limit),
                              "return value < 0 ? -value : value;"})};
}

// torch.clamp written as comparisons so NaN passes through; an infinite bound is dropped.
// On integers the bounds truncate toward zero (saturating): truncation is monotonic, so
// clamping to the truncated bounds equals truncating the real-valued clamp, as the reference.
ElementFn clip_fn(const ir::Node& node) {
  const DType dtype = node.inputs[0]->type.dtype;
  const double lo = attr<double>(node, "min");
  const double hi = attr<double>(node, "max");
  const std::string type(compute_type(dtype));
  const double type_min = dtype == DType::I32 ? -2147483648.0 : -9223372036854775808.0;
  const double type_max = dtype == DType::I32 ? 2147483647.0 : 9223372036854775807.0;
  auto bound = [&](double value) {
    if (ir::is_floating(dtype)) return literal(DType::F32, value);
    const double truncated = std::trunc(value);
    if (truncated <= type_min)
      return std::string(dtype == DType::I32 ? "-2147483647 - 1" : "-9223372036854775807LL - 1");
    if (truncated >= type_max)
      return std::string(dtype == DType::I32 ? "2147483647" : "9223372036854775807LL");
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

// Conversions between compute types: float→int saturates (NaN → 0) like the reference's
// store; i64→i32 saturates; anything→bool is `!= 0` (the store adds it), NaN included.
ElementFn cast_fn(DType from, DType to) {
  const std::string summary =
      fmt::format("cast {} -> {}", ir::dtype_name(from), ir::dtype_name(to));
  if (ir::is_floating(to)) {
    if (ir::is_floating(from))
      return {summary + ": f16/bf16 round once, on store", {"return value;"}};
    return {summary, {"return static_cast<float>(value);"}};
  }
  if (to == DType::Bool) return {summary + ": nonzero (and NaN) is true", {"return value != 0;"}};
  if (ir::is_floating(from))
    return {summary + ", truncating toward zero and saturating (NaN -> 0)",
            {fmt::format("return {}(value);",
                         to == DType::I32 ? "kiln_float_to_i32" : "kiln_float_to_i64")}};
  if (from == DType::I64 && to == DType::I32)
    return {summary + ", saturating",
            with_limits(DType::I32, {"return value < kI32Min ? kI32Min "
                                     ": (value > kI32Max ? kI32Max : static_cast<int>(value));"})};
  return {summary + ": exact", {fmt::format("return static_cast<{}>(value);", compute_type(to))}};
}

KernelSpec emit_binary(const KernelRequest& request) {
  return emit_map_kernel(request, binary_fn(request.node.op, request.node.inputs[0]->type.dtype));
}

KernelSpec emit_float_unary(const KernelRequest& request) {
  return emit_map_kernel(request, float_unary_fn(request.node));
}

// neg and abs accept integers too.
KernelSpec emit_numeric_unary(const KernelRequest& request) {
  const DType dtype = request.node.inputs[0]->type.dtype;
  if (ir::is_floating(dtype)) return emit_float_unary(request);
  return emit_map_kernel(request, integer_unary_fn(request.node.op, dtype));
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
  const std::string& op = node.op;
  const DType dtype = node.inputs[0]->type.dtype;
  for (const char* binary : {"add", "sub", "mul", "div", "maximum", "minimum"})
    if (op == binary) return binary_fn(op, dtype);
  if (op == "bias_add") return binary_fn("add", dtype);
  if (op == "neg" || op == "abs")
    return ir::is_floating(dtype) ? float_unary_fn(node) : integer_unary_fn(op, dtype);
  for (const char* unary :
       {"relu", "leaky_relu", "sigmoid", "tanh", "gelu", "exp", "log", "sqrt", "rsqrt", "pow"})
    if (op == unary) return float_unary_fn(node);
  if (op == "clip") return clip_fn(node);
  if (op == "cast") return cast_fn(dtype, node.results[0]->type.dtype);
  if (op == "dropout" && !attr<bool>(node, "training"))
    return ElementFn{"dropout at inference: the identity", {"return value;"}};
  return grad_element_fn(node);
}

void add_elementwise_emitters(EmitterTable& table) {
  for (const char* op : {"add", "sub", "mul", "div", "maximum", "minimum"})
    table.emplace_back(op, emit_binary);
  for (const char* op :
       {"relu", "leaky_relu", "sigmoid", "tanh", "gelu", "exp", "log", "sqrt", "rsqrt", "pow"})
    table.emplace_back(op, emit_float_unary);
  table.emplace_back("neg", emit_numeric_unary);
  table.emplace_back("abs", emit_numeric_unary);
  table.emplace_back("clip", [](const KernelRequest& request) {
    return emit_map_kernel(request, clip_fn(request.node));
  });
  table.emplace_back("cast", emit_cast);
  table.emplace_back("dropout", emit_dropout);
}

}  // namespace kiln::codegen
