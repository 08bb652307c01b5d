// Element functions for the elementwise backward ops that are not rows of scalar expressions
// (those, relu_grad ... erf_grad, come from ir/ops.def through elementwise.cpp): scale,
// broadcast_to, abs_grad, clip_grad, maximum_share and minimum_share. They go through element_fn
// (elementwise.cpp), so each op gets a map kernel of its own (elementwise_util.h) and
// fuse-elementwise can put it into loop kernels and GEMM epilogues like any forward activation:
// `lhs` is the upstream gradient dy, `rhs` the value saved from the forward pass.
//
// Results must match the reference (ir/eval, double, rounded once). Comparisons are written so
// NaN in the saved value takes the branch the reference takes (x > 0 is false for NaN:
// abs_grad gives 0).
#include <cmath>

#include "codegen/kernels/elementwise_util.h"
#include "codegen/kernels/reduce_util.h"

namespace kiln::codegen {
namespace {

using ir::DType;
using Statements = std::vector<std::string>;

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
  const ir::OpId op = node.op;
  if (op == ir::OpId::BroadcastTo)
    return ElementFn{"broadcast_to: the identity; the map reads x through its broadcast strides",
                     {"return value;"}};
  if (op == ir::OpId::Scale)
    return ElementFn{"scale: x * factor",
                     {fmt::format("constexpr float kFactor = {};",
                                  literal(DType::F32, attr<double>(node, "factor"))),
                      "return value * kFactor;"}};
  if (op == ir::OpId::AbsGrad)
    return ElementFn{"abs_grad: dy * sign(x), 0 at x = 0 (and for NaN)",
                     {"return rhs > 0.0f ? lhs : (rhs < 0.0f ? -lhs : 0.0f);"}};
  if (op == ir::OpId::ClipGrad) return clip_grad_fn(node);
  // torch's where(a == b, 1/2, 1).masked_fill(a < b, 0): NaN on either side gives 1.
  if (op == ir::OpId::MaximumShare)
    return ElementFn{"maximum_share: a's share of maximum(a, b)'s gradient (ties split it)",
                     {"return lhs == rhs ? 0.5f : (lhs < rhs ? 0.0f : 1.0f);"}};
  if (op == ir::OpId::MinimumShare)
    return ElementFn{"minimum_share: a's share of minimum(a, b)'s gradient (ties split it)",
                     {"return lhs == rhs ? 0.5f : (lhs > rhs ? 0.0f : 1.0f);"}};
  return std::nullopt;
}

void add_grad_emitters(EmitterTable& table) {
  using ir::OpId;
  for (const OpId op : {OpId::BroadcastTo, OpId::Scale, OpId::AbsGrad, OpId::ClipGrad,
                        OpId::MaximumShare, OpId::MinimumShare})
    table.emplace_back(op, [](const KernelRequest& request) {
      return emit_map_kernel(request, *grad_element_fn(request.node));
    });
  add_grad_softmax_emitters(table);
  add_grad_shape_emitters(table);
}

}  // namespace kiln::codegen
