// Reference kernels for normalization in training (ir/ops/norm_train_ops.cpp): batch_norm_train
// and the backward ops of batch_norm_train and layer_norm, in double, from their definitions.
//
// Both backward ops use dx = inv_std * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * scale
// and the means over the values normalized together (a channel, or a row); see
// ir/gradients/norm_grads.cpp. Checked against torch.autograd in tests/torch/norm_train_cases.py.
#include <algorithm>
#include <cmath>
#include <tuple>

#include "ir/eval/kernel_util.h"

namespace kiln::eval {
namespace {

using Inputs = std::vector<const ir::Tensor*>;
using Results = std::vector<ir::Tensor>;


// x [N, C, inner...] seen as N x C x inner: calls fn(at) per channel c, where at(k) is the flat
// index of the channel's k-th value, k in [0, N * inner).
struct ChannelView {
  int64_t n, channels, inner;
  explicit ChannelView(const ir::Shape& shape)
      : n(shape[0]), channels(shape[1]), inner(ir::num_elements(shape, 2, shape.size())) {}
  int64_t count() const { return n * inner; }
  int64_t at(int64_t c, int64_t k) const { return (k / inner * channels + c) * inner + k % inner; }
};

// Chunk s of a channel's values (split-batch-norm's partials): k in [begin, end).
struct ChunkRange {
  int64_t begin, end;
  ChunkRange(const ChannelView& view, int64_t chunks, int64_t s) {
    const int64_t length = (view.count() + chunks - 1) / chunks;
    begin = s * length;
    end = std::min(view.count(), begin + length);
  }
  double count() const { return static_cast<double>(end - begin); }
};

// The mean and the biased variance of channel c: from its values in two passes (the variance
// from deviations avoids E[x^2] - E[x]^2's cancellation), or combined from chunk statistics
// [chunks, 2, C] (each chunk's mean and sum of squared deviations) as Chan et al. combine them:
// M2 = sum of the chunks' M2 + sum of count * (chunk mean - mean)^2.
std::pair<double, double> channel_moments(const ChannelView& view, const std::vector<double>& x,
                                          const ir::Tensor* chunk_stats, int64_t c) {
  const double count = static_cast<double>(view.count());
  if (chunk_stats == nullptr) {
    double sum = 0;
    for (int64_t k = 0; k < view.count(); ++k) sum += x[view.at(c, k)];
    const double mean = sum / count;
    double squares = 0;
    for (int64_t k = 0; k < view.count(); ++k) squares += std::pow(x[view.at(c, k)] - mean, 2);
    return {mean, squares / count};
  }
  const int64_t chunks = chunk_stats->shape()[0];
  const auto stat = [&](int64_t s, int64_t which) {
    return chunk_stats->get((s * 2 + which) * view.channels + c);
  };
  double sum = 0;
  for (int64_t s = 0; s < chunks; ++s) sum += ChunkRange(view, chunks, s).count() * stat(s, 0);
  const double mean = sum / count;
  double m2 = 0;
  for (int64_t s = 0; s < chunks; ++s)
    m2 += stat(s, 1) + ChunkRange(view, chunks, s).count() * std::pow(stat(s, 0) - mean, 2);
  return {mean, m2 / count};
}

// (y, batch_mean, batch_var): the statistics of each channel, then the affine normalize.
Results batch_norm_train(const ir::Node& node, const Inputs& in) {
  const ChannelView view(in[0]->shape());
  const std::vector<double> x = in[0]->to_doubles();
  const std::vector<double> scale = in[1]->to_doubles();
  const std::vector<double> bias = in[2]->to_doubles();
  const ir::Tensor* chunk_stats = in.size() > 3 ? in[3] : nullptr;
  const double eps = ref::attr_float(node, "epsilon");
  std::vector<double> y(x.size()), mean(view.channels), var(view.channels);
  for (int64_t c = 0; c < view.channels; ++c) {
    std::tie(mean[c], var[c]) = channel_moments(view, x, chunk_stats, c);
    const double inv_std = 1.0 / std::sqrt(var[c] + eps);
    for (int64_t k = 0; k < view.count(); ++k) {
      const int64_t i = view.at(c, k);
      y[i] = (x[i] - mean[c]) * inv_std * scale[c] + bias[c];
    }
  }
  return {ref::make_result(node, y, 0), ref::make_result(node, mean, 1),
          ref::make_result(node, var, 2)};
}

// [chunks, 2, C]: each chunk's mean and sum of squared deviations from it.
Results batch_norm_chunk_stats(const ir::Node& node, const Inputs& in) {
  const ChannelView view(in[0]->shape());
  const std::vector<double> x = in[0]->to_doubles();
  const int64_t chunks = ref::attr_int(node, "chunks");
  std::vector<double> stats(static_cast<size_t>(chunks * 2 * view.channels));
  for (int64_t s = 0; s < chunks; ++s) {
    for (int64_t c = 0; c < view.channels; ++c) {
      const ChunkRange range(view, chunks, s);
      double sum = 0;
      for (int64_t k = range.begin; k < range.end; ++k) sum += x[view.at(c, k)];
      const double mean = sum / range.count();
      double squares = 0;
      for (int64_t k = range.begin; k < range.end; ++k) squares += std::pow(x[view.at(c, k)] - mean, 2);
      stats[(s * 2 + 0) * view.channels + c] = mean;
      stats[(s * 2 + 1) * view.channels + c] = squares;
    }
  }
  return {ref::make_result(node, stats, 0)};
}

// [chunks, 2, C]: each chunk's sums of dy and of dy * xhat.
Results batch_norm_chunk_sums(const ir::Node& node, const Inputs& in) {
  const ChannelView view(in[1]->shape());
  const std::vector<double> dy = in[0]->to_doubles();
  const std::vector<double> x = in[1]->to_doubles();
  const std::vector<double> mean = in[2]->to_doubles();
  const std::vector<double> var = in[3]->to_doubles();
  const double eps = ref::attr_float(node, "epsilon");
  const int64_t chunks = ref::attr_int(node, "chunks");
  std::vector<double> sums(static_cast<size_t>(chunks * 2 * view.channels));
  for (int64_t s = 0; s < chunks; ++s) {
    for (int64_t c = 0; c < view.channels; ++c) {
      const ChunkRange range(view, chunks, s);
      const double inv_std = 1.0 / std::sqrt(var[c] + eps);
      double sum_dy = 0, sum_dy_xhat = 0;
      for (int64_t k = range.begin; k < range.end; ++k) {
        const int64_t i = view.at(c, k);
        sum_dy += dy[i];
        sum_dy_xhat += dy[i] * (x[i] - mean[c]) * inv_std;
      }
      sums[(s * 2 + 0) * view.channels + c] = sum_dy;
      sums[(s * 2 + 1) * view.channels + c] = sum_dy_xhat;
    }
  }
  return {ref::make_result(node, sums, 0)};
}

// (dx, dscale, dbias) from dy, x, scale and the forward's batch_mean and batch_var; the channel
// sums of dy and dy * xhat from the values, or added up from chunk_sums [chunks, 2, C].
Results batch_norm_train_grad(const ir::Node& node, const Inputs& in) {
  const ChannelView view(in[1]->shape());
  const std::vector<double> dy = in[0]->to_doubles();
  const std::vector<double> x = in[1]->to_doubles();
  const std::vector<double> scale = in[2]->to_doubles();
  const std::vector<double> mean = in[3]->to_doubles();
  const std::vector<double> var = in[4]->to_doubles();
  const ir::Tensor* chunk_sums = in.size() > 5 ? in[5] : nullptr;
  const double eps = ref::attr_float(node, "epsilon");
  const double count = static_cast<double>(view.count());
  std::vector<double> dx(x.size()), dscale(view.channels), dbias(view.channels);
  for (int64_t c = 0; c < view.channels; ++c) {
    const double inv_std = 1.0 / std::sqrt(var[c] + eps);
    double sum_dy = 0, sum_dy_xhat = 0;
    if (chunk_sums == nullptr) {
      for (int64_t k = 0; k < view.count(); ++k) {
        const int64_t i = view.at(c, k);
        sum_dy += dy[i];
        sum_dy_xhat += dy[i] * (x[i] - mean[c]) * inv_std;
      }
    } else {
      for (int64_t s = 0; s < chunk_sums->shape()[0]; ++s) {
        sum_dy += chunk_sums->get((s * 2 + 0) * view.channels + c);
        sum_dy_xhat += chunk_sums->get((s * 2 + 1) * view.channels + c);
      }
    }
    for (int64_t k = 0; k < view.count(); ++k) {
      const int64_t i = view.at(c, k);
      const double xhat = (x[i] - mean[c]) * inv_std;
      dx[i] = scale[c] * inv_std * (dy[i] - sum_dy / count - xhat * sum_dy_xhat / count);
    }
    dscale[c] = sum_dy_xhat;
    dbias[c] = sum_dy;
  }
  return {ref::make_result(node, dx, 0), ref::make_result(node, dscale, 1),
          ref::make_result(node, dbias, 2)};
}

// (dx, dy * xhat) per row of x viewed as [prod(dims[:axis]), prod(dims[axis:])]. rms_norm_grad
// is the same without the centring: its mean is 0, and dx has no -mean(g) term.
Results layer_norm_grad(const ir::Node& node, const Inputs& in) {
  const ir::Shape& xs = in[1]->shape();
  const int axis = ref::norm_axis(ref::attr_int(node, "axis"), static_cast<int>(xs.size()));
  const double eps = ref::attr_float(node, "epsilon");
  const bool centred = node.op == ir::OpId::LayerNormGrad;
  const std::vector<double> dy = in[0]->to_doubles();
  const std::vector<double> x = in[1]->to_doubles();
  const std::vector<double> scale = in[2]->to_doubles();
  const int64_t rows = ir::num_elements(xs, 0, axis), size = ir::num_elements(xs, axis, xs.size());
  const double n = static_cast<double>(size);
  std::vector<double> dx(x.size()), dy_xhat(x.size()), xhat(static_cast<size_t>(size));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t base = r * size;
    double sum = 0;
    for (int64_t i = 0; i < size; ++i) sum += x[base + i];
    const double mean = centred ? sum / n : 0.0;
    double squares = 0;
    for (int64_t i = 0; i < size; ++i) squares += std::pow(x[base + i] - mean, 2);
    const double inv_std = 1.0 / std::sqrt(squares / n + eps);
    double sum_g = 0, sum_g_xhat = 0;
    for (int64_t i = 0; i < size; ++i) {
      xhat[i] = (x[base + i] - mean) * inv_std;
      const double g = dy[base + i] * scale[i];
      sum_g += g;
      sum_g_xhat += g * xhat[i];
    }
    for (int64_t i = 0; i < size; ++i) {
      const double g = dy[base + i] * scale[i];
      dx[base + i] = inv_std * (g - (centred ? sum_g / n : 0.0) - xhat[i] * sum_g_xhat / n);
      dy_xhat[base + i] = dy[base + i] * xhat[i];
    }
  }
  return {ref::make_result(node, dx, 0), ref::make_result(node, dy_xhat, 1)};
}

}  // namespace

void add_norm_train_kernels(KernelTable& table) {
  table[ir::OpId::BatchNormTrain] = batch_norm_train;
  table[ir::OpId::BatchNormTrainGrad] = batch_norm_train_grad;
  table[ir::OpId::BatchNormChunkStats] = batch_norm_chunk_stats;
  table[ir::OpId::BatchNormChunkSums] = batch_norm_chunk_sums;
  table[ir::OpId::LayerNormGrad] = layer_norm_grad;
  table[ir::OpId::RmsNormGrad] = layer_norm_grad;
}

}  // namespace kiln::eval
