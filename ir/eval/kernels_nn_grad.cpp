// Reference kernels for the window backward ops (ir/ops/nn_grad_ops.cpp), in double. Each
// walks the forward loop nest of ir/eval/kernels_nn.cpp and scatters dy where the
// forward read its operand: obviously the adjoint, which is what the oracle needs to be.
#include <cmath>

#include "ir/eval/kernel_util.h"

namespace kiln::eval {
namespace {

using Inputs = std::vector<const ir::Tensor*>;
using Results = std::vector<ir::Tensor>;

// The conv2d loop nest over x [N,C,H,W], weight [O,C/groups,KH,KW], y [N,O,OH,OW]; calls
// visit(x_index, w_index, y_index) for every product x * w the forward adds into y.
template <typename Visit>
void for_each_conv_product(const ir::Node& node, const ir::Shape& xs, const ir::Shape& ws,
                           const ir::Shape& ys, Visit visit) {
  const std::vector<int64_t>& stride = ref::attr_ints(node, "stride");
  const std::vector<int64_t>& pad = ref::attr_ints(node, "pad");
  const std::vector<int64_t>& dilation = ref::attr_ints(node, "dilation");
  const int64_t groups = ref::attr_int(node, "groups");
  const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3];
  const int64_t O = ws[0], Cg = ws[1], KH = ws[2], KW = ws[3];
  const int64_t OH = ys[2], OW = ys[3], Og = O / groups;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow)
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t kh = 0; kh < KH; ++kh) {
              const int64_t ih = oh * stride[0] - pad[0] + kh * dilation[0];
              if (ih < 0 || ih >= H) continue;  // zero padding: no product
              for (int64_t kw = 0; kw < KW; ++kw) {
                const int64_t iw = ow * stride[1] - pad[1] + kw * dilation[1];
                if (iw < 0 || iw >= W) continue;
                const int64_t ic = o / Og * Cg + c;
                visit(((n * C + ic) * H + ih) * W + iw, ((o * Cg + c) * KH + kh) * KW + kw,
                      ((n * O + o) * OH + oh) * OW + ow);
              }
            }
}

// conv2d_grad_input(dy, weight): dx[x] += dy[y] * w[w] over every product.
Results conv2d_grad_input(const ir::Node& node, const Inputs& in) {
  const ir::Shape& xs = ref::result_type(node).shape;
  const std::vector<double> dy = in[0]->to_doubles();
  const std::vector<double> w = in[1]->to_doubles();
  std::vector<double> dx(static_cast<size_t>(ir::num_elements(xs)), 0.0);
  for_each_conv_product(node, xs, in[1]->shape(), in[0]->shape(),
                        [&](int64_t xi, int64_t wi, int64_t yi) { dx[xi] += dy[yi] * w[wi]; });
  return {ref::make_result(node, dx)};
}

// conv2d_grad_weight(dy, x): dw[w] += dy[y] * x[x] over every product.
Results conv2d_grad_weight(const ir::Node& node, const Inputs& in) {
  const ir::Shape& result = ref::result_type(node).shape;
  const std::vector<double> dy = in[0]->to_doubles();
  const std::vector<double> x = in[1]->to_doubles();
  std::vector<double> dw(static_cast<size_t>(ir::num_elements(result)), 0.0);
  // k_chunk > 0 (split-K): one partial dweight per chunk of k_chunk batch pixels, where batch
  // pixel k = n * OH * OW + oh * OW + ow, stacked along the result's first dim.
  const int64_t chunk = ref::attr_int(node, "k_chunk");
  const ir::Shape ws(result.end() - 4, result.end());
  const ir::Shape& ys = in[0]->shape();
  const int64_t plane = ys[2] * ys[3], weights = ir::num_elements(ws);
  for_each_conv_product(node, in[1]->shape(), ws, ys, [&](int64_t xi, int64_t wi, int64_t yi) {
    const int64_t split = chunk > 0 ? (yi / (ys[1] * plane) * plane + yi % plane) / chunk : 0;
    dw[split * weights + wi] += dy[yi] * x[xi];
  });
  return {ref::make_result(node, dw)};
}

using ref::pool_window;
using ref::Window;

// For every output (plane, oh, ow) of a pool over planes of H x W: visit(y_index, taps), where
// taps holds the in-plane offsets (ih * W + iw) of the window's taps inside the input, in
// row-major window order.
template <typename Visit>
void for_each_window(const Window& win, int64_t planes, int64_t H, int64_t W, int64_t OH,
                     int64_t OW, Visit visit) {
  std::vector<int64_t> taps;
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        taps.clear();
        for (int64_t i = 0; i < win.kh; ++i)
          for (int64_t j = 0; j < win.kw; ++j) {
            const int64_t ih = oh * win.sh - win.top + i * win.dh;
            const int64_t iw = ow * win.sw - win.left + j * win.dw;
            if (ih >= 0 && ih < H && iw >= 0 && iw < W) taps.push_back(p * H * W + ih * W + iw);
          }
        visit((p * OH + oh) * OW + ow, taps);
      }
}

// max_pool2d_grad(dy, x): all of dy goes to the first maximum of the window (strictly greater
// replaces), or to its first NaN, as PyTorch's max_pool2d_with_indices records it.
Results max_pool2d_grad(const ir::Node& node, const Inputs& in) {
  const ir::Shape& xs = in[1]->shape();
  const ir::Shape& ys = in[0]->shape();
  const std::vector<double> dy = in[0]->to_doubles();
  const std::vector<double> x = in[1]->to_doubles();
  std::vector<double> dx(x.size(), 0.0);
  for_each_window(pool_window(node), xs[0] * xs[1], xs[2], xs[3], ys[2], ys[3],
                  [&](int64_t yi, const std::vector<int64_t>& taps) {
                    int64_t best = -1;
                    for (int64_t t : taps) {
                      if (best >= 0 && std::isnan(x[best])) break;
                      if (best < 0 || std::isnan(x[t]) || x[t] > x[best]) best = t;
                    }
                    if (best >= 0) dx[best] += dy[yi];
                  });
  return {ref::make_result(node, dx)};
}

// avg_pool2d_grad(dy): dy / divisor to every tap inside the input; the divisor is the whole
// window with count_include_pad, else the taps inside.
Results avg_pool2d_grad(const ir::Node& node, const Inputs& in) {
  const ir::Shape& xs = ref::result_type(node).shape;
  const ir::Shape& ys = in[0]->shape();
  const Window win = pool_window(node);
  const bool include_pad = ref::attr_bool(node, "count_include_pad");
  const std::vector<double> dy = in[0]->to_doubles();
  std::vector<double> dx(static_cast<size_t>(ir::num_elements(xs)), 0.0);
  for_each_window(win, xs[0] * xs[1], xs[2], xs[3], ys[2], ys[3],
                  [&](int64_t yi, const std::vector<int64_t>& taps) {
                    const double divisor = static_cast<double>(
                        include_pad ? win.kh * win.kw : static_cast<int64_t>(taps.size()));
                    for (int64_t t : taps) dx[t] += dy[yi] / divisor;
                  });
  return {ref::make_result(node, dx)};
}

}  // namespace

void add_nn_grad_kernels(KernelTable& table) {
  table[ir::OpId::Conv2dGradInput] = conv2d_grad_input;
  table[ir::OpId::Conv2dGradWeight] = conv2d_grad_weight;
  table[ir::OpId::MaxPool2dGrad] = max_pool2d_grad;
  table[ir::OpId::AvgPool2dGrad] = avg_pool2d_grad;
}

}  // namespace kiln::eval
