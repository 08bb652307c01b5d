// Reference kernels for attention and attention_grad (ir/ops/attention.cpp), in double.
//
// The oracle materializes each query row's scores and probabilities, the textbook way, so that
// it checks the generated kernels' online softmax and recomputation rather than repeating them:
// the backward kernel reads lse and out, this one recomputes the softmax and uses
// ds = p * (dp - sum(p * dp)).
#include <cmath>
#include <limits>

#include "ir/eval/kernel_util.h"

namespace kiln::eval {
namespace {

using Inputs = std::vector<const ir::Tensor*>;
using Results = std::vector<ir::Tensor>;

// The operands viewed as [batch, rows, features], and the scaled, masked scores of one row.
struct AttentionView {
  int64_t batch = 0, queries = 0, keys = 0, depth = 0, value_depth = 0;
  double scale = 0.0;
  bool causal = false;
  std::vector<double> q, k, v;
  const ir::Tensor* mask = nullptr;
  std::vector<double> mask_values;
  ir::Shape scores_shape;

  AttentionView(const ir::Node& node, const Inputs& in, size_t first, size_t mask_input) {
    const ir::Shape& qs = in[first]->shape();
    const ir::Shape& vs = in[first + 2]->shape();
    queries = qs[qs.size() - 2];
    depth = qs.back();
    keys = vs[vs.size() - 2];
    value_depth = vs.back();
    batch = ir::num_elements(qs, 0, qs.size() - 2);
    scale = ref::attr_float(node, "scale");
    if (scale == 0.0) scale = 1.0 / std::sqrt(static_cast<double>(depth));
    causal = ref::attr_bool(node, "causal");
    q = in[first]->to_doubles();
    k = in[first + 1]->to_doubles();
    v = in[first + 2]->to_doubles();
    if (in.size() > mask_input) {
      mask = in[mask_input];
      mask_values = mask->to_doubles();
    }
    scores_shape = ir::Shape(qs.begin(), qs.end() - 1);
    scores_shape.push_back(keys);
  }

  // The scores s_bij for j in [0, keys): -inf where masked.
  std::vector<double> scores(int64_t b, int64_t i) const {
    std::vector<double> s(static_cast<size_t>(keys));
    for (int64_t j = 0; j < keys; ++j) {
      double dot = 0.0;
      for (int64_t d = 0; d < depth; ++d)
        dot += q[(b * queries + i) * depth + d] * k[(b * keys + j) * depth + d];
      double score = scale * dot;
      if (mask != nullptr) {
        const int64_t flat = (b * queries + i) * keys + j;
        const double m = mask_values[ref::broadcast_source(ref::unravel(flat, scores_shape),
                                                           mask->shape())];
        if (mask->dtype() == ir::DType::Bool)
          score = m != 0.0 ? score : -std::numeric_limits<double>::infinity();
        else
          score += m;
      }
      if (causal && j > i) score = -std::numeric_limits<double>::infinity();
      s[j] = score;
    }
    return s;
  }

  // softmax(s) in place; returns the log-sum-exp. Every score -inf: NaN probabilities.
  static double softmax(std::vector<double>& s) {
    double max = -std::numeric_limits<double>::infinity();
    for (double x : s) max = std::max(max, x);
    double sum = 0.0;
    for (double& x : s) sum += (x = std::exp(x - max));
    for (double& x : s) x /= sum;
    return max + std::log(sum);
  }
};

Results attention(const ir::Node& node, const Inputs& in) {
  const AttentionView a(node, in, 0, 3);
  std::vector<double> out(static_cast<size_t>(a.batch * a.queries * a.value_depth));
  std::vector<double> lse(static_cast<size_t>(a.batch * a.queries));
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t i = 0; i < a.queries; ++i) {
      std::vector<double> p = a.scores(b, i);
      lse[b * a.queries + i] = AttentionView::softmax(p);
      for (int64_t e = 0; e < a.value_depth; ++e) {
        double sum = 0.0;
        for (int64_t j = 0; j < a.keys; ++j) sum += p[j] * a.v[(b * a.keys + j) * a.value_depth + e];
        out[(b * a.queries + i) * a.value_depth + e] = sum;
      }
    }
  return {ref::make_result(node, out, 0), ref::make_result(node, lse, 1)};
}

Results attention_grad(const ir::Node& node, const Inputs& in) {
  const AttentionView a(node, in, 1, 6);
  const std::vector<double> dy = in[0]->to_doubles();
  std::vector<double> dq(a.q.size(), 0.0), dk(a.k.size(), 0.0), dv(a.v.size(), 0.0);
  for (int64_t b = 0; b < a.batch; ++b)
    for (int64_t i = 0; i < a.queries; ++i) {
      std::vector<double> p = a.scores(b, i);
      AttentionView::softmax(p);
      const double* dy_i = &dy[(b * a.queries + i) * a.value_depth];
      std::vector<double> dp(static_cast<size_t>(a.keys));
      double p_dot_dp = 0.0;
      for (int64_t j = 0; j < a.keys; ++j) {
        double dot = 0.0;
        for (int64_t e = 0; e < a.value_depth; ++e)
          dot += dy_i[e] * a.v[(b * a.keys + j) * a.value_depth + e];
        dp[j] = dot;
        p_dot_dp += p[j] * dot;
      }
      for (int64_t j = 0; j < a.keys; ++j) {
        const double ds = p[j] * (dp[j] - p_dot_dp) * a.scale;
        for (int64_t e = 0; e < a.value_depth; ++e)
          dv[(b * a.keys + j) * a.value_depth + e] += p[j] * dy_i[e];
        for (int64_t d = 0; d < a.depth; ++d) {
          dq[(b * a.queries + i) * a.depth + d] += ds * a.k[(b * a.keys + j) * a.depth + d];
          dk[(b * a.keys + j) * a.depth + d] += ds * a.q[(b * a.queries + i) * a.depth + d];
        }
      }
    }
  return {ref::make_result(node, dq, 0), ref::make_result(node, dk, 1),
          ref::make_result(node, dv, 2)};
}

}  // namespace

void add_attention_kernels(KernelTable& table) {
  table[ir::OpId::Attention] = attention;
  table[ir::OpId::AttentionGrad] = attention_grad;
}

}  // namespace kiln::eval
