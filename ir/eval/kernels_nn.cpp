// Reference kernels for neural-network ops: conv2d, matmul, dense, bias_add, pooling,
// normalization and softmax. Semantics follow docs/ops.md; layouts are NCHW (or NHWC where an
// op's layout attribute says so, ir/image_layout.h) and row-major.
//
// Index arithmetic is written out per op with the layout spelled in a comment, so each loop nest
// can be checked against the PyTorch definition by reading it.
#include <algorithm>
#include <cmath>
#include <limits>

#include "ir/eval/kernel_util.h"
#include "ir/image_layout.h"

namespace kiln::eval {
namespace {

using Inputs = std::vector<const ir::Tensor*>;
using Results = std::vector<ir::Tensor>;


// --- conv2d -----------------------------------------------------------------------------------

// x [N,C,H,W], weight [O,C/groups,KH,KW], optional bias [O] -> [N,O,OH,OW]; with layout=nhwc
// x [N,H,W,C], weight [O,KH,KW,C/groups] -> [N,OH,OW,O]. Output channel o belongs to group
// o / (O/groups) and reads input channels of that group only.
Results conv2d(const ir::Node& node, const Inputs& in) {
  const ir::ImageLayout layout = ir::image_layout(node);
  const bool nhwc = layout == ir::ImageLayout::Nhwc;
  const ir::Shape xs = ir::to_nchw(in[0]->shape(), layout);
  const ir::Shape ws = ir::to_nchw(in[1]->shape(), layout);
  ir::Shape os = ref::result_type(node).shape;
  if (ref::attr_int(node, "k_chunk") > 0) os.erase(os.begin());  // split-K partials' leading dim
  os = ir::to_nchw(os, layout);
  const std::vector<double> x = in[0]->to_doubles();
  const std::vector<double> w = in[1]->to_doubles();
  const std::vector<double> bias =
      in.size() > 2 ? in[2]->to_doubles() : std::vector<double>(ws[0], 0.0);
  const std::vector<int64_t>& stride = ref::attr_ints(node, "stride");
  const std::vector<int64_t>& pad = ref::attr_ints(node, "pad");  // top, left, bottom, right
  const std::vector<int64_t>& dilation = ref::attr_ints(node, "dilation");
  const int64_t groups = ref::attr_int(node, "groups");

  const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3];
  const int64_t O = ws[0], Cg = ws[1], KH = ws[2], KW = ws[3];
  const int64_t OH = os[2], OW = os[3];
  const int64_t Og = O / groups;
  // Where (n, c, h, w) of x, (o, c, kh, kw) of the weight and (n, o, oh, ow) of the result lie.
  const auto x_at = [&](int64_t n, int64_t c, int64_t h, int64_t w_) {
    return nhwc ? ((n * H + h) * W + w_) * C + c : ((n * C + c) * H + h) * W + w_;
  };
  const auto w_at = [&](int64_t o, int64_t c, int64_t kh, int64_t kw) {
    return nhwc ? ((o * KH + kh) * KW + kw) * Cg + c : ((o * Cg + c) * KH + kh) * KW + kw;
  };
  const auto out_at = [&](int64_t n, int64_t o, int64_t oh, int64_t ow) {
    return nhwc ? ((n * OH + oh) * OW + ow) * O + o : ((n * O + o) * OH + oh) * OW + ow;
  };
  // k_chunk > 0 (split-K): one partial result per chunk of k_chunk patch terms, in the weight's
  // order: k = (c * KH + kh) * KW + kw, in NHWC k = (kh * KW + kw) * Cg + c. The partials are
  // stacked along a new first dim.
  const int64_t patch = Cg * KH * KW;
  const int64_t chunk = ref::attr_int(node, "k_chunk") > 0 ? ref::attr_int(node, "k_chunk") : patch;
  const int64_t chunks = (patch + chunk - 1) / chunk;
  const int64_t outputs = N * O * OH * OW;
  std::vector<double> out(static_cast<size_t>(chunks * outputs));
  for (int64_t s = 0; s < chunks; ++s)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < O; ++o)
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            const int64_t g = o / Og;
            double sum = bias[o];
            const int64_t k_begin = s * chunk, k_end = std::min(patch, (s + 1) * chunk);
            // The patch terms in order: (c, kh, kw) is stepped along with k, not divided out of
            // it for every term (three divisions per product made VGG-11's reference run take
            // 41 s instead of 13).
            int64_t c = nhwc ? k_begin % Cg : k_begin / (KH * KW);
            int64_t kh = nhwc ? k_begin / (Cg * KW) : k_begin / KW % KH;
            int64_t kw = nhwc ? k_begin / Cg % KW : k_begin % KW;
            for (int64_t k = k_begin; k < k_end; ++k) {
              const int64_t ih = oh * stride[0] - pad[0] + kh * dilation[0];
              const int64_t iw = ow * stride[1] - pad[1] + kw * dilation[1];
              if (ih >= 0 && ih < H && iw >= 0 && iw < W)  // else zero padding
                sum += x[x_at(n, g * Cg + c, ih, iw)] * w[w_at(o, c, kh, kw)];
              if (nhwc) {
                if (++c == Cg) {
                  c = 0;
                  if (++kw == KW) kw = 0, ++kh;
                }
              } else if (++kw == KW) {
                kw = 0;
                if (++kh == KH) kh = 0, ++c;
              }
            }
            out[s * outputs + out_at(n, o, oh, ow)] = sum;
          }
  return {ref::make_result(node, out)};
}

// --- matmul, dense, bias_add ------------------------------------------------------------------

// a [...,M,K] (stored [...,K,M] when transpose_a), b [...,K,N] (stored [...,N,K] when
// transpose_b). Batch dims broadcast like NumPy; each operand's batch index is found by
// broadcasting the output's batch index into the operand's batch shape.
Results matmul(const ir::Node& node, const Inputs& in) {
  const ir::Shape& as = in[0]->shape();
  const ir::Shape& bs = in[1]->shape();
  const int64_t k_chunk = ref::attr_int(node, "k_chunk");
  ir::Shape os = ref::result_type(node).shape;
  if (k_chunk > 0) os.erase(os.begin());  // split-K partials' leading dim
  const bool ta = ref::attr_bool(node, "transpose_a");
  const bool tb = ref::attr_bool(node, "transpose_b");
  const std::vector<double> a = in[0]->to_doubles();
  const std::vector<double> b = in[1]->to_doubles();

  const size_t ra = as.size(), rb = bs.size(), ro = os.size();
  const int64_t M = ta ? as[ra - 1] : as[ra - 2];
  const int64_t K = ta ? as[ra - 2] : as[ra - 1];
  const int64_t N = tb ? bs[rb - 2] : bs[rb - 1];
  const ir::Shape a_batch(as.begin(), as.end() - 2);
  const ir::Shape b_batch(bs.begin(), bs.end() - 2);
  const ir::Shape out_batch(os.begin(), os.end() - 2);

  // k_chunk > 0 (split-K): one partial result per chunk of k_chunk terms, stacked along a new
  // first dim.
  const int64_t chunk = k_chunk > 0 ? k_chunk : K;
  const int64_t chunks = k_chunk > 0 ? (K + chunk - 1) / chunk : 1;
  const int64_t batches = ir::num_elements(os, 0, ro - 2);
  std::vector<double> out(static_cast<size_t>(chunks * ir::num_elements(os)));
  for (int64_t s = 0; s < chunks; ++s)
    for (int64_t batch = 0; batch < batches; ++batch) {
      const std::vector<int64_t> index = ref::unravel(batch, out_batch);
      const int64_t a_base = ref::broadcast_source(index, a_batch) * M * K;
      const int64_t b_base = ref::broadcast_source(index, b_batch) * K * N;
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          double sum = 0;
          for (int64_t k = s * chunk; k < std::min(K, (s + 1) * chunk); ++k) {
            const double av = a[a_base + (ta ? k * M + m : m * K + k)];
            const double bv = b[b_base + (tb ? n * K + k : k * N + n)];
            sum += av * bv;
          }
          out[((s * batches + batch) * M + m) * N + n] = sum;
        }
    }
  return {ref::make_result(node, out)};
}

// x [...,K], weight [N,K], optional bias [N] -> [...,N]: y = x @ weight^T + bias.
Results dense(const ir::Node& node, const Inputs& in) {
  const ir::Shape& ws = in[1]->shape();
  const std::vector<double> x = in[0]->to_doubles();
  const std::vector<double> w = in[1]->to_doubles();
  const std::vector<double> bias =
      in.size() > 2 ? in[2]->to_doubles() : std::vector<double>(ws[0], 0.0);
  const int64_t N = ws[0], K = ws[1];
  const int64_t rows = in[0]->num_elements() / K;
  // k_chunk > 0 (split-K): one partial result per chunk of k_chunk input features, stacked
  // along a new first dim.
  const int64_t chunk = ref::attr_int(node, "k_chunk") > 0 ? ref::attr_int(node, "k_chunk") : K;
  const int64_t chunks = (K + chunk - 1) / chunk;
  std::vector<double> out(static_cast<size_t>(chunks * rows * N));
  for (int64_t s = 0; s < chunks; ++s)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t n = 0; n < N; ++n) {
        double sum = bias[n];
        for (int64_t k = s * chunk; k < std::min(K, (s + 1) * chunk); ++k) sum += x[r * K + k] * w[n * K + k];
        out[(s * rows + r) * N + n] = sum;
      }
  return {ref::make_result(node, out)};
}

// x + bias[c] where c is the index along `axis`.
Results bias_add(const ir::Node& node, const Inputs& in) {
  const ir::Shape& xs = in[0]->shape();
  const int axis = ref::norm_axis(ref::attr_int(node, "axis"), static_cast<int>(xs.size()));
  const int64_t C = xs[axis];
  const int64_t inner = ir::num_elements(xs, axis + 1, xs.size());
  std::vector<double> out = in[0]->to_doubles();
  const std::vector<double> bias = in[1]->to_doubles();
  for (size_t i = 0; i < out.size(); ++i) out[i] += bias[(static_cast<int64_t>(i) / inner) % C];
  return {ref::make_result(node, out)};
}

// --- pooling ----------------------------------------------------------------------------------

using ref::pool_window;
using ref::Window;

// The values of a 4-D tensor of NCHW shape `nchw` stored in `layout`, in NCHW order (to_planes);
// or NCHW values stored back in `layout` (!to_planes).
std::vector<double> reorder(const std::vector<double>& values, const ir::Shape& nchw, ir::ImageLayout layout,
                            bool to_planes) {
  if (layout == ir::ImageLayout::Nchw) return values;
  const int64_t N = nchw[0], C = nchw[1], HW = nchw[2] * nchw[3];
  std::vector<double> out(values.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < HW; ++i) {
        const int64_t plane = (n * C + c) * HW + i, pixel = (n * HW + i) * C + c;
        out[to_planes ? plane : pixel] = values[to_planes ? pixel : plane];
      }
  return out;
}

// Calls visit(value, inside) for every tap of the window of output (oh, ow) over one H x W
// plane; `inside` is false for taps in the padding (value 0 there).
template <typename Visit>
void for_each_tap(const Window& win, const double* plane, int64_t H, int64_t W, int64_t oh,
                  int64_t ow, Visit visit) {
  for (int64_t i = 0; i < win.kh; ++i)
    for (int64_t j = 0; j < win.kw; ++j) {
      const int64_t ih = oh * win.sh - win.top + i * win.dh;
      const int64_t iw = ow * win.sw - win.left + j * win.dw;
      const bool inside = ih >= 0 && ih < H && iw >= 0 && iw < W;
      visit(inside ? plane[ih * W + iw] : 0.0, inside);
    }
}

// Applies `pool(plane, oh, ow)` to every output position of every (n, c) plane. An NHWC
// input is pooled as its NCHW transpose, and the result transposed back.
template <typename Pool>
Results pool2d(const ir::Node& node, const Inputs& in, Pool pool) {
  const ir::ImageLayout layout = ir::image_layout(node);
  const ir::Shape xs = ir::to_nchw(in[0]->shape(), layout);
  const ir::Shape os = ir::to_nchw(ref::result_type(node).shape, layout);
  const std::vector<double> x = reorder(in[0]->to_doubles(), xs, layout, true);
  const int64_t planes = xs[0] * xs[1], H = xs[2], W = xs[3], OH = os[2], OW = os[3];
  std::vector<double> out(static_cast<size_t>(planes * OH * OW));
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow)
        out[(p * OH + oh) * OW + ow] = pool(&x[p * H * W], H, W, oh, ow);
  return {ref::make_result(node, reorder(out, os, layout, false))};
}

// Padding is -inf: padded taps never win.
Results max_pool2d(const ir::Node& node, const Inputs& in) {
  const Window win = pool_window(node);
  return pool2d(node, in, [&](const double* plane, int64_t H, int64_t W, int64_t oh, int64_t ow) {
    double best = -std::numeric_limits<double>::infinity();
    for_each_tap(win, plane, H, W, oh, ow, [&](double v, bool inside) {
      if (!inside || std::isnan(best)) return;  // a NaN, once seen, wins (as in torch)
      if (std::isnan(v) || v > best) best = v;
    });
    return best;
  });
}

// Padding is 0. count_include_pad divides by the full window (KH*KW taps, which with floor
// output sizes always lie inside the padded input); otherwise by the taps inside the input.
Results avg_pool2d(const ir::Node& node, const Inputs& in) {
  const Window win = pool_window(node);
  const bool include_pad = ref::attr_bool(node, "count_include_pad");
  return pool2d(node, in, [&](const double* plane, int64_t H, int64_t W, int64_t oh, int64_t ow) {
    double sum = 0;
    int64_t inside_count = 0;
    for_each_tap(win, plane, H, W, oh, ow, [&](double v, bool inside) {
      sum += v;
      inside_count += inside ? 1 : 0;
    });
    const int64_t divisor = include_pad ? win.kh * win.kw : inside_count;
    return sum / static_cast<double>(divisor);
  });
}

// x [N,C,H,W] -> [N,C,1,1]: mean of each plane.
Results global_avg_pool(const ir::Node& node, const Inputs& in) {
  const ir::Shape& xs = in[0]->shape();
  const std::vector<double> x = in[0]->to_doubles();
  const int64_t planes = xs[0] * xs[1], size = xs[2] * xs[3];
  std::vector<double> out(static_cast<size_t>(planes));
  for (int64_t p = 0; p < planes; ++p) {
    double sum = 0;
    for (int64_t i = 0; i < size; ++i) sum += x[p * size + i];
    out[p] = sum / static_cast<double>(size);
  }
  return {ref::make_result(node, out)};
}

// --- normalization ----------------------------------------------------------------------------

// x [N,C,...]; scale, bias, mean, var [C]. Training mode replaces mean and var by the batch's
// mean and biased variance per channel (over N and the trailing dims), as F.batch_norm does.
Results batch_norm(const ir::Node& node, const Inputs& in) {
  const ir::Shape& xs = in[0]->shape();
  const std::vector<double> x = in[0]->to_doubles();
  const std::vector<double> scale = in[1]->to_doubles();
  const std::vector<double> bias = in[2]->to_doubles();
  std::vector<double> mean = in[3]->to_doubles();
  std::vector<double> var = in[4]->to_doubles();
  const double eps = ref::attr_float(node, "epsilon");
  const int64_t N = xs[0], C = xs[1], inner = ir::num_elements(xs, 2, xs.size());
  auto at = [&](int64_t n, int64_t c, int64_t i) { return (n * C + c) * inner + i; };

  if (ref::attr_bool(node, "training")) {
    const double count = static_cast<double>(N * inner);
    for (int64_t c = 0; c < C; ++c) {
      double sum = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < inner; ++i) sum += x[at(n, c, i)];
      mean[c] = sum / count;
      // Two passes (mean first) avoid the cancellation of E[x^2] - E[x]^2.
      double squares = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < inner; ++i) squares += std::pow(x[at(n, c, i)] - mean[c], 2);
      var[c] = squares / count;
    }
  }
  std::vector<double> out(x.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t k = at(n, c, i);
        out[k] = (x[k] - mean[c]) / std::sqrt(var[c] + eps) * scale[c] + bias[c];
      }
  return {ref::make_result(node, out)};
}

// Normalizes each row of x viewed as [prod(dims[:axis]), prod(dims[axis:])] with its own mean
// and biased variance; scale and bias cover the row.
// layer_norm, and rms_norm (no centring, no bias): per row of x viewed as
// [prod(dims[:axis]), prod(dims[axis:])].
Results layer_norm(const ir::Node& node, const Inputs& in) {
  const ir::Shape& xs = in[0]->shape();
  const int axis = ref::norm_axis(ref::attr_int(node, "axis"), static_cast<int>(xs.size()));
  const double eps = ref::attr_float(node, "epsilon");
  const bool centred = node.op == ir::OpId::LayerNorm;
  const std::vector<double> x = in[0]->to_doubles();
  const std::vector<double> scale = in[1]->to_doubles();
  const std::vector<double> bias = centred ? in[2]->to_doubles() : std::vector<double>(scale.size(), 0.0);
  const int64_t rows = ir::num_elements(xs, 0, axis), size = ir::num_elements(xs, axis, xs.size());
  std::vector<double> out(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = &x[r * size];
    double sum = 0;
    for (int64_t i = 0; i < size; ++i) sum += row[i];
    const double mean = centred ? sum / static_cast<double>(size) : 0.0;
    double squares = 0;
    for (int64_t i = 0; i < size; ++i) squares += (row[i] - mean) * (row[i] - mean);
    const double inv_std = 1.0 / std::sqrt(squares / static_cast<double>(size) + eps);
    for (int64_t i = 0; i < size; ++i)
      out[r * size + i] = (row[i] - mean) * inv_std * scale[i] + bias[i];
  }
  return {ref::make_result(node, out)};
}

// Softmax along `axis`, stabilized by subtracting the max; `log_form` returns log-softmax
// computed as (x - max) - log(sum exp(x - max)), which stays finite where softmax underflows.
Results softmax(const ir::Node& node, const Inputs& in, bool log_form) {
  const ir::Shape& xs = in[0]->shape();
  const int axis = ref::norm_axis(ref::attr_int(node, "axis"), static_cast<int>(xs.size()));
  const std::vector<double> x = in[0]->to_doubles();
  const int64_t outer = ir::num_elements(xs, 0, axis), len = xs[axis];
  const int64_t inner = ir::num_elements(xs, axis + 1, xs.size());
  std::vector<double> out(x.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t k) { return (o * len + k) * inner + i; };
      double max = -std::numeric_limits<double>::infinity();
      for (int64_t k = 0; k < len; ++k) max = std::max(max, x[at(k)]);
      double sum = 0;
      for (int64_t k = 0; k < len; ++k) sum += std::exp(x[at(k)] - max);
      for (int64_t k = 0; k < len; ++k)
        out[at(k)] = log_form ? x[at(k)] - max - std::log(sum) : std::exp(x[at(k)] - max) / sum;
    }
  return {ref::make_result(node, out)};
}

}  // namespace

void add_nn_kernels(KernelTable& table) {
  add_attention_kernels(table);
  table[ir::OpId::Conv2d] = conv2d;
  table[ir::OpId::Matmul] = matmul;
  table[ir::OpId::Dense] = dense;
  table[ir::OpId::BiasAdd] = bias_add;
  table[ir::OpId::MaxPool2d] = max_pool2d;
  table[ir::OpId::AvgPool2d] = avg_pool2d;
  table[ir::OpId::GlobalAvgPool] = global_avg_pool;
  table[ir::OpId::BatchNorm] = batch_norm;
  table[ir::OpId::LayerNorm] = layer_norm;
  table[ir::OpId::RmsNorm] = layer_norm;
  table[ir::OpId::Softmax] = [](const ir::Node& node, const Inputs& in) {
    return softmax(node, in, false);
  };
  table[ir::OpId::LogSoftmax] = [](const ir::Node& node, const Inputs& in) {
    return softmax(node, in, true);
  };
}

}  // namespace kiln::eval
