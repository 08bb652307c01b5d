// Reference kernels for the backward ops (ir/ops/grad_ops.cpp): the derivatives written out
// from their definitions, in double, each checked against PyTorch autograd (tests/torch/).
#include <algorithm>
#include <cmath>
#include <numbers>

#include "ir/eval/kernel_util.h"

namespace kiln::eval {
namespace {

using Inputs = std::vector<const ir::Tensor*>;
using Results = std::vector<ir::Tensor>;

// dy and the saved operand have one shape: `fn(dy, saved)` per element.
template <typename Fn>
Results map_grad(const ir::Node& node, const Inputs& in, Fn fn) {
  const std::vector<double> dy = in[0]->to_doubles();
  const std::vector<double> saved = in[1]->to_doubles();
  std::vector<double> out(dy.size());
  for (size_t i = 0; i < dy.size(); ++i) out[i] = fn(dy[i], saved[i]);
  return {ref::make_result(node, out)};
}

// Row loops along `axis`: calls fn(at) once per row, where at(k) is the flat index of element
// k of the row.
template <typename Fn>
void for_each_row(const ir::Shape& shape, int axis, Fn fn) {
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= shape[d];
  for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  const int64_t len = shape.empty() ? 1 : shape[axis];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i)
      fn(len, [=](int64_t k) { return (o * len + k) * inner + i; });
}

// softmax: dx = y (dy - sum(dy y)); log_softmax: dx = dy - exp(y) sum(dy).
Results softmax_grad(const ir::Node& node, const Inputs& in, bool log_form) {
  const ir::Shape& shape = in[0]->shape();
  const int axis = ref::norm_axis(ref::attr_int(node, "axis"), static_cast<int>(shape.size()));
  const std::vector<double> dy = in[0]->to_doubles();
  const std::vector<double> y = in[1]->to_doubles();
  std::vector<double> out(dy.size());
  for_each_row(shape, axis, [&](int64_t len, auto at) {
    double sum = 0;
    for (int64_t k = 0; k < len; ++k) sum += log_form ? dy[at(k)] : dy[at(k)] * y[at(k)];
    for (int64_t k = 0; k < len; ++k)
      out[at(k)] = log_form ? dy[at(k)] - std::exp(y[at(k)]) * sum : y[at(k)] * (dy[at(k)] - sum);
  });
  return {ref::make_result(node, out)};
}

// logits [N,C], labels [N]: dx[n,c] = dy (softmax(logits)[n,c] - [c == label_n]) / N.
Results softmax_cross_entropy_grad(const ir::Node& node, const Inputs& in) {
  const double dy = in[0]->get(0);
  const std::vector<double> logits = in[1]->to_doubles();
  const int64_t n = in[1]->shape()[0], c = in[1]->shape()[1];
  std::vector<double> out(logits.size());
  for (int64_t row = 0; row < n; ++row) {
    const double label = in[2]->get(row);
    if (label < 0 || label >= static_cast<double>(c))
      ref::node_error(node, "label " + std::to_string(static_cast<int64_t>(label)) + " of row " +
                                std::to_string(row) + " is outside [0, " + std::to_string(c) + ")");
    const double* x = &logits[row * c];
    double max = -INFINITY;
    for (int64_t k = 0; k < c; ++k) max = std::max(max, x[k]);
    double sum = 0;
    for (int64_t k = 0; k < c; ++k) sum += std::exp(x[k] - max);
    for (int64_t k = 0; k < c; ++k) {
      const double p = std::exp(x[k] - max) / sum;
      out[row * c + k] = dy * (p - (k == static_cast<int64_t>(label) ? 1.0 : 0.0)) / static_cast<double>(n);
    }
  }
  return {ref::make_result(node, out)};
}

// maximum_share (`max_form`) or minimum_share of a and b broadcast together: torch's
// where(a == b, 1/2, 1).masked_fill(a < b, 0) (a > b for minimum), so NaN gives 1.
Results share(const ir::Node& node, const Inputs& in, bool max_form) {
  const ir::Shape& out_shape = ref::result_type(node).shape;
  const std::vector<double> a = in[0]->to_doubles();
  const std::vector<double> b = in[1]->to_doubles();
  std::vector<double> out(static_cast<size_t>(ir::num_elements(out_shape)));
  for (size_t i = 0; i < out.size(); ++i) {
    const std::vector<int64_t> index = ref::unravel(static_cast<int64_t>(i), out_shape);
    const double x = a[ref::broadcast_source(index, in[0]->shape())];
    const double y = b[ref::broadcast_source(index, in[1]->shape())];
    out[i] = x == y ? 0.5 : (max_form ? x < y : x > y) ? 0.0 : 1.0;
  }
  return {ref::make_result(node, out)};
}

// Element k of dy goes to x[first + k * step] per sliced axis; the rest of x's gradient is 0.
Results slice_grad(const ir::Node& node, const Inputs& in) {
  const ir::Shape& xs = ref::result_type(node).shape;
  const ir::Shape& ds = in[0]->shape();
  const int rank = static_cast<int>(xs.size());
  std::vector<int64_t> first(rank, 0), step(rank, 1);
  const std::vector<int64_t>& starts = ref::attr_ints(node, "starts");
  for (size_t i = 0; i < starts.size(); ++i) {
    const int axis = ref::norm_axis(ref::attr_ints(node, "axes")[i], rank);
    const int64_t dim = xs[axis];
    first[axis] = std::clamp<int64_t>(starts[i] < 0 ? starts[i] + dim : starts[i], 0, dim);
    step[axis] = ref::attr_ints(node, "steps")[i];
  }
  const std::vector<double> dy = in[0]->to_doubles();
  std::vector<double> out(static_cast<size_t>(ir::num_elements(xs)), 0.0);
  for (size_t k = 0; k < dy.size(); ++k) {
    std::vector<int64_t> index = ref::unravel(static_cast<int64_t>(k), ds);
    for (int d = 0; d < rank; ++d) index[d] = first[d] + index[d] * step[d];
    out[ref::ravel(index, xs)] = dy[k];
  }
  return {ref::make_result(node, out)};
}

Results broadcast_to(const ir::Node& node, const Inputs& in) {
  const ir::Shape& out_shape = ref::result_type(node).shape;
  const std::vector<double> x = in[0]->to_doubles();
  std::vector<double> out(static_cast<size_t>(ir::num_elements(out_shape)));
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = x[ref::broadcast_source(ref::unravel(static_cast<int64_t>(i), out_shape), in[0]->shape())];
  return {ref::make_result(node, out)};
}

}  // namespace

void add_grad_kernels(KernelTable& table) {
  table[ir::OpId::BroadcastTo] = broadcast_to;
  table[ir::OpId::Scale] = [](const ir::Node& node, const Inputs& in) {
    const double factor = ref::attr_float(node, "factor");
    std::vector<double> out = in[0]->to_doubles();
    for (double& v : out) v *= factor;
    return Results{ref::make_result(node, out)};
  };
  table[ir::OpId::AbsGrad] = [](const ir::Node& node, const Inputs& in) {
    return map_grad(node, in, [](double dy, double x) {
      return x > 0 ? dy : x < 0 ? -dy : 0.0;
    });
  };
  // torch.clamp's gradient passes where min <= x <= max, bounds included.
  table[ir::OpId::ClipGrad] = [](const ir::Node& node, const Inputs& in) {
    const double lo = ref::attr_float(node, "min"), hi = ref::attr_float(node, "max");
    return map_grad(node, in, [lo, hi](double dy, double x) { return x >= lo && x <= hi ? dy : 0.0; });
  };
  table[ir::OpId::SliceGrad] = slice_grad;
  table[ir::OpId::MaximumShare] = [](const ir::Node& node, const Inputs& in) {
    return share(node, in, true);
  };
  table[ir::OpId::MinimumShare] = [](const ir::Node& node, const Inputs& in) {
    return share(node, in, false);
  };
  table[ir::OpId::SoftmaxGrad] = [](const ir::Node& node, const Inputs& in) {
    return softmax_grad(node, in, false);
  };
  table[ir::OpId::LogSoftmaxGrad] = [](const ir::Node& node, const Inputs& in) {
    return softmax_grad(node, in, true);
  };
  table[ir::OpId::SoftmaxCrossEntropyGrad] = softmax_cross_entropy_grad;
}

}  // namespace kiln::eval
