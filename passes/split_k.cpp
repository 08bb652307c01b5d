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
// Refusals, each logged under --debug-only=split-k: a GEMM that already fills the GPU, a K too
// short to cut, a non-f32 gradient (the partials would round at the gradient's precision), a
// node already split.
#include <fmt/format.h>

#include <algorithm>
#include <unordered_set>

#include "passes/pass.h"
#include "passes/rewrite_util.h"

namespace kiln::passes {
namespace {

constexpr std::string_view kPass = "split-k";

constexpr int64_t kSms = 132;                 // an H100 SXM's SMs
constexpr int64_t kTile = 64;                 // the GEMM's tile of a small problem
constexpr int64_t kTargetBlocks = 4 * kSms;   // a few blocks per SM to hide latency
constexpr int64_t kMinChunk = 1024;
constexpr int64_t kChunkAlign = 64;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The chunk size to split `node` by, or 0 with the reason in `why`.
int64_t choose_chunk(const ir::Node& node, std::string& why) {
  const ir::Shape& dy = node.inputs[0]->type.shape;
  const ir::Shape& w = node.results[0]->type.shape;
  const int64_t groups = std::get<int64_t>(node.attrs.at("groups"));
  if (std::get<int64_t>(node.attrs.at("k_chunk")) > 0) {
    why = "already split";
    return 0;
  }
  if (node.results[0]->type.dtype != ir::DType::F32) {
    why = fmt::format("the gradient is {}: partial sums would round to it", ir::dtype_name(node.results[0]->type.dtype));
    return 0;
  }
  const int64_t m = w[0] / groups, n = w[1] * w[2] * w[3], k = dy[0] * dy[2] * dy[3];
  const int64_t blocks = ceil_div(m, kTile) * ceil_div(n, kTile) * groups;
  if (blocks >= kSms) {
    why = fmt::format("its GEMM ({}x{} per group, {} groups) has {} tiles of {}x{}: enough for {} SMs",
                      m, n, groups, blocks, kTile, kTile, kSms);
    return 0;
  }
  const int64_t wanted = ceil_div(kTargetBlocks, blocks);
  int64_t chunk = ceil_div(ceil_div(k, wanted), kChunkAlign) * kChunkAlign;
  chunk = std::max(chunk, kMinChunk);
  if (ceil_div(k, chunk) < 2) {
    why = fmt::format("K = N*OH*OW = {} is too short to cut into chunks of {} or more", k, kMinChunk);
    return 0;
  }
  return chunk;
}

}  // namespace

bool SplitK::run(ir::Graph& graph, PassContext& context) {
  std::vector<std::pair<ir::Node*, int64_t>> splits;
  for (const auto& node : graph.nodes()) {
    if (node->op != ir::OpId::Conv2dGradWeight) continue;
    std::string why;
    const int64_t chunk = choose_chunk(*node, why);
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
    const ir::Shape& dy = node->inputs[0]->type.shape;
    const int64_t chunks = ceil_div(dy[0] * dy[2] * dy[3], chunk);
    ir::Shape partials_shape{chunks};
    partials_shape.insert(partials_shape.end(), old_out->type.shape.begin(), old_out->type.shape.end());
    ir::AttrMap attrs = node->attrs;
    attrs["k_chunk"] = chunk;
    ir::Node* partials = graph.insert_node_before(
        node, ir::OpId::Conv2dGradWeight, node->name, node->inputs, std::move(attrs),
        {{names.take(out_name + ".partials"), ir::TensorType{old_out->type.dtype, partials_shape}}},
        node->loc);
    ir::Node* sum = graph.insert_node_before(
        node, ir::OpId::ReduceSum, node->name.empty() ? "" : node->name + ".sum",
        {partials->results[0]}, {{"axes", std::vector<int64_t>{0}}, {"keepdims", false}},
        {{out_name, old_out->type}}, node->loc);
    replacements[old_out] = sum->results[0];
    dead.insert(node);
    context.debug(kPass, fmt::format("split %{}: {} chunks of {} batch pixels, then reduce_sum",
                                     out_name, chunks, chunk));
  }
  replace_and_erase(graph, replacements, dead);
  return true;
}

}  // namespace kiln::passes
