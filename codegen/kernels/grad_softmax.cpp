// Kernel emitters for the row-reduction backward ops (ir/ops/grad_ops.cpp), laid out like the
// forward softmax kernels (normalize.cpp, loss.cpp): a pass over each row for its statistic,
// a combine across the row's threads, then a write pass over the same row.
//
//   - softmax_grad (dy, y):     dx = y * (dy - sum(dy * y))
//     log_softmax_grad (dy, y): dx = dy - exp(y) * sum(dy)
//     Along a contiguous axis (the last one, or followed by size-1 dims): one warp per row up
//     to kMaxWarpRow elements, else one block per row; along an axis with a stride (inner > 1)
//     one thread per (outer, inner) row, walking it sequentially, so neighbouring threads read
//     neighbouring addresses. dy is read through load_input: fuse-elementwise may fuse the
//     chain computing dy into the kernel (both ops are of the reduce kind).
//   - softmax_cross_entropy_grad (dy, logits [N, C], labels [N]):
//     dx[n, c] = dy * (softmax(logits[n])[c] - [c == label_n]) / N
//     One warp (C up to kMaxWarpRow) or one block per row: the online max / sum-of-exp pass of
//     the forward loss (reduce_util.h), merged across lanes and warps, then the write pass.
//     A label outside [0, C) is a run-time error in the reference; here it makes that row's
//     gradient NaN, as the forward kernel makes the loss NaN.
// Sums accumulate in float in a fixed tree order (reduce_util.h has the error bound); the
// reference sums in double.
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

// What both softmax gradients compute, as expressions of an element's dy and y.
struct SoftmaxGradForm {
  std::string term;    // summed over the row into `total`
  std::string result;  // the gradient, from dy, y and total
  std::string comment;
};

SoftmaxGradForm softmax_grad_form(bool log_form, const std::string& dy, const std::string& y) {
  if (log_form)
    return {dy, dy + " - expf(" + y + ") * total",
            "log_softmax: dx = dy - exp(y) * sum(dy), y = log_softmax(x)"};
  return {dy + " * " + y, y + " * (" + dy + " - total)",
          "softmax: dx = y * (dy - sum(dy * y)), y = softmax(x)"};
}

KernelSpec emit_contiguous_softmax_grad(const KernelRequest& request, int64_t rows, int64_t len,
                                        bool log_form) {
  const DType dtype = request.node.results[0]->type.dtype;
  const DType y_dtype = request.node.inputs[1]->type.dtype;
  const std::string type = index_type(rows * len);
  const bool per_warp = len <= kMaxWarpRow;
  const std::string first = per_warp ? "lane" : "static_cast<int>(threadIdx.x)";
  const std::string step = per_warp ? "kWarpSize" : "static_cast<int>(blockDim.x)";
  const std::string dy = load_input(request, 0, "row * kLen + k");
  const std::string y = load(y_dtype, request.input_params[1] + "[row * kLen + k]");
  const SoftmaxGradForm form = softmax_grad_form(log_form, dy, y);

  BodyWriter w;
  w.comment(form.comment);
  w.line("constexpr {} kRows = {};", type, int_literal(rows, type));
  w.line("constexpr int kLen = {};  // row length", len);
  emit_warp_constants(w, kRowBlock);
  if (!per_warp) w.line("float* partial = reinterpret_cast<float*>(kiln_smem);  // [kWarps]");
  open_host_rows(w, per_warp, type, "kRows", "grad_softmax.cpp");
  emit_host_row_sums(w, {{"total", form.term}}, {}, "kLen");
  w.open("for (int k = 0; k < kLen; ++k)");
  w.line("{}[row * kLen + k] = {};", request.output_params[0], store(dtype, form.result));
  w.close();
  close_host_rows(w, per_warp);
  open_row_loop(w, per_warp, type, "kRows");
  w.comment(log_form ? "Pass 1: the row's sum of dy." : "Pass 1: the row's sum of dy * y.");
  w.line("float total = 0.0f;");
  w.open("for (int k = {}; k < kLen; k += {})", first, step);
  w.line("total += {};", form.term);
  w.close();
  if (per_warp)
    emit_warp_combine(w, "total", Combine::Sum, "float");
  else
    emit_block_combine(w, "total", Combine::Sum, "float", "partial");
  w.comment("Pass 2: the gradient of each element.");
  w.open("for (int k = {}; k < kLen; k += {})", first, step);
  w.line("{}[row * kLen + k] = {};", request.output_params[0], store(dtype, form.result));
  w.close();
  w.close();
  KernelSpec spec = row_spec(per_warp, rows, static_cast<uint32_t>(kRowBlock / kWarpSize * 4));
  spec.host_variant = true;
  spec.body = w.take();
  spec.note = std::string(per_warp ? "one warp" : "one block") +
              " per row: row-sum pass, shuffle combine, write pass";
  return spec;
}

KernelSpec emit_strided_softmax_grad(const KernelRequest& request, int64_t outer, int64_t len,
                                     int64_t inner, bool log_form) {
  const DType dtype = request.node.results[0]->type.dtype;
  const DType y_dtype = request.node.inputs[1]->type.dtype;
  const std::string type = index_type(outer * len * inner);
  const std::string dy = load_input(request, 0, "base + k * kInner");
  const std::string y = load(y_dtype, request.input_params[1] + "[base + k * kInner]");
  const SoftmaxGradForm form = softmax_grad_form(log_form, dy, y);

  BodyWriter w;
  w.comment(form.comment);
  w.comment("dy and y viewed as [kOuter, kLen, kInner]; each thread owns one (outer, inner) row.");
  w.line("constexpr {} kOuter = {};", type, int_literal(outer, type));
  w.line("constexpr {} kLen = {};", type, int_literal(len, type));
  w.line("constexpr {} kInner = {};", type, int_literal(inner, type));
  w.line("constexpr {} kRows = kOuter * kInner;", type);
  open_grid_stride_loop(w, "row", type, "kRows");
  w.line("const {} base = row / kInner * kLen * kInner + row % kInner;", type);
  w.line("float total = 0.0f;");
  w.open("for ({} k = 0; k < kLen; ++k)", type);
  w.line("total += {};", form.term);
  w.close();
  w.open("for ({} k = 0; k < kLen; ++k)", type);
  w.line("{}[base + k * kInner] = {};", request.output_params[0], store(dtype, form.result));
  w.close();
  w.close();
  KernelSpec spec = grid_stride_spec(outer * inner);
  spec.body = w.take();
  spec.note = "one thread per strided row: row-sum pass, write pass";
  return spec;
}

KernelSpec emit_softmax_grad(const KernelRequest& request, bool log_form) {
  const ir::Shape& shape = request.node.inputs[0]->type.shape;
  const int axis = axis_of(request.node);
  const int64_t outer = ir::num_elements(shape, 0, axis);
  const int64_t len = shape.empty() ? 1 : shape[axis];
  const int64_t inner = ir::num_elements(shape, axis + 1, shape.size());
  if (inner == 1) return emit_contiguous_softmax_grad(request, outer, len, log_form);
  return emit_strided_softmax_grad(request, outer, len, inner, log_form);
}

KernelSpec emit_softmax_cross_entropy_grad(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const DType dtype = node.inputs[1]->type.dtype;
  const ir::Shape& shape = node.inputs[1]->type.shape;
  const std::string element(c_type(dtype));
  const std::string type = index_type(shape[0] * shape[1]);
  const bool per_warp = shape[1] <= kMaxWarpRow;
  const std::string first = per_warp ? "lane" : "static_cast<int>(threadIdx.x)";
  const std::string step = per_warp ? "kWarpSize" : "static_cast<int>(blockDim.x)";
  const std::string& dy = request.input_params[0];
  const std::string& logits = request.input_params[1];
  const std::string& labels = request.input_params[2];

  BodyWriter w;
  w.line("constexpr {} kRows = {};  // the batch", type, int_literal(shape[0], type));
  w.line("constexpr int kClasses = {};", shape[1]);
  w.line("constexpr float kRowsF = {};", literal(DType::F32, static_cast<double>(shape[0])));
  emit_warp_constants(w, kRowBlock);
  w.line("const float kNaN = __int_as_float(0x7fc00000);  // the gradient of an invalid label");
  emit_rescale_lambda(w);
  if (!per_warp) {
    w.line("float* partial_max = reinterpret_cast<float*>(kiln_smem);  // [kWarps]");
    w.line("float* partial_sum = partial_max + kWarps;  // [kWarps]");
  }
  w.comment("The loss is the batch mean: each row's gradient is scaled by dy / N.");
  w.line("const float row_scale = {} / kRowsF;", load(node.inputs[0]->type.dtype, dy + "[0]"));
  const std::vector<std::string> label_lines = {
      fmt::format("const {} raw_label = {}[row];", compute_type(node.inputs[2]->type.dtype), labels),
      "const bool valid = raw_label >= 0 && raw_label < kClasses;",
      "const int label = valid ? static_cast<int>(raw_label) : -1;  // as -1 it matches no class",
      "const float scale = valid ? row_scale : kNaN;"};
  const std::vector<std::string> write = {
      fmt::format("const float p = expf({} - max_v) * inv_sum;", load(dtype, "in_row[k]")),
      "const float target = k == label ? 1.0f : 0.0f;",
      fmt::format("out_row[k] = {};", store(dtype, "scale * (p - target)"))};
  // The host body: each CUDA thread's online state, merged as on the GPU; element k is
  // written with the state of the thread that writes it there.
  open_host_rows(w, per_warp, type, "kRows", "grad_softmax.cpp");
  w.line("const {}* in_row = {} + row * kClasses;", element, logits);
  w.line("{}* out_row = {} + row * kClasses;", element, request.output_params[0]);
  emit_host_online_softmax(w, load(dtype, "in_row[k]"), "kClasses");
  for (const std::string& line : label_lines) w.line("{}", line);
  w.open("for (int k = 0; k < kClasses; ++k)");
  w.line("const float max_v = max_lanes[k % kHostThreads];");
  w.line("const float inv_sum = 1.0f / sum_lanes[k % kHostThreads];");
  for (const std::string& line : write) w.line("{}", line);
  w.close();
  close_host_rows(w, per_warp);
  open_row_loop(w, per_warp, type, "kRows");
  w.line("const {}* in_row = {} + row * kClasses;", element, logits);
  w.line("{}* out_row = {} + row * kClasses;", element, request.output_params[0]);
  emit_online_softmax(w, load(dtype, "in_row[k]"), first, "kClasses", step, "int");
  if (per_warp)
    emit_warp_merge_softmax(w);
  else
    emit_block_merge_softmax(w);
  w.comment("An invalid label makes the row NaN.");
  for (const std::string& line : label_lines) w.line("{}", line);
  w.comment("One division per row: a division per element pulls in the IEEE divide's slow-path");
  w.comment("call, whose calling convention made ptxas spill registers here.");
  w.line("const float inv_sum = 1.0f / sum_v;");
  w.comment("Write pass: (softmax - onehot(label)) * dy / N.");
  w.open("for (int k = {}; k < kClasses; k += {})", first, step);
  for (const std::string& line : write) w.line("{}", line);
  w.close();
  w.close();
  KernelSpec spec = row_spec(per_warp, shape[0], static_cast<uint32_t>(2 * kRowBlock / kWarpSize * 4));
  spec.host_variant = true;
  spec.body = w.take();
  spec.note = std::string(per_warp ? "one warp" : "one block") +
              " per row: online max/sum-of-exp pass, shuffle merge, softmax - onehot write pass";
  return spec;
}

}  // namespace

void add_grad_softmax_emitters(EmitterTable& table) {
  table.emplace_back(ir::OpId::SoftmaxGrad,
                     [](const KernelRequest& r) { return emit_softmax_grad(r, false); });
  table.emplace_back(ir::OpId::LogSoftmaxGrad,
                     [](const KernelRequest& r) { return emit_softmax_grad(r, true); });
  table.emplace_back(ir::OpId::SoftmaxCrossEntropyGrad, emit_softmax_cross_entropy_grad);
}

}  // namespace kiln::codegen
