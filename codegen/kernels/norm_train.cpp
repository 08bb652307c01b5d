// CUDA kernels for normalization in training (ir/ops/norm_train_ops.cpp). Semantics:
// ir/eval/kernels_norm_train.cpp.
//
//   batch_norm_train       one block per channel: two block reductions over its N * inner values
//                          (the mean, then the squared deviations: no E[x^2] - E[x]^2
//                          cancellation), thread 0 writes the statistics, then all normalize.
//   batch_norm_train_grad  one block per channel: one pass sums dy and dy * xhat (block
//                          reductions; they are dbias[c] and dscale[c]), a second writes
//                          dx = scale * inv_std * (dy - mean(dy) - xhat * mean(dy * xhat)).
//   with chunk partials    (split-batch-norm) a grid of channels x chunks:
//     batch_norm_chunk_stats   per (channel, chunk) block: the chunk's mean, then its sum of
//                              squared deviations from that mean (block reductions);
//     batch_norm_train         every thread combines its channel's chunk statistics in chunk
//                              order (Chan et al.: M2 = sum M2_s + sum n_s (mean_s - mean)^2),
//                              then normalizes its block's chunk: no barrier;
//     batch_norm_chunk_sums    per block: the chunk's sums of dy and dy * xhat;
//     batch_norm_train_grad    every thread adds up its channel's chunk sums, then writes dx
//                              for its block's chunk: no barrier.
//   layer_norm_grad        the forward layer_norm's layout (normalize.cpp): one warp per row up
//                          to kMaxWarpRow elements, else one block per row. Mean and variance
//                          passes as in the forward, a pass summing g = dy * scale and g * xhat,
//                          then dx = inv_std * (g - mean(g) - xhat * mean(g * xhat)) and dy * xhat.
// Sums accumulate in float in the fixed tree order of reduce_util.h.
#include "codegen/kernels/reduce_util.h"

namespace kiln::codegen {
namespace {

using ir::DType;

// --- per-channel kernels ------------------------------------------------------------------------

// The loop of the two batch_norm kernels over the channel's values, and the flat offset of
// value e in x [N, C, inner...].
struct ChannelLoop {
  std::string loop = "for (index_t e = threadIdx.x; e < kPerChannel; e += kThreads)";
  std::string offset = "const index_t offset = (e / kInner * kChannels + c) * kInner + e % kInner;";
};

void emit_channel_preamble(BodyWriter& w, const ir::Node& node, const ir::Shape& xs) {
  const int64_t inner = ir::num_elements(xs, 2, xs.size());
  w.line("using index_t = {};", index_type_with_overhang(largest_tensor(node)));
  w.line("constexpr int kThreads = {};", kRowBlock);
  w.line("constexpr int kChannels = {};", xs[1]);
  w.line("constexpr index_t kInner = {};  // values per (n, c)", inner);
  w.line("constexpr index_t kPerChannel = {};  // N * kInner", xs[0] * inner);
  w.line("constexpr float kPerChannelF = {};",
         literal(DType::F32, static_cast<double>(xs[0] * inner)));
  w.line("constexpr float kEpsilon = {};", literal(DType::F32, attr<double>(node, "epsilon")));
  emit_warp_constants(w, kRowBlock);
  w.line("float* partial = reinterpret_cast<float*>(kiln_smem);  // [kWarps]");
  w.comment("One block per channel: every thread of the block reaches every barrier.");
  w.line("const int c = static_cast<int>(blockIdx.x);");
}

KernelSpec channel_spec(BodyWriter& w, int64_t channels, std::string note) {
  KernelSpec spec;
  spec.body = w.take();
  spec.grid = Dim3{static_cast<uint32_t>(channels), 1, 1};
  spec.block = Dim3{static_cast<uint32_t>(kRowBlock), 1, 1};
  spec.shared_bytes = static_cast<uint32_t>(kRowBlock / kWarpSize * sizeof(float));
  spec.uses_barriers = true;
  spec.note = std::move(note);
  return spec;
}

// --- per-chunk kernels (split-batch-norm) -------------------------------------------------------

// Chunk s of channel c's values is e in [s * kChunk, min(kPerChannel, (s + 1) * kChunk)); the
// grid is channels x chunks, one block each.
struct ChunkedChannels {
  int64_t channels = 0, chunks = 0, per_channel = 0, chunk = 0;
  ChunkedChannels(const ir::Shape& xs, int64_t chunk_count)
      : channels(xs[1]), chunks(chunk_count), per_channel(ir::num_elements(xs) / xs[1]),
        chunk((per_channel + chunk_count - 1) / chunk_count) {}
};

void emit_chunk_preamble(BodyWriter& w, const ir::Node& node, const ir::Shape& xs,
                         const ChunkedChannels& grid, bool block_reductions) {
  w.line("using index_t = {};", index_type_with_overhang(largest_tensor(node)));
  w.line("constexpr int kThreads = {};", kRowBlock);
  w.line("constexpr int kChannels = {};", xs[1]);
  w.line("constexpr index_t kInner = {};  // values per (n, c)", ir::num_elements(xs, 2, xs.size()));
  w.line("constexpr index_t kPerChannel = {};  // N * kInner", grid.per_channel);
  w.line("constexpr float kPerChannelF = {};",
         literal(DType::F32, static_cast<double>(grid.per_channel)));
  w.line("constexpr int kChunks = {};", grid.chunks);
  w.line("constexpr index_t kChunk = {};  // values per chunk; the last may have fewer", grid.chunk);
  if (node.attrs.count("epsilon"))
    w.line("constexpr float kEpsilon = {};", literal(DType::F32, attr<double>(node, "epsilon")));
  if (block_reductions) {
    emit_warp_constants(w, kRowBlock);
    w.line("float* partial = reinterpret_cast<float*>(kiln_smem);  // [kWarps]");
    w.comment("One block per (channel, chunk): every thread of the block reaches every barrier.");
  }
  w.line("const int c = static_cast<int>(blockIdx.x);");
  w.line("const int chunk = static_cast<int>(blockIdx.y);");
  w.line("const index_t chunk_begin = chunk * kChunk;");
  w.line("const index_t chunk_end = chunk + 1 == kChunks ? kPerChannel : chunk_begin + kChunk;");
}

const char* kChunkLoop = "for (index_t e = chunk_begin + threadIdx.x; e < chunk_end; e += kThreads)";

KernelSpec chunk_spec(BodyWriter& w, const ChunkedChannels& grid, bool block_reductions,
                      std::string note) {
  KernelSpec spec;
  spec.body = w.take();
  spec.grid = Dim3{static_cast<uint32_t>(grid.channels), static_cast<uint32_t>(grid.chunks), 1};
  spec.block = Dim3{static_cast<uint32_t>(kRowBlock), 1, 1};
  spec.shared_bytes =
      block_reductions ? static_cast<uint32_t>(kRowBlock / kWarpSize * sizeof(float)) : 0;
  spec.uses_barriers = block_reductions;
  spec.note = std::move(note);
  return spec;
}

// Partial `which` (0 or 1) of chunk `s` and channel c in a [kChunks, 2, kChannels] operand.
std::string chunk_partial(const KernelRequest& request, size_t operand, const std::string& s,
                          int which) {
  return load_input(request, operand, "(" + s + " * 2 + " + std::to_string(which) + ") * kChannels + c");
}

// Thread 0 stores the block's two partials (float expressions) at [chunk, 0..1, c] of result 0.
void emit_store_chunk_partials(BodyWriter& w, const KernelRequest& request, const std::string& first,
                               const std::string& second) {
  const DType dtype = request.node.results[0]->type.dtype;
  w.open("if (threadIdx.x == 0)");
  w.line("{}[(chunk * 2 + 0) * kChannels + c] = {};", request.output_params[0], store(dtype, first));
  w.line("{}[(chunk * 2 + 1) * kChannels + c] = {};", request.output_params[0], store(dtype, second));
  w.close();
}

// Operand: x. Result: [chunks, 2, C] chunk means and sums of squared deviations.
KernelSpec emit_batch_norm_chunk_stats(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const ir::Shape& xs = node.inputs[0]->type.shape;
  const ChunkedChannels grid(xs, attr<int64_t>(node, "chunks"));
  const ChannelLoop loop;
  const std::string x = load_input(request, 0, "offset");
  BodyWriter w;
  emit_chunk_preamble(w, node, xs, grid, true);
  w.comment("Pass 1: the chunk's mean.");
  w.line("float sum = 0.0f;");
  w.open("{}", kChunkLoop);
  w.line("{}", loop.offset);
  w.line("sum += {};", x);
  w.close();
  emit_block_combine(w, "sum", Combine::Sum, "float", "partial");
  w.line("const float chunk_mean = sum / static_cast<float>(chunk_end - chunk_begin);");
  w.comment("Pass 2: its squared deviations from that mean (no cancellation).");
  w.line("float squares = 0.0f;");
  w.open("{}", kChunkLoop);
  w.line("{}", loop.offset);
  w.line("const float deviation = {} - chunk_mean;", x);
  w.line("squares += deviation * deviation;");
  w.close();
  emit_block_combine(w, "squares", Combine::Sum, "float", "partial");
  emit_store_chunk_partials(w, request, "chunk_mean", "squares");
  return chunk_spec(w, grid, true,
                    "one block per channel and chunk: the chunk's mean and squared deviations");
}

// Operands: x 0, scale 1, bias 2, chunk_stats 3. Results: y, batch_mean, batch_var.
KernelSpec emit_batch_norm_train_chunked(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const ir::Shape& xs = node.inputs[0]->type.shape;
  const DType dtype = node.inputs[0]->type.dtype;
  const ChunkedChannels grid(xs, node.inputs[3]->type.shape[0]);
  const ChannelLoop loop;
  const std::string x = load_input(request, 0, "offset");
  BodyWriter w;
  emit_chunk_preamble(w, node, xs, grid, false);
  w.comment("Every thread combines the channel's chunk statistics in chunk order (Chan et al.),");
  w.comment("so all blocks of the channel normalize with the same bits.");
  w.open("const auto chunk_count = [](int s) -> float");
  w.line("return static_cast<float>((s + 1 == kChunks ? kPerChannel : (s + 1) * kChunk) - s * kChunk);");
  w.close(";");
  w.line("float weighted = 0.0f;");
  w.open("for (int s = 0; s < kChunks; ++s)");
  w.line("weighted += chunk_count(s) * {};", chunk_partial(request, 3, "s", 0));
  w.close();
  w.line("const float batch_mean = weighted / kPerChannelF;");
  w.line("float m2 = 0.0f;");
  w.open("for (int s = 0; s < kChunks; ++s)");
  w.line("const float offset_mean = {} - batch_mean;", chunk_partial(request, 3, "s", 0));
  w.line("m2 += {} + chunk_count(s) * offset_mean * offset_mean;", chunk_partial(request, 3, "s", 1));
  w.close();
  w.line("const float batch_var = m2 / kPerChannelF;");
  w.open("if (chunk == 0 && threadIdx.x == 0)");
  w.line("{}[c] = {};", request.output_params[1], store(dtype, "batch_mean"));
  w.line("{}[c] = {};", request.output_params[2], store(dtype, "batch_var"));
  w.close();
  w.comment("Normalize the block's chunk with the batch statistics, as one multiply-add.");
  w.line("const float channel_scale = {} / sqrtf(batch_var + kEpsilon);", load_input(request, 1, "c"));
  w.line("const float channel_shift = {} - batch_mean * channel_scale;", load_input(request, 2, "c"));
  w.open("{}", kChunkLoop);
  w.line("{}", loop.offset);
  w.line("{}[offset] = {};", request.output_params[0],
         store(dtype, x + " * channel_scale + channel_shift"));
  w.close();
  return chunk_spec(w, grid, false,
                    "one block per channel and chunk: statistics combined from the chunks', "
                    "then normalize the chunk");
}

// Operands: dy 0, x 1, batch_mean 2, batch_var 3. Result: [chunks, 2, C] chunk sums of dy and
// dy * xhat.
KernelSpec emit_batch_norm_chunk_sums(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const ir::Shape& xs = node.inputs[1]->type.shape;
  const ChunkedChannels grid(xs, attr<int64_t>(node, "chunks"));
  const ChannelLoop loop;
  BodyWriter w;
  emit_chunk_preamble(w, node, xs, grid, true);
  w.line("const float mean = {};", load_input(request, 2, "c"));
  w.line("const float inv_std = 1.0f / sqrtf({} + kEpsilon);", load_input(request, 3, "c"));
  w.line("float sum_dy = 0.0f;");
  w.line("float sum_dy_xhat = 0.0f;");
  w.open("{}", kChunkLoop);
  w.line("{}", loop.offset);
  w.comment("Not named dy: that is the operand's pointer.");
  w.line("const float grad_out = {};", load_input(request, 0, "offset"));
  w.line("sum_dy += grad_out;");
  w.line("sum_dy_xhat += grad_out * (({} - mean) * inv_std);", load_input(request, 1, "offset"));
  w.close();
  emit_block_combine(w, "sum_dy", Combine::Sum, "float", "partial");
  emit_block_combine(w, "sum_dy_xhat", Combine::Sum, "float", "partial");
  emit_store_chunk_partials(w, request, "sum_dy", "sum_dy_xhat");
  return chunk_spec(w, grid, true,
                    "one block per channel and chunk: the chunk's sums of dy and dy * xhat");
}

// Operands: dy 0, x 1, scale 2, batch_mean 3, batch_var 4, chunk_sums 5. Results: dx, dscale,
// dbias.
KernelSpec emit_batch_norm_train_grad_chunked(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const ir::Shape& xs = node.inputs[1]->type.shape;
  const DType dtype = node.inputs[1]->type.dtype;
  const ChunkedChannels grid(xs, node.inputs[5]->type.shape[0]);
  const ChannelLoop loop;
  const std::string dy = load_input(request, 0, "offset");
  BodyWriter w;
  emit_chunk_preamble(w, node, xs, grid, false);
  w.line("const float mean = {};", load_input(request, 3, "c"));
  w.line("const float inv_std = 1.0f / sqrtf({} + kEpsilon);", load_input(request, 4, "c"));
  w.comment("Every thread adds up the channel's chunk sums in chunk order: dbias[c], dscale[c].");
  w.line("float sum_dy = 0.0f;");
  w.line("float sum_dy_xhat = 0.0f;");
  w.open("for (int s = 0; s < kChunks; ++s)");
  w.line("sum_dy += {};", chunk_partial(request, 5, "s", 0));
  w.line("sum_dy_xhat += {};", chunk_partial(request, 5, "s", 1));
  w.close();
  w.open("if (chunk == 0 && threadIdx.x == 0)");
  w.line("{}[c] = {};", request.output_params[1], store(dtype, "sum_dy_xhat"));
  w.line("{}[c] = {};", request.output_params[2], store(dtype, "sum_dy"));
  w.close();
  w.comment("dx = scale * inv_std * (dy - mean(dy) - xhat * mean(dy * xhat)) over the chunk.");
  w.line("const float channel_scale = {} * inv_std;", load_input(request, 2, "c"));
  w.line("const float mean_dy = sum_dy / kPerChannelF;");
  w.line("const float mean_dy_xhat = sum_dy_xhat / kPerChannelF;");
  w.open("{}", kChunkLoop);
  w.line("{}", loop.offset);
  w.line("const float xhat = ({} - mean) * inv_std;", load_input(request, 1, "offset"));
  w.line("{}[offset] = {};", request.output_params[0],
         store_result(request, 0, dtype, "channel_scale * (" + dy + " - mean_dy - xhat * mean_dy_xhat)"));
  w.close();
  return chunk_spec(w, grid, false,
                    "one block per channel and chunk: channel sums added up from the chunks', "
                    "then dx over the chunk");
}

// Operands: x 0, scale 1, bias 2. Results: y, batch_mean, batch_var.
KernelSpec emit_batch_norm_train(const KernelRequest& request) {
  if (request.node.inputs.size() > 3) return emit_batch_norm_train_chunked(request);
  const ir::Node& node = request.node;
  const ir::Shape& xs = node.inputs[0]->type.shape;
  const DType dtype = node.inputs[0]->type.dtype;
  const ChannelLoop loop;
  const std::string x = load_input(request, 0, "offset");
  BodyWriter w;
  emit_channel_preamble(w, node, xs);
  w.comment("Pass 1: the channel's mean.");
  w.line("float sum = 0.0f;");
  w.open("{}", loop.loop);
  w.line("{}", loop.offset);
  w.line("sum += {};", x);
  w.close();
  emit_block_combine(w, "sum", Combine::Sum, "float", "partial");
  w.line("const float batch_mean = sum / kPerChannelF;");
  w.comment("Pass 2: the biased variance, from deviations (no cancellation).");
  w.line("float squares = 0.0f;");
  w.open("{}", loop.loop);
  w.line("{}", loop.offset);
  w.line("const float deviation = {} - batch_mean;", x);
  w.line("squares += deviation * deviation;");
  w.close();
  emit_block_combine(w, "squares", Combine::Sum, "float", "partial");
  w.line("const float batch_var = squares / kPerChannelF;");
  w.open("if (threadIdx.x == 0)");
  w.line("{}[c] = {};", request.output_params[1], store(dtype, "batch_mean"));
  w.line("{}[c] = {};", request.output_params[2], store(dtype, "batch_var"));
  w.close();
  w.comment("Pass 3: normalize with the batch statistics, as one multiply-add.");
  w.line("const float channel_scale = {} / sqrtf(batch_var + kEpsilon);",
         load_input(request, 1, "c"));
  w.line("const float channel_shift = {} - batch_mean * channel_scale;",
         load_input(request, 2, "c"));
  w.open("{}", loop.loop);
  w.line("{}", loop.offset);
  w.line("{}[offset] = {};", request.output_params[0],
         store(dtype, x + " * channel_scale + channel_shift"));
  w.close();
  return channel_spec(w, xs[1],
                      "one block per channel: batch mean and variance by block reductions, "
                      "then normalize");
}

// Operands: dy 0, x 1, scale 2, batch_mean 3, batch_var 4. Results: dx, dscale, dbias.
KernelSpec emit_batch_norm_train_grad(const KernelRequest& request) {
  if (request.node.inputs.size() > 5) return emit_batch_norm_train_grad_chunked(request);
  const ir::Node& node = request.node;
  const ir::Shape& xs = node.inputs[1]->type.shape;
  const DType dtype = node.inputs[1]->type.dtype;
  const ChannelLoop loop;
  const std::string dy = load_input(request, 0, "offset");
  const std::string xhat = "(" + load_input(request, 1, "offset") + " - mean) * inv_std";
  BodyWriter w;
  emit_channel_preamble(w, node, xs);
  w.line("const float mean = {};", load_input(request, 3, "c"));
  w.line("const float inv_std = 1.0f / sqrtf({} + kEpsilon);", load_input(request, 4, "c"));
  w.comment("Pass 1: sum(dy) and sum(dy * xhat), which are dbias[c] and dscale[c].");
  w.line("float sum_dy = 0.0f;");
  w.line("float sum_dy_xhat = 0.0f;");
  w.open("{}", loop.loop);
  w.line("{}", loop.offset);
  w.comment("Not named dy: that is the operand's pointer.");
  w.line("const float grad_out = {};", dy);
  w.line("sum_dy += grad_out;");
  w.line("sum_dy_xhat += grad_out * {};", xhat);
  w.close();
  emit_block_combine(w, "sum_dy", Combine::Sum, "float", "partial");
  emit_block_combine(w, "sum_dy_xhat", Combine::Sum, "float", "partial");
  w.open("if (threadIdx.x == 0)");
  w.line("{}[c] = {};", request.output_params[1], store(dtype, "sum_dy_xhat"));
  w.line("{}[c] = {};", request.output_params[2], store(dtype, "sum_dy"));
  w.close();
  w.comment("Pass 2: dx = scale * inv_std * (dy - mean(dy) - xhat * mean(dy * xhat)).");
  w.line("const float channel_scale = {} * inv_std;", load_input(request, 2, "c"));
  w.line("const float mean_dy = sum_dy / kPerChannelF;");
  w.line("const float mean_dy_xhat = sum_dy_xhat / kPerChannelF;");
  w.open("{}", loop.loop);
  w.line("{}", loop.offset);
  w.line("const float xhat = {};", xhat);
  w.line("{}[offset] = {};", request.output_params[0],
         store_result(request, 0, dtype, "channel_scale * (" + dy + " - mean_dy - xhat * mean_dy_xhat)"));
  w.close();
  return channel_spec(w, xs[1],
                      "one block per channel: sums of dy and dy * xhat by block reductions, "
                      "then dx");
}

// --- layer_norm_grad ----------------------------------------------------------------------------

// One loop over this thread's elements of the row: the `prelude` lines, then `var += expr` for
// each of `sums` (floats declared before).
void emit_row_fold(BodyWriter& w, const std::vector<std::pair<std::string, std::string>>& sums,
                   const std::vector<std::string>& prelude, const std::string& first,
                   const std::string& step) {
  w.open("for (int k = {}; k < kSize; k += {})", first, step);
  for (const std::string& line : prelude) w.line("{}", line);
  for (const auto& [var, expr] : sums) w.line("{} += {};", var, expr);
  w.close();
}

void emit_row_combine(BodyWriter& w, bool per_warp, const std::string& var) {
  if (per_warp)
    emit_warp_combine(w, var, Combine::Sum, "float");
  else
    emit_block_combine(w, var, Combine::Sum, "float", "partial");
}

// Operands: dy 0, x 1, scale 2. Results: dx, dy * xhat. rms_norm_grad: no mean pass (the
// mean is taken as 0) and no sum(g) pass.
KernelSpec emit_layer_norm_grad(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const bool centred = node.op == ir::OpId::LayerNormGrad;
  const DType dtype = node.inputs[1]->type.dtype;
  const ir::Shape& shape = node.inputs[1]->type.shape;
  const int axis = axis_of(node);
  const int64_t rows = ir::num_elements(shape, 0, axis);
  const int64_t size = ir::num_elements(shape, axis, shape.size());
  const std::string type = index_type(rows * size);
  const bool per_warp = size <= kMaxWarpRow;
  const std::string first = per_warp ? "lane" : "static_cast<int>(threadIdx.x)";
  const std::string step = per_warp ? "kWarpSize" : "static_cast<int>(blockDim.x)";
  const std::string x = load_input(request, 1, "row * kSize + k");
  const std::string dy = load_input(request, 0, "row * kSize + k");
  const std::string scale = load_input(request, 2, "k");

  BodyWriter w;
  w.line("constexpr {} kRows = {};", type, int_literal(rows, type));
  w.line("constexpr int kSize = {};  // elements per normalized row", size);
  w.line("constexpr float kSizeF = {};", literal(DType::F32, static_cast<double>(size)));
  w.line("constexpr float kEpsilon = {};", literal(DType::F32, attr<double>(node, "epsilon")));
  emit_warp_constants(w, kRowBlock);
  if (!per_warp) w.line("float* partial = reinterpret_cast<float*>(kiln_smem);  // [kWarps]");
  const std::vector<std::string> g_prelude = {
      "const float xhat = (" + x + " - mean) * inv_std;", "const float g = " + dy + " * " + scale + ";"};
  const std::vector<std::string> last_pass = {
      "const float xhat = (" + x + " - mean) * inv_std;", "const float grad_out = " + dy + ";",
      fmt::format("{}[row * kSize + k] = {};", request.output_params[0],
                  store_result(request, 0, dtype,
                               "inv_std * (grad_out * " + scale + " - mean_g - xhat * mean_g_xhat)")),
      fmt::format("{}[row * kSize + k] = {};", request.output_params[1], store(dtype, "grad_out * xhat"))};
  // The host body (docs/codegen.md, "The host backend"): the same passes as loops over the
  // block's rows, each sum as the CUDA threads compute it (emit_host_row_sums), so bit for bit
  // the CUDA body's results.
  open_host_rows(w, per_warp, type, "kRows", "norm_train.cpp");
  if (centred) {
    emit_host_row_sums(w, {{"sum", x}}, {}, "kSize");
    w.line("const float mean = sum / kSizeF;");
  } else {
    w.line("const float mean = 0.0f;");
  }
  emit_host_row_sums(w, {{"squares", "centred * centred"}}, {"const float centred = " + x + " - mean;"},
                     "kSize");
  w.line("const float inv_std = 1.0f / sqrtf(squares / kSizeF + kEpsilon);");
  if (centred) {
    emit_host_row_sums(w, {{"sum_g", "g"}, {"sum_g_xhat", "g * xhat"}}, g_prelude, "kSize");
    w.line("const float mean_g = sum_g / kSizeF;");
  } else {
    emit_host_row_sums(w, {{"sum_g_xhat", "g * xhat"}},
                       {"const float xhat = " + x + " * inv_std;", g_prelude[1]}, "kSize");
    w.line("const float mean_g = 0.0f;");
  }
  w.line("const float mean_g_xhat = sum_g_xhat / kSizeF;");
  w.open("for (int k = 0; k < kSize; ++k)");
  for (const std::string& line : last_pass) w.line("{}", line);
  w.close();
  close_host_rows(w, per_warp);

  open_row_loop(w, per_warp, type, "kRows");
  if (centred) {
    w.comment("Pass 1: the mean. Pass 2: the biased variance from centred values, as the forward.");
    w.line("float sum = 0.0f;");
    emit_row_fold(w, {{"sum", x}}, {}, first, step);
    emit_row_combine(w, per_warp, "sum");
    w.line("const float mean = sum / kSizeF;");
  } else {
    w.comment("Pass 1: the mean square, as the forward (rms_norm does not centre: mean is 0).");
    w.line("const float mean = 0.0f;");
  }
  w.line("float squares = 0.0f;");
  emit_row_fold(w, {{"squares", "centred * centred"}}, {"const float centred = " + x + " - mean;"},
                first, step);
  emit_row_combine(w, per_warp, "squares");
  w.line("const float inv_std = 1.0f / sqrtf(squares / kSizeF + kEpsilon);");
  if (centred) {
    w.comment("Pass 3: sums of g = dy * scale and of g * xhat over the row.");
    w.line("float sum_g = 0.0f;");
    w.line("float sum_g_xhat = 0.0f;");
    emit_row_fold(w, {{"sum_g", "g"}, {"sum_g_xhat", "g * xhat"}}, g_prelude, first, step);
    emit_row_combine(w, per_warp, "sum_g");
    emit_row_combine(w, per_warp, "sum_g_xhat");
    w.line("const float mean_g = sum_g / kSizeF;");
  } else {
    w.comment("Pass 2: the sum of g * xhat over the row, g = dy * scale.");
    w.line("float sum_g_xhat = 0.0f;");
    emit_row_fold(w, {{"sum_g_xhat", "g * xhat"}},
                  {"const float xhat = " + x + " * inv_std;", g_prelude[1]}, first, step);
    emit_row_combine(w, per_warp, "sum_g_xhat");
    w.line("const float mean_g = 0.0f;  // no centring, no -mean(g) term");
  }
  w.line("const float mean_g_xhat = sum_g_xhat / kSizeF;");
  w.comment("Last pass: dx = inv_std * (g - mean(g) - xhat * mean(g * xhat)), and dy * xhat.");
  w.open("for (int k = {}; k < kSize; k += {})", first, step);
  for (const std::string& line : last_pass) w.line("{}", line);
  w.close();
  w.close();

  KernelSpec spec;
  spec.host_variant = true;
  spec.body = w.take();
  spec.block = Dim3{static_cast<uint32_t>(kRowBlock), 1, 1};
  const uint32_t rows_per_block = per_warp ? static_cast<uint32_t>(kRowBlock / kWarpSize) : 1;
  spec.grid = Dim3{grid_stride_blocks(rows, rows_per_block), 1, 1};
  spec.shared_bytes = per_warp ? 0 : static_cast<uint32_t>(kRowBlock / kWarpSize * sizeof(float));
  spec.uses_barriers = true;
  spec.note = std::string(per_warp ? "one warp" : "one block") +
              (centred ? " per row: mean, variance, sum(g) and sum(g * xhat) passes, then dx and dy * xhat"
                       : " per row: mean square and sum(g * xhat) passes, then dx and dy * xhat");
  return spec;
}

}  // namespace

void add_norm_train_emitters(EmitterTable& table) {
  table.emplace_back(ir::OpId::BatchNormTrain, emit_batch_norm_train);
  table.emplace_back(ir::OpId::BatchNormTrainGrad, emit_batch_norm_train_grad);
  table.emplace_back(ir::OpId::BatchNormChunkStats, emit_batch_norm_chunk_stats);
  table.emplace_back(ir::OpId::BatchNormChunkSums, emit_batch_norm_chunk_sums);
  table.emplace_back(ir::OpId::LayerNormGrad, emit_layer_norm_grad);
  table.emplace_back(ir::OpId::RmsNormGrad, emit_layer_norm_grad);
}

}  // namespace kiln::codegen
