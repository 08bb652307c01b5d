// split-k: a conv2d_grad_weight whose GEMM has too few tiles to fill the GPU sums its long K in
// chunks, side by side, and a reduce_sum adds the partial weights:
//
//   %grad.w = conv2d_grad_weight(%dy, %x) {shape = [64,64,3,3]} : f32[64,64,3,3]
// becomes
//   %grad.w.partials = conv2d_grad_weight(%dy, %x) {k_chunk = 1728, shape = [64,64,3,3]}
//       : f32[59,64,64,3,3]
//   %grad.w = reduce_sum(%grad.w.partials) {axes = [0]} : f32[64,64,3,3]
//
// The weight gradient is a GEMM per group of M = O / groups channels by N = C / groups * KH *
// KW weights, summed over K = N * OH * OW batch pixels: in ResNet-50 at batch 32, K is up to
// 401,408 while M x N is often 9 tiles of 64 x 64, so 9 blocks would run on an H100's 132 SMs.
// Cut K into S chunks and the GEMM launches 9 x S blocks; each chunk's partial sums are stored
// and reduce_sum adds them in chunk order. Both steps are deterministic: every run adds the same
// numbers in the same order (no atomics).
//
// S is chosen to give the GEMM kTargetBlocks blocks of 64 x 64 (the tiles a small GEMM takes
// on either unit: codegen/kernels/gemm.h), with chunks of at least kMinChunk terms, so that
// the partials (S weights) stay small next to the products (K per weight) and each block's
// pipeline runs long. Chunks are multiples of kChunkAlign: whole k tiles, 16-byte aligned.
//
// A forward conv2d whose GEMM has too few tiles (ResNet-50 at batch 1: 8 tiles of 64 x 64 in
// its last stage, against K = 512 * 3 * 3 = 4,608) is cut the same way, along its patch
// (c, kh, kw), in chunks of at least kMinForwardChunk terms; its bias, if any, is added after
// the sum by a bias_add (partials take none), where fusion puts the activation with it:
//
//   %y = conv2d(%x, %w, %b) {pad = [1,1,1,1]} : f32[1,512,7,7]
// becomes
//   %y.partials = conv2d(%x, %w) {k_chunk = 128, pad = [1,1,1,1]} : f32[36,1,512,7,7]
//   %y.sum = reduce_sum(%y.partials) {axes = [0]} : f32[1,512,7,7]
//   %y = bias_add(%y.sum, %b) : f32[1,512,7,7]
//
// A dense with too few tiles (a classifier at batch 1: one row of 1000 features, 16 tiles,
// reading a 2048 x 1000 weight) is cut along its input features the same way; its bias is
// added along the last axis after the sum. The estimate of what a forward split saves takes
// the larger of the GEMM's FLOP time and its DRAM time on its share of the SMs.
//
// A matmul with too few tiles (a projection of 8 tokens from 4,096 features to 1,024: 16 tiles
// reading a 16 MB matrix) is cut along its inner dim K the same way; its partials stack in
// front of the batch dims, [S, ..., M, N], and the GEMM's grid z runs over batch and chunk.
//
// With the option whole=OP[+OP...] over conv2d, dense and matmul (passes::keep_vendor_gemms_whole,
// from --library), forward GEMMs of those ops stay whole: cuDNN and cuBLASLt choose their own
// split-K, and partial sums would take the GEMM off the library.
//
// Refusals, each logged under --debug-only=split-k: a GEMM that already fills the GPU, a K too
// short to cut, a non-f32 result (the partials would round at its precision), a node already
// split.
#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <unordered_set>

#include "ir/diagnostic.h"
#include "passes/pass.h"
#include "passes/rewrite_util.h"

namespace kiln::passes {
namespace {

constexpr std::string_view kPass = "split-k";

constexpr int64_t kSms = 132;                 // an H100 SXM's SMs
constexpr int64_t kTile = 64;                 // the GEMM's tile of a small problem
constexpr int64_t kTargetBlocks = 4 * kSms;   // a few blocks per SM to hide latency
constexpr int64_t kMinChunk = 1024;
constexpr int64_t kMinForwardChunk = 128;  // a forward K is hundreds or thousands
// A forward split adds two launches (the partials' sum, and the bias and activation it can no
// longer fuse), a few microseconds in a CUDA graph: it must save more than kMinSavedSeconds of
// GEMM time, estimated at the FMA template's ceiling (half of an H100's 66.9 TFLOP/s) on the
// share of the SMs its blocks occupy. The seed CNN at batch 1 to 16 stays whole.
constexpr double kTemplateFlopsPerSecond = 0.5 * 66.9e12;
constexpr double kDramBytesPerSecond = 3.35e12;
constexpr double kMinSavedSeconds = 10e-6;
constexpr int64_t kChunkAlign = 64;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The GEMM of a node split-k may cut: per group, M x N results summed over K terms.
struct GemmShape {
  int64_t m = 0, n = 0, k = 0, groups = 1;
  int64_t min_chunk = kMinChunk;
  const char* k_is = "";
};

GemmShape gemm_shape(const ir::Node& node) {
  GemmShape g;
  if (node.op == ir::OpId::Matmul) {  // a [..., M, K] @ b [..., K, N], either transposed
    const ir::Shape& a = node.inputs[0]->type.shape;
    const ir::Shape& b = node.inputs[1]->type.shape;
    const ir::Shape& y = node.results[0]->type.shape;
    const bool transpose_a = std::get<bool>(node.attrs.at("transpose_a"));
    g.m = y[y.size() - 2];
    g.n = y.back();
    g.k = transpose_a ? a[a.size() - 2] : a.back();
    // The batches are more blocks along grid z; the template folds them into the rows when b
    // is one matrix and a is not transposed, which tiles the same or better.
    g.groups = g.m * g.n > 0 ? ir::num_elements(y) / (g.m * g.n) : 0;
    if (ir::num_elements(b) == b[b.size() - 2] * b.back() && !transpose_a) {
      g.m *= g.groups;
      g.groups = 1;
    }
    g.min_chunk = kMinForwardChunk;
    g.k_is = "the inner dim";
    return g;
  }
  if (node.op == ir::OpId::Dense) {  // x [..., K] @ weight[N, K]^T
    const ir::Shape& w = node.inputs[1]->type.shape;
    g.m = ir::num_elements(node.inputs[0]->type.shape) / w[1];
    g.n = w[0];
    g.k = w[1];
    g.min_chunk = kMinForwardChunk;
    g.k_is = "input features";
    return g;
  }
  g.groups = std::get<int64_t>(node.attrs.at("groups"));
  if (node.op == ir::OpId::Conv2dGradWeight) {
    const ir::Shape& dy = node.inputs[0]->type.shape;
    const ir::Shape& w = node.results[0]->type.shape;
    g.m = w[0] / g.groups;
    g.n = w[1] * w[2] * w[3];
    g.k = dy[0] * dy[2] * dy[3];
    g.k_is = "N*OH*OW";
  } else {  // conv2d
    const ir::Shape& w = node.inputs[1]->type.shape;
    const ir::Shape& y = node.results[0]->type.shape;
    g.m = w[0] / g.groups;
    g.n = y[0] * y[2] * y[3];
    g.k = w[1] * w[2] * w[3];
    g.min_chunk = kMinForwardChunk;
    g.k_is = "C/groups*KH*KW";
  }
  return g;
}

// The chunk size to split `node` by, or 0 with the reason in `why`. `whole`: the forward ops a
// vendor library computes (option whole=conv2d+dense).
int64_t choose_chunk(const ir::Node& node, const std::set<std::string>& whole, std::string& why) {
  if (std::get<int64_t>(node.attrs.at("k_chunk")) > 0) {
    why = "already split";
    return 0;
  }
  const bool forward = node.op != ir::OpId::Conv2dGradWeight;
  if (forward && whole.count(std::string(ir::to_string(node.op)))) {
    why = fmt::format("a vendor library computes {} (--library), with a split-K of its own",
                      ir::to_string(node.op));
    return 0;
  }
  if (const ir::DType dtype = node.results[0]->type.dtype;
      dtype != ir::DType::F32 && dtype != ir::DType::BF16 && dtype != ir::DType::F16) {
    why = fmt::format("the {} is {}: split-K GEMMs are f32, bf16 or f16", forward ? "result" : "gradient",
                      ir::dtype_name(dtype));
    return 0;
  }
  const GemmShape g = gemm_shape(node);
  const int64_t blocks = ceil_div(g.m, kTile) * ceil_div(g.n, kTile) * g.groups;
  if (blocks == 0) {
    why = "its result is empty";
    return 0;
  }
  if (blocks >= kSms) {
    why = fmt::format("its GEMM ({}x{} per group, {} groups) has {} tiles of {}x{}: enough for {} SMs",
                      g.m, g.n, g.groups, blocks, kTile, kTile, kSms);
    return 0;
  }
  const int64_t wanted = ceil_div(kTargetBlocks, blocks);
  int64_t chunk = ceil_div(ceil_div(g.k, wanted), kChunkAlign) * kChunkAlign;
  chunk = std::max(chunk, g.min_chunk);
  if (ceil_div(g.k, chunk) < 2) {
    why = fmt::format("K = {} = {} is too short to cut into chunks of {} or more", g.k_is, g.k,
                      g.min_chunk);
    return 0;
  }
  if (forward) {
    // The GEMM's time on the share of the SMs its grid occupies: its FLOPs at the template's
    // ceiling, or its operands and result at the DRAM bandwidth (a 1-row dense reads a whole
    // weight matrix for a few FLOPs per byte).
    const double flops = 2.0 * static_cast<double>(g.m * g.n * g.k * g.groups);
    double bytes = static_cast<double>(ir::num_elements(node.results[0]->type.shape));
    for (const ir::Value* operand : node.inputs) bytes += static_cast<double>(ir::num_elements(operand->type.shape));
    bytes *= static_cast<double>(ir::dtype_size(node.results[0]->type.dtype));
    const auto seconds = [&](int64_t grid) {
      const double share = std::min(1.0, static_cast<double>(grid) / kSms);
      return std::max(flops / (kTemplateFlopsPerSecond * share), bytes / (kDramBytesPerSecond * share));
    };
    const double saved = seconds(blocks) - seconds(blocks * ceil_div(g.k, chunk));
    if (saved < kMinSavedSeconds) {
      why = fmt::format("splitting would save {:.1f} us of its {:.1f} us, less than the {:.0f} us two "
                        "more launches are worth", saved * 1e6, seconds(blocks) * 1e6,
                        kMinSavedSeconds * 1e6);
      return 0;
    }
  }
  return chunk;
}

}  // namespace

bool SplitK::run(ir::Graph& graph, PassContext& context) {
  context.check_options(kPass, {"whole"});
  std::set<std::string> whole;
  const std::string whole_option = context.option("whole", "");
  for (size_t begin = 0; begin < whole_option.size();) {
    const size_t end = std::min(whole_option.find('+', begin), whole_option.size());
    const std::string op = whole_option.substr(begin, end - begin);
    if (op != "conv2d" && op != "dense" && op != "matmul")
      throw Error("--passes", fmt::format("pass '{}': option whole={}: '{}' is not conv2d, dense or "
                                          "matmul (expected one of them, or several joined by '+')",
                                          kPass, whole_option, op));
    whole.insert(op);
    begin = end + 1;
  }
  std::vector<std::pair<ir::Node*, int64_t>> splits;
  for (const auto& node : graph.nodes()) {
    if (node->op != ir::OpId::Conv2dGradWeight && node->op != ir::OpId::Conv2d &&
        node->op != ir::OpId::Dense && node->op != ir::OpId::Matmul)
      continue;
    std::string why;
    const int64_t chunk = choose_chunk(*node, whole, why);
    const std::string who = fmt::format("{} (%{})", node->describe(), node->results[0]->name);
    if (chunk == 0) {
      context.debug(kPass, fmt::format("not split: {}: {}", who, why));
      continue;
    }
    if (!context.take_fuel(kPass, "split K of " + who)) break;
    splits.emplace_back(node.get(), chunk);
  }
  if (splits.empty()) return false;

  NameTable names(graph);
  Replacements replacements;
  std::unordered_set<const ir::Node*> dead;
  for (const auto& [node, chunk] : splits) {
    ir::Value* old_out = node->results[0];
    const std::string out_name = old_out->name;
    old_out->name = names.take(out_name + ".unsplit");
    const int64_t chunks = ceil_div(gemm_shape(*node).k, chunk);
    ir::Shape partials_shape{chunks};
    partials_shape.insert(partials_shape.end(), old_out->type.shape.begin(), old_out->type.shape.end());
    ir::AttrMap attrs = node->attrs;
    attrs["k_chunk"] = chunk;
    // A forward GEMM's bias is added once, after the sum: along a conv's channels (axis 1), a
    // dense's features (its last axis).
    const bool biased = node->op != ir::OpId::Conv2dGradWeight && node->inputs.size() > 2;
    const int64_t bias_axis = node->op == ir::OpId::Dense ? old_out->type.rank() - 1 : 1;
    std::vector<ir::Value*> operands = node->inputs;
    if (biased) operands.pop_back();
    // 16-bit GEMMs sum in f32: their partials and the sum stay f32, and a cast rounds the sum
    // once, as the unsplit kernel rounds its accumulators.
    const ir::DType sum_dtype = ir::accumulation_dtype(old_out->type.dtype);
    const bool rounds = sum_dtype != old_out->type.dtype;
    ir::Node* partials = graph.insert_node_before(
        node, node->op, node->name, operands, std::move(attrs),
        {{names.take(out_name + ".partials"), ir::TensorType{sum_dtype, partials_shape}}}, node->loc);
    const std::string sum_name = biased || rounds ? names.take(out_name + ".sum") : out_name;
    ir::Node* sum = graph.insert_node_before(
        node, ir::OpId::ReduceSum, node->name.empty() ? "" : node->name + ".sum",
        {partials->results[0]}, {{"axes", std::vector<int64_t>{0}}, {"keepdims", false}},
        {{sum_name, ir::TensorType{sum_dtype, old_out->type.shape}}}, node->loc);
    ir::Node* result = sum;
    if (biased) {
      // The bias joins the f32 sum (widened exactly) before the one rounding, as in the unsplit
      // kernel's epilogue.
      ir::Value* bias = node->inputs[2];
      if (rounds) {
        bias = graph.insert_node_before(
            node, ir::OpId::Cast, node->name.empty() ? "" : node->name + ".bias_f32", {bias},
            {{"to", std::string(ir::dtype_name(sum_dtype))}},
            {{names.take(bias->name + ".f32"), ir::TensorType{sum_dtype, bias->type.shape}}},
            node->loc)->results[0];
      }
      result = graph.insert_node_before(
          node, ir::OpId::BiasAdd, node->name.empty() ? "" : node->name + ".bias",
          {sum->results[0], bias}, {{"axis", bias_axis}},
          {{rounds ? names.take(out_name + ".biased") : out_name, sum->results[0]->type}}, node->loc);
    }
    if (rounds) {
      result = graph.insert_node_before(
          node, ir::OpId::Cast, node->name.empty() ? "" : node->name + ".round",
          {result->results[0]}, {{"to", std::string(ir::dtype_name(old_out->type.dtype))}},
          {{out_name, old_out->type}}, node->loc);
    }
    replacements[old_out] = result->results[0];
    dead.insert(node);
    context.debug(kPass, fmt::format("split %{}: {} chunks of {} {}, then reduce_sum{}{}",
                                     out_name, chunks, chunk,
                                     node->op == ir::OpId::Conv2d   ? "patch terms"
                                     : node->op == ir::OpId::Dense  ? "input features"
                                     : node->op == ir::OpId::Matmul ? "inner terms"
                                                                    : "batch pixels",
                                     biased ? " and bias_add" : "",
                                     rounds ? fmt::format(" in f32, cast to {}", ir::dtype_name(old_out->type.dtype)) : ""));
  }
  replace_and_erase(graph, replacements, dead);
  return true;
}

}  // namespace kiln::passes
