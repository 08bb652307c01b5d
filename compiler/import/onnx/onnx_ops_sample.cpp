// ONNX sampling at run-time coordinates → kiln ops: GridSample. Interpolation at a coordinate x
// along an axis of size d is a weighted sum of the pixels, with a weight per pixel that depends
// only on x minus the pixel's position: a tent (linear), the cubic convolution kernel (cubic)
// or a one-hot (nearest). So each axis becomes a [points, d] weight matrix computed from the
// grid, and the sample is the input contracted with those matrices, one axis at a time. Taps
// that fall outside the input are folded onto the pixel the padding mode reads (border: the
// edge; reflection: the mirrored pixel) or dropped (zeros), by a constant [taps, d] matrix.
#include <cmath>
#include <string>

#include "compiler/import/onnx/onnx_ops.h"

namespace kiln::compiler::onnx_import {

namespace {
using ir::OpId;
using Outputs = std::vector<Operand>;
using Ints = std::vector<int64_t>;

enum class Mode { kNearest, kLinear, kCubic };
enum class Padding { kZeros, kBorder, kReflection };

constexpr double kCubicAlpha = -0.75;  // the cubic convolution kernel's a (as PyTorch and ONNX)

struct Sampling {
  Mode mode;
  Padding padding;
  bool align_corners;
};

// The range a coordinate stays in before padding applies: pixel centers with align_corners,
// else the pixels' outer edges.
double lowest(const Sampling& s) { return s.align_corners ? 0.0 : -0.5; }
double highest(const Sampling& s, int64_t size) { return s.align_corners ? double(size - 1) : double(size) - 0.5; }

// x mirrored into [low, high] (ONNX's reference: whole periods dropped, then the remainder
// taken from the end the parity says).
double reflect(double x, double low, double high) {
  const double range = high - low;
  if (range <= 0) return low;
  if (x >= low && x <= high) return x;
  const double distance = x < low ? low - x : x - high;
  const double periods = std::floor(distance / range);
  const double rest = distance - periods * range;
  const bool even = std::fmod(periods, 2.0) == 0.0;
  return (x < low) == even ? low + rest : high - rest;
}

// The pixel that tap `i` reads, or -1 for none (zeros padding).
int64_t tap_pixel(int64_t i, int64_t size, const Sampling& s) {
  if (i >= 0 && i < size) return i;
  switch (s.padding) {
    case Padding::kZeros: return -1;
    case Padding::kBorder: return i < 0 ? 0 : size - 1;
    case Padding::kReflection:
      return static_cast<int64_t>(reflect(static_cast<double>(i), lowest(s), highest(s, size)));  // truncates, as ONNX
  }
  return -1;
}

// The grid's normalized coordinates ([-1, 1] spans the input) as pixel coordinates along an axis
// of `size`, moved inside by the border and reflection padding modes.
Operand pixel_coordinates(NodeContext& node, const Operand& g, int64_t size, const Sampling& s) {
  const ir::DType t = g.type().dtype;
  auto k = [&](double v) { return node.scalar(t, v); };
  const Operand one_more = node.emit(OpId::Add, {g, k(1.0)});
  Operand x = s.align_corners
                  ? node.emit(OpId::Mul, {one_more, k(0.5 * double(size - 1))})
                  : node.emit(OpId::Mul, {node.emit(OpId::Sub, {node.emit(OpId::Mul, {one_more, k(double(size))}), k(1.0)}), k(0.5)});
  if (s.mode == Mode::kNearest) x = node.emit(OpId::Round, {x});
  if (s.padding == Padding::kZeros) return x;
  const double low = lowest(s), high = highest(s, size);
  const Operand below = node.emit(OpId::Less, {x, k(low)});
  const Operand above = node.emit(OpId::Greater, {x, k(high)});
  Operand moved;
  if (s.padding == Padding::kBorder) {
    moved = node.emit(OpId::Minimum, {node.emit(OpId::Maximum, {x, k(0.0)}), k(double(size - 1))});
  } else if (high - low <= 0) {
    moved = node.fill(t, x.type().shape, low);
  } else {
    const double range = high - low;
    const Operand distance = node.emit(OpId::Where, {below, node.emit(OpId::Sub, {k(low), x}), node.emit(OpId::Sub, {x, k(high)})});
    const Operand periods = node.emit(OpId::Floor, {node.emit(OpId::Div, {distance, k(range)})});
    const Operand rest = node.emit(OpId::Sub, {distance, node.emit(OpId::Mul, {periods, k(range)})});
    const Operand half = node.emit(OpId::Mul, {periods, k(0.5)});
    const Operand even = node.emit(OpId::Equal, {node.emit(OpId::Floor, {half}), half});
    const Operand from_low = node.emit(OpId::Add, {k(low), rest}), from_high = node.emit(OpId::Sub, {k(high), rest});
    // Below the range an even number of periods lands `rest` above low; above it, below high.
    moved = node.emit(OpId::Where, {node.emit(OpId::Equal, {below, even}), from_low, from_high});
  }
  return node.emit(OpId::Where, {node.emit(OpId::LogicalOr, {below, above}), moved, x});
}

// The [..., size] weights that sampling at `x` ([..., 1]) gives each pixel of an axis of `size`.
Operand axis_weights(NodeContext& node, const Operand& x, int64_t size, const Sampling& s) {
  const ir::DType t = x.type().dtype;
  auto k = [&](double v) { return node.scalar(t, v); };
  const int rank = x.type().rank();
  // Taps: the pixels, plus those just outside that the kernel can reach and padding can read.
  const int64_t reach = s.mode == Mode::kCubic ? 2 : s.mode == Mode::kLinear ? 1 : 0;
  const int64_t first = s.padding == Padding::kZeros ? 0 : -reach;
  const int64_t taps = size + (s.padding == Padding::kZeros ? 0 : 2 * reach);
  const Operand tap_position = node.emit(
      OpId::Add, {node.emit(OpId::Cast, {node.positions(rank, rank - 1, taps)}, {{"to", std::string(ir::dtype_name(t))}}),
                  k(double(first))});
  Operand weight;
  if (s.mode == Mode::kNearest) {
    weight = node.emit(OpId::Cast, {node.emit(OpId::Equal, {x, tap_position})}, {{"to", std::string(ir::dtype_name(t))}});
  } else {
    const Operand distance = node.emit(OpId::Abs, {node.emit(OpId::Sub, {x, tap_position})});
    if (s.mode == Mode::kLinear) {
      weight = node.emit(OpId::Maximum, {node.emit(OpId::Sub, {k(1.0), distance}), k(0.0)});
    } else {
      const double a = kCubicAlpha;
      auto mul = [&](const Operand& p, const Operand& q) { return node.emit(OpId::Mul, {p, q}); };
      auto add = [&](const Operand& p, double c) { return node.emit(OpId::Add, {p, k(c)}); };
      // |t| <= 1: ((a + 2)|t| - (a + 3))|t|^2 + 1;  1 < |t| < 2: ((a|t| - 5a)|t| + 8a)|t| - 4a.
      const Operand near = add(mul(mul(add(mul(distance, k(a + 2)), -(a + 3)), distance), distance), 1.0);
      const Operand far = add(mul(add(mul(add(mul(distance, k(a)), -5 * a), distance), 8 * a), distance), -4 * a);
      weight = node.emit(OpId::Where, {node.emit(OpId::LessEqual, {distance, k(1.0)}), near,
                                        node.emit(OpId::Where, {node.emit(OpId::Less, {distance, k(2.0)}), far, k(0.0)})});
    }
  }
  if (taps == size) return weight;  // every tap is its own pixel
  node.check_fold_size({t, {taps, size}}, "the padding's tap matrix");
  std::vector<double> fold(static_cast<size_t>(taps * size), 0.0);
  for (int64_t j = 0; j < taps; ++j)
    if (const int64_t pixel = tap_pixel(first + j, size, s); pixel >= 0) fold[static_cast<size_t>(j * size + pixel)] = 1.0;
  return node.emit(OpId::Matmul, {weight, node.constant(ir::Tensor::from_doubles({t, {taps, size}}, fold), "padding_taps")});
}

Outputs grid_sample(NodeContext& node) {
  node.check_attrs({"align_corners", "mode", "padding_mode"});
  const Operand& x = node.input(0);
  Operand grid = node.input(1);
  const ir::TensorType& xt = x.type();
  const ir::DType t = xt.dtype;
  if (!ir::is_floating(t))
    node.fail("X must be a float tensor, got " + xt.to_string());
  const int spatial = xt.rank() - 2;
  if (spatial < 1 || (node.opset() < 20 && spatial != 2))
    node.fail("X must be [N, C, H, W]" + std::string(node.opset() < 20 ? "" : " or have 1+ spatial dims") + ", got " + xt.to_string());
  const ir::Shape& gs = grid.type().shape;
  if (grid.type().rank() != xt.rank() || gs[0] != xt.shape[0] || gs.back() != spatial)
    node.fail("grid must be [N, out dims..., " + std::to_string(spatial) + "] for X " + xt.to_string() + ", got " +
              grid.type().to_string());
  if (grid.type().dtype != t) grid = node.emit(OpId::Cast, {grid}, {{"to", std::string(ir::dtype_name(t))}});

  Sampling s{};
  const std::string mode = node.attr_string("mode", node.opset() < 20 ? "bilinear" : "linear");
  if (mode == "nearest") s.mode = Mode::kNearest;
  else if (mode == "bilinear" || mode == "linear") s.mode = Mode::kLinear;
  else if (mode == "bicubic" || mode == "cubic") s.mode = Mode::kCubic;
  else node.fail("mode must be " + std::string(node.opset() < 20 ? "bilinear, nearest or bicubic" : "linear, nearest or cubic") +
                 ", got '" + mode + "'");
  if (s.mode == Mode::kCubic && spatial != 2) node.fail("cubic sampling is defined for 2-D inputs only");
  const std::string padding = node.attr_string("padding_mode", "zeros");
  if (padding == "zeros") s.padding = Padding::kZeros;
  else if (padding == "border") s.padding = Padding::kBorder;
  else if (padding == "reflection") s.padding = Padding::kReflection;
  else node.fail("padding_mode must be zeros, border or reflection, got '" + padding + "'");
  s.align_corners = node.attr_int("align_corners", 0) != 0;

  const int64_t n = xt.shape[0], channels = xt.shape[1];
  int64_t points = 1;
  for (int a = 1; a <= spatial; ++a) points *= gs[static_cast<size_t>(a)];
  const Operand flat_grid = node.reshape(grid, {n, points, spatial});

  // The first spatial axis is a batched matmul of its weights with X laid out [N, D1, rest, C];
  // each further axis multiplies its weights in and sums its dim away.
  Ints to_channels_last{0};
  for (int a = 0; a < spatial; ++a) to_channels_last.push_back(2 + a);
  to_channels_last.push_back(1);
  Operand sampled = node.emit(OpId::Transpose, {x}, {{"perm", to_channels_last}});
  int64_t rest = ir::num_elements(xt.shape) / (n * xt.shape[2]);
  for (int a = 0; a < spatial; ++a) {
    const int64_t size = xt.shape[static_cast<size_t>(2 + a)];
    const int64_t component = spatial - 1 - a;  // the grid lists x (the last axis) first
    const Operand g = node.emit(OpId::Slice, {flat_grid}, {{"starts", Ints{component}}, {"ends", Ints{component + 1}},
                                                           {"axes", Ints{2}}, {"steps", Ints{1}}});
    const Operand weights = axis_weights(node, pixel_coordinates(node, g, size, s), size, s);  // [N, P, size]
    if (a == 0) {
      sampled = node.emit(OpId::Matmul, {weights, node.reshape(sampled, {n, size, rest})});  // [N, P, rest]
    } else {
      rest /= size;
      sampled = node.emit(OpId::ReduceSum, {node.emit(OpId::Mul, {node.reshape(sampled, {n, points, size, rest}),
                                                                   node.reshape(weights, {n, points, size, 1})})},
                          {{"axes", Ints{2}}, {"keepdims", false}});
    }
  }
  ir::Shape out{n, channels};
  for (int a = 1; a <= spatial; ++a) out.push_back(gs[static_cast<size_t>(a)]);
  sampled = node.emit(OpId::Transpose, {node.reshape(sampled, {n, points, channels})}, {{"perm", Ints{0, 2, 1}}});
  return {node.reshape(sampled, out)};
}

constexpr OpRule kRules[] = {
    {"GridSample", 16, kMaxOpset, grid_sample},
};

}  // namespace

std::span<const OpRule> sample_rules() { return kRules; }

}  // namespace kiln::compiler::onnx_import
