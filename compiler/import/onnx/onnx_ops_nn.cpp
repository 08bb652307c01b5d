// ONNX convolution, pooling, normalization, Gemm/MatMul and softmax → kiln ops. kiln's conv2d
// and pools are 2-D over NCHW; 1-D ones run as 2-D with a height of 1.
#include <cmath>
#include <numeric>

#include "compiler/import/onnx/onnx_ops.h"

namespace kiln::compiler::onnx_import {

namespace {
using ir::OpId;
using Outputs = std::vector<Operand>;
using Ints = std::vector<int64_t>;

// The spatial layout of a windowed op as kiln sees it: always 2-D.
struct Window {
  Ints kernel, stride, dilation, pad;  // pad: [top, left, bottom, right]
  bool one_d = false;                  // the ONNX op was 1-D: inputs get a unit height
};

// Window sizes, strides, dilations and pads live in [min, 2^24]: far above any real model, and
// low enough that the output-size arithmetic cannot overflow.
void check_window_values(const NodeContext& node, const char* name, const Ints& values, int64_t min) {
  constexpr int64_t kMaxWindowValue = int64_t{1} << 24;
  for (int64_t value : values)
    if (value < min || value > kMaxWindowValue)
      node.fail(std::string(name) + " value " + std::to_string(value) + " is outside [" + std::to_string(min) +
                ", 2^24]");
}

// A windowed op's attributes for any number of spatial dims: pads are [begins..., ends...].
struct WindowNd {
  Ints kernel, stride, dilation, pads;
};

// Reads kernel_shape/strides/dilations/pads/auto_pad for the spatial dims of input shape `x`
// (NC + spatial), with `kernel` taken from the weight when the node does not say.
WindowNd read_window_nd(NodeContext& node, const ir::Shape& x, Ints kernel) {
  const int spatial = static_cast<int>(x.size()) - 2;
  kernel = node.attr_ints("kernel_shape", kernel);
  if (static_cast<int>(kernel.size()) != spatial) node.fail("kernel_shape must have one value per spatial dim");
  Ints stride = node.attr_ints("strides", Ints(spatial, 1));
  Ints dilation = node.attr_ints("dilations", Ints(spatial, 1));
  Ints pads = node.attr_ints("pads", Ints(2 * spatial, 0));
  if (static_cast<int>(stride.size()) != spatial || static_cast<int>(dilation.size()) != spatial ||
      static_cast<int>(pads.size()) != 2 * spatial)
    node.fail("strides, dilations and pads must have one value per spatial dim (pads: two)");
  check_window_values(node, "kernel_shape", kernel, 1);
  check_window_values(node, "strides", stride, 1);
  check_window_values(node, "dilations", dilation, 1);
  check_window_values(node, "pads", pads, 0);
  const std::string auto_pad = node.attr_string("auto_pad", "NOTSET");
  if (auto_pad == "VALID") {
    pads.assign(2 * spatial, 0);
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (int d = 0; d < spatial; ++d) {
      const int64_t in = x[2 + d];
      const int64_t out = (in + stride[d] - 1) / stride[d];
      const int64_t total = std::max<int64_t>(0, (out - 1) * stride[d] + (kernel[d] - 1) * dilation[d] + 1 - in);
      const int64_t small = total / 2;
      pads[d] = auto_pad == "SAME_UPPER" ? small : total - small;
      pads[d + spatial] = total - pads[d];
    }
  } else if (auto_pad != "NOTSET") {
    node.fail("auto_pad '" + auto_pad + "' is not supported");
  }
  return {kernel, stride, dilation, pads};
}

// The same as kiln's 2-D layout: 1-D ops get a unit height.
Window read_window(NodeContext& node, const ir::Shape& x, Ints kernel) {
  const int spatial = static_cast<int>(x.size()) - 2;
  if (spatial != 1 && spatial != 2)
    node.fail(std::to_string(spatial) + "-D windows are not supported (kiln has 1-D and 2-D)");
  const WindowNd nd = read_window_nd(node, x, std::move(kernel));
  Window w;
  w.one_d = spatial == 1;
  if (w.one_d) {
    w.kernel = {1, nd.kernel[0]};
    w.stride = {1, nd.stride[0]};
    w.dilation = {1, nd.dilation[0]};
    w.pad = {0, nd.pads[0], 0, nd.pads[1]};
  } else {
    w.kernel = nd.kernel;
    w.stride = nd.stride;
    w.dilation = nd.dilation;
    w.pad = nd.pads;
  }
  return w;
}

// x with `before`/`after` elements of `value` added along `axis` (a concat with constants).
Operand pad_axis(NodeContext& node, const Operand& x, int axis, int64_t before, int64_t after, double value) {
  std::vector<Operand> parts;
  // A block of `value`: a broadcast of one scalar, folded when small, filled at run time if not.
  auto block = [&](int64_t count) {
    ir::Shape shape = x.type().shape;
    shape[axis] = count;
    parts.push_back(node.fill(x.type().dtype, shape, value));
  };
  if (before > 0) block(before);
  parts.push_back(x);
  if (after > 0) block(after);
  if (parts.size() == 1) return x;
  return node.emit(OpId::Concat, parts, {{"axis", int64_t{axis}}});
}

// [N, C, L] → [N, C, 1, L] for 1-D ops.
Operand to_2d(NodeContext& node, const Operand& x) {
  const ir::Shape& s = x.type().shape;
  return node.reshape(x, {s[0], s[1], 1, s[2]});
}
Operand from_2d(NodeContext& node, const Operand& y) {
  const ir::Shape& s = y.type().shape;
  return node.reshape(y, {s[0], s[1], s[3]});
}

Outputs conv(NodeContext& node) {
  node.check_attrs({"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"});
  return {convolve(node, node.input(0), node.input(1), node.has_input(2) ? &node.input(2) : nullptr)};
}

}  // namespace

namespace {

// A 3-D convolution as conv2d over depth slices: for each of the kernel's depth taps, the input's
// depth positions that tap reads (a strided slice of the depth-padded input) fold into the batch,
// and one conv2d with that tap's [O, C/g, kH, kW] weight slice covers them all; the taps' results
// add up. K_d conv2d calls instead of one per output depth.
Operand convolve_volume(NodeContext& node, const Operand& x, const Operand& weight, const Operand* bias) {
  const ir::Shape& xs = x.type().shape;
  const ir::Shape& ws = weight.type().shape;
  const WindowNd w = read_window_nd(node, xs, Ints(ws.begin() + 2, ws.end()));
  const int64_t group = node.attr_int("group", 1);
  const int64_t n = xs[0], depth = xs[2], taps = w.kernel[0], step = w.stride[0], spacing = w.dilation[0];
  const int64_t span = (taps - 1) * spacing + 1, padded = depth + w.pads[0] + w.pads[3];
  if (padded < span) node.fail("the kernel's depth span " + std::to_string(span) + " exceeds the padded input's depth " + std::to_string(padded));
  const int64_t out_depth = (padded - span) / step + 1;
  const Operand volume = pad_axis(node, x, 2, w.pads[0], w.pads[3], 0.0);
  Operand sum;
  for (int64_t t = 0; t < taps; ++t) {
    const int64_t first = t * spacing;
    const Operand slab = node.emit(OpId::Slice, {volume}, {{"starts", Ints{first}}, {"ends", Ints{first + (out_depth - 1) * step + 1}},
                                                          {"axes", Ints{2}}, {"steps", Ints{step}}});  // [N, C, D', H, W]
    const Operand batched = node.reshape(node.emit(OpId::Transpose, {slab}, {{"perm", Ints{0, 2, 1, 3, 4}}}),
                                         {n * out_depth, xs[1], xs[3], xs[4]});
    const Operand tap = node.reshape(
        node.emit(OpId::Slice, {weight}, {{"starts", Ints{t}}, {"ends", Ints{t + 1}}, {"axes", Ints{2}}, {"steps", Ints{1}}}),
        {ws[0], ws[1], ws[3], ws[4]});
    const Operand y = node.emit(OpId::Conv2d, {batched, tap},
                                {{"stride", Ints{w.stride[1], w.stride[2]}},
                                 {"pad", Ints{w.pads[1], w.pads[2], w.pads[4], w.pads[5]}},
                                 {"dilation", Ints{w.dilation[1], w.dilation[2]}}, {"groups", group}});
    sum = sum.present() ? node.emit(OpId::Add, {sum, y}) : y;
  }
  if (bias) sum = node.emit(OpId::BiasAdd, {sum, *bias}, {{"axis", int64_t{1}}});
  const ir::Shape& ys = sum.type().shape;  // [N * D', O, H', W']
  return node.emit(OpId::Transpose, {node.reshape(sum, {n, out_depth, ys[1], ys[2], ys[3]})}, {{"perm", Ints{0, 2, 1, 3, 4}}});
}

}  // namespace

Operand convolve(NodeContext& node, const Operand& x, const Operand& weight, const Operand* bias) {
  if (x.type().rank() < 3) node.fail("input must have rank >= 3 (N, C, spatial...)");
  if (weight.type().rank() != x.type().rank())
    node.fail("weight " + weight.type().to_string() + " must have the input's rank, " +
              std::to_string(x.type().rank()));
  if (x.type().rank() == 5) return convolve_volume(node, x, weight, bias);
  const ir::Shape& ws = weight.type().shape;
  const Window w = read_window(node, x.type().shape, Ints(ws.begin() + 2, ws.end()));
  Operand input = x, kernel = weight;
  if (w.one_d) {
    input = to_2d(node, x);
    kernel = node.reshape(weight, {ws[0], ws[1], 1, ws[2]});
  }
  std::vector<Operand> operands{input, kernel};
  if (bias) operands.push_back(*bias);
  const Operand y = node.emit(OpId::Conv2d, operands,
                              {{"stride", w.stride}, {"pad", w.pad}, {"dilation", w.dilation},
                               {"groups", node.attr_int("group", 1)}});
  return w.one_d ? from_2d(node, y) : y;
}

namespace {

// ConvTranspose is the input gradient of a convolution: kiln's conv2d_grad_input takes the
// transposed conv's weight layout [C_in, C_out/group, kH, kW] as it is, with the output shape
// from the pads (or the pads from output_shape / auto_pad, as the ONNX spec computes them).
Outputs conv_transpose(NodeContext& node) {
  node.check_attrs({"auto_pad", "dilations", "group", "kernel_shape", "output_padding", "output_shape", "pads", "strides"});
  const Operand& x = node.input(0);
  const Operand& weight = node.input(1);
  const int rank = x.type().rank();
  if (rank != 3 && rank != 4) node.fail(std::to_string(rank - 2) + "-D transposed convolution is not supported");
  if (weight.type().rank() != rank)
    node.fail("weight " + weight.type().to_string() + " must have the input's rank, " + std::to_string(rank));
  const int spatial = rank - 2;
  const ir::Shape& xs = x.type().shape;
  const ir::Shape& ws = weight.type().shape;
  const int64_t group = node.attr_int("group", 1);
  const Ints kernel = node.attr_ints("kernel_shape", Ints(ws.begin() + 2, ws.end()));
  const Ints stride = node.attr_ints("strides", Ints(spatial, 1));
  const Ints dilation = node.attr_ints("dilations", Ints(spatial, 1));
  const Ints out_pad = node.attr_ints("output_padding", Ints(spatial, 0));
  Ints pads = node.attr_ints("pads", Ints(2 * spatial, 0));
  const Ints output_shape = node.attr_ints("output_shape");
  const std::string auto_pad = node.attr_string("auto_pad", "NOTSET");
  if (static_cast<int>(kernel.size()) != spatial || static_cast<int>(stride.size()) != spatial ||
      static_cast<int>(dilation.size()) != spatial || static_cast<int>(out_pad.size()) != spatial ||
      static_cast<int>(pads.size()) != 2 * spatial)
    node.fail("kernel_shape, strides, dilations, output_padding and pads must have one value per spatial dim (pads: two)");
  check_window_values(node, "kernel_shape", kernel, 1);
  check_window_values(node, "strides", stride, 1);
  check_window_values(node, "dilations", dilation, 1);
  check_window_values(node, "output_padding", out_pad, 0);
  check_window_values(node, "pads", pads, 0);
  check_window_values(node, "output_shape", output_shape, 1);
  check_window_values(node, "group", {group}, 1);
  if (!output_shape.empty() && static_cast<int>(output_shape.size()) < spatial)
    node.fail("output_shape must have a value per spatial dim");
  Ints out(spatial);
  for (int d = 0; d < spatial; ++d) {
    if (xs[2 + d] > ir::kMaxElements / stride[d]) node.fail("the output would have more than 2^48 elements");
    const int64_t full = stride[d] * (xs[2 + d] - 1) + out_pad[d] + (kernel[d] - 1) * dilation[d] + 1;
    if (!output_shape.empty() || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      const int64_t want = !output_shape.empty() ? output_shape.at(output_shape.size() - spatial + d) : xs[2 + d] * stride[d];
      const int64_t total = full - want;
      if (total < 0) {  // a larger output_shape is an output padding at the end
        pads[d] = pads[d + spatial] = 0;
        out[d] = want;
        continue;
      }
      const bool upper = auto_pad == "SAME_UPPER";
      pads[d] = upper ? total / 2 : total - total / 2;
      pads[d + spatial] = total - pads[d];
    } else if (auto_pad == "VALID") {
      pads[d] = pads[d + spatial] = 0;
    }
    out[d] = full - pads[d] - pads[d + spatial];
    if (out_pad[d] >= stride[d]) node.fail("output_padding must be smaller than the stride");
  }
  const int64_t channels = ws.at(1) * group;
  Operand input = x, w = weight;
  ir::Shape shape{xs[0], channels};
  Ints pad4, stride2, dilation2;
  if (spatial == 1) {
    input = node.reshape(x, {xs[0], xs[1], 1, xs[2]});
    w = node.reshape(weight, {ws[0], ws[1], 1, ws[2]});
    shape.insert(shape.end(), {1, out[0]});
    pad4 = {0, pads[0], 0, pads[1]};
    stride2 = {1, stride[0]};
    dilation2 = {1, dilation[0]};
  } else {
    shape.insert(shape.end(), out.begin(), out.end());
    pad4 = pads;
    stride2 = stride;
    dilation2 = dilation;
  }
  Operand y = node.emit(OpId::Conv2dGradInput, {input, w},
                        {{"shape", shape}, {"stride", stride2}, {"pad", pad4}, {"dilation", dilation2}, {"groups", group}});
  if (node.has_input(2)) y = node.emit(OpId::BiasAdd, {y, node.input(2)}, {{"axis", int64_t{1}}});
  if (spatial == 1) y = node.reshape(y, {xs[0], channels, out[0]});
  return {y};
}

// Output length of a pooling window along one dim, floor or ceil.
int64_t pooled(int64_t in, int64_t pad, int64_t k, int64_t d, int64_t s, bool ceil_mode) {
  const int64_t span = in + pad - ((k - 1) * d + 1);
  return (ceil_mode ? (span + s - 1) / s : span / s) + 1;
}

// ceil_mode = 1 is floor mode with extra padding at the end, as long as the last window starts
// inside the input or the left padding (which ONNX and PyTorch guarantee).
void apply_ceil_mode(NodeContext& node, const ir::Shape& x, Window& w, bool counts_padding) {
  if (node.attr_int("ceil_mode", 0) == 0) return;
  for (int d = 0; d < 2; ++d) {
    const int64_t in = x[2 + d];
    const int64_t pad = w.pad[d] + w.pad[d + 2];
    int64_t want = pooled(in, pad, w.kernel[d], w.dilation[d], w.stride[d], true);
    // The last window must start inside the input or its left padding.
    if ((want - 1) * w.stride[d] >= in + w.pad[d]) --want;
    const int64_t have = pooled(in, pad, w.kernel[d], w.dilation[d], w.stride[d], false);
    if (want == have) continue;
    if (counts_padding)
      node.fail("ceil_mode with count_include_pad changes the output shape; not supported");
    w.pad[d + 2] += (want - have) * w.stride[d];
  }
}

// kiln's pools pad at most half a window on each side; wider padding (which ONNX allows) is
// added to the input explicitly: -inf for max, 0 for an average that counts the padding.
Operand pool2d(NodeContext& node, OpId op, const Operand& x, Window w, ir::AttrMap attrs) {
  Operand input = w.one_d ? to_2d(node, x) : x;
  bool wide = false;
  for (int d = 0; d < 2; ++d) wide |= 2 * std::max(w.pad[d], w.pad[d + 2]) > w.kernel[d];
  const bool counts_padding = op == OpId::MaxPool2d || std::get<bool>(attrs.at("count_include_pad"));
  if (wide) {
    const double value = op == OpId::MaxPool2d ? -INFINITY : 0.0;
    const Ints pad = w.pad;
    auto padded = [&](Operand t) {
      for (int d = 0; d < 2; ++d) t = pad_axis(node, t, 2 + d, pad[d], pad[d + 2], value);
      return t;
    };
    input = padded(input);
    w.pad = {0, 0, 0, 0};
    ir::AttrMap window = attrs;
    window["kernel"] = w.kernel;
    window["stride"] = w.stride;
    window["pad"] = w.pad;
    if (!counts_padding) {
      // The mean over the window's taps inside the input: the padded sum over the count of
      // real taps, which pooling a padded tensor of ones computes (folded to a constant).
      window["count_include_pad"] = true;
      const ir::Shape& s = w.one_d ? to_2d(node, x).type().shape : x.type().shape;
      const Operand count = node.emit(op, {padded(node.fill(x.type().dtype, {1, 1, s[2], s[3]}, 1.0))}, window);
      const Operand y = node.emit(OpId::Div, {node.emit(op, {input}, window), count});
      return w.one_d ? from_2d(node, y) : y;
    }
  }
  attrs["kernel"] = w.kernel;
  attrs["stride"] = w.stride;
  attrs["pad"] = w.pad;
  const Operand y = node.emit(op, {input}, std::move(attrs));
  return w.one_d ? from_2d(node, y) : y;
}

// Pooling over 3 or more spatial dims, one dim at a time: a box window is the product of its
// per-dim windows, so the max is the max of per-dim maxima, and the mean the mean of per-dim
// means (a box's count of real taps, without padding, is the product of the per-dim counts).
// Each dim moves last and pools as a [1, rest, 1, length] tensor.
Operand pool_separable(NodeContext& node, OpId op, const Operand& x, const WindowNd& nd, const ir::AttrMap& attrs,
                       bool counts_padding) {
  const int rank = x.type().rank(), spatial = rank - 2;
  Operand y = x;
  for (int d = spatial - 1; d >= 0; --d) {
    const int axis = 2 + d;
    Ints perm;
    for (int a = 0; a < rank; ++a)
      if (a != axis) perm.push_back(a);
    perm.push_back(axis);
    Ints inverse(static_cast<size_t>(rank));
    for (int a = 0; a < rank; ++a) inverse[static_cast<size_t>(perm[static_cast<size_t>(a)])] = a;
    Operand moved = node.emit(OpId::Transpose, {y}, {{"perm", perm}});
    const ir::Shape moved_shape = moved.type().shape;
    const int64_t length = moved_shape.back(), rest = ir::num_elements(moved_shape) / length;
    const ir::Shape as_2d{1, rest, 1, length};
    Window w;
    w.kernel = {1, nd.kernel[d]};
    w.stride = {1, nd.stride[d]};
    w.dilation = {1, nd.dilation[d]};
    w.pad = {0, nd.pads[d], 0, nd.pads[d + spatial]};
    apply_ceil_mode(node, as_2d, w, counts_padding);
    ir::AttrMap window_attrs = attrs;
    if (op == OpId::MaxPool2d) window_attrs["dilation"] = w.dilation;
    Operand pooled = pool2d(node, op, node.reshape(moved, as_2d), w, window_attrs);
    ir::Shape back = moved_shape;
    back.back() = pooled.type().shape.back();
    y = node.emit(OpId::Transpose, {node.reshape(pooled, back)}, {{"perm", inverse}});
  }
  return y;
}

// More window taps than this for MaxPool's Indices output: a window kiln's importer will not
// unroll (each tap is a few ops).
constexpr int64_t kMaxIndexedTaps = 1024;

// MaxPool with its Indices output: the window taps visited in order (rows, then columns), each
// a strided slice of the (-inf padded) input and of a constant map of positions, keeping the first
// maximum and where it sits. Positions are flat over the whole input (batch and channel
// included), row-major, or column-major within each plane with storage_order 1.
Outputs max_pool_with_indices(NodeContext& node, const Operand& x) {
  if (!ir::is_floating(x.type().dtype)) node.fail("the Indices output is supported for float inputs only");
  if (x.type().rank() > 4) node.fail("the Indices output is supported for 1-D and 2-D pooling only");
  Window w = read_window(node, x.type().shape, {});
  const Operand input = w.one_d ? to_2d(node, x) : x;
  const ir::Shape& s = input.type().shape;
  apply_ceil_mode(node, s, w, false);
  const int64_t n = s[0], c = s[1], h = s[2], wd = s[3];
  if (w.kernel[0] * w.kernel[1] > kMaxIndexedTaps)
    node.fail("a window of " + std::to_string(w.kernel[0] * w.kernel[1]) + " taps is over the " + std::to_string(kMaxIndexedTaps) +
              " kiln unrolls for the Indices output");
  const bool column_major = node.attr_int("storage_order", 0) != 0;
  Operand padded = input;
  for (int d = 0; d < 2; ++d) padded = pad_axis(node, padded, 2 + d, w.pad[d], w.pad[d + 2], -INFINITY);
  const int64_t hp = h + w.pad[0] + w.pad[2], wp = wd + w.pad[1] + w.pad[3];
  node.check_fold_size({ir::DType::I64, {hp, wp}}, "the position map");
  std::vector<double> where(static_cast<size_t>(hp * wp), -1.0);
  for (int64_t i = 0; i < h; ++i)
    for (int64_t j = 0; j < wd; ++j)
      where[static_cast<size_t>((i + w.pad[0]) * wp + j + w.pad[1])] = double(column_major ? j * h + i : i * wd + j);
  const Operand positions = node.constant(ir::Tensor::from_doubles({ir::DType::I64, {1, 1, hp, wp}}, where), "positions");
  const int64_t out_h = (hp - ((w.kernel[0] - 1) * w.dilation[0] + 1)) / w.stride[0] + 1;
  const int64_t out_w = (wp - ((w.kernel[1] - 1) * w.dilation[1] + 1)) / w.stride[1] + 1;
  if (out_h < 1 || out_w < 1) node.fail("the window is larger than the padded input");
  auto tap = [&](const Operand& v, int64_t i, int64_t j) {
    const int64_t top = i * w.dilation[0], left = j * w.dilation[1];
    return node.emit(OpId::Slice, {v}, {{"starts", Ints{top, left}}, {"ends", Ints{top + (out_h - 1) * w.stride[0] + 1, left + (out_w - 1) * w.stride[1] + 1}},
                                        {"axes", Ints{2, 3}}, {"steps", Ints{w.stride[0], w.stride[1]}}});
  };
  Operand best, at;
  for (int64_t i = 0; i < w.kernel[0]; ++i)
    for (int64_t j = 0; j < w.kernel[1]; ++j) {
      const Operand value = tap(padded, i, j), position = tap(positions, i, j);
      if (!best.present()) {
        best = value;
        at = node.emit(OpId::BroadcastTo, {position}, {{"shape", ir::Shape{n, c, out_h, out_w}}});
        continue;
      }
      const Operand better = node.emit(OpId::Greater, {value, best});  // ties keep the earlier tap
      best = node.emit(OpId::Where, {better, value, best});
      at = node.emit(OpId::Where, {better, position, at});
    }
  // The plane's offset in the flat input: (n * C + c) * H * W.
  const Operand plane = node.emit(OpId::Add, {node.emit(OpId::Mul, {node.positions(4, 0, n), node.scalar(ir::DType::I64, double(c))}),
                                               node.positions(4, 1, c)});
  at = node.emit(OpId::Add, {at, node.emit(OpId::Mul, {plane, node.scalar(ir::DType::I64, double(h * wd))})});
  if (w.one_d) return {from_2d(node, best), from_2d(node, at)};
  return {best, at};
}

Outputs max_pool(NodeContext& node) {
  node.check_attrs({"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"});
  const Operand& x = node.input(0);
  if (x.type().rank() < 3) node.fail("input must have rank >= 3");
  if (node.num_outputs() > 1 && node.output_used(1)) return max_pool_with_indices(node, x);
  auto pool = [&](const Operand& input) {
    if (input.type().rank() > 4)
      return pool_separable(node, OpId::MaxPool2d, input, read_window_nd(node, input.type().shape, {}), {}, false);
    Window w = read_window(node, input.type().shape, {});
    const ir::Shape& s = input.type().shape;
    apply_ceil_mode(node, w.one_d ? ir::Shape{s[0], s[1], 1, s[2]} : s, w, false);
    return pool2d(node, OpId::MaxPool2d, input, w, {{"dilation", w.dilation}});
  };
  const ir::DType dtype = x.type().dtype;
  if (!ir::is_integer(dtype)) return {pool(x)};
  // 8- and 16-bit integers pool in f32, which holds every one of their values exactly.
  if (ir::dtype_size(dtype) > 2) node.fail("max pooling " + x.type().to_string() + " is not supported");
  const Operand pooled = pool(node.emit(OpId::Cast, {x}, {{"to", std::string("f32")}}));
  return {node.emit(OpId::Cast, {pooled}, {{"to", std::string(ir::dtype_name(dtype))}})};
}

Outputs average_pool(NodeContext& node) {
  node.check_attrs({"auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads", "strides"});
  const Operand& x = node.input(0);
  if (x.type().rank() < 3) node.fail("input must have rank >= 3");
  const bool include = node.attr_int("count_include_pad", 0) != 0;
  if (x.type().rank() > 4) {
    const WindowNd nd = read_window_nd(node, x.type().shape, {});
    for (int64_t d : nd.dilation)
      if (d != 1) node.fail("dilated average pooling is not supported");
    return {pool_separable(node, OpId::AvgPool2d, x, nd, {{"count_include_pad", include}}, include)};
  }
  Window w = read_window(node, x.type().shape, {});
  if (w.dilation != Ints{1, 1}) node.fail("dilated average pooling is not supported");
  const ir::Shape shape2d = w.one_d ? ir::Shape{x.type().shape[0], x.type().shape[1], 1, x.type().shape[2]}
                                    : x.type().shape;
  apply_ceil_mode(node, shape2d, w, include);
  return {pool2d(node, OpId::AvgPool2d, x, w, {{"count_include_pad", include}})};
}

Ints spatial_axes(const Operand& x) {
  Ints axes;
  for (int d = 2; d < x.type().rank(); ++d) axes.push_back(d);
  return axes;
}

Outputs global_average_pool(NodeContext& node) {
  const Operand& x = node.input(0);
  if (x.type().rank() == 4) return {node.emit(OpId::GlobalAvgPool, {x})};
  return {node.emit(OpId::ReduceMean, {x}, {{"axes", spatial_axes(x)}, {"keepdims", true}})};
}

Outputs global_max_pool(NodeContext& node) {
  const Operand& x = node.input(0);
  return {node.emit(OpId::ReduceMax, {x}, {{"axes", spatial_axes(x)}, {"keepdims", true}})};
}

// BatchNormalization with training_mode = 1 (opset 14+): normalized by the batch's statistics
// (the population variance), with the running statistics updated by momentum as outputs.
Outputs batch_norm_training(NodeContext& node) {
  const Operand& x = node.input(0);
  const int rank = x.type().rank();
  if (rank < 2) node.fail("input must have rank >= 2");
  const ir::DType t = x.type().dtype;
  Ints axes{0};
  for (int a = 2; a < rank; ++a) axes.push_back(a);
  ir::Shape per_channel(static_cast<size_t>(rank), 1);
  per_channel[1] = x.type().shape[1];
  auto channels = [&](const Operand& v) { return node.reshape(v, per_channel); };
  const ir::AttrMap over_batch{{"axes", axes}, {"keepdims", false}};
  const Operand mean = node.emit(OpId::ReduceMean, {x}, over_batch);
  const Operand centered = node.emit(OpId::Sub, {x, channels(mean)});
  const Operand variance = node.emit(OpId::ReduceMean, {node.emit(OpId::Mul, {centered, centered})}, over_batch);
  const Operand deviation = node.emit(OpId::Sqrt, {node.emit(OpId::Add, {variance, node.scalar(t, node.attr_float("epsilon", 1e-5))})});
  const Operand y = node.emit(OpId::Add, {node.emit(OpId::Mul, {node.emit(OpId::Div, {centered, channels(deviation)}), channels(node.input(1))}),
                                          channels(node.input(2))});
  const double momentum = node.attr_float("momentum", 0.9);
  auto update = [&](const Operand& running, const Operand& batch) {
    return node.emit(OpId::Add, {node.emit(OpId::Mul, {running, node.scalar(t, momentum)}),
                                 node.emit(OpId::Mul, {batch, node.scalar(t, 1.0 - momentum)})});
  };
  return {y, update(node.input(3), mean), update(node.input(4), variance)};
}

Outputs batch_norm(NodeContext& node) {
  if (node.attr_int("training_mode", 0) != 0) {
    if (node.opset() < 14) node.fail("training_mode needs opset 14 or newer");
    return batch_norm_training(node);
  }
  if (node.num_outputs() > 1) node.fail("training outputs (running mean and variance) need training_mode = 1 (opset 14+); the older saved_mean/saved_var outputs are not supported");
  if (node.opset() < 9 && node.attr_int("spatial", 1) == 0) node.fail("spatial = 0 is not supported");
  if (node.opset() < 7 && node.attr_int("is_test", 0) == 0) node.fail("is_test = 0 (training) is not supported");
  return {node.emit(OpId::BatchNorm,
                    {node.input(0), node.input(1), node.input(2), node.input(3), node.input(4)},
                    {{"epsilon", node.attr_float("epsilon", 1e-5)}})};
}

// y = scale * (x - mean) / sqrt(var + epsilon) + bias per sample and channel, over the spatial
// dims; composed from reductions.
Outputs instance_norm(NodeContext& node) {
  const Operand& x = node.input(0);
  const int rank = x.type().rank();
  if (rank < 3) node.fail("input must have rank >= 3");
  const ir::AttrMap reduce{{"axes", spatial_axes(x)}, {"keepdims", true}};
  const Operand mean = node.emit(OpId::ReduceMean, {x}, reduce);
  const Operand centered = node.emit(OpId::Sub, {x, mean});
  const Operand var = node.emit(OpId::ReduceMean, {node.emit(OpId::Mul, {centered, centered})}, reduce);
  const ir::DType dtype = x.type().dtype;
  const Operand inv = node.emit(OpId::Rsqrt, {node.emit(OpId::Add, {var, node.scalar(dtype, node.attr_float("epsilon", 1e-5))})});
  ir::Shape channel(rank, 1);
  channel[1] = x.type().shape[1];
  const Operand scale = node.reshape(node.input(1), channel);
  const Operand bias = node.reshape(node.input(2), channel);
  const Operand normalized = node.emit(OpId::Mul, {centered, node.emit(OpId::Mul, {inv, scale})});
  return {node.emit(OpId::Add, {normalized, bias})};
}

Outputs layer_norm(NodeContext& node) {
  const Operand& x = node.input(0);
  const int axis = normalize_axis_or_fail(node, node.attr_int("axis", -1), x.type().rank(), "axis");
  const ir::Shape normalized(x.type().shape.begin() + axis, x.type().shape.end());
  auto full = [&](const Operand& p) {
    if (p.type().shape == normalized) return p;
    return node.emit(OpId::BroadcastTo, {p}, {{"shape", normalized}});
  };
  const Operand scale = full(node.input(1));
  const Operand bias = node.has_input(2)
                           ? full(node.input(2))
                           : node.constant(ir::Tensor(ir::TensorType{scale.type().dtype, normalized}), "bias");
  const double epsilon = node.attr_float("epsilon", 1e-5);
  Outputs outputs{node.emit(OpId::LayerNorm, {x, scale, bias}, {{"axis", int64_t{axis}}, {"epsilon", epsilon}})};
  if (node.num_outputs() > 1) {  // Mean and InvStdDev, with the normalized dims kept as 1
    Ints axes;
    for (int d = axis; d < x.type().rank(); ++d) axes.push_back(d);
    const ir::AttrMap reduce{{"axes", axes}, {"keepdims", true}};
    const Operand mean = node.emit(OpId::ReduceMean, {x}, reduce);
    const Operand centered = node.emit(OpId::Sub, {x, mean});
    const Operand var = node.emit(OpId::ReduceMean, {node.emit(OpId::Mul, {centered, centered})}, reduce);
    outputs.push_back(mean);
    outputs.push_back(node.emit(OpId::Rsqrt, {node.emit(OpId::Add, {var, node.scalar(x.type().dtype, epsilon)})}));
  }
  return outputs;
}

}  // namespace

Operand matmul(NodeContext& node, const Operand& a, const Operand& b) {
  Operand left = a, right = b;
  const bool vector_a = a.type().rank() == 1, vector_b = b.type().rank() == 1;
  if (vector_a) left = node.reshape(a, {1, a.type().shape[0]});
  if (vector_b) right = node.reshape(b, {b.type().shape[0], 1});
  Operand y = node.emit(OpId::Matmul, {left, right});
  if (vector_a || vector_b) {
    ir::Shape shape = y.type().shape;
    if (vector_b) shape.erase(shape.end() - 1);
    if (vector_a) shape.erase(shape.end() - (vector_b ? 1 : 2));
    y = node.reshape(y, shape);
  }
  return y;
}

namespace {

Outputs mat_mul(NodeContext& node) { return {matmul(node, node.input(0), node.input(1))}; }

// Y = alpha * A' B' + beta * C. The common Linear layer (transB = 1, vector bias) is one dense.
Outputs gemm(NodeContext& node) {
  const double alpha = node.attr_float("alpha", 1.0), beta = node.attr_float("beta", 1.0);
  const bool trans_a = node.attr_int("transA", 0) != 0, trans_b = node.attr_int("transB", 0) != 0;
  const Operand& a = node.input(0);
  const Operand& b = node.input(1);
  if (a.type().rank() != 2 || b.type().rank() != 2) node.fail("A and B must be matrices");
  const bool has_c = node.has_input(2) && beta != 0.0;
  const int64_t n = trans_b ? b.type().shape[0] : b.type().shape[1];
  if (!trans_a && trans_b && alpha == 1.0 &&
      (!has_c || (beta == 1.0 && node.input(2).type().shape == ir::Shape{n}))) {
    std::vector<Operand> operands{a, b};
    if (has_c) operands.push_back(node.input(2));
    return {node.emit(OpId::Dense, operands)};
  }
  Operand y = node.emit(OpId::Matmul, {a, b}, {{"transpose_a", trans_a}, {"transpose_b", trans_b}});
  if (alpha != 1.0) y = node.emit(OpId::Scale, {y}, {{"factor", alpha}});
  if (has_c) {
    Operand c = node.input(2);
    if (beta != 1.0) c = node.emit(OpId::Scale, {c}, {{"factor", beta}});
    y = node.emit(OpId::Add, {y, c});
  }
  return {y};
}

// Opsets 1-12 coerce the input to 2-D at `axis` (default 1); 13+ work along one axis (default -1).
template <OpId Op>
Outputs softmax_legacy(NodeContext& node) {
  const Operand& x = node.input(0);
  const int rank = x.type().rank();
  const int axis = normalize_axis_or_fail(node, node.attr_int("axis", 1), std::max(rank, 1), "axis");
  if (axis == rank - 1) return {node.emit(Op, {x}, {{"axis", int64_t{-1}}})};
  const int64_t rows = ir::num_elements(x.type().shape, 0, axis);
  const int64_t cols = ir::num_elements(x.type().shape, axis, rank);
  const Operand flat = node.reshape(x, {rows, cols});
  return {node.reshape(node.emit(Op, {flat}, {{"axis", int64_t{-1}}}), x.type().shape)};
}

template <OpId Op>
Outputs softmax(NodeContext& node) {
  return {node.emit(Op, {node.input(0)}, {{"axis", node.attr_int("axis", -1)}})};
}

// Hardmax: 1 at the first maximum along the axis, 0 elsewhere, as argmax compared with the
// positions along the axis (a constant) and cast to x's dtype.
Operand hardmax_along(NodeContext& node, const Operand& x, int axis) {
  const ir::Shape& shape = x.type().shape;
  const Operand index = node.emit(OpId::Argmax, {x}, {{"axis", int64_t{axis}}, {"keepdims", true}});
  const Operand iota = node.positions(static_cast<int>(shape.size()), axis, shape[axis]);
  const Operand hot = node.emit(OpId::Equal, {index, iota});
  return node.emit(OpId::Cast, {hot}, {{"to", std::string(ir::dtype_name(x.type().dtype))}});
}

// Opsets 1-12 coerce the input to 2-D at `axis` (default 1); 13+ work along one axis (default -1).
Outputs hardmax_legacy(NodeContext& node) {
  const Operand& x = node.input(0);
  const int rank = x.type().rank();
  const int axis = normalize_axis_or_fail(node, node.attr_int("axis", 1), std::max(rank, 1), "axis");
  const int64_t rows = ir::num_elements(x.type().shape, 0, axis);
  const int64_t cols = ir::num_elements(x.type().shape, axis, rank);
  const Operand flat = node.reshape(x, {rows, cols});
  return {node.reshape(hardmax_along(node, flat, 1), x.type().shape)};
}

Outputs hardmax(NodeContext& node) {
  const Operand& x = node.input(0);
  const int axis = normalize_axis_or_fail(node, node.attr_int("axis", -1), x.type().rank(), "axis");
  return {hardmax_along(node, x, axis)};
}

// MeanVarianceNormalization: (x - mean) / (sqrt(variance) + 1e-9) over `axes` (default N, H,
// W), as the op's ONNX function (which forms the variance as E[x^2] - E[x]^2; E[(x - mean)^2]
// here, the same value without the cancellation).
Outputs mean_variance_normalization(NodeContext& node) {
  const Operand& x = node.input(0);
  const std::vector<int64_t> axes = node.attr_ints("axes", {0, 2, 3});
  const ir::AttrMap reduce = {{"axes", axes}, {"keepdims", true}};
  const Operand mean = node.emit(OpId::ReduceMean, {x}, reduce);
  const Operand centered = node.emit(OpId::Sub, {x, mean});
  const Operand variance = node.emit(OpId::ReduceMean, {node.emit(OpId::Mul, {centered, centered})}, reduce);
  const Operand deviation = node.emit(OpId::Add, {node.emit(OpId::Sqrt, {variance}), node.scalar(x.type().dtype, 1e-9)});
  return {node.emit(OpId::Div, {centered, deviation})};
}

// Inference: Dropout passes its input through; the mask, when asked for, is all true.
Outputs dropout(NodeContext& node) {
  if (node.opset() >= 12 && node.has_input(2)) {
    const auto training = node.const_ints(2, "training_mode");
    // Training with a ratio of 0 drops nothing; any other ratio draws a random mask at run time,
    // which kiln's import does not build (kiln train switches its own dropout to training).
    const double ratio = node.has_input(1) ? node.const_doubles(1, "ratio").at(0) : 0.5;
    if (!training.empty() && training[0] != 0 && ratio != 0.0)
      node.fail("training_mode = true with a ratio above 0 (a random mask at run time) is not supported");
  }
  const Operand& x = node.input(0);
  Outputs outputs{x};
  if (node.num_outputs() > 1) {
    outputs.push_back(node.fill(node.opset() >= 10 ? ir::DType::Bool : x.type().dtype, x.type().shape, 1.0));
  }
  return outputs;
}

constexpr int kLast = kMaxOpset;

const OpRule kRules[] = {
    {"Conv", 1, kLast, conv},
    {"ConvTranspose", 1, kLast, conv_transpose},
    {"MaxPool", 1, kLast, max_pool},
    {"AveragePool", 1, kLast, average_pool},
    {"GlobalAveragePool", 1, kLast, global_average_pool},
    {"GlobalMaxPool", 1, kLast, global_max_pool},
    {"BatchNormalization", 1, kLast, batch_norm},
    {"InstanceNormalization", 1, kLast, instance_norm},
    {"LayerNormalization", 17, kLast, layer_norm},
    {"MatMul", 1, kLast, mat_mul},
    {"Gemm", 1, kLast, gemm},
    {"Softmax", 1, 12, softmax_legacy<OpId::Softmax>},
    {"Softmax", 13, kLast, softmax<OpId::Softmax>},
    {"LogSoftmax", 1, 12, softmax_legacy<OpId::LogSoftmax>},
    {"LogSoftmax", 13, kLast, softmax<OpId::LogSoftmax>},
    {"Dropout", 1, kLast, dropout},
    {"Hardmax", 1, 12, hardmax_legacy},
    {"Hardmax", 13, kLast, hardmax},
    {"MeanVarianceNormalization", 9, kLast, mean_variance_normalization},
};
}  // namespace

std::span<const OpRule> nn_rules() { return kRules; }

}  // namespace kiln::compiler::onnx_import
