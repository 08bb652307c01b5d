#include "codegen/kernels/reduce_util.h"

namespace kiln::codegen {

void emit_warp_constants(BodyWriter& w, int64_t block_threads) {
  w.declare("kWarpSize", "constexpr int kWarpSize = {};", kWarpSize);
  w.declare("kFullMask", "constexpr unsigned kFullMask = 0xffffffffu;  // all lanes take part");
  w.declare("kWarps", "constexpr int kWarps = {};  // warps per block", block_threads / kWarpSize);
  w.declare("lane", "const int lane = static_cast<int>(threadIdx.x) % kWarpSize;");
  w.declare("warp", "const int warp = static_cast<int>(threadIdx.x) / kWarpSize;");
}

void open_row_loop(BodyWriter& w, bool per_warp, const std::string& type, const std::string& rows) {
  if (!per_warp) {
    w.comment("Block-uniform loop: every thread reaches every barrier.");
    w.open("for ({} row = blockIdx.x; row < {}; row += gridDim.x)", type, rows);
    return;
  }
  w.line("const {} first_row = static_cast<{}>(", type, type);
  w.line("    (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarpSize);");
  w.comment("Warp-uniform loop: all 32 lanes reach every shuffle.");
  w.open("for ({} row = first_row; row < {}; row += kWarps * gridDim.x)", type, rows);
}

void emit_combine(BodyWriter& w, const std::string& var, const std::string& other,
                  Combine combine, const std::string& type) {
  if (combine == Combine::Sum)
    w.line("{} += {};", var, other);
  else if (type == "float")
    w.line("{} = kiln_max({}, {});", var, var, other);
  else if (type == "double")  // kiln_max's test: NaN propagates
    w.line("{0} = ({0} != {0} || {0} > {1}) ? {0} : {1};", var, other);
  else
    w.line("{0} = {1} > {0} ? {1} : {0};", var, other);
}

void emit_warp_combine(BodyWriter& w, const std::string& var, Combine combine,
                       const std::string& type) {
  if (type == "float") {  // kiln_warp_sum and kiln_warp_max: the loop below, as functions
    w.line("{} = {}({});", var, combine == Combine::Sum ? "kiln_warp_sum" : "kiln_warp_max", var);
    return;
  }
  w.open("for (int offset = kWarpSize / 2; offset > 0; offset /= 2)");
  w.line("const {} other = __shfl_xor_sync(kFullMask, {}, offset);", type, var);
  emit_combine(w, var, "other", combine, type);
  w.close();
}

void emit_block_combine(BodyWriter& w, const std::string& var, Combine combine,
                        const std::string& type, const std::string& partial) {
  emit_warp_combine(w, var, combine, type);
  w.open("if (lane == 0)");
  w.line("{}[warp] = {};", partial, var);
  w.close();
  w.line("__syncthreads();");
  w.comment("Every thread folds the per-warp partials in the same order: same result in all.");
  w.line("{} = {}[0];", var, partial);
  w.open("for (int k = 1; k < kWarps; ++k)");
  emit_combine(w, var, partial + "[k]", combine, type);
  w.close();
  w.comment("Wait until every thread has read the partials before they are overwritten.");
  w.line("__syncthreads();");
}

void emit_host_threads_combine(BodyWriter& w, const std::string& var, const std::string& values,
                               const std::string& threads, Combine combine,
                               const std::string& type) {
  w.comment("Each warp's shuffle butterfly, every lane's value at every step, as on the GPU;");
  w.comment("then the warps' results (lane 0's) in warp order.");
  w.open("for (int host_warp = 0; host_warp < {}; host_warp += kWarpSize)", threads);
  w.open("for (int offset = kWarpSize / 2; offset > 0; offset /= 2)");
  w.line("{} next[kWarpSize];", type);
  w.open("for (int host_lane = 0; host_lane < kWarpSize; ++host_lane)");
  w.line("{} v = {}[host_warp + host_lane];", type, values);
  w.line("const {} other = {}[host_warp + (host_lane ^ offset)];", type, values);
  emit_combine(w, "v", "other", combine, type);
  w.line("next[host_lane] = v;");
  w.close();
  w.line("for (int host_lane = 0; host_lane < kWarpSize; ++host_lane) {}[host_warp + host_lane] "
         "= next[host_lane];", values);
  w.close();
  w.close();
  w.line("{} {} = {}[0];", type, var, values);
  w.open("for (int host_warp = kWarpSize; host_warp < {}; host_warp += kWarpSize)", threads);
  emit_combine(w, var, values + "[host_warp]", combine, type);
  w.close();
}

void open_host_rows(BodyWriter& w, bool per_warp, const std::string& type, const std::string& rows,
                    const std::string& file) {
  open_host_body(w, {"Host backend: the block's rows as loops without shuffles or barriers, equal bit for",
                     fmt::format("bit to the CUDA body below (codegen/kernels/{}). Thread 0 runs it.", file)});
  w.line("constexpr int kHostThreads = {};  // the CUDA threads of one row",
         per_warp ? "kWarpSize" : "kWarps * kWarpSize");
  if (per_warp) {
    w.open("for (int host_row_warp = 0; host_row_warp < kWarps; ++host_row_warp)");
    w.open("for ({0} row = static_cast<{0}>(blockIdx.x) * kWarps + host_row_warp; row < {1}; "
           "row += kWarps * gridDim.x)", type, rows);
  } else {
    w.open("for ({} row = blockIdx.x; row < {}; row += gridDim.x)", type, rows);
  }
}

void close_host_rows(BodyWriter& w, bool per_warp) {
  w.close();
  if (per_warp) w.close();
  close_host_body(w);
}

void emit_host_row_sums(BodyWriter& w, const std::vector<std::pair<std::string, std::string>>& sums,
                        const std::vector<std::string>& prelude, const std::string& count) {
  for (const auto& [var, term] : sums)
    w.line("float {0}_lanes[kHostThreads] = {{}};  // each CUDA thread's fold", var);
  w.open("for (int k0 = 0; k0 < {}; k0 += kHostThreads)", count);
  w.open("for (int host_lane = 0; host_lane < kHostThreads && k0 + host_lane < {}; ++host_lane)",
         count);
  w.line("const int k = k0 + host_lane;");
  for (const std::string& line : prelude) w.line("{}", line);
  for (const auto& [var, term] : sums) w.line("{}_lanes[host_lane] += {};", var, term);
  w.close();
  w.close();
  for (const auto& [var, term] : sums)
    emit_host_threads_combine(w, var, var + "_lanes", "kHostThreads", Combine::Sum, "float");
}

// The reference computes max(row) (std::max, which skips NaN), then sum(exp(v - max)): the
// sum, and so every output, is NaN when the row holds a NaN, a +inf (exp(inf - inf)) or only
// -inf (exp(-inf - -inf)). The online form keeps that:
//   - a new maximum v rescales the sum and adds exp(v - v): 1, or NaN for v = +inf;
//   - v = -inf is skipped (it adds exp(-inf - max) = 0 in the reference); a row of only -inf
//     ends with max = -inf and sum = 0, and the outputs exp(-inf - -inf) / 0 are NaN;
//   - NaN fails `v > max` and adds exp(NaN) = NaN to the sum.
void emit_rescale_lambda(BodyWriter& w) {
  w.comment("Scales a running sum of exp(v - from) to exp(v - to); an empty sum (0) stays 0, so");
  w.comment("a slice without elements (max -inf) cannot add exp(-inf - -inf) = NaN.");
  w.open("const auto rescale = [](float sum, float from, float to) -> float");
  w.line("return sum == 0.0f ? 0.0f : sum * expf(from - to);");
  w.close(";");
}

void emit_online_softmax(BodyWriter& w, const std::string& element, const std::string& first,
                         const std::string& count, const std::string& step,
                         const std::string& type) {
  w.comment("Online softmax (Milakov & Gimelshein 2018): running max and sum of exp(v - max).");
  w.line("float max_v = -INFINITY;");
  w.line("float sum_v = 0.0f;");
  w.open("for ({} k = {}; k < {}; k += {})", type, first, count, step);
  w.line("const float v = {};", element);
  w.open("if (v > max_v)");
  w.comment("exp(v - v) is 1, or NaN for v = +inf as in the reference's sum.");
  w.line("sum_v = rescale(sum_v, max_v, v) + expf(v - v);");
  w.line("max_v = v;");
  w.reopen("else if (v != -INFINITY)");
  w.comment("-inf adds exp(-inf - max) = 0: skipped; NaN lands here and makes the sum NaN.");
  w.line("sum_v += expf(v - max_v);");
  w.close();
  w.close();
}

void emit_warp_merge_softmax(BodyWriter& w) {
  w.open("for (int offset = kWarpSize / 2; offset > 0; offset /= 2)");
  w.line("const float other_max = __shfl_xor_sync(kFullMask, max_v, offset);");
  w.line("const float other_sum = __shfl_xor_sync(kFullMask, sum_v, offset);");
  w.comment("Maxima are never NaN (NaN fails every comparison above).");
  w.line("const float merged_max = other_max > max_v ? other_max : max_v;");
  w.line("sum_v = rescale(sum_v, max_v, merged_max) + rescale(other_sum, other_max, merged_max);");
  w.line("max_v = merged_max;");
  w.close();
}

void emit_block_merge_softmax(BodyWriter& w) {
  emit_warp_merge_softmax(w);
  w.open("if (lane == 0)");
  w.line("partial_max[warp] = max_v;");
  w.line("partial_sum[warp] = sum_v;");
  w.close();
  w.line("__syncthreads();");
  w.comment("Every thread merges the per-warp states in the same order: same result in all.");
  w.line("max_v = partial_max[0];");
  w.line("sum_v = partial_sum[0];");
  w.open("for (int k = 1; k < kWarps; ++k)");
  w.line("const float merged_max = partial_max[k] > max_v ? partial_max[k] : max_v;");
  w.line("sum_v = rescale(sum_v, max_v, merged_max) +");
  w.line("        rescale(partial_sum[k], partial_max[k], merged_max);");
  w.line("max_v = merged_max;");
  w.close();
  w.comment("Wait until every thread has read the partials before they are overwritten.");
  w.line("__syncthreads();");
}

}  // namespace kiln::codegen

namespace kiln::codegen {

void emit_host_online_softmax(BodyWriter& w, const std::string& element, const std::string& count) {
  w.line("float max_lanes[kHostThreads], sum_lanes[kHostThreads];  // each CUDA thread's state");
  w.line("for (int host_lane = 0; host_lane < kHostThreads; ++host_lane) "
         "max_lanes[host_lane] = -INFINITY, sum_lanes[host_lane] = 0.0f;");
  w.open("for (int k0 = 0; k0 < {}; k0 += kHostThreads)", count);
  w.open("for (int host_lane = 0; host_lane < kHostThreads && k0 + host_lane < {}; ++host_lane)",
         count);
  w.line("const int k = k0 + host_lane;");
  w.line("const float v = {};", element);
  w.line("float& max_v = max_lanes[host_lane];");
  w.line("float& sum_v = sum_lanes[host_lane];");
  w.open("if (v > max_v)");
  w.line("sum_v = rescale(sum_v, max_v, v) + expf(v - v);");
  w.line("max_v = v;");
  w.reopen("else if (v != -INFINITY)");
  w.line("sum_v += expf(v - max_v);");
  w.close();
  w.close();
  w.close();
  w.comment("Each warp's merge butterfly, every lane's state at every step, as on the GPU.");
  w.open("for (int host_warp = 0; host_warp < kHostThreads; host_warp += kWarpSize)");
  w.open("for (int offset = kWarpSize / 2; offset > 0; offset /= 2)");
  w.line("float next_max[kWarpSize], next_sum[kWarpSize];");
  w.open("for (int host_lane = 0; host_lane < kWarpSize; ++host_lane)");
  w.line("const float max_v = max_lanes[host_warp + host_lane];");
  w.line("const float sum_v = sum_lanes[host_warp + host_lane];");
  w.line("const float other_max = max_lanes[host_warp + (host_lane ^ offset)];");
  w.line("const float other_sum = sum_lanes[host_warp + (host_lane ^ offset)];");
  w.line("const float merged_max = other_max > max_v ? other_max : max_v;");
  w.line("next_sum[host_lane] = rescale(sum_v, max_v, merged_max) + "
         "rescale(other_sum, other_max, merged_max);");
  w.line("next_max[host_lane] = merged_max;");
  w.close();
  w.open("for (int host_lane = 0; host_lane < kWarpSize; ++host_lane)");
  w.line("max_lanes[host_warp + host_lane] = next_max[host_lane];");
  w.line("sum_lanes[host_warp + host_lane] = next_sum[host_lane];");
  w.close();
  w.close();
  w.close();
  w.open("if (kHostThreads > kWarpSize)");
  w.comment("The block merge: the warps' states (lane 0's) in warp order, the same in every thread.");
  w.line("float max_v = max_lanes[0];");
  w.line("float sum_v = sum_lanes[0];");
  w.open("for (int host_warp = kWarpSize; host_warp < kHostThreads; host_warp += kWarpSize)");
  w.line("const float merged_max = max_lanes[host_warp] > max_v ? max_lanes[host_warp] : max_v;");
  w.line("sum_v = rescale(sum_v, max_v, merged_max) +");
  w.line("        rescale(sum_lanes[host_warp], max_lanes[host_warp], merged_max);");
  w.line("max_v = merged_max;");
  w.close();
  w.line("for (int host_lane = 0; host_lane < kHostThreads; ++host_lane) "
         "max_lanes[host_lane] = max_v, sum_lanes[host_lane] = sum_v;");
  w.close();
}

}  // namespace kiln::codegen
