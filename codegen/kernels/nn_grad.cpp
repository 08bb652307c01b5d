// CUDA kernels for the window backward ops (ir/ops/nn_grad_ops.cpp). Semantics:
// ir/eval/kernels_nn_grad.cpp, which scatters; these kernels gather instead, one
// thread per result element in a grid-stride loop, so no atomics and a deterministic sum:
//
//   conv2d_grad_input   dx[n,c,h,w]: over the out channels of c's group and the kernel taps,
//                       the outputs (oh, ow) whose window reads (h, w): h = oh * stride - pad +
//                       kh * dilation, so oh = (h + pad - kh * dilation) / stride when exact;
//                       on the GEMM template (nn::conv2d_grad_input_gemm) or one thread per
//                       input element, whichever the cost model expects to be faster.
//   conv2d_grad_weight  dw[o,c,kh,kw]: a dot product of dy and x over n, oh, ow: on the GEMM
//                       template (nn::conv2d_grad_weight_gemm) or one thread per weight,
//                       whichever the cost model expects to be faster.
//   max_pool2d_grad     dx[p,h,w]: for each window containing (h, w), recompute its first
//                       maximum (first NaN) and take its dy when that is (h, w); when the
//                       windows do not overlap, one thread per window instead, writing the
//                       dy to its first maximum and 0 to the rest of its cell.
//   avg_pool2d_grad     dx[p,h,w]: each window containing (h, w) gives dy / its divisor.
//
#include <fmt/format.h>

#include <algorithm>

#include "codegen/cost_model.h"
#include "codegen/kernels/emit_util.h"
#include "codegen/kernels/gemm.h"

namespace kiln::codegen {
namespace {

using Ints = std::vector<int64_t>;

void preamble(BodyWriter& w, const ir::Node& node, int64_t count) {
  w.line("using index_t = {};", index_type_with_overhang(largest_tensor(node)));
  w.line("constexpr int kThreads = {};", kDefaultBlock);
  w.line("constexpr index_t kCount = {};  // results", count);
}

// The window attributes as constants: kStrideH/W, kPadTop/Left, kDilationH/W.
void window_constants(BodyWriter& w, const ir::Node& node, const Ints& stride) {
  const Ints& pad = attr<Ints>(node, "pad");
  Ints dilation{1, 1};
  if (node.attrs.count("dilation")) dilation = attr<Ints>(node, "dilation");
  w.line("constexpr int kStrideH = {};", stride[0]);
  w.line("constexpr int kStrideW = {};", stride[1]);
  w.line("constexpr int kPadTop = {};", pad[0]);
  w.line("constexpr int kPadLeft = {};", pad[1]);
  w.line("constexpr int kDilationH = {};", dilation[0]);
  w.line("constexpr int kDilationW = {};", dilation[1]);
}

// Opens loops over kernel rows kh and columns kw, binding out_h, out_w to the output whose
// window reads input (h, w) through that tap, and skipping taps no output uses that way.
void open_outputs_reading(BodyWriter& w, const char* kh_bound, const char* kw_bound) {
  w.open("for (int kh = 0; kh < {}; ++kh)", kh_bound);
  w.line("const int th = x_h + kPadTop - kh * kDilationH;");
  w.open("if (th < 0 || th % kStrideH != 0 || th / kStrideH >= kOutH)");
  w.line("continue;");
  w.close();
  w.line("const int out_h = th / kStrideH;");
  w.open("for (int kw = 0; kw < {}; ++kw)", kw_bound);
  w.line("const int tw = x_w + kPadLeft - kw * kDilationW;");
  w.open("if (tw < 0 || tw % kStrideW != 0 || tw / kStrideW >= kOutW)");
  w.line("continue;");
  w.close();
  w.line("const int out_w = tw / kStrideW;");
}

// The opening every backward-conv kernel shares: the constants (dims of x [N,C,H,W], weight
// [O,C/groups,KH,KW] and dy [N,O,OH,OW], the groups, the window) and the loop over results.
// `with_batch`: kN too (the weight gradient sums over the batch).
void open_conv_grad(BodyWriter& w, const ir::Node& node, int64_t count, const ir::Shape& xs,
                    const ir::Shape& ws, const ir::Shape& ys, bool with_batch) {
  const int64_t groups = attr<int64_t>(node, "groups");
  preamble(w, node, count);
  if (with_batch) w.line("constexpr int kN = {};", xs[0]);
  w.line("constexpr int kC = {};", xs[1]);
  w.line("constexpr int kH = {};", xs[2]);
  w.line("constexpr int kW = {};", xs[3]);
  w.line("constexpr int kO = {};", ws[0]);
  w.line("constexpr int kChannelsPerGroup = {};", ws[1]);
  w.line("constexpr int kOutPerGroup = {};", ws[0] / groups);
  w.line("constexpr int kKernelH = {};", ws[2]);
  w.line("constexpr int kKernelW = {};", ws[3]);
  w.line("constexpr int kOutH = {};", ys[2]);
  w.line("constexpr int kOutW = {};", ys[3]);
  window_constants(w, node, attr<Ints>(node, "stride"));
  open_output_loop(w);
}

KernelSpec finish(BodyWriter& w, int64_t count, std::string note, bool host_variant = false) {
  KernelSpec spec = grid_stride_spec(count);
  spec.host_variant = host_variant;
  spec.body = w.take();
  spec.note = std::move(note);
  return spec;
}

// dx [N,C,H,W] from dy [N,O,OH,OW] and weight [O,C/groups,KH,KW].
KernelSpec emit_conv2d_grad_input(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const ir::DType dtype = node.inputs[0]->type.dtype;
  const ir::Shape& ys = node.inputs[0]->type.shape;
  const ir::Shape& ws = node.inputs[1]->type.shape;
  const ir::Shape& xs = node.results[0]->type.shape;
  const int64_t count = ir::num_elements(xs);
  BodyWriter w;
  open_conv_grad(w, node, count, xs, ws, ys, /*with_batch=*/false);
  w.line("const int x_w = static_cast<int>(i % kW);");
  w.line("const int x_h = static_cast<int>(i / kW % kH);");
  w.line("const int c = static_cast<int>(i / (kW * kH) % kC);");
  w.line("const index_t n = i / (static_cast<index_t>(kW) * kH * kC);");
  w.line("const int group = c / kChannelsPerGroup;");
  w.line("const int c_in_group = c % kChannelsPerGroup;");
  w.line("float sum = 0.0f;");
  w.open("for (int o = group * kOutPerGroup; o < (group + 1) * kOutPerGroup; ++o)");
  w.line("const index_t dy_plane = (n * kO + o) * kOutH * kOutW;");
  w.line("const index_t w_plane = (static_cast<index_t>(o) * kChannelsPerGroup + c_in_group) * "
         "kKernelH * kKernelW;");
  open_outputs_reading(w, "kKernelH", "kKernelW");
  w.line("sum += {} * {};", load(dtype, fmt::format("{}[dy_plane + out_h * kOutW + out_w]",
                                                    request.input_params[0])),
         load(dtype, fmt::format("{}[w_plane + kh * kKernelW + kw]", request.input_params[1])));
  w.close();
  w.close();
  w.close();
  w.line("{}[i] = {};", request.output_params[0], store(dtype, "sum"));
  w.close();
  return finish(w, count,
                fmt::format("input gradient of a {}x{} convolution, one thread per input element",
                            ws[2], ws[3]));
}

// dweight [O,C/groups,KH,KW] from dy [N,O,OH,OW] and x [N,C,H,W], one thread per weight summing
// over the batch and the output positions: for small weights with a long sum, where the GEMM
// template's few tiles would leave most of the GPU idle (choose_grad_weight_kernel).
KernelSpec emit_conv2d_grad_weight(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const ir::DType dtype = node.inputs[0]->type.dtype;
  const ir::Shape& ys = node.inputs[0]->type.shape;
  const ir::Shape& xs = node.inputs[1]->type.shape;
  const ir::Shape& ws = node.results[0]->type.shape;
  const int64_t count = ir::num_elements(ws);
  BodyWriter w;
  open_conv_grad(w, node, count, xs, ws, ys, /*with_batch=*/true);
  w.line("const int kw = static_cast<int>(i % kKernelW);");
  w.line("const int kh = static_cast<int>(i / kKernelW % kKernelH);");
  w.line("const int c_in_group = static_cast<int>(i / (kKernelW * kKernelH) % kChannelsPerGroup);");
  w.line("const int o = static_cast<int>(i / (kKernelW * kKernelH * kChannelsPerGroup));");
  w.line("const int c = o / kOutPerGroup * kChannelsPerGroup + c_in_group;");
  w.line("float sum = 0.0f;");
  w.open("for (int n = 0; n < kN; ++n)");
  w.line("const index_t dy_plane = (static_cast<index_t>(n) * kO + o) * kOutH * kOutW;");
  w.line("const index_t x_plane = (static_cast<index_t>(n) * kC + c) * kH * kW;");
  w.open("for (int out_h = 0; out_h < kOutH; ++out_h)");
  w.line("const int in_h = out_h * kStrideH - kPadTop + kh * kDilationH;");
  w.comment("Zero padding: taps outside the input add nothing.");
  w.open("if (in_h < 0 || in_h >= kH)");
  w.line("continue;");
  w.close();
  w.open("for (int out_w = 0; out_w < kOutW; ++out_w)");
  w.line("const int in_w = out_w * kStrideW - kPadLeft + kw * kDilationW;");
  w.open("if (in_w < 0 || in_w >= kW)");
  w.line("continue;");
  w.close();
  w.line("sum += {} * {};", load(dtype, fmt::format("{}[dy_plane + out_h * kOutW + out_w]",
                                                    request.input_params[0])),
         load(dtype, fmt::format("{}[x_plane + in_h * kW + in_w]", request.input_params[1])));
  w.close();
  w.close();
  w.close();
  w.line("{}[i] = {};", request.output_params[0], store(dtype, "sum"));
  w.close();
  return finish(w, count,
                fmt::format("weight gradient of a {}x{} convolution, one thread per weight "
                            "element summing over the batch and output positions",
                            ws[2], ws[3]));
}

// A backward convolution on the GEMM template or as direct loops (one thread per result,
// `direct`), whichever the cost model (codegen/cost_model.h) expects to be faster on an H100.
// On tensor cores the GEMM always is. Otherwise the GEMM reaches kFmaTemplate of the FMA peak
// on the share of the GPU its tiles fill, and the direct loops kDirectLoop on theirs; a
// `useful` share of the GEMM's products is not zero (a strided window's input gradient
// multiplies zeros between the outputs), while the direct loops skip the zeros. Few output
// channels and weights with a long sum over the batch (most of ResNet-50's weight gradients
// at batch 32) leave a GEMM a handful of tiles, while one thread per weight still fills a few
// waves: without split-K (issue 17) the direct loops win there.
KernelSpec gemm_or_direct(const nn::GemmSpec& gemm, const KernelRequest& request, double useful,
                          KernelSpec (*direct)(const KernelRequest&)) {
  const nn::GemmTiling tiling = nn::gemm_tiling(gemm);
  if (nn::on_tensor_cores(tiling.unit)) return nn::emit_gemm(gemm, request.node);
  // Blocks each kernel launches, and the blocks per SM they typically keep: the 64x64 GEMM at
  // 40 registers, 6; the direct loop's 256 threads at 32 registers or fewer, 8.
  const double gemm_blocks = static_cast<double>((gemm.m + tiling.tile_m - 1) / tiling.tile_m *
                                                 ((gemm.n + tiling.tile_n - 1) / tiling.tile_n) *
                                                 gemm.batch);
  const double direct_blocks =
      static_cast<double>(grid_stride_blocks(ir::num_elements(request.node.results[0]->type.shape)));
  const double gemm_share = std::min(1.0, gemm_blocks / (kSms * 6.0));
  const double direct_share = std::min(1.0, direct_blocks / (kSms * 8.0));
  if (kFmaTemplate * gemm_share * useful >= kDirectLoop * direct_share)
    return nn::emit_gemm(gemm, request.node);
  return direct(request);
}

// Split-K partials (k_chunk, from the split-k pass) exist to fill the GPU with GEMM tiles:
// only the GEMM computes them.
KernelSpec emit_conv2d_grad_weight_best(const KernelRequest& request) {
  if (attr<int64_t>(request.node, "k_chunk") > 0)
    return nn::emit_gemm(nn::conv2d_grad_weight_gemm(request), request.node);
  return gemm_or_direct(nn::conv2d_grad_weight_gemm(request), request, 1.0, emit_conv2d_grad_weight);
}

// The input gradient's GEMM multiplies zeros where no output reads a pixel through a tap:
// all but 1 in stride_h * stride_w of them for a strided window.
KernelSpec emit_conv2d_grad_input_best(const KernelRequest& request) {
  const Ints& stride = attr<Ints>(request.node, "stride");
  const double useful = 1.0 / static_cast<double>(stride[0] * stride[1]);
  return gemm_or_direct(nn::conv2d_grad_input_gemm(request), request, useful, emit_conv2d_grad_input);
}

// A pool gradient's shapes and window: kH, kW (x), kOutH, kOutW (dy), kKernelH, kKernelW and
// the window constants.
void pool_grad_constants(BodyWriter& w, const ir::Node& node, const Ints& stride) {
  const ir::Shape& ys = node.inputs[0]->type.shape;
  const ir::Shape& xs = node.results[0]->type.shape;
  const Ints& kernel = attr<Ints>(node, "kernel");
  w.line("constexpr int kH = {};", xs[2]);
  w.line("constexpr int kW = {};", xs[3]);
  w.line("constexpr int kOutH = {};", ys[2]);
  w.line("constexpr int kOutW = {};", ys[3]);
  w.line("constexpr int kKernelH = {};", kernel[0]);
  w.line("constexpr int kKernelW = {};", kernel[1]);
  window_constants(w, node, stride);
}

// The scan of a max pool's window for its first maximum, as the forward (and torch) picks it:
// best_h/best_w, -1 when the window lies in the padding. `in` points at the plane of x, and
// top/left are the window's corner.
void scan_window_maximum(BodyWriter& w, ir::DType dtype) {
  w.comment("The window's first maximum, as the forward (and torch) picks it: a strictly");
  w.comment("greater value replaces it, and the first NaN wins for good (v != v is NaN).");
  w.line("float best = 0.0f;");
  w.line("int best_h = -1;");
  w.line("int best_w = -1;");
  w.comment("Not unrolled: inside the unrolled loops over the windows, unrolling the scan too");
  w.comment("spills registers for large kernels.");
  w.line("#pragma unroll 1");
  w.open("for (int wh = 0; wh < kKernelH; ++wh)");
  w.line("const int in_h = top + wh * kDilationH;");
  w.open("if (in_h < 0 || in_h >= kH)");
  w.line("continue;");
  w.close();
  w.line("#pragma unroll 1");
  w.open("for (int ww = 0; ww < kKernelW; ++ww)");
  w.line("const int in_w = left + ww * kDilationW;");
  w.open("if (in_w < 0 || in_w >= kW || (best_h >= 0 && best != best))");
  w.line("continue;");
  w.close();
  w.line("const float v = {};", load(dtype, "in[in_h * kW + in_w]"));
  w.open("if (best_h < 0 || v != v || v > best)");
  w.line("best = v;");
  w.line("best_h = in_h;");
  w.line("best_w = in_w;");
  w.close();
  w.close();
  w.close();
}

// dx of a max pool whose windows do not overlap (stride >= the dilated window, as in the
// usual 2x2/2): one thread per window scans it once and writes its whole cell, the rows and
// columns from its corner to the next window's (to the edge of x for the last, clipped to x):
// dy at the first maximum, 0 elsewhere. The cells partition x, so every element is written
// once. The gather (emit_pool_grad) would scan each window once per element it holds.
KernelSpec emit_max_pool_grad_by_window(const KernelRequest& request, const Ints& stride) {
  const ir::Node& node = request.node;
  const ir::DType dtype = node.inputs[0]->type.dtype;
  const Ints& kernel = attr<Ints>(node, "kernel");
  const int64_t windows = ir::num_elements(node.inputs[0]->type.shape);  // dy's
  BodyWriter w;
  w.line("using index_t = {};", index_type_with_overhang(largest_tensor(node)));
  w.line("constexpr int kThreads = {};", kDefaultBlock);
  w.line("constexpr index_t kCount = {};  // windows", windows);
  pool_grad_constants(w, node, stride);
  // Window i's place: its plane of x and dx, and its corner (top, left).
  const auto emit_window_place = [&] {
    w.line("const int out_w = static_cast<int>(i % kOutW);");
    w.line("const int out_h = static_cast<int>(i / kOutW % kOutH);");
    w.line("const index_t plane = i / (kOutW * kOutH);");
    w.line("const {}* in = {} + plane * kH * kW;", c_type(dtype), request.input_params[1]);
    w.line("{}* dx = {} + plane * kH * kW;", c_type(dtype), request.output_params[0]);
    w.line("const int top = out_h * kStrideH - kPadTop;");
    w.line("const int left = out_w * kStrideW - kPadLeft;");
  };
  const std::string grad = fmt::format("const float grad = 0.0f + {};",
                                       load(dtype, fmt::format("{}[i]", request.input_params[0])));
  // Window i's scan and cell, wherever it lies.
  const auto emit_window = [&] {
    scan_window_maximum(w, dtype);
    w.comment("0 + dy, as the gathering kernel and the reference sum into zero (-0 becomes +0).");
    w.line(grad);
    w.comment("The window's cell, clipped to x: up to the next window's corner, or x's edge.");
    w.line("const int cell_top = top < 0 ? 0 : top;");
    w.line("const int next_top = out_h + 1 < kOutH ? top + kStrideH : kH;");
    w.line("const int cell_bottom = next_top < kH ? next_top : kH;");
    w.line("const int cell_left = left < 0 ? 0 : left;");
    w.line("const int next_left = out_w + 1 < kOutW ? left + kStrideW : kW;");
    w.line("const int cell_right = next_left < kW ? next_left : kW;");
    w.open("for (int h = cell_top; h < cell_bottom; ++h)");
    w.open("for (int c = cell_left; c < cell_right; ++c)");
    w.line("dx[h * kW + c] = {};", store(dtype, "h == best_h && c == best_w ? grad : 0.0f"));
    w.close();
    w.close();
  };
  open_host_body(w, {"Host backend: the block's windows in one loop, equal bit for bit to the CUDA body",
                     "below (codegen/kernels/nn_grad.cpp). Thread 0 runs it."});
  open_host_block_items(w);
  emit_window_place();
  w.comment("An interior window (most of them): the window and its kStrideH x kStrideW cell lie in x,");
  w.comment("so its taps need no bounds and its cell's loops have constant trip counts. (The last");
  w.comment("row's and column's cells reach x's edge, which may be further.)");
  w.open("if (top >= 0 && left >= 0 && top + kStrideH <= kH && left + kStrideW <= kW && "
         "(out_h + 1 < kOutH || top + kStrideH == kH) && (out_w + 1 < kOutW || left + kStrideW == kW))");
  w.line("const {}* corner = in + top * kW + left;", c_type(dtype));
  const std::vector<std::string> taps = emit_window_taps(w, dtype, kernel[0], kernel[1]);
  w.open("if (!window_nan)");
  w.comment("The CUDA scan picks the first tap equal to the maximum (a later one must be greater).");
  w.comment("Masks, not branches: random data would mispredict them.");
  w.line("int found = 0;");
  w.line("int best_h = 0;");
  w.line("int best_w = 0;");
  for (size_t t = 0; t < taps.size(); ++t) {
    const int64_t kh = static_cast<int64_t>(t) / kernel[1], kw = static_cast<int64_t>(t) % kernel[1];
    w.line("const int hit_{0} = -static_cast<int>({1} == window_max) & ~found;", t, taps[t]);
    w.line("found |= hit_{};", t);
    w.line("best_h |= {} * kDilationH & hit_{};", kh, t);
    w.line("best_w |= {} * kDilationW & hit_{};", kw, t);
  }
  w.line(grad);
  w.line("{}* cell = dx + top * kW + left;", c_type(dtype));
  w.open("for (int h = 0; h < kStrideH; ++h)");
  w.open("for (int c = 0; c < kStrideW; ++c)");
  w.comment("grad or +0, by a mask as well.");
  w.line("const int hit = -static_cast<int>((h == best_h) & (c == best_w));");
  w.line("cell[h * kW + c] = {};", store(dtype, "__int_as_float(__float_as_int(grad) & hit)"));
  w.close();
  w.close();
  w.line("continue;");
  w.close();
  w.close();
  w.comment("A cell at a ragged or padded edge, or a NaN (rare: the branch is predicted): the CUDA");
  w.comment("body's scan.");
  emit_window();
  w.close();
  w.close();
  close_host_body(w);
  open_output_loop(w);
  emit_window_place();
  emit_window();
  w.close();
  return finish(w, windows,
                fmt::format("max pooling {}x{} gradient, one thread per window (they do not "
                            "overlap) writing its cell: dy at the first maximum, 0 elsewhere",
                            kernel[0], kernel[1]),
                /*host_variant=*/true);
}

// dx [N,C,H,W] of a pool whose dy is [N,C,OH,OW].
KernelSpec emit_pool_grad(const KernelRequest& request, bool is_max) {
  const ir::Node& node = request.node;
  const ir::DType dtype = node.inputs[0]->type.dtype;
  const ir::Shape& xs = node.results[0]->type.shape;
  const Ints& kernel = attr<Ints>(node, "kernel");
  Ints stride = attr<Ints>(node, "stride");
  if (stride.empty()) stride = kernel;  // PyTorch's default: stride = kernel
  const bool include_pad = !is_max && attr<bool>(node, "count_include_pad");
  Ints dilation{1, 1};
  if (node.attrs.count("dilation")) dilation = attr<Ints>(node, "dilation");
  if (is_max && stride[0] >= (kernel[0] - 1) * dilation[0] + 1 &&
      stride[1] >= (kernel[1] - 1) * dilation[1] + 1)
    return emit_max_pool_grad_by_window(request, stride);
  const int64_t count = ir::num_elements(xs);
  const std::string& dy = request.input_params[0];
  BodyWriter w;
  preamble(w, node, count);
  pool_grad_constants(w, node, stride);
  open_output_loop(w);
  w.line("const int x_w = static_cast<int>(i % kW);");
  w.line("const int x_h = static_cast<int>(i / kW % kH);");
  w.line("const index_t plane = i / (kW * kH);");
  w.line("const index_t dy_plane = plane * kOutH * kOutW;");
  if (is_max) w.line("const {}* in = {} + plane * kH * kW;", c_type(dtype), request.input_params[1]);
  w.line("float sum = 0.0f;");
  open_outputs_reading(w, "kKernelH", "kKernelW");
  w.line("const int top = out_h * kStrideH - kPadTop;");
  w.line("const int left = out_w * kStrideW - kPadLeft;");
  if (is_max) {
    scan_window_maximum(w, dtype);
    w.open("if (best_h == x_h && best_w == x_w)");
    w.line("sum += {};", load(dtype, fmt::format("{}[dy_plane + out_h * kOutW + out_w]", dy)));
    w.close();
  } else {
    if (include_pad) {
      w.comment("count_include_pad: every window divides by its full size.");
      w.line("const int divisor = kKernelH * kKernelW;");
    } else {
      w.comment("The window's taps inside the input (never 0: pad <= kernel / 2).");
      w.line("const int rows = (top + kKernelH < kH ? top + kKernelH : kH) - (top > 0 ? top : 0);");
      w.line("const int cols = (left + kKernelW < kW ? left + kKernelW : kW) - (left > 0 ? left : 0);");
      w.line("const int divisor = rows * cols;");
    }
    w.line("sum += {} / static_cast<float>(divisor);",
           load(dtype, fmt::format("{}[dy_plane + out_h * kOutW + out_w]", dy)));
  }
  w.close();
  w.close();
  w.line("{}[i] = {};", request.output_params[0], store(dtype, "sum"));
  w.close();
  return finish(w, count,
                fmt::format("{} pooling {}x{} gradient, one thread per input element gathering "
                            "the windows that read it",
                            is_max ? "max" : "average", kernel[0], kernel[1]));
}

}  // namespace

void add_nn_grad_emitters(EmitterTable& table) {
  table.emplace_back(ir::OpId::Conv2dGradInput, emit_conv2d_grad_input_best);
  table.emplace_back(ir::OpId::Conv2dGradWeight, emit_conv2d_grad_weight_best);
  table.emplace_back(ir::OpId::MaxPool2dGrad, [](const KernelRequest& r) { return emit_pool_grad(r, true); });
  table.emplace_back(ir::OpId::AvgPool2dGrad, [](const KernelRequest& r) { return emit_pool_grad(r, false); });
}

}  // namespace kiln::codegen
