// ONNX ops that are a fixed matrix applied along one axis: Resize and Upsample (interpolation
// matrices), CumSum (a triangle of ones) and LRN (a band of ones over the channels, for the
// sum of squares).
//
// Resize and Upsample.
//
// Every mode ONNX defines (nearest, linear, cubic; with or without antialias; every coordinate
// transformation) interpolates each resized axis on its own, and along one axis an output
// position is a fixed weighted sum of input positions. So the resize along axis a is a matrix
// W_a [out, in] applied to that axis: the importer computes W_a in double at import (the
// shapes are static) and emits one matmul per resized axis, with the tensor viewed as
// [outer, in, inner] (or [outer, in] for the last axis). tf_crop_and_resize's extrapolation is
// an affine term: the rows outside the input get no weights and the extrapolation value as a
// bias; since every row's weights sum to 1, applying the axes one after the other gives the
// value wherever any axis is outside, as ONNX's reference does.
//
// An axis whose matrix is the identity (the batch and channel axes, a scale of 1) is skipped.
// Nearest is a one-hot matrix: exact, if more work than a gather; a dedicated kernel is a
// later optimization.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "compiler/import/onnx/onnx_ops.h"

namespace kiln::compiler::onnx_import {
namespace {

using ir::OpId;
using Ints = std::vector<int64_t>;
using Outputs = std::vector<Operand>;

constexpr int64_t kMaxInterpolationElements = int64_t{1} << 22;

// coordinate_transformation_mode, in the order of kTransformNames.
enum class Transform { HalfPixel, HalfPixelSymmetric, PytorchHalfPixel, AlignCorners, Asymmetric, TfHalfPixelForNn, TfCropAndResize };
constexpr const char* kTransformNames[] = {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                                           "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize"};

// How output coordinates map to input coordinates, and the weights of the neighbours.
struct ResizeSpec {
  std::string mode = "nearest";              // nearest | linear | cubic
  Transform transform = Transform::HalfPixel;
  std::string nearest_mode = "round_prefer_floor";
  double cubic_a = -0.75;
  bool exclude_outside = false;
  bool antialias = false;
  double extrapolation = 0.0;
};

// The weights of the neighbours of a point whose distance past its left neighbour is `ratio`
// (in (0, 1]; 1 when the point is on a sample), for a resize by `scale`, into `weights` (reused
// from row to row: a matrix may have millions of rows).
void neighbour_weights(const ResizeSpec& spec, double ratio, double scale, std::vector<double>& weights) {
  weights.clear();
  if (spec.mode == "nearest") {
    const std::string& m = spec.nearest_mode;
    bool right = true;  // on a sample, or ceil
    if (ratio != 1.0 && m == "round_prefer_floor") right = ratio > 0.5;
    else if (ratio != 1.0 && m == "round_prefer_ceil") right = ratio >= 0.5;
    else if (ratio != 1.0 && m == "floor") right = false;
    weights.insert(weights.end(), {right ? 0.0 : 1.0, right ? 1.0 : 0.0});
    return;
  }
  if (spec.mode == "linear") {
    if (!spec.antialias) {
      weights.insert(weights.end(), {1 - ratio, ratio});
      return;
    }
    // The triangle filter stretched by 1/scale when shrinking.
    const double s = std::min(scale, 1.0);
    const int64_t start = static_cast<int64_t>(std::floor(-1 / s) + 1);
    for (int64_t i = start; i < start + 2 - 2 * start; ++i)
      weights.push_back(std::clamp(1 - std::abs((double(i) - ratio) * s), 0.0, 1.0));
  } else {
    const double a = spec.cubic_a;
    auto kernel = [a](double x) {
      x = std::abs(x);
      if (x <= 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
      if (x < 2) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
      return 0.0;
    };
    if (!spec.antialias) {
      weights.insert(weights.end(), {kernel(ratio + 1), kernel(ratio), kernel(1 - ratio), kernel(2 - ratio)});
      return;
    }
    const double s = std::min(scale, 1.0);
    const int64_t start = static_cast<int64_t>(std::floor(-2 / s) + 1);
    for (int64_t i = start; i < 2 - start; ++i) weights.push_back(kernel(s * (double(i) - ratio)));
  }
  const double sum = std::accumulate(weights.begin(), weights.end(), 0.0);
  for (double& w : weights) w /= sum;
}

// The input coordinate of output position `x` along an axis of `in` samples resized to `out`
// (`exact_out` = scale * in, which differs from `out` when the scale was given).
double source_coordinate(Transform t, double x, int64_t in, int64_t out, double exact_out, double scale,
                         double roi_start, double roi_end) {
  switch (t) {
    case Transform::AlignCorners: return exact_out == 1 ? 0.0 : x * double(in - 1) / (exact_out - 1);
    case Transform::Asymmetric: return x / scale;
    case Transform::TfHalfPixelForNn: return (x + 0.5) / scale;
    case Transform::PytorchHalfPixel: return exact_out == 1 ? -0.5 : (x + 0.5) / scale - 0.5;
    case Transform::TfCropAndResize: {
      const double span = (roi_end - roi_start) * double(in - 1);
      return roi_start * double(in - 1) + (exact_out == 1 ? span / 2 : x * span / (exact_out - 1));
    }
    case Transform::HalfPixelSymmetric: {
      const double offset = double(in) / 2 * (1 - double(out) / exact_out);
      return offset + (x + 0.5) / scale - 0.5;
    }
    case Transform::HalfPixel: break;
  }
  return (x + 0.5) / scale - 0.5;
}

// The [out, in] matrix of one axis, and the bias of the rows tf_crop_and_resize extrapolates
// (empty when none is).
struct AxisMatrix {
  std::vector<double> weights;  // row-major [out, in]
  std::vector<double> bias;     // [out], or empty
};

AxisMatrix axis_matrix(const ResizeSpec& spec, int64_t in, int64_t out, double scale, double roi_start,
                       double roi_end) {
  AxisMatrix m;
  m.weights.assign(static_cast<size_t>(out * in), 0.0);
  const double exact_out = scale * double(in);
  std::vector<double> weights;
  for (int64_t x = 0; x < out; ++x) {
    const double source = source_coordinate(spec.transform, double(x), in, out, exact_out, scale, roi_start, roi_end);
    if (spec.transform == Transform::TfCropAndResize && (source < 0 || source > double(in - 1))) {
      if (m.bias.empty()) m.bias.assign(static_cast<size_t>(out), 0.0);
      m.bias[x] = spec.extrapolation;
      continue;
    }
    const double floor = std::floor(source);
    const double ratio = source == floor ? 1.0 : source - floor;
    neighbour_weights(spec, ratio, scale, weights);
    const int64_t n = static_cast<int64_t>(weights.size());
    // The n samples nearest to `source` (the lower on ties) of the input padded by n/2 copies
    // of each edge sample: a run of n indices (n is even for every filter), the weights' order.
    const int64_t pad = n / 2;
    const int64_t padded = in + 2 * pad;
    const double centre = source + double(pad);
    int64_t first = static_cast<int64_t>(std::floor(centre)) - (n / 2 - 1);
    if (centre == std::floor(centre)) first = static_cast<int64_t>(centre) - n / 2;
    first = std::clamp<int64_t>(first, 0, padded - n);
    if (spec.exclude_outside) {
      double kept = 0;
      for (int64_t k = 0; k < n; ++k) {
        const int64_t index = first + k - pad;
        if (index < 0 || index >= in) weights[k] = 0;
        kept += weights[k];
      }
      if (kept != 0)
        for (double& w : weights) w /= kept;
    }
    for (int64_t k = 0; k < n; ++k) {
      const int64_t index = std::clamp<int64_t>(first + k - pad, 0, in - 1);
      m.weights[static_cast<size_t>(x * in + index)] += weights[k];
    }
  }
  return m;
}

bool is_identity(const AxisMatrix& m, int64_t in, int64_t out) {
  if (in != out || !m.bias.empty()) return false;
  for (int64_t i = 0; i < out; ++i)
    for (int64_t j = 0; j < in; ++j)
      if (m.weights[static_cast<size_t>(i * in + j)] != (i == j ? 1.0 : 0.0)) return false;
  return true;
}

// Applies the matrix along `axis`: x viewed as [outer, in, inner] (or [outer, in] when the axis
// is the last), multiplied, viewed back.
Operand apply_along(NodeContext& node, const Operand& x, int axis, const AxisMatrix& m, int64_t out) {
  const ir::Shape& s = x.type().shape;
  const ir::DType dtype = x.type().dtype;
  const int64_t in = s[axis];
  const int64_t outer = ir::num_elements(s, 0, axis);
  const int64_t inner = ir::num_elements(s, axis + 1, s.size());
  ir::Shape result = s;
  result[axis] = out;
  Operand y;
  if (inner == 1) {
    // [outer, in] x W^T [in, out]
    std::vector<double> transposed(static_cast<size_t>(in * out));
    for (int64_t i = 0; i < out; ++i)
      for (int64_t j = 0; j < in; ++j) transposed[j * out + i] = m.weights[i * in + j];
    node.check_fold_size({dtype, {in, out}}, "the interpolation matrix");
    const Operand w = node.constant(ir::Tensor::from_doubles({dtype, {in, out}}, transposed), "interpolation");
    y = node.emit(OpId::Matmul, {node.reshape(x, {outer, in}), w});
    if (!m.bias.empty()) y = node.emit(OpId::Add, {y, node.constant(ir::Tensor::from_doubles({dtype, {out}}, m.bias), "extrapolation")});
  } else {
    // W [out, in] x [outer, in, inner]
    node.check_fold_size({dtype, {out, in}}, "the interpolation matrix");
    const Operand w = node.constant(ir::Tensor::from_doubles({dtype, {out, in}}, m.weights), "interpolation");
    y = node.emit(OpId::Matmul, {w, node.reshape(x, {outer, in, inner})});
    if (!m.bias.empty()) y = node.emit(OpId::Add, {y, node.constant(ir::Tensor::from_doubles({dtype, {out, 1}}, m.bias), "extrapolation")});
  }
  return node.reshape(y, result);
}

// The resize of `x` to `sizes` along every axis, with the scales the coordinates use.
Operand interpolate(NodeContext& node, const Operand& x, const ResizeSpec& spec, const Ints& sizes,
                    const std::vector<double>& scales, const std::vector<double>& roi) {
  const int rank = x.type().rank();
  if (!ir::is_floating(x.type().dtype))
    node.fail("resizing " + x.type().to_string() + " is not supported (kiln resizes float tensors)");
  // Every axis is checked before any matrix is built (a bad last axis must not cost the
  // building of the others).
  for (int axis = rank - 1; axis >= 0; --axis) {
    const int64_t in = x.type().shape[axis], out = sizes[axis];
    if (out < 1) node.fail("axis " + std::to_string(axis) + " would have " + std::to_string(out) + " elements; kiln tensors need at least one");
    if (!(scales[axis] > 0) || !std::isfinite(scales[axis])) node.fail("scales must be positive and finite");
    // A dense matrix per axis: 4M elements covers 2048 x 2048; larger resizes want a gather
    // kernel kiln does not have yet.
    if (in > kMaxInterpolationElements / out)
      node.fail("the interpolation matrix of axis " + std::to_string(axis) + " would be [" + std::to_string(out) +
                ", " + std::to_string(in) + "], over the 2^22 elements kiln's Resize builds");
  }
  if (!ir::checked_num_elements(ir::Shape(sizes.begin(), sizes.end())))
    node.fail("the result " + ir::shape_to_string(ir::Shape(sizes.begin(), sizes.end())) + " has more than 2^48 elements");
  Operand y = x;
  for (int axis = rank - 1; axis >= 0; --axis) {
    const int64_t in = x.type().shape[axis], out = sizes[axis];
    const double roi_start = roi.empty() ? 0.0 : roi[axis], roi_end = roi.empty() ? 1.0 : roi[rank + axis];
    const AxisMatrix m = axis_matrix(spec, in, out, scales[axis], roi_start, roi_end);
    if (!is_identity(m, in, out)) y = apply_along(node, y, axis, m, out);
  }
  return y;
}

ResizeSpec read_spec(NodeContext& node) {
  ResizeSpec spec;
  spec.mode = node.attr_string("mode", "nearest");
  if (spec.mode != "nearest" && spec.mode != "linear" && spec.mode != "cubic")
    node.fail("mode '" + spec.mode + "' is not one of nearest, linear, cubic");
  const std::string transform = node.attr_string("coordinate_transformation_mode", "half_pixel");
  const auto known = std::find(std::begin(kTransformNames), std::end(kTransformNames), transform);
  if (known == std::end(kTransformNames))
    node.fail("coordinate_transformation_mode '" + transform + "' is not supported");
  spec.transform = static_cast<Transform>(known - std::begin(kTransformNames));
  spec.nearest_mode = node.attr_string("nearest_mode", "round_prefer_floor");
  if (spec.nearest_mode != "round_prefer_floor" && spec.nearest_mode != "round_prefer_ceil" &&
      spec.nearest_mode != "floor" && spec.nearest_mode != "ceil")
    node.fail("nearest_mode '" + spec.nearest_mode + "' is not supported");
  spec.cubic_a = node.attr_float("cubic_coeff_a", -0.75);
  spec.exclude_outside = node.attr_int("exclude_outside", 0) != 0;
  spec.antialias = node.attr_int("antialias", 0) != 0;
  if (spec.antialias && spec.mode == "nearest") node.fail("antialias applies to linear and cubic modes only");
  spec.extrapolation = node.attr_float("extrapolation_value", 0.0);
  return spec;
}

// Resize-11 and later: X, roi, scales, sizes (roi, and one of scales and sizes, optional).
Outputs resize(NodeContext& node) {
  node.check_attrs({"antialias", "axes", "coordinate_transformation_mode", "cubic_coeff_a", "exclude_outside",
                    "extrapolation_value", "keep_aspect_ratio_policy", "mode", "nearest_mode"});
  const Operand& x = node.input(0);
  const int rank = x.type().rank();
  const ir::Shape& in = x.type().shape;
  const ResizeSpec spec = read_spec(node);

  // The axes that scales, sizes and roi list (all of them unless `axes` says).
  std::vector<int> axes;
  for (int64_t axis : node.attr_ints("axes", {})) {
    const int a = normalize_axis_or_fail(node, axis, rank, "axes");
    if (std::find(axes.begin(), axes.end(), a) != axes.end()) node.fail("axis " + std::to_string(axis) + " is listed twice");
    axes.push_back(a);
  }
  if (axes.empty())
    for (int a = 0; a < rank; ++a) axes.push_back(a);
  const size_t listed = axes.size();

  std::vector<double> roi;
  if (node.has_input(1) && spec.transform == Transform::TfCropAndResize) {
    const std::vector<double> given = node.const_doubles(1, "roi");
    if (given.size() != 2 * listed) node.fail("roi must have two values per resized axis");
    roi.assign(2 * rank, 0.0);
    std::fill(roi.begin() + rank, roi.end(), 1.0);
    for (size_t i = 0; i < listed; ++i) {
      roi[axes[i]] = given[i];
      roi[rank + axes[i]] = given[listed + i];
    }
  }

  std::vector<double> scales(rank, 1.0);
  Ints sizes(in.begin(), in.end());
  const bool has_sizes = node.has_input(3);
  if (node.has_input(2) && has_sizes) node.fail("scales and sizes are both given; ONNX allows one");
  if (has_sizes) {
    const Ints given = node.const_ints(3, "sizes");
    if (given.size() != listed) node.fail("sizes must have one value per resized axis");
    for (size_t i = 0; i < listed; ++i) {
      if (given[i] < 1 || given[i] > (int64_t{1} << 24)) node.fail("sizes must lie in [1, 2^24]");
      sizes[axes[i]] = given[i];
      scales[axes[i]] = double(given[i]) / double(in[axes[i]]);
    }
    const std::string policy = node.attr_string("keep_aspect_ratio_policy", "stretch");
    if (policy != "stretch") {
      if (policy != "not_larger" && policy != "not_smaller")
        node.fail("keep_aspect_ratio_policy '" + policy + "' is not one of stretch, not_larger, not_smaller");
      double scale = scales[axes[0]];
      for (int a : axes) scale = policy == "not_larger" ? std::min(scale, scales[a]) : std::max(scale, scales[a]);
      for (int a : axes) {
        scales[a] = scale;
        sizes[a] = static_cast<int64_t>(scale * double(in[a]) + 0.5);
      }
    }
  } else if (node.has_input(2)) {
    const std::vector<double> given = node.const_doubles(2, "scales");
    if (given.size() != listed) node.fail("scales must have one value per resized axis");
    for (size_t i = 0; i < listed; ++i) {
      if (!(given[i] > 0) || given[i] * double(in[axes[i]]) > double(int64_t{1} << 24))
        node.fail("scales must be positive, with at most 2^24 elements along an axis");
      scales[axes[i]] = given[i];
      sizes[axes[i]] = static_cast<int64_t>(given[i] * double(in[axes[i]]));
    }
  } else {
    node.fail("neither scales nor sizes is given");
  }
  return {interpolate(node, x, spec, sizes, scales, roi)};
}

// Upsample (opsets 7-9) and Resize-10: scales only, asymmetric coordinates; nearest takes the
// sample at or below (floor), linear interpolates between the two around.
Outputs upsample(NodeContext& node) {
  node.check_attrs({"mode", "scales"});
  const Operand& x = node.input(0);
  const int rank = x.type().rank();
  ResizeSpec spec;
  spec.mode = node.attr_string("mode", "nearest");
  if (spec.mode != "nearest" && spec.mode != "linear" && spec.mode != "bilinear")
    node.fail("mode '" + spec.mode + "' is not one of nearest, linear");
  if (spec.mode == "bilinear") spec.mode = "linear";
  spec.transform = Transform::Asymmetric;
  spec.nearest_mode = "floor";
  const std::vector<double> scales = node.has_attr("scales") ? node.attr_floats("scales") : node.const_doubles(1, "scales");
  if (static_cast<int>(scales.size()) != rank) node.fail("scales must have one value per axis");
  Ints sizes;
  for (int a = 0; a < rank; ++a) {
    if (!(scales[a] > 0) || scales[a] * double(x.type().shape[a]) > double(int64_t{1} << 24))
      node.fail("scales must be positive, with at most 2^24 elements along an axis");
    sizes.push_back(static_cast<int64_t>(scales[a] * double(x.type().shape[a])));
  }
  return {interpolate(node, x, spec, sizes, scales, {})};
}

// CumSum along a constant axis: a lower (or, reversed, upper) triangle of ones, strict when
// exclusive. Float tensors (the matmul's).
Outputs cumsum(NodeContext& node) {
  node.check_attrs({"exclusive", "reverse"});
  const Operand& x = node.input(0);
  if (!ir::is_floating(x.type().dtype))
    node.fail("a cumulative sum of " + x.type().to_string() + " is not supported (kiln sums float tensors)");
  const int rank = x.type().rank();
  const int axis = normalize_axis_or_fail(node, node.const_ints(1, "axis").at(0), rank, "axis");
  const bool exclusive = node.attr_int("exclusive", 0) != 0, reverse = node.attr_int("reverse", 0) != 0;
  const int64_t n = x.type().shape[axis];
  node.check_fold_size({x.type().dtype, {n, n}}, "the summing matrix");
  AxisMatrix m;
  m.weights.assign(static_cast<size_t>(n * n), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const bool summed = reverse ? (exclusive ? j > i : j >= i) : (exclusive ? j < i : j <= i);
      m.weights[static_cast<size_t>(i * n + j)] = summed ? 1.0 : 0.0;
    }
  return {apply_along(node, x, axis, m, n)};
}

// LRN: x / (bias + alpha / size * the sum of squares over the `size` channels around)^beta; the
// window sum is a band matrix along the channels.
Outputs lrn(NodeContext& node) {
  node.check_attrs({"alpha", "beta", "bias", "size"});
  const Operand& x = node.input(0);
  if (x.type().rank() < 3) node.fail("input must have rank >= 3 (N, C, spatial...)");
  if (!ir::is_floating(x.type().dtype)) node.fail("input must be a float tensor");
  const int64_t size = node.attr_int("size", 0);
  const int64_t channels = x.type().shape[1];
  if (size < 1 || size > (int64_t{1} << 24)) node.fail("size must lie in [1, 2^24], got " + std::to_string(size));
  const double alpha = node.attr_float("alpha", 1e-4), beta = node.attr_float("beta", 0.75),
               bias = node.attr_float("bias", 1.0);
  node.check_fold_size({x.type().dtype, {channels, channels}}, "the channel window's matrix");
  AxisMatrix band;
  band.weights.assign(static_cast<size_t>(channels * channels), 0.0);
  const int64_t below = (size - 1) / 2, above = size - 1 - below;
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t i = std::max<int64_t>(0, c - below); i <= std::min(channels - 1, c + above); ++i)
      band.weights[static_cast<size_t>(c * channels + i)] = 1.0;
  const ir::DType dtype = x.type().dtype;
  const Operand sum = apply_along(node, node.emit(OpId::Mul, {x, x}), 1, band, channels);
  const Operand scaled = node.emit(OpId::Add, {node.emit(OpId::Mul, {sum, node.scalar(dtype, alpha / double(size))}),
                                               node.scalar(dtype, bias)});
  return {node.emit(OpId::Mul, {x, node.emit(OpId::Pow, {scaled}, {{"exponent", -beta}})})};
}

constexpr int kLast = kMaxOpset;

const OpRule kRules[] = {
    {"Upsample", 7, 9, upsample},
    {"Resize", 10, 10, upsample},
    {"Resize", 11, kLast, resize},
    {"CumSum", 11, kLast, cumsum},
    {"LRN", 1, kLast, lrn},
};

}  // namespace

std::span<const OpRule> axis_matrix_rules() { return kRules; }

}  // namespace kiln::compiler::onnx_import
