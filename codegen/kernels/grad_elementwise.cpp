// Element functions for the elementwise backward ops (ir/ops/grad_ops.cpp): relu_grad,
// leaky_relu_grad, sigmoid_grad, tanh_grad, gelu_grad, abs_grad, clip_grad, scale,
// broadcast_to, maximum_share and minimum_share. They go through element_fn (elementwise.cpp), so each op gets a map kernel of
// its own (elementwise_util.h) and fuse-elementwise can put it into loop kernels and GEMM
// epilogues like any forward activation: `lhs` is the upstream gradient dy, `rhs` the value
// saved from the forward pass (x, or y where the derivative is cheaper from the result).
//
// Results must match the reference (runtime/reference/kernels_grad.cpp, double, rounded once)
// within a few ulp, so the derivatives are written to avoid cancellation:
//   - tanh: 1 - y^2 as (1 - y)(1 + y), exact-er for |y| near 1 (Sterbenz: 1 - y is exact
//     for y in [0.5, 2]), where 1 - y*y would lose the relative precision of the result;
//   - gelu (tanh approximation): 1 + tanh(u) and 1 - tanh(u)^2 through the stable logistic
//     s = sigmoid(2u): 0.5 (1 + t) = s and 1 - t^2 = 4 s (1 - s), with 1 - s computed as
//     sigmoid(-2u) rather than subtracted;
//   - gelu (erf form): Phi(x) as 0.5 erfc(-x / sqrt 2), which keeps precision for large
//     negative x, where 1 + erf(x / sqrt 2) cancels.
// Comparisons are written so NaN in the saved value takes the branch the reference takes
// (x > 0 is false for NaN: relu_grad and abs_grad give 0, leaky_relu_grad alpha * dy).
#include <cmath>

#include "codegen/kernels/elementwise_util.h"
#include "codegen/kernels/reduce_util.h"

namespace kiln::codegen {
namespace {

using ir::DType;
using Statements = std::vector<std::string>;

// `const float s = sigmoid(arg)` and `const float one_minus_s = sigmoid(-arg)`, neither
// subtracted from 1: exp of a non-positive argument, so nothing overflows either.
void append_stable_sigmoid_pair(Statements& body, const std::string& arg) {
  body.push_back(fmt::format("const float e = expf(-fabsf({}));", arg));
  body.push_back("const float inv = 1.0f / (1.0f + e);");
  body.push_back(fmt::format("const float s = {} >= 0.0f ? inv : e * inv;", arg));
  body.push_back(fmt::format("const float one_minus_s = {} >= 0.0f ? e * inv : inv;", arg));
}

ElementFn gelu_grad_fn(const ir::Node& node) {
  if (attr<std::string>(node, "approximate") == "tanh") {
    Statements body = {"constexpr float kSqrt2OverPi = 0.797884560802865f;",
                       "constexpr float kCubic = 0.044715f;",
                       "const float x2 = rhs * rhs;",
                       "const float twice_u = 2.0f * kSqrt2OverPi * (rhs + kCubic * x2 * rhs);"};
    append_stable_sigmoid_pair(body, "twice_u");
    body.push_back("// u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2)");
    body.push_back("const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x2);");
    body.push_back("return lhs * (s + 2.0f * rhs * du * s * one_minus_s);");
    return {"gelu_grad, tanh approximation: dy * (s + 2 x u' s (1 - s)), s = sigmoid(2u), "
            "u = sqrt(2/pi) (x + 0.044715 x^3)",
            body};
  }
  return {"gelu_grad: dy * (Phi(x) + x phi(x)), Phi from erfc (no cancellation for x << 0)",
          {"constexpr float kInvSqrt2 = 0.707106781186548f;",
           "constexpr float kInvSqrt2Pi = 0.398942280401433f;",
           "const float cdf = 0.5f * erfcf(-rhs * kInvSqrt2);",
           "const float pdf = kInvSqrt2Pi * expf(-0.5f * rhs * rhs);",
           "return lhs * (cdf + rhs * pdf);"}};
}

// torch.clamp's gradient: dy where min <= x <= max, bounds included; NaN x gives 0. An
// infinite bound is compared as a literal (it still rejects NaN).
ElementFn clip_grad_fn(const ir::Node& node) {
  const double lo = attr<double>(node, "min");
  const double hi = attr<double>(node, "max");
  Statements body;
  std::string lo_text = literal(DType::F32, lo);
  std::string hi_text = literal(DType::F32, hi);
  if (!std::isinf(lo)) {
    body.push_back(fmt::format("constexpr float kMin = {};", lo_text));
    lo_text = "kMin";
  }
  if (!std::isinf(hi)) {
    body.push_back(fmt::format("constexpr float kMax = {};", hi_text));
    hi_text = "kMax";
  }
  body.push_back(fmt::format("return rhs >= {} && rhs <= {} ? lhs : 0.0f;", lo_text, hi_text));
  return {"clip_grad: dy where min <= x <= max (bounds included, as torch.clamp), else 0", body};
}

}  // namespace

std::optional<ElementFn> grad_element_fn(const ir::Node& node) {
  const std::string& op = node.op;
  if (op == "broadcast_to")
    return ElementFn{"broadcast_to: the identity; the map reads x through its broadcast strides",
                     {"return value;"}};
  if (op == "scale")
    return ElementFn{"scale: x * factor",
                     {fmt::format("constexpr float kFactor = {};",
                                  literal(DType::F32, attr<double>(node, "factor"))),
                      "return value * kFactor;"}};
  if (op == "relu_grad")
    return ElementFn{"relu_grad: dy where x > 0, else 0", {"return rhs > 0.0f ? lhs : 0.0f;"}};
  if (op == "leaky_relu_grad")
    return ElementFn{"leaky_relu_grad: dy where x > 0, else alpha * dy",
                     {fmt::format("constexpr float kAlpha = {};",
                                  literal(DType::F32, attr<double>(node, "alpha"))),
                      "return rhs > 0.0f ? lhs : kAlpha * lhs;"}};
  if (op == "sigmoid_grad")
    return ElementFn{"sigmoid_grad: dy * y * (1 - y), y = sigmoid(x)",
                     {"return lhs * rhs * (1.0f - rhs);"}};
  if (op == "tanh_grad")
    return ElementFn{"tanh_grad: dy * (1 - y^2) as dy * (1 - y)(1 + y), y = tanh(x)",
                     {"return lhs * ((1.0f - rhs) * (1.0f + rhs));"}};
  if (op == "gelu_grad") return gelu_grad_fn(node);
  if (op == "abs_grad")
    return ElementFn{"abs_grad: dy * sign(x), 0 at x = 0 (and for NaN)",
                     {"return rhs > 0.0f ? lhs : (rhs < 0.0f ? -lhs : 0.0f);"}};
  if (op == "clip_grad") return clip_grad_fn(node);
  // torch's where(a == b, 1/2, 1).masked_fill(a < b, 0): NaN on either side gives 1.
  if (op == "maximum_share")
    return ElementFn{"maximum_share: a's share of maximum(a, b)'s gradient (ties split it)",
                     {"return lhs == rhs ? 0.5f : (lhs < rhs ? 0.0f : 1.0f);"}};
  if (op == "minimum_share")
    return ElementFn{"minimum_share: a's share of minimum(a, b)'s gradient (ties split it)",
                     {"return lhs == rhs ? 0.5f : (lhs > rhs ? 0.0f : 1.0f);"}};
  return std::nullopt;
}

void add_grad_emitters(EmitterTable& table) {
  for (const char* op : {"broadcast_to", "scale", "relu_grad", "leaky_relu_grad", "sigmoid_grad",
                         "tanh_grad", "gelu_grad", "abs_grad", "clip_grad", "maximum_share",
                         "minimum_share"})
    table.emplace_back(op, [](const KernelRequest& request) {
      return emit_map_kernel(request, *grad_element_fn(request.node));
    });
  add_grad_softmax_emitters(table);
  add_grad_shape_emitters(table);
}

}  // namespace kiln::codegen
