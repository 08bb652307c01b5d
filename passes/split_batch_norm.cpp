// split-batch-norm: batch_norm_train and batch_norm_train_grad with too few channels to fill the
// GPU reduce each channel in chunks, side by side, and combine the chunks' partials:
//
//   %y, %m, %v = batch_norm_train(%x, %scale, %bias) : f32[32,64,56,56], f32[64], f32[64]
// becomes
//   %y.chunk_stats = batch_norm_chunk_stats(%x) {chunks = 17} : f32[17,2,64]
//   %y, %m, %v = batch_norm_train(%x, %scale, %bias, %y.chunk_stats)
// and
//   %dx, %ds, %db = batch_norm_train_grad(%dy, %x, %scale, %m, %v)
// becomes
//   %dx.chunk_sums = batch_norm_chunk_sums(%dy, %x, %m, %v) {chunks = 17} : f32[17,2,64]
//   %dx, %ds, %db = batch_norm_train_grad(%dy, %x, %scale, %m, %v, %dx.chunk_sums)
//
// The fused kernels (codegen/kernels/norm_train.cpp) run one block per channel: ResNet-50's
// first stage at batch 32 has 64 channels of 100,352 values, so 64 blocks of an H100's 132 SMs
// read 25.7 MB three times while the rest idle. Split, each of 64 x 17 blocks reduces one chunk
// of a channel (its mean and squared deviations; or its sums of dy and dy * xhat), and the
// normalizing kernel (dx) runs on the same grid, each thread combining its channel's 17
// partials in chunk order before it normalizes its block's chunk. Both steps are deterministic:
// fixed chunks, fixed order, no atomics. The variance stays accurate: each chunk's squared
// deviations are taken from its own mean, and the chunks combine by Chan et al.'s formula
// (M2 = sum of M2_s + sum of n_s (mean_s - mean)^2), never E[x^2] - E[x]^2.
//
// Chunks: enough for kTargetBlocks blocks, each of at least kMinChunk values.
//
// Refusals, each logged under --debug-only=split-batch-norm: channels that fill the GPU
// already, channels too short to cut, a non-f32 type (the partials would round to it), a node
// split already.
#include <fmt/format.h>

#include <algorithm>

#include "passes/pass.h"
#include "passes/rewrite_util.h"

namespace kiln::passes {
namespace {

constexpr std::string_view kPass = "split-batch-norm";

constexpr int64_t kSms = 132;                 // an H100 SXM's SMs
constexpr int64_t kTargetBlocks = 8 * kSms;   // 256-thread blocks: a full wave at 2048 threads/SM
constexpr int64_t kMinChunk = 2048;           // 8 values per thread of a block

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The number of chunks to cut each channel of `node`'s x into, or 0 with the reason in `why`.
int64_t choose_chunks(const ir::Node& node, std::string& why) {
  const bool forward = node.op == ir::OpId::BatchNormTrain;
  const size_t x_operand = forward ? 0 : 1;
  if (node.inputs.size() > (forward ? 3u : 5u)) {
    why = "already split";
    return 0;
  }
  const ir::TensorType& x = node.inputs[x_operand]->type;
  if (x.dtype != ir::DType::F32) {
    why = fmt::format("x is {}: partial statistics would round to it", ir::dtype_name(x.dtype));
    return 0;
  }
  const int64_t channels = x.shape[1];
  const int64_t per_channel = ir::num_elements(x.shape) / channels;
  if (channels * 2 > kTargetBlocks) {
    why = fmt::format("{} channels, one block each, fill {} SMs", channels, kSms);
    return 0;
  }
  const int64_t wanted = std::min(ceil_div(kTargetBlocks, channels), per_channel / kMinChunk);
  if (wanted < 2) {
    why = fmt::format("{} values per channel are too few to cut into chunks of {} or more",
                      per_channel, kMinChunk);
    return 0;
  }
  // Equal chunks of ceil(M / wanted) values; recounting them leaves no chunk empty.
  return ceil_div(per_channel, ceil_div(per_channel, wanted));
}

}  // namespace

bool SplitBatchNorm::run(ir::Graph& graph, PassContext& context) {
  std::vector<std::pair<ir::Node*, int64_t>> splits;
  for (const auto& node : graph.nodes()) {
    if (node->op != ir::OpId::BatchNormTrain && node->op != ir::OpId::BatchNormTrainGrad) continue;
    std::string why;
    const int64_t chunks = choose_chunks(*node, why);
    const std::string who = fmt::format("{} (%{})", node->describe(), node->results[0]->name);
    if (chunks == 0) {
      context.debug(kPass, fmt::format("not split: {}: {}", who, why));
      continue;
    }
    if (!context.take_fuel(kPass, "split " + who)) break;
    splits.emplace_back(node.get(), chunks);
  }
  if (splits.empty()) return false;

  NameTable names(graph);
  for (const auto& [node, chunks] : splits) {
    NodeInserter insert(graph, names, *node);
    const std::string& base = node->results[0]->name;
    ir::Value* partials;
    if (node->op == ir::OpId::BatchNormTrain) {
      partials = insert.add(ir::OpId::BatchNormChunkStats, {node->inputs[0]},
                            {{"chunks", chunks}}, base + ".chunk_stats");
    } else {
      partials = insert.add(ir::OpId::BatchNormChunkSums,
                            {node->inputs[0], node->inputs[1], node->inputs[3], node->inputs[4]},
                            {{"chunks", chunks}, {"epsilon", node->attrs.at("epsilon")}},
                            base + ".chunk_sums");
    }
    node->inputs.push_back(partials);
    const ir::Shape& x = node->inputs[node->op == ir::OpId::BatchNormTrain ? 0 : 1]->type.shape;
    context.debug(kPass, fmt::format("split %{}: {} channels x {} chunks of {} values", base,
                                     x[1], chunks,
                                     ceil_div(ir::num_elements(x) / x[1], chunks)));
  }
  return true;
}

}  // namespace kiln::passes
