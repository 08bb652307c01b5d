// Kernel emitters for softmax, log_softmax and layer_norm: per-row statistics, then a write
// pass over the same row.
//
//   - softmax / log_softmax along a contiguous axis (the last one, or followed by size-1 dims):
//     one warp per row up to kMaxWarpRow elements, else one block per row. A single online pass
//     (reduce_util.h) finds the max and the sum of exp(x - max), lanes and warps merge their
//     states, then the row is written: exp(x - max) / sum, or x - max - log(sum). Reading the
//     row twice instead of three times; numerically stable as the max is subtracted first.
//   - softmax along an axis with a stride (inner > 1): one thread per (outer, inner) row, which
//     walks the row sequentially; neighbouring threads read neighbouring addresses.
//   - layer_norm: one warp (rows up to kMaxWarpRow) or one block per normalized row; two passes
//     for the mean and then the biased variance of (x - mean), as the reference, which is
//     exact-er than E[x^2] - mean^2; then (x - mean) * inv_std * scale + bias.
#include "codegen/kernels/reduce_util.h"

namespace kiln::codegen {
namespace {

using ir::DType;

KernelSpec row_spec(bool per_warp, int64_t rows, uint32_t shared_bytes) {
  KernelSpec spec;
  spec.block = Dim3{static_cast<uint32_t>(kRowBlock), 1, 1};
  const uint32_t rows_per_block = per_warp ? static_cast<uint32_t>(kRowBlock / kWarpSize) : 1;
  spec.grid = Dim3{grid_stride_blocks(rows, rows_per_block), 1, 1};
  spec.shared_bytes = per_warp ? 0 : shared_bytes;
  spec.uses_barriers = true;
  return spec;
}

// The write pass of softmax (`log_form` false) or log_softmax for element expression `v`.
std::string softmax_value(bool log_form, const std::string& v) {
  return log_form ? v + " - max_v - log_sum" : "expf(" + v + " - max_v) / sum_v";
}

KernelSpec emit_contiguous_softmax(const KernelRequest& request, int64_t rows, int64_t len,
                                   bool log_form) {
  const DType dtype = request.node.inputs[0]->type.dtype;
  const std::string element(c_type(dtype));
  const std::string type = index_type(rows * len);
  const bool per_warp = len <= kMaxWarpRow;
  const std::string first = per_warp ? "lane" : "static_cast<int>(threadIdx.x)";
  const std::string step = per_warp ? "kWarpSize" : "static_cast<int>(blockDim.x)";
  BodyWriter w;
  w.line(dynamic_count(request.dynamic_rows, "kRows", type, rows));
  w.line("constexpr int kLen = {};  // row length", len);
  emit_warp_constants(w, kRowBlock);
  emit_rescale_lambda(w);
  if (!per_warp) {
    w.line("float* partial_max = reinterpret_cast<float*>(kiln_smem);  // [kWarps]");
    w.line("float* partial_sum = partial_max + kWarps;  // [kWarps]");
  }
  const std::string in_row_k = load_input(request, 0, "row * kLen + k");
  // The host body: each CUDA thread's online state, merged as on the GPU; element k is
  // written with the state of the thread that writes it there.
  open_host_rows(w, per_warp, type, "kRows", "normalize.cpp");
  emit_host_online_softmax(w, in_row_k, "kLen");
  w.open("for (int k = 0; k < kLen; ++k)");
  w.line("const float max_v = max_lanes[k % kHostThreads];");
  w.line("const float sum_v = sum_lanes[k % kHostThreads];");
  if (log_form) w.line("const float log_sum = logf(sum_v);");
  w.line("{}[row * kLen + k] = {};", request.output_params[0],
         store(dtype, softmax_value(log_form, in_row_k)));
  w.close();
  close_host_rows(w, per_warp);
  open_row_loop(w, per_warp, type, "kRows");
  w.line("{}* out_row = {} + row * kLen;", element, request.output_params[0]);
  emit_online_softmax(w, in_row_k, first, "kLen", step, "int");
  if (per_warp)
    emit_warp_merge_softmax(w);
  else
    emit_block_merge_softmax(w);
  w.comment(log_form ? "Write pass: x - max - log(sum)." : "Write pass: exp(x - max) / sum.");
  if (log_form) w.line("const float log_sum = logf(sum_v);");
  w.open("for (int k = {}; k < kLen; k += {})", first, step);
  w.line("out_row[k] = {};", store(dtype, softmax_value(log_form, in_row_k)));
  w.close();
  w.close();
  KernelSpec spec = row_spec(per_warp, rows, static_cast<uint32_t>(2 * kRowBlock / kWarpSize * 4));
  spec.host_variant = true;
  spec.body = w.take();
  if (request.dynamic_rows) spec.dynamic_grid_axis = 0;
  spec.note = std::string(per_warp ? "one warp" : "one block") +
              " per row: online max/sum-of-exp pass, shuffle merge, write pass";
  return spec;
}

KernelSpec emit_strided_softmax(const KernelRequest& request, int64_t outer, int64_t len,
                                int64_t inner, bool log_form) {
  const DType dtype = request.node.inputs[0]->type.dtype;
  const int64_t count = outer * len * inner;
  const std::string type = index_type(count);
  BodyWriter w;
  w.comment("x viewed as [kOuter, kLen, kInner]; each thread owns one (outer, inner) row.");
  w.line(dynamic_count(request.dynamic_rows, "kOuter", type, outer));
  w.line("constexpr {} kLen = {};", type, int_literal(len, type));
  w.line("constexpr {} kInner = {};", type, int_literal(inner, type));
  w.line("{} {} kRows = kOuter * kInner;", count_qualifier(request), type);
  emit_rescale_lambda(w);
  open_grid_stride_loop(w, "row", type, "kRows");
  w.line("const {} base = row / kInner * kLen * kInner + row % kInner;", type);
  const std::string element = load_input(request, 0, "base + k * kInner");
  emit_online_softmax(w, element, int_literal(0, type), "kLen", "1", type);
  w.comment(log_form ? "Write pass: x - max - log(sum)." : "Write pass: exp(x - max) / sum.");
  if (log_form) w.line("const float log_sum = logf(sum_v);");
  w.open("for ({} k = 0; k < kLen; ++k)", type);
  w.line("{}[base + k * kInner] = {};", request.output_params[0],
         store(dtype, softmax_value(log_form, element)));
  w.close();
  w.close();
  KernelSpec spec = grid_stride_spec(outer * inner);
  spec.body = w.take();
  if (request.dynamic_rows) spec.dynamic_grid_axis = 0;
  spec.note = "one thread per strided row: online max/sum-of-exp pass, write pass";
  return spec;
}

KernelSpec emit_softmax(const KernelRequest& request, bool log_form) {
  const ir::Shape& shape = request.node.inputs[0]->type.shape;
  const int axis = axis_of(request.node);
  const int64_t outer = ir::num_elements(shape, 0, axis);
  const int64_t len = shape[axis];
  const int64_t inner = ir::num_elements(shape, axis + 1, shape.size());
  if (inner == 1) return emit_contiguous_softmax(request, outer, len, log_form);
  return emit_strided_softmax(request, outer, len, inner, log_form);
}

// Folds `expr` (a float of `k`) over this thread's elements of the row into `var`, then
// combines it across the warp or block.
void emit_row_sum(BodyWriter& w, bool per_warp, const std::string& var, const std::string& expr,
                  const std::string& first, const std::string& step) {
  w.line("float {} = 0.0f;", var);
  w.open("for (int k = {}; k < kSize; k += {})", first, step);
  w.line("{} += {};", var, expr);
  w.close();
  if (per_warp)
    emit_warp_combine(w, var, Combine::Sum, "float");
  else
    emit_block_combine(w, var, Combine::Sum, "float", "partial");
}

// The host backend's body of layer_norm and rms_norm (docs/codegen.md, "The host backend"):
// thread 0 computes the block's rows without shuffles or barriers; mean and inv_std, and so
// the outputs, are the CUDA body's bit for bit (emit_host_row_sums).
void emit_layer_norm_host_body(BodyWriter& w, bool per_warp, bool centred, const std::string& type,
                               const std::string& in_row_k, const std::string& write) {
  open_host_rows(w, per_warp, type, "kRows", "normalize.cpp");
  if (centred) {
    emit_host_row_sums(w, {{"sum", in_row_k}}, {}, "kSize");
    w.line("const float mean = sum / kSizeF;");
  } else {
    w.line("const float mean = 0.0f;");
  }
  emit_host_row_sums(w, {{"squares", "centred * centred"}},
                     {"const float centred = " + in_row_k + " - mean;"}, "kSize");
  w.line("const float inv_std = 1.0f / sqrtf(squares / kSizeF + kEpsilon);");
  w.open("for (int k = 0; k < kSize; ++k)");
  w.lines(write);
  w.close();
  close_host_rows(w, per_warp);
}

KernelSpec emit_layer_norm(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const DType dtype = node.inputs[0]->type.dtype;
  const ir::Shape& shape = node.inputs[0]->type.shape;
  const int axis = axis_of(node);
  const int64_t rows = ir::num_elements(shape, 0, axis);
  const int64_t size = ir::num_elements(shape, axis, shape.size());
  const std::string element(c_type(dtype));
  const std::string type = index_type(rows * size);
  const bool per_warp = size <= kMaxWarpRow;
  const std::string first = per_warp ? "lane" : "static_cast<int>(threadIdx.x)";
  const std::string step = per_warp ? "kWarpSize" : "static_cast<int>(blockDim.x)";
  const std::string& scale = request.input_params[1];
  const bool centred = node.op == ir::OpId::LayerNorm;  // rms_norm: no mean, no bias
  const double epsilon = attr<double>(node, "epsilon");

  BodyWriter w;
  w.line(dynamic_count(request.dynamic_rows, "kRows", type, rows));
  w.line("constexpr int kSize = {};  // elements per normalized row", size);
  w.line("constexpr float kSizeF = {};", literal(DType::F32, static_cast<double>(size)));
  w.line("constexpr float kEpsilon = {};", literal(DType::F32, epsilon));
  emit_warp_constants(w, kRowBlock);
  if (!per_warp) w.line("float* partial = reinterpret_cast<float*>(kiln_smem);  // [kWarps]");
  const std::string in_row_k = load_input(request, 0, "row * kSize + k");
  const std::string scaled = "normalized * " + load(dtype, scale + "[k]");
  const std::string write = fmt::format(
      "const float normalized = ({} - mean) * inv_std;\n{}[row * kSize + k] = {};", in_row_k,
      request.output_params[0],
      store(dtype, centred ? scaled + " + " + load(dtype, request.input_params[2] + "[k]") : scaled));
  emit_layer_norm_host_body(w, per_warp, centred, type, in_row_k, write);
  open_row_loop(w, per_warp, type, "kRows");
  w.line("{}* out_row = {} + row * kSize;", element, request.output_params[0]);
  if (centred) {
    w.comment("Pass 1: the mean.");
    emit_row_sum(w, per_warp, "sum", in_row_k, first, step);
    w.line("const float mean = sum / kSizeF;");
    w.comment("Pass 2: the biased variance, from centred values (no cancellation).");
  } else {
    w.line("const float mean = 0.0f;  // rms_norm does not centre");
    w.comment("Pass 1: the mean square.");
  }
  w.line("float squares = 0.0f;");
  w.open("for (int k = {}; k < kSize; k += {})", first, step);
  w.line("const float centred = {} - mean;", in_row_k);
  w.line("squares += centred * centred;");
  w.close();
  if (per_warp)
    emit_warp_combine(w, "squares", Combine::Sum, "float");
  else
    emit_block_combine(w, "squares", Combine::Sum, "float", "partial");
  w.line("const float inv_std = 1.0f / sqrtf(squares / kSizeF + kEpsilon);");
  w.comment(centred ? "Pass 3: normalize, scale and shift." : "Pass 2: normalize and scale.");
  w.open("for (int k = {}; k < kSize; k += {})", first, step);
  w.line("const float normalized = ({} - mean) * inv_std;", in_row_k);
  w.line("out_row[k] = {};",
         store(dtype, centred ? scaled + " + " + load(dtype, request.input_params[2] + "[k]") : scaled));
  w.close();
  w.close();
  KernelSpec spec = row_spec(per_warp, rows, static_cast<uint32_t>(kRowBlock / kWarpSize * 4));
  spec.host_variant = true;
  spec.body = w.take();
  if (request.dynamic_rows) spec.dynamic_grid_axis = 0;
  spec.note = std::string(per_warp ? "one warp" : "one block") +
              (centred ? " per row: mean pass, centred variance pass, normalize pass"
                       : " per row: mean-square pass, normalize pass");
  return spec;
}

}  // namespace

void add_normalize_emitters(EmitterTable& table) {
  table.emplace_back(ir::OpId::Softmax, [](const KernelRequest& r) { return emit_softmax(r, false); });
  table.emplace_back(ir::OpId::LogSoftmax, [](const KernelRequest& r) { return emit_softmax(r, true); });
  table.emplace_back(ir::OpId::LayerNorm, emit_layer_norm);
  table.emplace_back(ir::OpId::RmsNorm, emit_layer_norm);
}

}  // namespace kiln::codegen
