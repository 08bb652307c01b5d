// split-reductions: a reduction with too few results to fill the GPU and a long sum behind each
// runs in two stages, each a reduction with enough results:
//
//   %db = reduce_sum(%dy) {axes = [0, 2, 3]} : f32[32]                 (%dy : f32[64,32,28,28])
// becomes
//   %db.partials = reduce_sum(%dy) {axes = [2, 3], keepdims = true} : f32[64,32,1,1]
//   %db = reduce_sum(%db.partials) {axes = [0, 2, 3]} : f32[32]
//
// The reduce kernels give each result a block, a warp or a few threads, so 32 results of
// 50,176 values each run 32 blocks on an H100's 132 SMs. Stage 1 keeps one reduced axis (its
// extent is the number of partials) and reduces the others; stage 2, the same reduction as
// before, reduces the partials. Every partial covers the same number of values, so a mean of
// partial means is the mean, a sum of partial sums the sum, a max of partial maxima the max.
// Both stages are deterministic (fixed order, no atomics); only the order of the additions
// changes. The kept axis is a whole axis, so no reshape (a copy, where its producer cannot take
// it) is needed; a reduction over one axis is not cut.
//
// The kept axis: the smallest reduced extent that gives kTargetResults results in stage 1, else
// the largest; either way each partial must cover at least kMinPartial values, so that stage 2
// stays short next to stage 1.
//
// Refusals, each logged under --debug-only=split-reductions: enough results already, sums too
// short to cut, one reduced axis only, a type other than f32 or f64 (the partials would round
// at a half type; integer sums saturate differently in two stages).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "passes/pass.h"
#include "passes/rewrite_util.h"

namespace kiln::passes {
namespace {

constexpr std::string_view kPass = "split-reductions";

constexpr int64_t kSms = 132;                   // an H100 SXM's SMs
constexpr int64_t kTargetResults = 16 * kSms;   // ~16 blocks (or warps) per SM in stage 1
constexpr int64_t kMinPartial = 256;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Stage 1 keeps reduced axis `axis` (its extent partials); 0 partials: not split, see `why`.
struct ReductionSplit {
  int64_t axis = -1;
  int64_t partials = 0;
  std::string why;
};

bool is_split_reduction(ir::OpId op) {
  return op == ir::OpId::ReduceSum || op == ir::OpId::ReduceMean || op == ir::OpId::ReduceMax;
}

ReductionSplit choose_split(const ir::Shape& shape, const std::vector<int64_t>& axes,
                           ir::DType dtype) {
  ReductionSplit split;
  if (dtype != ir::DType::F32 && dtype != ir::DType::F64) {
    split.why = fmt::format("{} values: only f32 and f64 partials are exact enough to cut",
                            ir::dtype_name(dtype));
    return split;
  }
  int64_t per_result = 1;
  for (int64_t a : axes) per_result *= shape[a];
  const int64_t results = ir::num_elements(shape) / std::max<int64_t>(per_result, 1);
  if (results >= kTargetResults) {
    split.why = fmt::format("{} results fill {} SMs", results, kSms);
    return split;
  }
  if (per_result < 2 * kMinPartial) {
    split.why = fmt::format("{} values per result are too few to cut into partials of {} or more",
                            per_result, kMinPartial);
    return split;
  }
  if (axes.size() < 2) {
    split.why = "it reduces one axis: cutting it would need a reshape";
    return split;
  }
  const int64_t wanted = ceil_div(kTargetResults, results);
  for (int64_t a : axes) {
    const int64_t extent = shape[a];
    if (extent < 2 || per_result / extent < kMinPartial) continue;
    const bool enough = extent >= wanted, best_enough = split.partials >= wanted;
    if (split.partials == 0 || (enough && (!best_enough || extent < split.partials)) ||
        (!enough && !best_enough && extent > split.partials)) {
      split.axis = a;
      split.partials = extent;
    }
  }
  if (split.partials == 0)
    split.why = fmt::format("no reduced axis of [{}] leaves {} or more values per partial",
                            fmt::join(shape, ","), kMinPartial);
  return split;
}

}  // namespace

bool SplitReductions::run(ir::Graph& graph, PassContext& context) {
  std::vector<std::pair<ir::Node*, ReductionSplit>> splits;
  for (const auto& node : graph.nodes()) {
    if (!is_split_reduction(node->op)) continue;
    const ir::TensorType& x = node->inputs[0]->type;
    ReductionSplit split = choose_split(x.shape, reduced_axes(*node), x.dtype);
    const std::string who = fmt::format("{} (%{})", node->describe(), node->results[0]->name);
    if (split.partials == 0) {
      context.debug(kPass, fmt::format("not split: {}: {}", who, split.why));
      continue;
    }
    if (!context.take_fuel(kPass, "split " + who)) break;
    splits.emplace_back(node.get(), std::move(split));
  }
  if (splits.empty()) return false;

  NameTable names(graph);
  Replacements replacements;
  std::unordered_set<const ir::Node*> dead;
  for (const auto& [node, split] : splits) {
    ir::Value* old_out = node->results[0];
    const std::string out_name = old_out->name;
    old_out->name = names.take(out_name + ".unsplit");
    NodeInserter insert(graph, names, *node);
    const std::vector<int64_t> axes = reduced_axes(*node);

    std::vector<int64_t> stage1_axes;
    for (int64_t a : axes)
      if (a != split.axis) stage1_axes.push_back(a);
    ir::Value* partials = insert.add(node->op, {node->inputs[0]}, {{"axes", stage1_axes}, {"keepdims", true}},
                                     out_name + ".partials");
    // Stage 2 is the original reduction of the partials; its result keeps the original's name.
    names.release(out_name);
    ir::Value* result = insert.add(node->op, {partials}, node->attrs, out_name);
    replacements[old_out] = result;
    dead.insert(node);
    context.debug(kPass, fmt::format("split %{}: {} partials (axis {}) of {} values",
                                     out_name, split.partials, split.axis,
                                     ir::num_elements(node->inputs[0]->type.shape) /
                                         ir::num_elements(old_out->type.shape) / split.partials));
  }
  replace_and_erase(graph, replacements, dead);
  return true;
}

}  // namespace kiln::passes
