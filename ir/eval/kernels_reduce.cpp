// Reference kernels for reductions (reduce_sum, reduce_mean, reduce_max, pairwise_sum) and
// losses (softmax_cross_entropy, mse_loss). Sums accumulate in double, except pairwise_sum's,
// whose order and precision are its definition.
#include <cmath>
#include <limits>

#include "ir/eval/kernel_util.h"
#include "ir/pairwise_sum.h"

namespace kiln::eval {
namespace {

using Inputs = std::vector<const ir::Tensor*>;
using Results = std::vector<ir::Tensor>;

enum class Reduction { Sum, Mean, Max };

// Each input element folds into the output element found by zeroing its reduced coordinates
// in the keepdims shape. Dropping the size-1 dims does not change row-major order, so the
// same flat index serves keepdims = false.
Results reduce(const ir::Node& node, const Inputs& in, Reduction kind) {
  const ir::Shape& xs = in[0]->shape();
  const int rank = static_cast<int>(xs.size());
  const std::vector<int64_t>& axes = ref::attr_ints(node, "axes");
  std::vector<bool> reduced(rank, axes.empty());  // [] reduces every axis
  for (int64_t axis : axes) reduced[ref::norm_axis(axis, rank)] = true;
  ir::Shape kept = xs;
  int64_t count = 1;
  for (int d = 0; d < rank; ++d)
    if (reduced[d]) {
      count *= xs[d];
      kept[d] = 1;
    }

  const std::vector<double> x = in[0]->to_doubles();
  const double init = kind == Reduction::Max ? -std::numeric_limits<double>::infinity() : 0.0;
  std::vector<double> out(static_cast<size_t>(ir::num_elements(kept)), init);
  for (size_t i = 0; i < x.size(); ++i) {
    std::vector<int64_t> index = ref::unravel(static_cast<int64_t>(i), xs);
    for (int d = 0; d < rank; ++d)
      if (reduced[d]) index[d] = 0;
    double& acc = out[ref::ravel(index, kept)];
    if (kind != Reduction::Max) acc += x[i];
    else if (!std::isnan(acc) && (std::isnan(x[i]) || x[i] > acc)) acc = x[i];  // NaN sticks
  }
  if (kind == Reduction::Mean)
    for (double& v : out) v /= static_cast<double>(count);
  return {ref::make_result(node, out)};
}

// The rows of x [S, ...] added in pairwise_sum's order (ir/pairwise_sum.h), accumulated as the
// kernels do: in float for f32 and the half types (rounded once at the end), in double for f64.
Results pairwise_sum(const ir::Node& node, const Inputs& in) {
  const ir::Shape& xs = in[0]->shape();
  const int64_t rows = xs[0];
  const int64_t columns = ir::num_elements(ir::Shape(xs.begin() + 1, xs.end()));
  const std::vector<double> x = in[0]->to_doubles();
  const bool wide = in[0]->dtype() == ir::DType::F64;
  std::vector<double> out(static_cast<size_t>(columns));
  for (int64_t c = 0; c < columns; ++c) {
    const auto row = [&](int64_t r) { return x[static_cast<size_t>(r * columns + c)]; };
    out[static_cast<size_t>(c)] =
        wide ? ir::pairwise_sum<double>(rows, row) : ir::pairwise_sum<float>(rows, row);
  }
  return {ref::make_result(node, out)};
}

// logits [N,C], labels [N] (i32 or i64): mean over n of logsumexp(logits[n]) - logits[n, label].
Results softmax_cross_entropy(const ir::Node& node, const Inputs& in) {
  const ir::Shape& ls = in[0]->shape();
  const int64_t N = ls[0], C = ls[1];
  const std::vector<double> logits = in[0]->to_doubles();
  const std::vector<double> labels = in[1]->to_doubles();
  double total = 0;
  for (int64_t n = 0; n < N; ++n) {
    const double label = labels[n];
    if (label < 0 || label >= static_cast<double>(C))
      ref::node_error(node, "label " + std::to_string(static_cast<int64_t>(label)) +
                                " at batch index " + std::to_string(n) + " is outside [0, " +
                                std::to_string(C) + ")");
    const double* row = &logits[n * C];
    double max = -std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < C; ++c) max = std::max(max, row[c]);
    double sum = 0;
    for (int64_t c = 0; c < C; ++c) sum += std::exp(row[c] - max);
    total += max + std::log(sum) - row[static_cast<int64_t>(label)];
  }
  return {ref::make_result(node, {total / static_cast<double>(N)})};
}

// mean of (prediction - target)^2 over every element.
Results mse_loss(const ir::Node& node, const Inputs& in) {
  const std::vector<double> p = in[0]->to_doubles();
  const std::vector<double> t = in[1]->to_doubles();
  double sum = 0;
  for (size_t i = 0; i < p.size(); ++i) sum += (p[i] - t[i]) * (p[i] - t[i]);
  return {ref::make_result(node, {sum / static_cast<double>(p.size())})};
}

}  // namespace

void add_reduce_kernels(KernelTable& table) {
  table[ir::OpId::ReduceSum] = [](const ir::Node& node, const Inputs& in) {
    return reduce(node, in, Reduction::Sum);
  };
  table[ir::OpId::ReduceMean] = [](const ir::Node& node, const Inputs& in) {
    return reduce(node, in, Reduction::Mean);
  };
  table[ir::OpId::ReduceMax] = [](const ir::Node& node, const Inputs& in) {
    return reduce(node, in, Reduction::Max);
  };
  table[ir::OpId::PairwiseSum] = pairwise_sum;
  table[ir::OpId::SoftmaxCrossEntropy] = softmax_cross_entropy;
  table[ir::OpId::MseLoss] = mse_loss;
}

}  // namespace kiln::eval
