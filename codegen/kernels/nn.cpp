// CUDA kernels for the GEMM-shaped neural-network ops: matmul, dense and conv2d. All three are
// instances of the tiled GEMM template (gemm.h); this file says, per op, what A, B and out are.
//
//   matmul  out[b][m][n] = A[b][m][k] B[b][k][n]; batch dims broadcast, so each operand's offset
//           is found from the output's batch index (grid z). Transposes only change which index
//           is contiguous. An unbatched b folds a's batch into M (one big GEMM).
//   dense   rows of x times weight^T: B is weight stored [N][K]; bias in the epilogue. Or its
//           transpose, weight times x^T, when the weight is A (a 2:4 weight on sparse tensor cores).
//   conv2d  implicit GEMM per group (grid z): out[o][pixel] = W[o][c,kh,kw] . patch[c,kh,kw][pixel]
//           with pixel = (image, oh, ow), so consecutive threads write consecutive pixels of
//           an NCHW plane. The patch matrix is never built: each thread gathers its elements
//           from x with stride, padding and dilation (zero in the padding).
// The pooling and normalization kernels are in pool_norm.cpp.
#include <fmt/format.h>

#include <algorithm>

#include "codegen/kernels/emit_util.h"
#include "codegen/kernels/gemm.h"
#include "ir/image_layout.h"

namespace kiln::codegen::nn {

namespace {

// Per-problem offsets of a and b for out batch index `batch`, with NumPy broadcasting.
std::string matmul_batch_offsets(const ir::Shape& a_batch, const ir::Shape& b_batch,
                                 const ir::Shape& out_batch, int64_t a_matrix, int64_t b_matrix) {
  BodyWriter w(0);
  const int64_t batches = ir::num_elements(out_batch, 0, out_batch.size());
  const int64_t a_count = ir::num_elements(a_batch, 0, a_batch.size());
  const int64_t b_count = ir::num_elements(b_batch, 0, b_batch.size());
  const bool simple = (a_count == 1 || a_count == batches) && (b_count == 1 || b_count == batches);
  if (simple) {
    w.comment("Batch offsets: each operand has either every batch or one matrix.");
    const auto base = [](int64_t count, int64_t matrix) {
      return count == 1 ? std::string("0")
                        : fmt::format("batch * static_cast<index_t>({})", matrix);
    };
    w.line("const index_t a_base = {};", base(a_count, a_matrix));
    w.line("const index_t b_base = {};", base(b_count, b_matrix));
    return w.take();
  }
  w.comment(fmt::format("Batch offsets: out batch dims {} broadcast from a {} and b {}.",
                        ir::shape_to_string(out_batch), ir::shape_to_string(a_batch),
                        ir::shape_to_string(b_batch)));
  w.line("index_t a_base = 0;");
  w.line("index_t b_base = 0;");
  w.line("int rest = batch;");
  int64_t a_stride = a_matrix;
  int64_t b_stride = b_matrix;
  const size_t rank = out_batch.size();
  for (size_t i = 0; i < rank; ++i) {
    const size_t d = rank - 1 - i;  // innermost first
    const int64_t a_dim = d + a_batch.size() >= rank ? a_batch[d + a_batch.size() - rank] : 1;
    const int64_t b_dim = d + b_batch.size() >= rank ? b_batch[d + b_batch.size() - rank] : 1;
    if (d == 0) {
      w.line("const int batch_0 = rest;");
    } else {
      w.line("const int batch_{} = rest % {};", d, out_batch[d]);
      w.line("rest /= {};", out_batch[d]);
    }
    if (a_dim != 1) w.line("a_base += static_cast<index_t>(batch_{}) * {};", d, a_stride);
    if (b_dim != 1) w.line("b_base += static_cast<index_t>(batch_{}) * {};", d, b_stride);
    a_stride *= a_dim;
    b_stride *= b_dim;
  }
  return w.take();
}

// The operand's plain address, and the element type there (GemmOperand::address), when input
// `index` is read as it is.
void set_address(GemmOperand& operand, const KernelRequest& request, size_t index,
                 const std::string& subscript) {
  operand.address = input_address(request, index, subscript);
  operand.address_dtype = stored_dtype(request, index);
}

// What the GEMMs of every op share: the index type and the result.
GemmSpec gemm_for(const KernelRequest& request) {
  GemmSpec spec;
  spec.index_type = index_type_with_overhang(largest_tensor(request.node));
  spec.out_param = request.output_params[0];
  spec.out_dtype = request.node.results[0]->type.dtype;
  // f64 anywhere: the whole product in double (an f64 GEMM is for exactness, not speed).
  bool any_f64 = spec.out_dtype == ir::DType::F64;
  for (const ir::Value* input : request.node.inputs) any_f64 |= input->type.dtype == ir::DType::F64;
  if (any_f64) spec.value_type = "double";
  spec.precision = request.precision;
  return spec;
}

// The shape constants of a convolution's implicit GEMM (forward and weight gradient): the input,
// the output plane, the window.
std::vector<GemmConstant> conv_constants(const ir::Shape& xs, int64_t group_in, int64_t out_channels,
                                         int64_t out_w, int64_t out_plane, int64_t kh, int64_t kw,
                                         const std::vector<int64_t>& stride,
                                         const std::vector<int64_t>& pad,
                                         const std::vector<int64_t>& dilation) {
  return {
      {"kC", xs[1], "input channels (all groups)"},
      {"kH", xs[2], "input height"},
      {"kW", xs[3], "input width"},
      {"kGroupChannels", group_in, "input channels per group"},
      {"kO", out_channels, "output channels (all groups)"},
      {"kOutW", out_w, "output width"},
      {"kOutPlane", out_plane, "output pixels per channel"},
      {"kKernelW", kw, "kernel width"},
      {"kWindow", kh * kw, "taps per input channel"},
      {"kStrideH", stride[0], "vertical stride"},
      {"kStrideW", stride[1], "horizontal stride"},
      {"kPadTop", pad[0], "padding before the first row"},
      {"kPadLeft", pad[1], "padding before the first column"},
      {"kDilationH", dilation[0], "vertical dilation"},
      {"kDilationW", dilation[1], "horizontal dilation"},
  };
}

// Statements setting `value` to a gathered input `element` at (in_h, in_w): guarded when the
// convolution pads, since taps in the padding read zero.
std::string tap_fetch(const std::string& element, bool padded) {
  if (!padded) return "value = " + element + ";\n";  // every tap of a valid pixel is inside
  return "// Taps in the padding read zero.\n"
         "if (in_h >= 0 && in_h < kH && in_w >= 0 && in_w < kW) {\n"
         "  value = " + element + ";\n}\n";
}

// Split-K (k_chunk, from the split-k pass): each chunk's partial result is stored after the
// previous chunk's, `per_partial` values apart; a reduce_sum adds them in order.
void stack_split_partials(GemmSpec& spec, int64_t k_chunk, int64_t per_partial) {
  spec.k_chunk = k_chunk;
  if (k_chunk == 0) return;
  spec.constants.push_back({"kPartial", per_partial, "values in one partial result"});
  spec.out_index = "split * kPartial + " + spec.out_index;
}

}  // namespace

GemmSpec matmul_gemm(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const ir::Value* a = node.inputs[0];
  const ir::Value* b = node.inputs[1];
  const ir::Shape& as = a->type.shape;
  const ir::Shape& bs = b->type.shape;
  ir::Shape os = node.results[0]->type.shape;
  if (attr<int64_t>(node, "k_chunk") > 0) os.erase(os.begin());  // split-K partials' leading dim
  const bool ta = attr<bool>(node, "transpose_a");
  const bool tb = attr<bool>(node, "transpose_b");
  const int64_t m = os[os.size() - 2];
  const int64_t n = os[os.size() - 1];
  const int64_t k = ta ? as[as.size() - 2] : as[as.size() - 1];
  const ir::Shape a_batch(as.begin(), as.end() - 2);
  const ir::Shape b_batch(bs.begin(), bs.end() - 2);
  const ir::Shape out_batch(os.begin(), os.end() - 2);
  const int64_t batches = ir::num_elements(out_batch, 0, out_batch.size());

  GemmSpec spec = gemm_for(request);
  // One matrix b for the whole batch and row-major a: the batch is just more rows of a and out.
  const bool fold = batches > 1 && ir::num_elements(b_batch, 0, b_batch.size()) == 1 && !ta &&
                    ir::num_elements(a_batch, 0, a_batch.size()) == batches;
  spec.m = fold ? batches * m : m;
  if (request.dynamic_rows) spec.dynamic_grid_axis = fold || batches == 1 ? 1 : 2;
  spec.m_is = fold ? "rows of a, all batches" : "rows of a";
  spec.n_is = "columns of b";
  spec.k_is = "columns of a, rows of b";
  spec.n = n;
  spec.k = k;
  spec.batch = fold ? 1 : batches;
  if (fold) {
    spec.batch_setup = "// b is shared by the whole batch: the batch is folded into the rows.\n"
                       "const index_t a_base = 0;\nconst index_t b_base = 0;\n";
  } else {
    spec.batch_setup = matmul_batch_offsets(a_batch, b_batch, out_batch, m * k, k * n);
  }
  spec.a.k_contiguous = !ta;
  const std::string a_at = ta ? "a_base + k * kM + row" : "a_base + row * kK + k";
  const std::string b_at = tb ? "b_base + col * kK + k" : "b_base + k * kN + col";
  spec.a.fetch = fmt::format("value = {};", load_input(request, 0, a_at));
  set_address(spec.a, request, 0, a_at);
  spec.b.k_contiguous = tb;
  spec.b.fetch = fmt::format("value = {};", load_input(request, 1, b_at));
  set_address(spec.b, request, 1, b_at);
  spec.channel = "static_cast<int>(col)";  // the last axis: what a bias_add(axis=-1) indexes
  spec.out_index = spec.batch > 1 ? "batch * kM * kN + row * kN + col"
                                  : "row * kN + col";
  stack_split_partials(spec, attr<int64_t>(node, "k_chunk"), batches * m * n);
  spec.what = fmt::format("tiled GEMM{}{}{}", ta ? ", a transposed" : "",
                          tb ? ", b transposed" : "", fold ? ", batch folded into rows" : "");
  return spec;
}

GemmSpec dense_gemm(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const ir::Value* x = node.inputs[0];
  const ir::Value* weight = node.inputs[1];
  const int64_t n = weight->type.shape[0];
  const int64_t k = weight->type.shape[1];

  GemmSpec spec = gemm_for(request);
  spec.m = ir::num_elements(x->type.shape) / k;
  if (request.dynamic_rows) spec.dynamic_grid_axis = 1;  // the rows
  spec.m_is = "rows of x";
  spec.n_is = "output features";
  spec.k_is = "input features";
  spec.n = n;
  spec.k = k;
  spec.a.k_contiguous = true;
  spec.a.fetch = fmt::format("value = {};", load_input(request, 0, "row * kK + k"));
  set_address(spec.a, request, 0, "row * kK + k");
  spec.b.k_contiguous = true;  // weight is [N][K]: B transposed
  spec.b.fetch = fmt::format("value = {};", load_input(request, 1, "col * kK + k"));
  set_address(spec.b, request, 1, "col * kK + k");
  spec.channel = "static_cast<int>(col)";
  spec.out_index = "row * kN + col";
  if (node.inputs.size() > 2)
    spec.epilogue = fmt::format("value += {};", load_input(request, 2, "channel"));
  stack_split_partials(spec, attr<int64_t>(node, "k_chunk"), spec.m * n);
  spec.what = fmt::format("x * weight^T as tiled GEMM{}",
                          node.inputs.size() > 2 ? " + bias in the epilogue" : "");
  return spec;
}

GemmSpec dense_gemm_by_weight_rows(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const ir::Value* x = node.inputs[0];
  const ir::Value* weight = node.inputs[1];
  const int64_t features = weight->type.shape[0];
  const int64_t k = weight->type.shape[1];

  GemmSpec spec = gemm_for(request);
  spec.m = features;
  spec.n = ir::num_elements(x->type.shape) / k;
  if (request.dynamic_rows) spec.dynamic_grid_axis = 0;  // x's rows are the columns
  spec.m_is = "output features";
  spec.n_is = "rows of x";
  spec.k_is = "input features";
  spec.k = k;
  spec.a.k_contiguous = true;  // weight is [N][K]: its rows are A's
  spec.a.fetch = fmt::format("value = {};", load_input(request, 1, "row * kK + k"));
  set_address(spec.a, request, 1, "row * kK + k");
  spec.b.k_contiguous = true;  // x's rows are B's columns
  spec.b.fetch = fmt::format("value = {};", load_input(request, 0, "col * kK + k"));
  set_address(spec.b, request, 0, "col * kK + k");
  spec.channel = "static_cast<int>(row)";
  spec.out_index = "col * kM + row";  // out^T: column col of the product is row col of out
  if (node.inputs.size() > 2)
    spec.epilogue = fmt::format("value += {};", load_input(request, 2, "channel"));
  stack_split_partials(spec, attr<int64_t>(node, "k_chunk"), spec.m * spec.n);
  spec.what = fmt::format("(weight * x^T)^T as tiled GEMM, the weight's rows as A{}",
                          node.inputs.size() > 2 ? ", + bias in the epilogue" : "");
  return spec;
}

namespace {

// A gathered patch column's setup, before its image's base: a thread's column (output pixel) is
// fixed for the whole K loop, so its image and window corner are computed once.
constexpr std::string_view kPatchCorner =
    "// This thread's output pixel: its image and the top-left corner of its window.\n"
    "const index_t b_pixel = block_col + b_col;\n"
    "const index_t b_image = b_pixel / kOutPlane;\n"
    "const int b_in_top = static_cast<int>(b_pixel % kOutPlane / kOutW) * kStrideH - kPadTop;\n"
    "const int b_in_left = static_cast<int>(b_pixel % kOutW) * kStrideW - kPadLeft;\n";

// B of a conv2d in NHWC (ir/image_layout.h), whose patch terms run in the weight's KRSC order,
// k = (kh * KW + kw) * C/groups + c: a 1x1, stride-1, unpadded convolution reads x itself,
// whose [N*H*W][C] rows are its columns, contiguous along k (loaded 16 bytes at a time, or
// copied by cp.async, as a dense layer's rows); the others gather each pixel's window along
// its channels.
void read_nhwc_patches(GemmSpec& spec, const KernelRequest& request, bool pointwise, bool padded) {
  if (pointwise) {
    const std::string x_at = "col * kC + group * kGroupChannels + k";
    spec.b.k_contiguous = true;
    spec.b.fetch = fmt::format("value = {};", load_input(request, 0, x_at));
    set_address(spec.b, request, 0, x_at);
    return;
  }
  // A thread's column (output pixel) is fixed for the whole K loop, so its image and window
  // corner are computed once.
  spec.b.k_contiguous = false;
  spec.b.setup = std::string(kPatchCorner) + "const index_t b_base = b_image * kH * kW * kC + group * kGroupChannels;\n";
  std::string fetch =
      "const index_t in_channel = k % kGroupChannels;\n"
      "const int tap = static_cast<int>(k / kGroupChannels);\n"
      "const int in_h = b_in_top + tap / kKernelW * kDilationH;\n"
      "const int in_w = b_in_left + tap % kKernelW * kDilationW;\n";
  fetch += tap_fetch(load_input(request, 0, "b_base + (static_cast<index_t>(in_h) * kW + in_w) * kC + in_channel"),
                     padded);
  spec.b.fetch = fetch;
}

}  // namespace

GemmSpec conv2d_gemm(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const ir::ImageLayout layout = ir::image_layout(node);
  // The shapes as [N, C, H, W], [O, C/groups, KH, KW] and [N, O, OH, OW] in either layout.
  const ir::Shape xs = ir::to_nchw(node.inputs[0]->type.shape, layout);
  const ir::Shape ws = ir::to_nchw(node.inputs[1]->type.shape, layout);
  const int64_t k_chunk = attr<int64_t>(node, "k_chunk");
  ir::Shape os = node.results[0]->type.shape;
  if (k_chunk > 0) os.erase(os.begin());  // split-K partials: [S, N, O, OH, OW]
  os = ir::to_nchw(os, layout);
  const bool nhwc = layout == ir::ImageLayout::Nhwc;
  const auto& stride = attr<std::vector<int64_t>>(node, "stride");
  const auto& pad = attr<std::vector<int64_t>>(node, "pad");  // top, left, bottom, right
  const auto& dilation = attr<std::vector<int64_t>>(node, "dilation");
  const int64_t groups = attr<int64_t>(node, "groups");
  const int64_t out_channels = ws[0], group_in = ws[1], kh = ws[2], kw = ws[3];
  const int64_t group_out = out_channels / groups;
  const bool padded = std::any_of(pad.begin(), pad.end(), [](int64_t p) { return p != 0; });

  GemmSpec spec = gemm_for(request);
  spec.m = group_out;
  spec.m_is = "output channels per group";
  spec.n_is = "output pixels, N * OH * OW";
  spec.k_is = nhwc ? "patch size, KH * KW * C / groups (the weight's KRSC order)" : "patch size, C / groups * KH * KW";
  spec.n = os[0] * os[2] * os[3];
  if (request.dynamic_rows) spec.dynamic_grid_axis = 0;  // columns, image-major
  spec.k = group_in * kh * kw;
  spec.batch = groups;
  spec.z_name = "group";
  spec.constants = conv_constants(xs, group_in, out_channels, os[3], os[2] * os[3], kh, kw, stride, pad, dilation);
  // A: weight [O][C/groups][KH][KW] (NHWC: [O][KH][KW][C/groups]) is row-major [O][K] per group.
  spec.a.k_contiguous = true;
  spec.a.fetch =
      fmt::format("value = {};", load_input(request, 1, "(group * kM + row) * kK + k"));
  set_address(spec.a, request, 1, "(group * kM + row) * kK + k");
  const bool pointwise = kh * kw == 1 && stride[0] == 1 && stride[1] == 1 && !padded;
  if (nhwc) {
    read_nhwc_patches(spec, request, pointwise, padded);
  } else if (pointwise) {
    // B: a 1x1, stride-1, unpadded convolution reads x itself, [N][C][H*W], as its patch
    // matrix: contiguous along the pixels, one image's plane at a time (cp.async copies it when
    // a plane holds whole 16-byte copies).
    const std::string x_at =
        "(col / kOutPlane * kC + group * kGroupChannels + k) * kOutPlane + col % kOutPlane";
    spec.b.k_contiguous = false;
    spec.b.fetch = fmt::format("value = {};", load_input(request, 0, x_at));
    set_address(spec.b, request, 0, x_at);
    spec.b.run = os[2] * os[3];
  } else {
    // B: the patch matrix, gathered. A thread's column (output pixel) is fixed for the whole K
    // loop, so its image and window corner are computed once.
    spec.b.k_contiguous = false;
    spec.b.setup = std::string(kPatchCorner) + "const index_t b_base = (b_image * kC + group * kGroupChannels) * kH * kW;\n";
    std::string fetch =
        "const index_t in_channel = k / kWindow;\n"
        "const int tap = static_cast<int>(k % kWindow);\n"
        "const int in_h = b_in_top + tap / kKernelW * kDilationH;\n"
        "const int in_w = b_in_left + tap % kKernelW * kDilationW;\n";
    const std::string element =
        load_input(request, 0, "b_base + (in_channel * kH + in_h) * kW + in_w");
    fetch += tap_fetch(element, padded);
    spec.b.fetch = fetch;
  }
  spec.channel = "static_cast<int>(group * kM + row)";
  spec.out_index = nhwc ? "col * kO + channel"  // [N*OH*OW][O]
                        : "(col / kOutPlane * kO + channel) * kOutPlane + col % kOutPlane";
  if (node.inputs.size() > 2)
    spec.epilogue = fmt::format("value += {};", load_input(request, 2, "channel"));
  stack_split_partials(spec, k_chunk, ir::num_elements(os));
  const std::string source = !pointwise ? "gathered patches"
                             : nhwc     ? "x (1x1, stride 1: x's rows are the patch matrix's columns)"
                                        : "x (1x1, stride 1: x is the patch matrix)";
  spec.what = nhwc ? fmt::format("NHWC implicit GEMM per group: out[image,oh,ow][o] = W[o][kh,kw,c] . {} "
                                 "(M = O/groups = {}, N = N*OH*OW = {}, K = KH*KW*C/groups = {}){}",
                                 source, spec.m, spec.n, spec.k, node.inputs.size() > 2 ? ", bias in the epilogue" : "")
                   : fmt::format("implicit GEMM per group: out[o][image,oh,ow] = W[o][c,kh,kw] . {} "
                                 "(M = O/groups = {}, N = N*OH*OW = {}, K = C/groups*KH*KW = {}){}",
                                 source, spec.m, spec.n, spec.k, node.inputs.size() > 2 ? ", bias in the epilogue" : "");
  return spec;
}

// The weight gradient of conv2d as the same tiled GEMM (the template's K loop replaces the
// direct kernel's serial loop over n, oh, ow, and sums in the same order): per group,
// M = O / groups output channels, N = C / groups * KH * KW weights per channel, K = N * OH * OW
// batch pixels. A[o][k] = dy[n, group * M + o, pixel] with k = n * OH * OW + pixel, read along
// k; B[k][col] = x at the tap col = (c, kh, kw) of output pixel k's window, zero in the padding.
GemmSpec conv2d_grad_weight_gemm(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const ir::Shape& ys = node.inputs[0]->type.shape;
  const ir::Shape& xs = node.inputs[1]->type.shape;
  const ir::Shape& result = node.results[0]->type.shape;
  const ir::Shape ws(result.end() - 4, result.end());  // without split-K's partials dim
  const auto& stride = attr<std::vector<int64_t>>(node, "stride");
  const auto& pad = attr<std::vector<int64_t>>(node, "pad");
  const auto& dilation = attr<std::vector<int64_t>>(node, "dilation");
  const int64_t groups = attr<int64_t>(node, "groups");
  const int64_t out_channels = ws[0], group_in = ws[1], kh = ws[2], kw = ws[3];
  const int64_t out_plane = ys[2] * ys[3];
  const bool padded = std::any_of(pad.begin(), pad.end(), [](int64_t p) { return p != 0; });

  GemmSpec spec = gemm_for(request);
  spec.m = out_channels / groups;
  spec.n = group_in * kh * kw;
  spec.k = ys[0] * out_plane;
  spec.m_is = "output channels per group";
  spec.n_is = "weights per output channel, C / groups * KH * KW";
  spec.k_is = "batch pixels, N * OH * OW";
  spec.batch = groups;
  spec.z_name = "group";
  spec.constants = conv_constants(xs, group_in, out_channels, ys[3], out_plane, kh, kw, stride, pad, dilation);
  const std::string dy_at = "(k / kOutPlane * kO + group * kM + row) * kOutPlane + k % kOutPlane";
  spec.a.k_contiguous = true;
  spec.a.host_along_k = true;
  spec.a.fetch = fmt::format("value = {};", load_input(request, 0, dy_at));
  // Contiguous along k within one image's pixels.
  set_address(spec.a, request, 0, dy_at);
  spec.a.run = out_plane;
  // B: a thread's column (weight tap) is fixed for the whole K loop, so its channel and window
  // offsets are computed once; the pixel moves with k.
  spec.b.k_contiguous = false;
  spec.b.setup =
      "// This thread's weight: its input channel plane and its tap's offsets in the window.\n"
      "const index_t b_weight = block_col + b_col;\n"
      "const index_t b_plane = (group * kGroupChannels + b_weight / kWindow) * kH * kW;\n"
      "const int b_tap = static_cast<int>(b_weight % kWindow);\n"
      "const int b_tap_h = b_tap / kKernelW * kDilationH - kPadTop;\n"
      "const int b_tap_w = b_tap % kKernelW * kDilationW - kPadLeft;\n";
  std::string fetch =
      "const index_t image = k / kOutPlane;\n"
      "const int pixel = static_cast<int>(k % kOutPlane);\n"
      "const int in_h = pixel / kOutW * kStrideH + b_tap_h;\n"
      "const int in_w = pixel % kOutW * kStrideW + b_tap_w;\n";
  const std::string element =
      load_input(request, 1, "image * kC * kH * kW + b_plane + in_h * kW + in_w");
  fetch += tap_fetch(element, padded);
  spec.b.fetch = fetch;
  spec.channel = "static_cast<int>(col)";
  spec.out_index = "(group * kM + row) * kN + col";
  stack_split_partials(spec, attr<int64_t>(node, "k_chunk"), ir::num_elements(ws));
  spec.what = fmt::format(
      "weight gradient of a {}x{} convolution as a GEMM per group: dW[o][c,kh,kw] = dy[o][n,oh,ow] "
      ". gathered patches (M = O/groups = {}, N = C/groups*KH*KW = {}, K = N*OH*OW = {})",
      kh, kw, spec.m, spec.n, spec.k);
  return spec;
}

// The input gradient of conv2d as the same tiled GEMM, per group: M = C / groups input
// channels, N = N * H * W input pixels, K = O / groups * KH * KW (out channel, tap) pairs, summed
// in the direct kernel's order. A[c][k] = W[group * O/groups + o][c][tap] with k = o * KH * KW +
// tap; B[k][pixel] = dy at the output whose window reads the pixel through that tap (zero where
// none does: in the padding, or between the outputs of a strided window). A 1x1, stride-1,
// unpadded convolution is a plain GEMM of W^T and dy, whose B rows cp.async can copy.
GemmSpec conv2d_grad_input_gemm(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const ir::Shape& ys = node.inputs[0]->type.shape;
  const ir::Shape& ws = node.inputs[1]->type.shape;
  const ir::Shape& xs = node.results[0]->type.shape;
  const auto& stride = attr<std::vector<int64_t>>(node, "stride");
  const auto& pad = attr<std::vector<int64_t>>(node, "pad");
  const auto& dilation = attr<std::vector<int64_t>>(node, "dilation");
  const int64_t groups = attr<int64_t>(node, "groups");
  const int64_t out_channels = ws[0], group_in = ws[1], kh = ws[2], kw = ws[3];
  const int64_t in_plane = xs[2] * xs[3];
  const bool pointwise = kh * kw == 1 && stride[0] == 1 && stride[1] == 1 &&
                         std::all_of(pad.begin(), pad.end(), [](int64_t p) { return p == 0; });

  GemmSpec spec = gemm_for(request);
  spec.m = group_in;
  spec.n = xs[0] * in_plane;
  spec.k = out_channels / groups * kh * kw;
  spec.m_is = "input channels per group";
  spec.n_is = "input pixels, N * H * W";
  spec.k_is = "(output channel, tap) pairs, O / groups * KH * KW";
  spec.batch = groups;
  spec.z_name = "group";
  spec.constants = conv_constants(xs, group_in, out_channels, ys[3], ys[2] * ys[3], kh, kw, stride,
                                  pad, dilation);
  spec.constants.push_back({"kOutH", ys[2], "output height"});
  spec.constants.push_back({"kOutPerGroup", out_channels / groups, "output channels per group"});
  spec.constants.push_back({"kInPlane", in_plane, "input pixels per channel"});
  // A: the weight, read along its taps (k contiguous in runs of KH * KW); a 1x1 kernel's
  // weight is [O][C] per group, contiguous along the rows, which cp.async copies.
  const std::string w_at =
      "((group * kOutPerGroup + k / kWindow) * kGroupChannels + row) * kWindow + k % kWindow";
  spec.a.k_contiguous = kh * kw > 1;
  spec.a.host_along_k = kh * kw > 1;
  spec.a.fetch = fmt::format("value = {};", load_input(request, 1, w_at));
  if (kh * kw == 1) set_address(spec.a, request, 1, w_at);
  if (pointwise) {
    // B: dy itself, [N][O][H*W]: contiguous along the pixels, one image's plane at a time.
    const std::string dy_at =
        "(col / kInPlane * kO + group * kOutPerGroup + k) * kOutPlane + col % kInPlane";
    spec.b.k_contiguous = false;
    spec.b.fetch = fmt::format("value = {};", load_input(request, 0, dy_at));
    set_address(spec.b, request, 0, dy_at);
    spec.b.run = in_plane;
  } else {
    // B: a thread's column (input pixel) is fixed for the whole K loop, so its image and its
    // position in padded coordinates are computed once; the tap and out channel move with k.
    spec.b.k_contiguous = false;
    spec.b.setup =
        "// This thread's input pixel: its image and its place in the padded input.\n"
        "const index_t b_pixel = block_col + b_col;\n"
        "const index_t b_base = (b_pixel / kInPlane * kO + group * kOutPerGroup) * kOutPlane;\n"
        "const int b_padded_h = static_cast<int>(b_pixel % kInPlane / kW) + kPadTop;\n"
        "const int b_padded_w = static_cast<int>(b_pixel % kW) + kPadLeft;\n";
    std::string fetch =
        "const index_t out_channel = k / kWindow;\n"
        "const int tap = static_cast<int>(k % kWindow);\n"
        "// The output whose window reads this pixel through this tap, if one does.\n"
        "const int th = b_padded_h - tap / kKernelW * kDilationH;\n"
        "const int tw = b_padded_w - tap % kKernelW * kDilationW;\n";
    const bool strided = stride[0] != 1 || stride[1] != 1;
    fetch += strided ? "if (th >= 0 && tw >= 0 && th % kStrideH == 0 && tw % kStrideW == 0 &&\n"
                       "    th / kStrideH < kOutH && tw / kStrideW < kOutW) {\n"
                     : "if (th >= 0 && tw >= 0 && th < kOutH && tw < kOutW) {\n";
    const std::string at = strided
        ? "b_base + out_channel * kOutPlane + th / kStrideH * kOutW + tw / kStrideW"
        : "b_base + out_channel * kOutPlane + th * kOutW + tw";
    fetch += "  value = " + load_input(request, 0, at) + ";\n}\n";
    spec.b.fetch = fetch;
  }
  spec.channel = "static_cast<int>(group * kM + row)";
  spec.out_index = "(col / kInPlane * kC + channel) * kInPlane + col % kInPlane";
  spec.what = fmt::format(
      "input gradient of a {}x{} convolution as a GEMM per group: dx[c][n,h,w] = W^T[c][o,kh,kw] "
      ". gathered dy (M = C/groups = {}, N = N*H*W = {}, K = O/groups*KH*KW = {})",
      kh, kw, spec.m, spec.n, spec.k);
  return spec;
}

}  // namespace kiln::codegen::nn

namespace kiln::codegen {

void add_nn_emitters(EmitterTable& table) {
  const auto gemm = [](nn::GemmSpec (*build)(const KernelRequest&)) {
    return [build](const KernelRequest& request) {
      return nn::emit_gemm(build(request), request.node);
    };
  };
  table.emplace_back(ir::OpId::Matmul, gemm(nn::matmul_gemm));
  table.emplace_back(ir::OpId::Dense, gemm(nn::dense_gemm));
  table.emplace_back(ir::OpId::Conv2d, gemm(nn::conv2d_gemm));
  add_pool_norm_emitters(table);
  add_attention_emitters(table);
  add_nn_grad_emitters(table);
}

}  // namespace kiln::codegen
