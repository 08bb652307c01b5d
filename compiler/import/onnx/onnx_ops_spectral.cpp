// ONNX spectral ops → kiln ops: DFT and STFT as one matmul by a [2n, 2k] matrix of cosines and
// sines built at import (the real and imaginary parts side by side: a complex product is four
// real ones), STFT's frames gathered first; MelWeightMatrix built at import.
#include <cmath>
#include <numbers>
#include <string>

#include "compiler/import/onnx/onnx_ops.h"
#include "compiler/import/onnx/onnx_tensor.h"

namespace kiln::compiler::onnx_import {

namespace {
using ir::OpId;
using Outputs = std::vector<Operand>;
using Ints = std::vector<int64_t>;

// The DFT of `signal` ([..., n, 1] real or [..., n, 2] complex) along its second-to-last dim,
// of `length` points (the signal truncated or zero-padded to it), keeping the first `bins`
// frequencies; [..., bins, 2]. Inverse: the conjugate exponent and a 1/length scale.
Operand transform(NodeContext& node, const Operand& signal, int64_t length, int64_t bins, bool inverse) {
  const ir::TensorType& type = signal.type();
  const int rank = type.rank();
  const int64_t n = type.shape[static_cast<size_t>(rank - 2)];
  const bool complex = type.shape.back() == 2;
  const int64_t rows = complex ? 2 * n : n;  // re[0..n), then im[0..n)
  node.check_fold_size({type.dtype, {rows, 2 * bins}}, "the DFT matrix");
  // out_re = re·cos ± im·sin, out_im = im·cos ∓ re·sin (forward: e^{-iθ}; inverse: e^{+iθ}).
  const double sign = inverse ? -1.0 : 1.0, scale = inverse ? 1.0 / double(length) : 1.0;
  std::vector<double> matrix(static_cast<size_t>(rows * 2 * bins), 0.0);
  for (int64_t t = 0; t < std::min(n, length); ++t)
    for (int64_t k = 0; k < bins; ++k) {
      // The angle of t·k/length turns, reduced exactly in integers first.
      const double angle = 2 * std::numbers::pi * double((t * k) % length) / double(length);
      const double c = std::cos(angle) * scale, s = std::sin(angle) * scale;
      matrix[static_cast<size_t>(t * 2 * bins + k)] = c;
      matrix[static_cast<size_t>(t * 2 * bins + bins + k)] = -sign * s;
      if (complex) {
        matrix[static_cast<size_t>((n + t) * 2 * bins + k)] = sign * s;
        matrix[static_cast<size_t>((n + t) * 2 * bins + bins + k)] = c;
      }
    }
  ir::Shape lead(type.shape.begin(), type.shape.end() - 2);
  Ints to_parts_first;  // [..., n, 2] → [..., 2, n]
  for (int a = 0; a < rank - 2; ++a) to_parts_first.push_back(a);
  to_parts_first.push_back(rank - 1);
  to_parts_first.push_back(rank - 2);
  ir::Shape flat = lead;
  flat.push_back(rows);
  const Operand parts = complex ? node.reshape(node.emit(OpId::Transpose, {signal}, {{"perm", to_parts_first}}), flat)
                                : node.reshape(signal, flat);
  const Operand product = node.emit(
      OpId::Matmul, {parts, node.constant(ir::Tensor::from_doubles({type.dtype, {rows, 2 * bins}}, matrix), "dft")});
  ir::Shape split = lead;
  split.push_back(2);
  split.push_back(bins);
  return node.emit(OpId::Transpose, {node.reshape(product, split)}, {{"perm", to_parts_first}});
}

// Moves `axis` of x to position `to` (the rest keep their order), or back with `inverse`.
Ints move_axis(int rank, int axis, int to) {
  Ints perm;
  for (int a = 0; a < rank; ++a)
    if (a != axis) perm.push_back(a);
  perm.insert(perm.begin() + to, axis);
  return perm;
}
Ints inverse_of(const Ints& perm) {
  Ints inverse(perm.size());
  for (size_t a = 0; a < perm.size(); ++a) inverse[static_cast<size_t>(perm[a])] = static_cast<int64_t>(a);
  return inverse;
}

Outputs dft(NodeContext& node) {
  node.check_attrs({"axis", "inverse", "onesided"});
  const Operand& x = node.input(0);
  const ir::TensorType& type = x.type();
  const int rank = type.rank();
  if (!ir::is_floating(type.dtype)) node.fail("input must be a float tensor, got " + type.to_string());
  if (rank < 3 || (type.shape.back() != 1 && type.shape.back() != 2))
    node.fail("input must be [batch, signal dims..., 1 or 2] (real or complex), got " + type.to_string());
  int64_t axis = node.opset() >= 20 ? -2 : node.attr_int("axis", 1);
  if (node.opset() >= 20 && node.has_input(2)) {
    const Ints given = node.const_ints(2, "axis");
    if (given.size() != 1) node.fail("axis must be a scalar");
    axis = given[0];
  }
  const int signal_axis = normalize_axis_or_fail(node, axis, rank, "axis");
  if (signal_axis == rank - 1) node.fail("axis must not be the last dim, which holds the real and imaginary parts");
  const int64_t n = type.shape[static_cast<size_t>(signal_axis)];
  int64_t length = n;
  if (node.has_input(1)) {
    const Ints given = node.const_ints(1, "dft_length");
    if (given.size() != 1 || given[0] < 1 || given[0] > (int64_t{1} << 24))
      node.fail("dft_length must be one value in [1, 2^24]");
    length = given[0];
  }
  const bool inverse = node.attr_int("inverse", 0) != 0, onesided = node.attr_int("onesided", 0) != 0;
  if (onesided && (inverse || type.shape.back() == 2))
    node.fail("onesided is supported for a forward DFT of a real signal only");
  const int64_t bins = onesided ? length / 2 + 1 : length;

  const Ints perm = move_axis(rank, signal_axis, rank - 2);
  const bool moved = signal_axis != rank - 2;
  const Operand signal = moved ? node.emit(OpId::Transpose, {x}, {{"perm", perm}}) : x;
  const Operand result = transform(node, signal, length, bins, inverse);
  return {moved ? node.emit(OpId::Transpose, {result}, {{"perm", inverse_of(perm)}}) : result};
}

// STFT: the frames of `signal` ([batch, length, 1 or 2]) every frame_step samples, each times
// the window, transformed; [batch, frames, bins, 2].
Outputs stft(NodeContext& node) {
  node.check_attrs({"onesided"});
  const Operand& signal = node.input(0);
  const ir::TensorType& type = signal.type();
  if (!ir::is_floating(type.dtype)) node.fail("signal must be a float tensor, got " + type.to_string());
  if (type.rank() != 3 || (type.shape[2] != 1 && type.shape[2] != 2))
    node.fail("signal must be [batch, length, 1 or 2], got " + type.to_string());
  const Ints step_value = node.const_ints(1, "frame_step");
  if (step_value.size() != 1 || step_value[0] < 1) node.fail("frame_step must be one value >= 1");
  const int64_t step = step_value[0], samples = type.shape[1];
  int64_t frame = 0;
  if (node.has_input(3)) {
    const Ints given = node.const_ints(3, "frame_length");
    if (given.size() != 1) node.fail("frame_length must be a scalar");
    frame = given[0];
  }
  if (node.has_input(2)) {
    const ir::TensorType& window = node.input(2).type();
    if (window.rank() != 1) node.fail("window must be 1-D, got " + window.to_string());
    if (frame != 0 && frame != window.shape[0])
      node.fail("frame_length " + std::to_string(frame) + " differs from the window's length " + std::to_string(window.shape[0]));
    frame = window.shape[0];
  }
  if (frame < 1 || frame > samples)
    node.fail("frame_length (or the window's length) must lie in [1, " + std::to_string(samples) + "], got " + std::to_string(frame));
  const bool onesided = node.attr_int("onesided", 1) != 0;
  if (onesided && type.shape[2] == 2) node.fail("onesided is supported for a real signal only");
  const int64_t frames = (samples - frame) / step + 1;
  const int64_t bins = onesided ? frame / 2 + 1 : frame;

  node.check_fold_size({ir::DType::I64, {frames * frame}}, "the frame positions");
  std::vector<double> positions(static_cast<size_t>(frames * frame));
  for (int64_t f = 0; f < frames; ++f)
    for (int64_t t = 0; t < frame; ++t) positions[static_cast<size_t>(f * frame + t)] = double(f * step + t);
  const Operand at = node.constant(ir::Tensor::from_doubles({ir::DType::I64, {frames * frame}}, positions), "frame_positions");
  Operand framed = node.reshape(gather_along(node, signal, at, 1), {type.shape[0], frames, frame, type.shape[2]});
  if (node.has_input(2)) {
    Operand window = node.input(2);
    if (window.type().dtype != type.dtype) window = node.emit(OpId::Cast, {window}, {{"to", std::string(ir::dtype_name(type.dtype))}});
    framed = node.emit(OpId::Mul, {framed, node.reshape(window, {1, 1, frame, 1})});
  }
  return {transform(node, framed, frame, bins, false)};
}

// MelWeightMatrix: [dft_length / 2 + 1, num_mel_bins] triangular filters spaced evenly on the mel
// scale from lower_edge_hertz, built at import as ONNX's reference does (bin edges rounded down
// to spectrogram bins of (dft_length + 1) / sample_rate).
Outputs mel_weight_matrix(NodeContext& node) {
  node.check_attrs({"output_datatype"});
  auto one = [&](int index, const char* what) {
    const std::vector<double> v = node.const_doubles(index, what);
    if (v.size() != 1) node.fail(std::string(what) + " must be a scalar");
    return v[0];
  };
  const double mel_bins = one(0, "num_mel_bins"), dft_length = one(1, "dft_length"), rate = one(2, "sample_rate");
  const double lower = one(3, "lower_edge_hertz"), upper = one(4, "upper_edge_hertz");
  if (!(mel_bins >= 1 && mel_bins <= 65536)) node.fail("num_mel_bins must lie in [1, 65536]");
  if (!(dft_length >= 1 && dft_length <= (1 << 24))) node.fail("dft_length must lie in [1, 2^24]");
  if (!(rate > 0) || !(lower >= 0) || !(upper > lower) || !std::isfinite(upper))
    node.fail("need sample_rate > 0 and 0 <= lower_edge_hertz < upper_edge_hertz");
  const int onnx_type = static_cast<int>(node.attr_int("output_datatype", 1));
  const auto dtype = dtype_from_onnx(onnx_type);
  if (!dtype) node.fail("output_datatype " + onnx_dtype_name(onnx_type) + " is not supported");
  const int64_t mels = static_cast<int64_t>(mel_bins), spectrum = static_cast<int64_t>(dft_length) / 2 + 1;
  node.check_fold_size({*dtype, {spectrum, mels}}, "the mel weight matrix");

  auto to_mel = [](double hertz) { return 2595.0 * std::log10(1.0 + hertz / 700.0); };
  // ONNX's reference divides the mel range into mels + 2 steps (one per edge), so the last edge
  // falls short of upper_edge_hertz; kept, as every runtime matches it.
  const double low_mel = to_mel(lower), step = (to_mel(upper) - low_mel) / double(mels + 2);
  std::vector<int64_t> edge(static_cast<size_t>(mels + 2));
  for (int64_t i = 0; i < mels + 2; ++i) {
    const double hertz = 700.0 * (std::pow(10.0, (double(i) * step + low_mel) / 2595.0) - 1.0);
    edge[static_cast<size_t>(i)] = static_cast<int64_t>(std::floor((std::floor(dft_length) + 1) * hertz / rate));
    if (edge[static_cast<size_t>(i)] >= spectrum)
      node.fail("upper_edge_hertz " + std::to_string(upper) + " lies beyond the spectrum's top bin (sample_rate / 2)");
  }
  std::vector<double> weights(static_cast<size_t>(spectrum * mels), 0.0);
  auto at = [&](int64_t bin, int64_t mel) -> double& { return weights[static_cast<size_t>(bin * mels + mel)]; };
  for (int64_t m = 0; m < mels; ++m) {
    const int64_t left = edge[static_cast<size_t>(m)], center = edge[static_cast<size_t>(m + 1)],
                  right = edge[static_cast<size_t>(m + 2)];
    if (center == left) at(center, m) = 1.0;
    else
      for (int64_t j = left; j <= center; ++j) at(j, m) = double(j - left) / double(center - left);
    for (int64_t j = center; j < right; ++j) at(j, m) = double(right - j) / double(right - center);
  }
  return {node.constant(ir::Tensor::from_doubles({*dtype, {spectrum, mels}}, weights), "mel_weights")};
}

constexpr OpRule kRules[] = {
    {"DFT", 17, kMaxOpset, dft},
    {"STFT", 17, kMaxOpset, stft},
    {"MelWeightMatrix", 17, kMaxOpset, mel_weight_matrix},
};

}  // namespace

std::span<const OpRule> spectral_rules() { return kRules; }

}  // namespace kiln::compiler::onnx_import
