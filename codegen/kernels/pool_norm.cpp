// CUDA kernels for pooling, bias_add and batch_norm. Semantics: docs/ops.md and
// ir/eval/kernels_nn.cpp.
//
//   max_pool2d, avg_pool2d  one thread per output in a grid-stride loop; the window is walked
//                           with compile-time bounds, taps in the padding skipped (max: -inf,
//                           avg: 0, divided by the full window when count_include_pad).
//   global_avg_pool         one warp per (n, c) plane: lanes sum a strided share, a shuffle
//                           tree adds the 32 partial sums.
//   bias_add                elementwise, channel = flat index / inner % C.
//   batch_norm              inference: per element, the channel's statistics folded into one
//                           scale and shift (the kernel is memory-bound, so recomputing them is
//                           free). Training: one block per channel, two block reductions (mean,
//                           then squared deviations: no E[x^2] - E[x]^2 cancellation), then
//                           normalize with the batch statistics.
#include <fmt/format.h>

#include "codegen/kernels/emit_util.h"
#include "codegen/kernels/reduce_util.h"
#include "ir/image_layout.h"

namespace kiln::codegen {
namespace {

// One thread per output in order (outputs image-major): a request for real rows is honoured
// by the kCount the caller declared with dynamic_count.
KernelSpec elementwise_launch(const KernelRequest& request, BodyWriter& w, int64_t count, std::string note,
                              bool host_variant = false) {
  KernelSpec spec = grid_stride_spec(count);
  spec.host_variant = host_variant;
  spec.body = w.take();
  spec.note = std::move(note);
  if (request.dynamic_rows) spec.dynamic_grid_axis = 0;
  return spec;
}

// --- pooling --------------------------------------------------------------------------------

KernelSpec emit_pool(const KernelRequest& request, bool is_max) {
  const ir::Node& node = request.node;
  const ir::Value* x = node.inputs[0];
  const ir::DType dtype = x->type.dtype;
  // NHWC (ir/image_layout.h): output i is channel i % C of pixel i / C, and a window's taps are
  // C apart.
  const ir::ImageLayout layout = ir::image_layout(node);
  const bool nhwc = layout == ir::ImageLayout::Nhwc;
  const ir::Shape xs = ir::to_nchw(x->type.shape, layout);
  const ir::Shape os = ir::to_nchw(node.results[0]->type.shape, layout);
  const auto& kernel = attr<std::vector<int64_t>>(node, "kernel");
  std::vector<int64_t> stride = attr<std::vector<int64_t>>(node, "stride");
  if (stride.empty()) stride = kernel;  // PyTorch's default: stride = kernel
  const auto& pad = attr<std::vector<int64_t>>(node, "pad");
  std::vector<int64_t> dilation{1, 1};
  if (node.attrs.count("dilation")) dilation = attr<std::vector<int64_t>>(node, "dilation");
  const bool include_pad = !is_max && attr<bool>(node, "count_include_pad");
  const int64_t count = ir::num_elements(os);
  const std::string& px = request.input_params[0];

  BodyWriter w;
  w.line("using index_t = {};", index_type_with_overhang(largest_tensor(node)));
  w.line("constexpr int kThreads = {};", kDefaultBlock);
  w.line(dynamic_count(request.dynamic_rows, "kCount", "index_t", count));
  if (nhwc) w.line("constexpr int kC = {};", xs[1]);
  w.line("constexpr int kH = {};", xs[2]);
  w.line("constexpr int kW = {};", xs[3]);
  w.line("constexpr int kOutH = {};", os[2]);
  w.line("constexpr int kOutW = {};", os[3]);
  w.line("constexpr int kKernelH = {};", kernel[0]);
  w.line("constexpr int kKernelW = {};", kernel[1]);
  w.line("constexpr int kStrideH = {};", stride[0]);
  w.line("constexpr int kStrideW = {};", stride[1]);
  w.line("constexpr int kPadTop = {};", pad[0]);
  w.line("constexpr int kPadLeft = {};", pad[1]);
  if (is_max) {
    w.line("constexpr int kDilationH = {};", dilation[0]);
    w.line("constexpr int kDilationW = {};", dilation[1]);
  }
  const std::string dh = is_max ? " * kDilationH" : "";
  const std::string dw = is_max ? " * kDilationW" : "";
  const std::string out = request.output_params[0];
  // Output i's window: its plane of x and its corner (top, left).
  const auto emit_window_place = [&] {
    if (nhwc) {
      w.line("const index_t pixel = i / kC;");
      w.line("const int out_w = static_cast<int>(pixel % kOutW);");
      w.line("const int out_h = static_cast<int>(pixel / kOutW % kOutH);");
      w.line("const index_t image = pixel / (kOutW * kOutH);");
      w.line("const int top = out_h * kStrideH - kPadTop;");
      w.line("const int left = out_w * kStrideW - kPadLeft;");
      w.line("const {}* in = {} + image * kH * kW * kC + i % kC;", c_type(dtype), px);
      return;
    }
    w.line("const int out_w = static_cast<int>(i % kOutW);");
    w.line("const int out_h = static_cast<int>(i / kOutW % kOutH);");
    w.line("const index_t plane = i / (kOutW * kOutH);");
    w.line("const int top = out_h * kStrideH - kPadTop;");
    w.line("const int left = out_w * kStrideW - kPadLeft;");
    w.line("const {}* in = {} + plane * kH * kW;", c_type(dtype), px);
  };
  const std::string tap = nhwc ? "in[(in_h * kW + in_w) * kC]" : "in[in_h * kW + in_w]";
  // Output i, wherever its window lies.
  const auto emit_output = [&] {
    if (is_max) {
      w.comment("Padding is -inf: padded taps are skipped. kiln_max lets a NaN win, as torch does.");
      w.line("float best = -INFINITY;");
    } else {
      w.comment("Padding is 0: padded taps add nothing.");
      w.line("float sum = 0.0f;");
      if (!include_pad) w.line("int inside = 0;");
    }
    w.open("for (int kh = 0; kh < kKernelH; ++kh)");
    w.line("const int in_h = top + kh{};", dh);
    w.open("if (in_h < 0 || in_h >= kH)");
    w.line("continue;");
    w.close();
    w.open("for (int kw = 0; kw < kKernelW; ++kw)");
    w.line("const int in_w = left + kw{};", dw);
    w.open("if (in_w < 0 || in_w >= kW)");
    w.line("continue;");
    w.close();
    if (is_max) {
      w.line("best = kiln_max(best, {});", load(dtype, tap));
    } else {
      w.line("sum += {};", load(dtype, tap));
      if (!include_pad) w.line("++inside;");
    }
    w.close();
    w.close();
    if (is_max) {
      w.line("{}[i] = {};", out, store(dtype, "best"));
    } else if (include_pad) {
      w.comment("count_include_pad: divide by the whole window.");
      w.line("{}[i] = {};", out, store(dtype, "sum / static_cast<float>(kKernelH * kKernelW)"));
    } else {
      w.comment("Divide by the taps inside the input (never 0: pad <= kernel / 2).");
      w.line("{}[i] = {};", out, store(dtype, "sum / static_cast<float>(inside)"));
    }
  };
  const bool host_variant = is_max && !nhwc;
  if (host_variant) {
    // The host body: the block's outputs in one loop (no call per GPU thread), and a window
    // inside x (all but the padded edges) without bounds checks, its maximum a chain of maxss
    // when it holds no NaN (emit_window_taps): 2.4x faster than kiln_max's chain, whose
    // selects become branches on the data.
    open_host_body(w, {"Host backend: the block's outputs in one loop, equal bit for bit to the CUDA body",
                       "below (codegen/kernels/pool_norm.cpp). Thread 0 runs it."});
    open_host_block_items(w);
    emit_window_place();
    w.open("if (top >= 0 && left >= 0 && top + (kKernelH - 1) * kDilationH < kH && "
           "left + (kKernelW - 1) * kDilationW < kW)");
    w.line("const {}* corner = in + top * kW + left;", c_type(dtype));
    emit_window_taps(w, dtype, kernel[0], kernel[1]);
    w.open("if (!window_nan)");
    w.line("{}[i] = {};", out, store(dtype, "window_max"));
    w.line("continue;");
    w.close();
    w.close();
    w.comment("A padded edge, or a NaN (rare, so the branch is predicted): the CUDA body's scan.");
    emit_output();
    w.close();
    w.close();
    close_host_body(w);
  }
  open_output_loop(w);
  emit_window_place();
  emit_output();
  w.close();
  return elementwise_launch(
      request, w, count,
      fmt::format("{}{} pooling {}x{}, one thread per output{}", nhwc ? "NHWC " : "", is_max ? "max" : "average",
                  kernel[0], kernel[1],
                  is_max ? "" : include_pad ? ", padding counted" : ", padding not counted"),
      host_variant);
}

KernelSpec emit_global_avg_pool(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const ir::Value* x = node.inputs[0];
  const ir::DType dtype = x->type.dtype;
  const ir::Shape& xs = x->type.shape;
  const int64_t planes = xs[0] * xs[1];
  constexpr int kWarpsPerBlock = static_cast<int>(kDefaultBlock / kWarpSize);

  BodyWriter w;
  w.line("using index_t = {};", index_type_with_overhang(largest_tensor(node)));
  w.line("constexpr int kWarpSize = {};", kWarpSize);
  w.line("constexpr int kWarpsPerBlock = {};", kWarpsPerBlock);
  w.line(dynamic_count(request.dynamic_rows, "kPlanes", "index_t", planes));
  w.line("constexpr int kPlaneSize = {};  // H * W", xs[2] * xs[3]);
  w.line("const int lane = threadIdx.x % kWarpSize;");
  w.comment("The plane depends on the warp only, so all 32 lanes reach the shuffles together.");
  w.line("const int warp = threadIdx.x / kWarpSize;");
  w.line("const index_t first = static_cast<index_t>(blockIdx.x) * kWarpsPerBlock + warp;");
  w.line("const index_t grid_warps = static_cast<index_t>(gridDim.x) * kWarpsPerBlock;");
  // The host body (docs/codegen.md, "The host backend"): each warp's planes, their sums as the
  // lanes and the shuffle tree compute them (emit_host_row_sums).
  open_host_body(w, {"Host backend: the block's planes as loops without shuffles, equal bit for bit to",
                     "the CUDA body below (codegen/kernels/pool_norm.cpp). Thread 0 runs it."});
  w.line("constexpr int kHostThreads = kWarpSize;  // the CUDA threads of one plane");
  w.open("for (int host_warp_index = 0; host_warp_index < kWarpsPerBlock; ++host_warp_index)");
  w.open("for (index_t plane = static_cast<index_t>(blockIdx.x) * kWarpsPerBlock + host_warp_index; "
         "plane < kPlanes; plane += grid_warps)");
  emit_host_row_sums(w, {{"sum", load_input(request, 0, "plane * kPlaneSize + k")}}, {}, "kPlaneSize");
  w.line("{}[plane] = {};", request.output_params[0], store(dtype, "sum / static_cast<float>(kPlaneSize)"));
  w.close();
  w.close();
  close_host_body(w);
  w.open("for (index_t plane = first; plane < kPlanes; plane += grid_warps)");
  w.line("float sum = 0.0f;");
  w.open("for (int i = lane; i < kPlaneSize; i += kWarpSize)");
  w.line("sum += {};", load_input(request, 0, "plane * kPlaneSize + i"));
  w.close();
  w.line("sum = kiln_warp_sum(sum);");
  w.open("if (lane == 0)");
  w.line("{}[plane] = {};", request.output_params[0],
         store(dtype, "sum / static_cast<float>(kPlaneSize)"));
  w.close();
  w.close();

  KernelSpec spec;
  spec.body = w.take();
  spec.grid = Dim3{grid_stride_blocks(planes, kWarpsPerBlock), 1, 1};
  spec.block = Dim3{kDefaultBlock, 1, 1};
  spec.uses_barriers = true;  // warp shuffles
  spec.host_variant = true;
  spec.note = "one warp per (n, c) plane, strided lane sums and a shuffle-tree sum";
  if (request.dynamic_rows) spec.dynamic_grid_axis = 0;  // planes in order, image-major
  return spec;
}

// --- bias_add -------------------------------------------------------------------------------

KernelSpec emit_bias_add(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const ir::Value* x = node.inputs[0];
  const ir::DType dtype = x->type.dtype;
  const ir::Shape& xs = x->type.shape;
  const int axis = axis_of(node);
  const int64_t count = ir::num_elements(xs);

  BodyWriter w;
  w.line("using index_t = {};", index_type_with_overhang(count));
  w.line("constexpr int kThreads = {};", kDefaultBlock);
  w.line(dynamic_count(request.dynamic_rows, "kCount", "index_t", count));
  w.line("constexpr int kChannels = {};  // size of axis {}", xs[axis], axis);
  w.line("constexpr index_t kInner = {};  // elements after axis {}",
         ir::num_elements(xs, axis + 1, xs.size()), axis);
  open_output_loop(w);
  w.line("const int channel = static_cast<int>(i / kInner % kChannels);");
  w.line("{}[i] = {};", request.output_params[0],
         store(dtype, load_input(request, 0, "i") + " + " + load_input(request, 1, "channel")));
  w.close();
  return elementwise_launch(request, w, count,
                            "elementwise, bias broadcast along axis " + std::to_string(axis));
}

// --- batch_norm -----------------------------------------------------------------------------

// Operands (load_input's indices): x 0, scale 1, bias 2, mean 3, var 4.
KernelSpec emit_batch_norm_inference(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const ir::Shape& xs = node.inputs[0]->type.shape;
  const int64_t count = ir::num_elements(xs);
  BodyWriter w;
  w.line("using index_t = {};", index_type_with_overhang(count));
  w.line("constexpr int kThreads = {};", kDefaultBlock);
  w.line(dynamic_count(request.dynamic_rows, "kCount", "index_t", count));
  w.line("constexpr int kChannels = {};", xs[1]);
  w.line("constexpr index_t kInner = {};  // elements per (n, c)", ir::num_elements(xs, 2, xs.size()));
  w.line("constexpr float kEpsilon = {};", literal(ir::DType::F32, attr<double>(node, "epsilon")));
  open_output_loop(w);
  w.line("const int c = static_cast<int>(i / kInner % kChannels);");
  w.comment("(x - mean) / sqrt(var + eps) * scale + bias as one multiply-add.");
  w.line("const float channel_scale = {} / sqrtf({} + kEpsilon);", load_input(request, 1, "c"),
         load_input(request, 4, "c"));
  w.line("const float channel_shift = {} - {} * channel_scale;", load_input(request, 2, "c"),
         load_input(request, 3, "c"));
  w.line("{}[i] = {};", request.output_params[0],
         store(node.inputs[0]->type.dtype,
               load_input(request, 0, "i") + " * channel_scale + channel_shift"));
  w.close();
  return elementwise_launch(
      request, w, count, "inference: running statistics folded into a per-channel scale and shift");
}

KernelSpec emit_batch_norm_training(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const ir::Shape& xs = node.inputs[0]->type.shape;
  const int64_t channels = xs[1];
  const int64_t inner = ir::num_elements(xs, 2, xs.size());
  const int64_t per_channel = xs[0] * inner;
  constexpr int kWarps = static_cast<int>(kDefaultBlock / kWarpSize);

  BodyWriter w;
  w.line("using index_t = {};", index_type_with_overhang(ir::num_elements(xs)));
  w.line("constexpr int kThreads = {};", kDefaultBlock);
  w.line("constexpr int kWarpSize = {};", kWarpSize);
  w.line("constexpr int kWarps = kThreads / kWarpSize;");
  w.line("constexpr int kChannels = {};", channels);
  w.line("constexpr index_t kInner = {};  // elements per (n, c)", inner);
  w.line("constexpr index_t kPerChannel = {};  // N * kInner", per_channel);
  w.line("constexpr float kEpsilon = {};", literal(ir::DType::F32, attr<double>(node, "epsilon")));
  w.line("float* warp_sums = reinterpret_cast<float*>(kiln_smem);  // [kWarps]");
  w.line("const int c = blockIdx.x;");
  w.line("const int lane = threadIdx.x % kWarpSize;");
  w.line("const int warp = threadIdx.x / kWarpSize;");
  w.comment("Sum over the block, returned to every thread: shuffles within warps, then each");
  w.comment("thread adds the kWarps partial sums (the same order everywhere, so all agree).");
  w.open("auto block_sum = [&](float partial) -> float");
  w.line("partial = kiln_warp_sum(partial);");
  w.open("if (lane == 0)");
  w.line("warp_sums[warp] = partial;");
  w.close();
  w.line("__syncthreads();");
  w.line("float total = 0.0f;");
  w.open("for (int i = 0; i < kWarps; ++i)");
  w.line("total += warp_sums[i];");
  w.close();
  w.comment("warp_sums is reused by the next call.");
  w.line("__syncthreads();");
  w.line("return total;");
  w.close(";");
  const std::string loop =
      "for (index_t e = threadIdx.x; e < kPerChannel; e += kThreads)";
  const std::string offset =
      "const index_t offset = (e / kInner * kChannels + c) * kInner + e % kInner;";
  w.comment("Pass 1: the channel's mean.");
  w.line("float sum = 0.0f;");
  w.open("{}", loop);
  w.line("{}", offset);
  w.line("sum += {};", load_input(request, 0, "offset"));
  w.close();
  w.line("const float batch_mean = block_sum(sum) / static_cast<float>(kPerChannel);");
  w.comment("Pass 2: the biased variance, from deviations (no cancellation).");
  w.line("float squares = 0.0f;");
  w.open("{}", loop);
  w.line("{}", offset);
  w.line("const float deviation = {} - batch_mean;", load_input(request, 0, "offset"));
  w.line("squares += deviation * deviation;");
  w.close();
  w.line("const float batch_var = block_sum(squares) / static_cast<float>(kPerChannel);");
  w.comment("Pass 3: normalize with the batch statistics.");
  w.line("const float channel_scale = {} / sqrtf(batch_var + kEpsilon);",
         load_input(request, 1, "c"));
  w.line("const float channel_shift = {} - batch_mean * channel_scale;",
         load_input(request, 2, "c"));
  w.open("{}", loop);
  w.line("{}", offset);
  w.line("{}[offset] = {};", request.output_params[0],
         store(node.inputs[0]->type.dtype,
               load_input(request, 0, "offset") + " * channel_scale + channel_shift"));
  w.close();

  KernelSpec spec;
  spec.body = w.take();
  spec.grid = Dim3{static_cast<uint32_t>(channels), 1, 1};
  spec.block = Dim3{kDefaultBlock, 1, 1};
  spec.shared_bytes = kWarps * sizeof(float);
  spec.uses_barriers = true;
  spec.note = "training: one block per channel, two-pass batch mean and variance by block "
              "reductions, then normalize";
  return spec;
}

KernelSpec emit_batch_norm(const KernelRequest& request) {
  return attr<bool>(request.node, "training") ? emit_batch_norm_training(request)
                                              : emit_batch_norm_inference(request);
}

}  // namespace

void add_pool_norm_emitters(EmitterTable& table) {
  table.emplace_back(ir::OpId::MaxPool2d, [](const KernelRequest& r) { return emit_pool(r, true); });
  table.emplace_back(ir::OpId::AvgPool2d, [](const KernelRequest& r) { return emit_pool(r, false); });
  table.emplace_back(ir::OpId::GlobalAvgPool, emit_global_avg_pool);
  table.emplace_back(ir::OpId::BiasAdd, emit_bias_add);
  table.emplace_back(ir::OpId::BatchNorm, emit_batch_norm);
}

}  // namespace kiln::codegen
