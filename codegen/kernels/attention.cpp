// Kernel emitters for attention and attention_grad: flash-style, the S x S scores never leave
// the chip (Dao et al. 2022, "FlashAttention", algorithms 1 and 4; Rabe & Staats 2021 for the
// online softmax over key blocks).
//
// attention: one warp per query row, kWarps rows per block; the block walks the keys in tiles
// of 32 staged in shared memory (K padded to an odd row stride, so the lanes' column reads hit
// 32 different banks). Per tile each lane scores one key, the warp takes the tile's max, rescales
// its running sum and output by exp(old max - new max) and adds p_j v_j, each lane owning the
// output features lane, lane + 32, ... The probabilities of a tile go through a per-warp shared
// row, so the V product is a broadcast read rather than 32 shuffles. A causal block stops at the
// tile holding its last query's diagonal. Results: out, and each row's logsumexp for backward.
//
// attention_grad: one kernel, two kinds of block. The first kQueryTasks blocks own query rows
// and compute dq_i = scale sum_j ds_ij k_j over key tiles; the rest own key rows and compute
// dv_j = sum_i p_ij dy_i and dk_j = scale sum_i ds_ij q_i over query tiles. Both recompute
// p_ij = exp(s_ij - lse_i) and use ds_ij = p_ij (dy_i . v_j - delta_i), delta_i = dy_i . out_i.
// Every gradient element has one writer and a fixed summation order: no atomics, the same bits
// on every run (FlashAttention-2's dq uses atomics; this spends a second pass over the tiles
// instead).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>

#include "codegen/kernels/attention.h"
#include "codegen/kernels/reduce_util.h"
#include "ir/diagnostic.h"
#include "ir/kernel_region.h"
#include "ir/strided_view.h"

namespace kiln::codegen {
namespace {

using ir::DType;

constexpr int64_t kTile = 32;            // keys (forward, dq) or queries (dk, dv) per tile
constexpr int64_t kAttentionWarps = 8;   // rows per block
// Bigger heads would need more shared memory than sm_80 grants a block; they are rare (every
// torchvision and Hugging Face model of note uses 64 or 128) and refused with a reason.
constexpr int64_t kMaxHeadDim = 256;

int64_t odd(int64_t n) { return n % 2 == 0 ? n + 1 : n; }

// The sizes of one attention node, from q, k, v at operand `first`.
struct Dims {
  int64_t batch, queries, keys, depth, value_depth;
  double scale;
  bool causal;
  bool has_mask;
  bool bool_mask;
  StridedDims mask;   // where score (b, i, j) reads the mask, dims merged where they chain
  std::string index;  // the C type of flat score and feature indices

  Dims(const ir::Node& node, size_t first, size_t mask_input) {
    const ir::Shape& qs = node.inputs[first]->type.shape;
    const ir::Shape& vs = node.inputs[first + 2]->type.shape;
    queries = qs[qs.size() - 2];
    depth = qs.back();
    keys = vs[vs.size() - 2];
    value_depth = vs.back();
    batch = ir::num_elements(qs, 0, qs.size() - 2);
    scale = attr<double>(node, "scale");
    if (scale == 0.0) scale = 1.0 / std::sqrt(static_cast<double>(depth));
    causal = attr<bool>(node, "causal");
    has_mask = node.inputs.size() > mask_input;
    bool_mask = has_mask && node.inputs[mask_input]->type.dtype == DType::Bool;
    if (has_mask) {
      ir::Shape scores(qs.begin(), qs.end() - 1);
      scores.push_back(keys);
      mask.dims = scores;
      mask.strides = broadcast_operand("mask", node.inputs[mask_input]->type.shape, scores).strides;
      mask = collapse(mask);
    }
    index = index_type(std::max(batch * queries * keys, batch * keys * std::max(depth, value_depth)));
    if (depth > kMaxHeadDim || value_depth > kMaxHeadDim)
      throw Error(node.loc.render(),
                  node.describe() + ": head dims up to " + std::to_string(kMaxHeadDim) +
                      " are supported by the attention kernel (its key tiles live in shared "
                      "memory), got D = " + std::to_string(depth) + ", Dv = " +
                      std::to_string(value_depth));
  }
};

// Where element (b, r, c) of a [batch..., rows, width] operand of the forward kernel lies
// (b the flat batch-and-heads index): row-major in its own buffer, or through a strided view
// of a kernel operand, when fuse-attention-views took the slices, reshapes and transposes that
// made it into the kernel (q, k and v read straight from a QKV projection; the output written
// straight as [batch, tokens, heads x features]).
struct Layout {
  std::string prefix;                   // constants k<Prefix>...; the per-task base <prefix>_base
  std::optional<ir::StridedView> view;  // nullopt: contiguous

  // Constants, before the task loop.
  void emit_constants(BodyWriter& w, const std::string& index) const {
    if (!view) return;
    const size_t rank = view->shape.size();
    StridedDims batch{{view->shape.begin(), view->shape.end() - 2},
                      {view->strides.begin(), view->strides.end() - 2}};
    w.comment(fmt::format("{} is read through a strided view: offset {}, strides {}", prefix,
                          view->offset, ir::shape_to_string(view->strides)));
    emit_strided_constants(w, prefix + "Batch", collapse(batch), "long long");
    w.line("constexpr long long k{}Offset = {};", prefix, view->offset);
    w.line("constexpr long long k{}RowStride = {};", prefix, view->strides[rank - 2]);
    w.line("constexpr long long k{}ColStride = {};", prefix, view->strides[rank - 1]);
  }
  // The base of batch `b`, once per task.
  void emit_base(BodyWriter& w, const std::string& index) const {
    if (!view) return;
    StridedDims batch{{view->shape.begin(), view->shape.end() - 2},
                      {view->strides.begin(), view->strides.end() - 2}};
    const std::string var = lower() + "_batch";
    emit_strided_offset(w, var, "b", prefix + "Batch", collapse(batch), "long long");
    w.line("const long long {}_base = k{}Offset + {};", lower(), prefix, var);
  }
  // The index of row `row`, column `col` of batch b in the buffer (`rows`, `width`: the
  // operand's constants, for the contiguous case).
  std::string at(const std::string& row, const std::string& col, const std::string& rows,
                 const std::string& width) const {
    if (!view)
      return "(static_cast<long long>(b) * " + rows + " + " + row + ") * " + width + " + " + col;
    return lower() + "_base + static_cast<long long>(" + row + ") * k" + prefix +
           "RowStride + static_cast<long long>(" + col + ") * k" + prefix + "ColStride";
  }
  std::string lower() const {
    std::string name = prefix;
    for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return name;
  }
};

struct Layouts {
  Layout q{"Q", {}}, k{"K", {}}, v{"V", {}}, out{"Out", {}};
  bool write_lse = true;  // false: the fused kernel has no buffer for each row's logsumexp
};

// The sizes as constants, and the warp constants.
void emit_constants(BodyWriter& w, const Dims& d) {
  w.line("constexpr int kBatch = {};  // batch x heads", d.batch);
  w.line("constexpr int kQueries = {};", d.queries);
  w.line("constexpr int kKeys = {};", d.keys);
  w.line("constexpr int kDepth = {};  // q and k features", d.depth);
  w.line("constexpr int kValueDepth = {};  // v features", d.value_depth);
  w.line("constexpr float kScale = {};", literal(DType::F32, d.scale));
  w.line("constexpr int kTile = {};", kTile);
  w.line("constexpr int kValuesPerLane = {};  // output features per lane",
         (d.value_depth + kWarpSize - 1) / kWarpSize);
  w.line("constexpr int kDepthPerLane = {};", (d.depth + kWarpSize - 1) / kWarpSize);
  w.comment("Odd row strides: lane l reading row l of a tile hits bank (l * stride + c) % 32.");
  w.line("constexpr int kDepthStride = {};", odd(d.depth));
  w.line("constexpr int kValueStride = {};", odd(d.value_depth));
  emit_warp_constants(w, kAttentionWarps * kWarpSize);
}

// `float s`: the scaled, masked score of query `i` and key `j` of batch `b` from their dot
// product `dot`; -INFINITY where masked or out of range. Statements rather than a lambda: NVRTC
// calls a lambda used twice through the ABI, and the call spills.
void emit_score(BodyWriter& w, const KernelRequest& request, const Dims& d, size_t mask_input,
                const std::string& dot, const std::string& i, const std::string& j) {
  w.line("float s = -INFINITY;");
  std::string inside = j + " < kKeys";
  if (i != "i") inside = i + " < kQueries && " + inside;
  if (d.causal) inside += " && " + j + " <= " + i + "  /* causal */";
  w.open("if ({})", inside);
  w.line("s = kScale * {};", dot);
  if (d.has_mask) {
    w.line("const {} flat = (static_cast<{}>(b) * kQueries + {}) * kKeys + {};", d.index, d.index,
           i, j);
    emit_strided_offset(w, "mask_at", "flat", "Mask", d.mask, d.index);
    const std::string m = request.input_params[mask_input] + "[mask_at]";
    if (d.bool_mask)
      w.line("if (!{}) s = -INFINITY;  // bool mask: false does not attend", m);
    else
      w.line("s += {};  // additive mask", load(request.node.inputs[mask_input]->type.dtype, m));
  }
  w.close();
}

// The mask's k<Mask>Dims / Strides constants, outside the loops.
void emit_mask_constants(BodyWriter& w, const Dims& d) {
  if (d.has_mask) emit_strided_constants(w, "Mask", d.mask, d.index);
}

// Copies rows [first, first + kTile) of `src` ([rows][width] of batch b) into `tile`
// ([kTile][stride], zeros past the end) with the whole block.
void emit_stage_tile(BodyWriter& w, DType dtype, const std::string& tile, const std::string& src,
                     const std::string& rows, const std::string& width,
                     const std::string& stride, const Layout& layout = {}) {
  w.open("for (int e = static_cast<int>(threadIdx.x); e < kTile * {}; e += blockDim.x)", width);
  w.line("const int r = e / {}, c = e % {};", width, width);
  w.line("{}[r * {} + c] = first + r < {} ? {} : 0.0f;", tile, stride, rows,
         load(dtype, src + "[" + layout.at("first + r", "c", rows, width) + "]"));
  w.close();
}

// `const float var` = the dot product of the warp's shared row `row` with row `lane` of `tile`
// (stride `stride`). Statements, not a lambda: NVRTC keeps an immediately invoked lambda's
// closure on the stack (8 bytes of spills on sm_80, where nvcc inlines it).
void emit_lane_dot(BodyWriter& w, const std::string& var, const std::string& row,
                   const std::string& tile, const std::string& width, const std::string& stride) {
  w.line("float {} = 0.0f;", var);
  w.line("for (int c = 0; c < {}; ++c) {} += {}[c] * {}[lane * {} + c];", width, var, row, tile,
         stride);
}

// acc[a] += sum_t coef[t] * tile[t * stride + c] for the lane's features c = lane + 32 a < width.
// The tile loop outside, unrolled 4-fold, and the per-lane loop inside, fully unrolled, so
// that `acc` stays in registers.
void emit_accumulate(BodyWriter& w, const std::string& acc, const std::string& per_lane,
                     const std::string& coef, const std::string& tile, const std::string& stride,
                     const std::string& width) {
  w.line("#pragma unroll 4");
  w.open("for (int t = 0; t < kTile; ++t)");
  w.line("const float weight = {}[t];", coef);
  w.line("#pragma unroll");
  w.open("for (int a = 0; a < {}; ++a)", per_lane);
  w.line("const int c = lane + a * kWarpSize;");
  w.line("if (c < {}) {}[a] += weight * {}[t * {} + c];", width, acc, tile, stride);
  w.close();
  w.close();
}

// Writes `value` (an expression of the per-lane index a) to the lane's features
// c = lane + 32 a < width of row `row` of `out`.
void emit_store_lanes(BodyWriter& w, const std::string& per_lane, const std::string& width,
                      const std::string& out, const std::string& row, const std::string& value,
                      const std::string& comment = "") {
  w.line("#pragma unroll");
  w.open("for (int a = 0; a < {}; ++a)", per_lane);
  w.line("const int c = lane + a * kWarpSize;");
  if (!comment.empty()) w.comment(comment);
  w.line("if (c < {}) {}[{} * {} + c] = {};", width, out, row, width, value);
  w.close();
}

// Copies a global row of `width` features into the warp's shared row.
void emit_stage_row(BodyWriter& w, DType dtype, const std::string& row, const std::string& src,
                    const std::string& offset, const std::string& width) {
  w.open("for (int c = lane; c < {}; c += kWarpSize)", width);
  w.line("{}[c] = {};", row, load(dtype, src + "[" + offset + " + c]"));
  w.close();
}

// The shared-memory names a key-tile loop uses.
struct KeyTiles {
  std::string k_tile, v_tile, v_stride, q_row;
};

// Opens the loop over key tiles of a warp-per-query-row kernel (query `i`, `active`, `b` and
// `first_query` declared): stages K and V with the whole block, then, in the warps that own a
// query, `float s`, the score of query i and key j = first + lane. The caller closes the loop.
void open_key_tiles(BodyWriter& w, const KernelRequest& request, const Dims& d,
                    size_t mask_input, const KeyTiles& t, const Layouts& layouts = {}) {
  const size_t first = mask_input == 3 ? 0 : 1;
  const DType dtype = request.node.inputs[first]->type.dtype;
  w.line("const int key_end = {};", d.causal ? "min(kKeys, first_query + kWarps)" : "kKeys");
  w.open("for (int first = 0; first < key_end; first += kTile)");
  w.line("__syncthreads();  // the previous tile's readers are done");
  emit_stage_tile(w, dtype, t.k_tile, request.input_params[first + 1], "kKeys", "kDepth",
                  "kDepthStride", layouts.k);
  emit_stage_tile(w, dtype, t.v_tile, request.input_params[first + 2], "kKeys", "kValueDepth",
                  t.v_stride, layouts.v);
  w.line("__syncthreads();");
  w.line("if (!active) continue;");
  emit_lane_dot(w, "qk", t.q_row, t.k_tile, "kDepth", "kDepthStride");
  w.line("const int j = first + lane;");
  emit_score(w, request, d, mask_input, "qk", "i", "j");
}

KernelSpec finish(BodyWriter& w, int64_t tasks, int64_t shared_floats, std::string note) {
  KernelSpec spec;
  spec.body = w.take();
  spec.block = Dim3{static_cast<uint32_t>(kAttentionWarps * kWarpSize), 1, 1};
  spec.grid = Dim3{grid_stride_blocks(tasks, 1), 1, 1};
  spec.shared_bytes = static_cast<uint32_t>(shared_floats * sizeof(float));
  spec.uses_barriers = true;
  spec.min_blocks_per_sm = 1;  // else ptxas spills bytes (tests/lit/codegen/attention_spills.ir)
  spec.note = std::move(note);
  return spec;
}

KernelSpec emit_attention_with(const KernelRequest& request, const Layouts& layouts) {
  const ir::Node& node = request.node;
  const Dims d(node, 0, 3);
  const DType dtype = node.inputs[0]->type.dtype;
  const std::string& q = request.input_params[0];
  const int64_t query_blocks = (d.queries + kAttentionWarps - 1) / kAttentionWarps;
  const int64_t tasks = d.batch * query_blocks;

  BodyWriter w;
  emit_mask_constants(w, d);
  emit_constants(w, d);
  for (const Layout* layout : {&layouts.q, &layouts.k, &layouts.v, &layouts.out})
    layout->emit_constants(w, d.index);
  w.line("constexpr int kQueryBlocks = {};", query_blocks);
  // Real rows only when the dynamic dim is a batch dim (q of rank 3 or more): tasks run
  // batch-major (b = task / kQueryBlocks), so the first ones are the real batches. A dynamic
  // query axis (rank 2) keeps every task.
  const bool dynamic_batch = request.dynamic_rows && node.inputs[0]->type.rank() >= 3;
  w.line(dynamic_count(dynamic_batch ? request.dynamic_rows : std::nullopt, "kTasks", "int", tasks));
  w.line("float* k_tile = reinterpret_cast<float*>(kiln_smem);  // [kTile][kDepthStride]");
  w.line("float* v_tile = k_tile + kTile * kDepthStride;  // [kTile][kValueDepth]");
  w.line("float* q_row = v_tile + kTile * kValueDepth + warp * kDepth;  // this warp's query");
  w.line("float* p_row = v_tile + kTile * kValueDepth + kWarps * kDepth + warp * kTile;");
  w.comment("Block-uniform loop over (batch, block of kWarps queries): every thread reaches every");
  w.comment("barrier; warps past the last query idle through the tiles.");
  w.open("for (int task = blockIdx.x; task < kTasks; task += gridDim.x)");
  w.line("const int b = task / kQueryBlocks;");
  w.line("const int first_query = task % kQueryBlocks * kWarps;");
  w.line("const int i = first_query + warp;");
  w.line("const bool active = i < kQueries;  // warp-uniform");
  for (const Layout* layout : {&layouts.q, &layouts.k, &layouts.v, &layouts.out})
    layout->emit_base(w, d.index);
  w.line("if (active)");
  w.line("  for (int c = lane; c < kDepth; c += kWarpSize)");
  w.line("    q_row[c] = {};", load(dtype, q + "[" + layouts.q.at("i", "c", "kQueries", "kDepth") + "]"));
  w.line("float row_max = -INFINITY, row_sum = 0.0f;  // online softmax state");
  w.line("float acc[kValuesPerLane] = {};  // sum_j p_j v_j, features lane + 32 a");
  open_key_tiles(w, request, d, 3, {"k_tile", "v_tile", "kValueDepth", "q_row"}, layouts);
  w.line("const float new_max = kiln_max(row_max, kiln_warp_max(s));");
  w.comment("Until some key is unmasked the state stays empty (exp(-inf - -inf) would be NaN).");
  w.line("const float p = new_max == -INFINITY ? 0.0f : expf(s - new_max);");
  w.line("const float correction = row_max == -INFINITY ? 0.0f : expf(row_max - new_max);");
  w.line("row_sum = row_sum * correction + kiln_warp_sum(p);");
  w.line("row_max = new_max;");
  w.line("p_row[lane] = p;");
  w.line("__syncwarp();");
  w.line("#pragma unroll");
  w.line("for (int a = 0; a < kValuesPerLane; ++a) acc[a] *= correction;");
  emit_accumulate(w, "acc", "kValuesPerLane", "p_row", "v_tile", "kValueDepth", "kValueDepth");
  w.line("__syncwarp();  // p_row is rewritten by the next tile");
  w.close();
  w.line("if (!active) continue;");
  w.line("const long long row = static_cast<long long>(b) * kQueries + i;");
  if (layouts.out.view) {
    w.line("#pragma unroll");
    w.open("for (int a = 0; a < kValuesPerLane; ++a)");
    w.line("const int c = lane + a * kWarpSize;");
    w.comment("A row with every key masked divides 0 by 0: NaN, as PyTorch.");
    w.line("if (c < kValueDepth) {}[{}] = {};", request.output_params[0],
           layouts.out.at("i", "c", "kQueries", "kValueDepth"), store(dtype, "acc[a] / row_sum"));
    w.close();
  } else {
    emit_store_lanes(w, "kValuesPerLane", "kValueDepth", request.output_params[0], "row",
                     store(dtype, "acc[a] / row_sum"),
                     "A row with every key masked divides 0 by 0: NaN, as PyTorch.");
  }
  if (layouts.write_lse)
    w.line("if (lane == 0) {}[row] = row_max + logf(row_sum);", request.output_params[1]);
  w.close();
  const int64_t shared = kTile * odd(d.depth) + kTile * d.value_depth +
                         kAttentionWarps * (d.depth + kTile);
  KernelSpec spec = finish(w, tasks, shared,
                           fmt::format("flash attention: a warp per query row, keys in tiles of {} through "
                                       "shared memory, online softmax; no {}x{} score matrix",
                                       kTile, d.queries, d.keys));
  if (dynamic_batch) spec.dynamic_grid_axis = 0;
  return spec;
}

KernelSpec emit_attention(const KernelRequest& request) { return emit_attention_with(request, {}); }

KernelSpec emit_attention_grad(const KernelRequest& request) {
  const ir::Node& node = request.node;
  const Dims d(node, 1, 6);
  const DType dtype = node.inputs[1]->type.dtype;
  const std::string& dy = request.input_params[0];
  const std::string& q = request.input_params[1];
  const std::string& k = request.input_params[2];
  const std::string& v = request.input_params[3];
  const std::string& out = request.input_params[4];
  const std::string& lse = request.input_params[5];
  const int64_t query_blocks = (d.queries + kAttentionWarps - 1) / kAttentionWarps;
  const int64_t key_blocks = (d.keys + kAttentionWarps - 1) / kAttentionWarps;
  const int64_t tasks = d.batch * (query_blocks + key_blocks);

  BodyWriter w;
  emit_mask_constants(w, d);
  emit_constants(w, d);
  w.line("constexpr int kQueryBlocks = {};", query_blocks);
  w.line("constexpr int kKeyBlocks = {};", key_blocks);
  w.line("constexpr int kQueryTasks = kBatch * kQueryBlocks;  // then kBatch * kKeyBlocks");
  w.comment("Shared memory: two tiles (K and V, or Q and dy), with odd strides since lanes read");
  w.comment("their columns; per warp two feature rows and two rows of kTile coefficients.");
  w.line("float* tile_a = reinterpret_cast<float*>(kiln_smem);  // [kTile][kDepthStride]");
  w.line("float* tile_b = tile_a + kTile * kDepthStride;  // [kTile][kValueStride]");
  w.line("float* tile_lse = tile_b + kTile * kValueStride;  // [kTile]");
  w.line("float* tile_delta = tile_lse + kTile;  // [kTile]");
  w.line("float* warp_rows = tile_delta + kTile + warp * (kDepth + kValueDepth + 2 * kTile);");
  w.line("float* row_a = warp_rows;  // [kDepth]: q_i, or k_j");
  w.line("float* row_b = row_a + kDepth;  // [kValueDepth]: dy_i, or v_j");
  w.line("float* coef_p = row_b + kValueDepth;  // [kTile]");
  w.line("float* coef_ds = coef_p + kTile;  // [kTile]");
  w.open("for (int task = blockIdx.x; task < kQueryTasks + kBatch * kKeyBlocks; task += gridDim.x)");
  w.open("if (task < kQueryTasks)");
  w.comment("dq: warp per query row i, over key tiles.");
  w.line("const int b = task / kQueryBlocks;");
  w.line("const int first_query = task % kQueryBlocks * kWarps;");
  w.line("const int i = first_query + warp;");
  w.line("const bool active = i < kQueries;  // warp-uniform");
  w.line("const long long row = static_cast<long long>(b) * kQueries + (active ? i : 0);");
  w.open("if (active)");
  emit_stage_row(w, dtype, "row_a", q, "row * kDepth", "kDepth");
  emit_stage_row(w, dtype, "row_b", dy, "row * kValueDepth", "kValueDepth");
  w.close();
  w.line("const float lse_i = active ? {}[row] : 0.0f;", lse);
  w.line("float delta_i = 0.0f;  // dy_i . out_i, lanes over features, then the warp");
  w.open("if (active)");
  w.line("for (int c = lane; c < kValueDepth; c += kWarpSize)");
  w.line("  delta_i += {} * {};", load(dtype, dy + "[row * kValueDepth + c]"),
         load(dtype, out + "[row * kValueDepth + c]"));
  w.line("delta_i = kiln_warp_sum(delta_i);");
  w.close();
  w.line("float dq[kDepthPerLane] = {};");
  open_key_tiles(w, request, d, 6, {"tile_a", "tile_b", "kValueStride", "row_a"});
  w.line("const float p = s == -INFINITY ? 0.0f : expf(s - lse_i);");
  emit_lane_dot(w, "dp", "row_b", "tile_b", "kValueDepth", "kValueStride");
  w.line("coef_ds[lane] = p * (dp - delta_i);");
  w.line("__syncwarp();");
  emit_accumulate(w, "dq", "kDepthPerLane", "coef_ds", "tile_a", "kDepthStride", "kDepth");
  w.line("__syncwarp();");
  w.close();
  w.line("if (!active) continue;");
  emit_store_lanes(w, "kDepthPerLane", "kDepth", request.output_params[0], "row",
                   store(dtype, "kScale * dq[a]"));
  w.reopen("else");
  w.comment("dk, dv: warp per key row j, over query tiles.");
  w.line("const int key_task = task - kQueryTasks;");
  w.line("const int b = key_task / kKeyBlocks;");
  w.line("const int first_key = key_task % kKeyBlocks * kWarps;");
  w.line("const int j = first_key + warp;");
  w.line("const bool active = j < kKeys;  // warp-uniform");
  w.line("const long long key_row = static_cast<long long>(b) * kKeys + (active ? j : 0);");
  w.open("if (active)");
  emit_stage_row(w, dtype, "row_a", k, "key_row * kDepth", "kDepth");
  emit_stage_row(w, dtype, "row_b", v, "key_row * kValueDepth", "kValueDepth");
  w.close();
  w.line("float dk[kDepthPerLane] = {};");
  w.line("float dv[kValuesPerLane] = {};");
  if (d.causal) w.comment("Causal: queries before the block's first key see none of its keys.");
  w.line("const int query_begin = {};", d.causal ? "first_key / kTile * kTile" : "0");
  w.open("for (int first = query_begin; first < kQueries; first += kTile)");
  w.line("__syncthreads();");
  emit_stage_tile(w, dtype, "tile_a", q, "kQueries", "kDepth", "kDepthStride");
  emit_stage_tile(w, dtype, "tile_b", dy, "kQueries", "kValueDepth", "kValueStride");
  w.open("if (threadIdx.x < kTile && first + static_cast<int>(threadIdx.x) < kQueries)");
  w.line("const long long row = static_cast<long long>(b) * kQueries + first + threadIdx.x;");
  w.line("tile_lse[threadIdx.x] = {}[row];", lse);
  w.line("float delta = 0.0f;  // dy_i . out_i, by one thread");
  w.line("for (int c = 0; c < kValueDepth; ++c)");
  w.line("  delta += {} * {};", load(dtype, dy + "[row * kValueDepth + c]"),
         load(dtype, out + "[row * kValueDepth + c]"));
  w.line("tile_delta[threadIdx.x] = delta;");
  w.close();
  w.line("__syncthreads();");
  w.line("if (!active) continue;");
  w.line("const int query = first + lane;");
  emit_lane_dot(w, "qk", "row_a", "tile_a", "kDepth", "kDepthStride");
  emit_score(w, request, d, 6, "qk", "query", "j");
  w.line("const float p = s == -INFINITY ? 0.0f : expf(s - tile_lse[lane]);");
  emit_lane_dot(w, "dp", "row_b", "tile_b", "kValueDepth", "kValueStride");
  w.line("coef_p[lane] = p;");
  w.line("coef_ds[lane] = p == 0.0f ? 0.0f : p * (dp - tile_delta[lane]);");
  w.line("__syncwarp();");
  emit_accumulate(w, "dv", "kValuesPerLane", "coef_p", "tile_b", "kValueStride", "kValueDepth");
  emit_accumulate(w, "dk", "kDepthPerLane", "coef_ds", "tile_a", "kDepthStride", "kDepth");
  w.line("__syncwarp();");
  w.close();
  w.line("if (!active) continue;");
  emit_store_lanes(w, "kDepthPerLane", "kDepth", request.output_params[1], "key_row",
                   store(dtype, "kScale * dk[a]"));
  emit_store_lanes(w, "kValuesPerLane", "kValueDepth", request.output_params[2], "key_row",
                   store(dtype, "dv[a]"));
  w.close();
  w.close();
  const int64_t shared = kTile * (odd(d.depth) + odd(d.value_depth) + 2) +
                         kAttentionWarps * (d.depth + d.value_depth + 2 * kTile);
  return finish(w, tasks, shared,
                "flash attention backward: dq blocks over key tiles, dk/dv blocks over query "
                "tiles, probabilities recomputed from lse; no atomics");
}

// The body input that `value` is a view of, through view ops of the body, and that view.
std::pair<const ir::Value*, ir::StridedView> view_source(const ir::Node& kernel, const ir::Value* value) {
  std::vector<const ir::Node*> chain;  // from the body input on
  for (; value->producer != nullptr; value = value->producer->inputs[0])
    chain.insert(chain.begin(), value->producer);
  std::optional<ir::StridedView> view = ir::view_through(value, chain);
  if (!view || !view->plain_trailing(2))
    throw Error(kernel.loc.render(), kernel.describe() + ": an operand of its attention is not a "
                                                         "strided view of a kernel operand (rows and "
                                                         "features by one stride each)");
  return {value, *view};
}

size_t index_of(const std::vector<ir::Value*>& values, const ir::Value* value) {
  const auto it = std::find(values.begin(), values.end(), value);
  KILN_CHECK(it != values.end()) << "value '" << value->name << "' is not there";
  return static_cast<size_t>(it - values.begin());
}

}  // namespace

KernelSpec emit_attention_views(const KernelRequest& request) {
  const ir::Node& kernel = request.node;
  const ir::Graph& body = *kernel.body;
  const ir::Node* attention = nullptr;
  for (const auto& node : body.nodes())
    if (node->op == ir::OpId::Attention) attention = node.get();
  if (!attention) throw Error(kernel.loc.render(), kernel.describe() + ": an attention kernel without attention");
  KernelRequest inner{*attention, request.kernel_name, {}, {}, {}, request.dynamic_rows, request.precision, {}, {}};
  Layouts layouts;
  Layout* operand_layouts[] = {&layouts.q, &layouts.k, &layouts.v};
  for (size_t i = 0; i < attention->inputs.size(); ++i) {
    const auto [source, view] = view_source(kernel, attention->inputs[i]);
    inner.input_params.push_back(request.input_params[index_of(body.inputs, source)]);
    if (i < 3 && view != ir::contiguous_view(source->type.shape)) operand_layouts[i]->view = view;
    if (i >= 3 && source != attention->inputs[i])
      throw Error(kernel.loc.render(), kernel.describe() + ": the mask must be a kernel operand");
  }
  // The output: forwards through the view ops to a body output, then the view back from there.
  const ir::Value* out = attention->results[0];
  std::vector<const ir::Node*> chain;
  while (std::find(body.outputs.begin(), body.outputs.end(), out) == body.outputs.end()) {
    std::vector<ir::Node*> users = body.users(out);
    if (users.size() != 1)
      throw Error(kernel.loc.render(), kernel.describe() + ": the attention output must reach one kernel result");
    chain.push_back(users[0]);
    out = users[0]->results[0];
  }
  const std::optional<ir::StridedView> view = ir::view_written_through(attention->results[0], chain);
  if (!view || !view->plain_trailing(2))
    throw Error(kernel.loc.render(), kernel.describe() + ": the ops after its attention do not "
                                                         "write the output as a strided view");
  if (!chain.empty()) layouts.out.view = *view;
  inner.output_params.push_back(request.output_params[index_of(body.outputs, out)]);
  const auto lse = std::find(body.outputs.begin(), body.outputs.end(), attention->results[1]);
  layouts.write_lse = lse != body.outputs.end();
  inner.output_params.push_back(layouts.write_lse ? request.output_params[static_cast<size_t>(lse - body.outputs.begin())] : "");
  KernelSpec spec = emit_attention_with(inner, layouts);
  spec.note += "; q, k, v read and the output written through strided views (no copies)";
  return spec;
}

void add_attention_emitters(EmitterTable& table) {
  table.emplace_back(ir::OpId::Attention, emit_attention);
  table.emplace_back(ir::OpId::AttentionGrad, emit_attention_grad);
}

}  // namespace kiln::codegen
