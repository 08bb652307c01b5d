// Kernel emitters for the losses, which reduce a whole batch to one scalar in one block:
//   - softmax_cross_entropy: each warp takes rows warp, warp + kWarps, ...: an online
//     log-sum-exp pass over the row (reduce_util.h), the label's logit, and the row's loss
//     max + log(sum) - logit[label] added to the warp's running total; the per-warp totals
//     meet in shared memory and thread 0 writes their mean. A label outside [0, C) is a
//     run-time error in the reference; on the GPU it makes the loss NaN.
//   - mse_loss: a block-wide strided sum of (prediction - target)^2, then the mean.
// One block keeps the result deterministic and needs no second kernel; it reads at one SM's
// bandwidth, which is fine for loss-sized inputs (a two-stage reduction is the upgrade).
#include "codegen/kernels/reduce_util.h"

namespace kiln::codegen {
namespace {

using ir::DType;

// Threads of the single block of mse_loss: the whole GPU's work sits in it.
constexpr int64_t kLossBlock = 1024;

KernelSpec single_block_spec(int64_t threads) {
  KernelSpec spec;
  spec.block = Dim3{static_cast<uint32_t>(threads), 1, 1};
  spec.grid = Dim3{1, 1, 1};
  spec.shared_bytes = static_cast<uint32_t>(threads / kWarpSize * 4);
  spec.uses_barriers = true;
  return spec;
}

KernelSpec emit_softmax_cross_entropy(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const DType dtype = node.inputs[0]->type.dtype;
  const ir::Shape& shape = node.inputs[0]->type.shape;
  const std::string element(c_type(dtype));
  const std::string type = index_type(shape[0] * shape[1]);
  const std::string& logits = request.input_params[0];
  const std::string& labels = request.input_params[1];

  BodyWriter w;
  w.line("constexpr {} kBatch = {};", type, int_literal(shape[0], type));
  w.line("constexpr {} kClasses = {};", type, int_literal(shape[1], type));
  w.line("constexpr float kBatchF = {};", literal(DType::F32, static_cast<double>(shape[0])));
  emit_warp_constants(w, kRowBlock);
  w.line("const float kNaN = __int_as_float(0x7fc00000);  // the loss of an invalid label");
  emit_rescale_lambda(w);
  w.line("float* partial = reinterpret_cast<float*>(kiln_smem);  // [kWarps] per-warp totals");
  const std::string label_lines[] = {
      fmt::format("const long long label = static_cast<long long>({}[row]);", labels),
      "const bool valid = label >= 0 && label < kClasses;",
      fmt::format("const float picked = valid ? {} : kNaN;", load(dtype, "in_row[label]"))};
  // The host body (docs/codegen.md, "The host backend"): each warp's rows, their online
  // states merged as on the GPU; lane 0's total per warp, folded in warp order.
  open_host_body(w, {"Host backend: the warps' rows as loops without shuffles or barriers, equal bit for",
                     "bit to the CUDA body below (codegen/kernels/loss.cpp). Thread 0 runs it."});
  w.line("constexpr int kHostThreads = kWarpSize;  // the CUDA threads of one row");
  w.line("float warp_totals[kWarps];");
  w.open("for (int host_row_warp = 0; host_row_warp < kWarps; ++host_row_warp)");
  w.line("float total = 0.0f;");
  w.open("for ({} row = host_row_warp; row < kBatch; row += kWarps)", type);
  w.line("const {}* in_row = {} + row * kClasses;", element, logits);
  emit_host_online_softmax(w, load(dtype, "in_row[k]"), "kClasses");
  w.line("const float max_v = max_lanes[0];");
  w.line("const float sum_v = sum_lanes[0];");
  for (const std::string& line : label_lines) w.line("{}", line);
  w.line("total += max_v + logf(sum_v) - picked;");
  w.close();
  w.line("warp_totals[host_row_warp] = total;");
  w.close();
  w.line("float sum = warp_totals[0];");
  w.line("for (int k = 1; k < kWarps; ++k) sum += warp_totals[k];");
  w.line("{}[0] = {};", request.output_params[0], store(dtype, "sum / kBatchF"));
  close_host_body(w);
  w.comment("Every lane of a warp holds the same running total (the merges are symmetric).");
  w.line("float total = 0.0f;");
  w.comment("Warp-uniform loop: all 32 lanes reach every shuffle.");
  w.open("for ({} row = warp; row < kBatch; row += kWarps)", type);
  w.line("const {}* in_row = {} + row * kClasses;", element, logits);
  emit_online_softmax(w, load(dtype, "in_row[k]"), "lane", "kClasses", "kWarpSize", type);
  emit_warp_merge_softmax(w);
  for (const std::string& line : label_lines) w.line("{}", line);
  w.line("total += max_v + logf(sum_v) - picked;");
  w.close();
  w.open("if (lane == 0)");
  w.line("partial[warp] = total;");
  w.close();
  w.line("__syncthreads();");
  w.open("if (threadIdx.x == 0)");
  w.comment("Fold the per-warp totals in warp order.");
  w.line("float sum = partial[0];");
  w.open("for (int k = 1; k < kWarps; ++k)");
  w.line("sum += partial[k];");
  w.close();
  w.line("{}[0] = {};", request.output_params[0], store(dtype, "sum / kBatchF"));
  w.close();
  KernelSpec spec = single_block_spec(kRowBlock);
  spec.host_variant = true;
  spec.body = w.take();
  spec.note =
      "one block: a warp per row (online log-sum-exp, label gather), per-warp totals "
      "folded in shared memory, mean";
  return spec;
}

KernelSpec emit_mse_loss(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const DType dtype = node.inputs[0]->type.dtype;
  const int64_t count = ir::num_elements(node.inputs[0]->type.shape);
  const std::string type = index_type(count);
  BodyWriter w;
  w.line("constexpr {} kCount = {};", type, int_literal(count, type));
  w.line("constexpr float kCountF = {};", literal(DType::F32, static_cast<double>(count)));
  emit_warp_constants(w, kLossBlock);
  w.line("float* partial = reinterpret_cast<float*>(kiln_smem);  // [kWarps]");
  w.line("float acc = 0.0f;");
  w.open("for ({} i = threadIdx.x; i < kCount; i += blockDim.x)", type);
  w.line("const float diff = {} - {};", load(dtype, request.input_params[0] + "[i]"),
         load(dtype, request.input_params[1] + "[i]"));
  w.line("acc += diff * diff;");
  w.close();
  emit_block_combine(w, "acc", Combine::Sum, "float", "partial");
  w.open("if (threadIdx.x == 0)");
  w.line("{}[0] = {};", request.output_params[0], store(dtype, "acc / kCountF"));
  w.close();
  KernelSpec spec = single_block_spec(kLossBlock);
  spec.body = w.take();
  spec.note = "one block: strided sum of squared differences, shuffle + shared-memory tree, mean";
  return spec;
}

}  // namespace

void add_loss_emitters(EmitterTable& table) {
  table.emplace_back(ir::OpId::SoftmaxCrossEntropy, emit_softmax_cross_entropy);
  table.emplace_back(ir::OpId::MseLoss, emit_mse_loss);
}

}  // namespace kiln::codegen
