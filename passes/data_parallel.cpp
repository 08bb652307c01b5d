// data-parallel: the communication of data-parallel training, as ops of the graph.
//
// Input: a graph whose outputs include grad.P for parameters P (autodiff's product), before
// append-optimizer. Output: the same outputs, each grad.P now the result of an all_reduce node
// (ir/ops.def: the mean over the ranks), so that the optimizer step that append-optimizer
// appends updates every rank's parameters with the same averaged gradients; and each other
// state output next.X (batch norm's running statistics, which each rank computes from its own
// shard) the result of a broadcast from rank 0, so that every rank holds the same state, as
// DistributedDataParallel broadcasts its buffers.
//
// The gradients are grouped into buckets, as PyTorch's DistributedDataParallel does: in reverse
// order of the forward pass (the last layer's parameters first, whose gradients the backward
// pass computes first), a bucket closing once it holds `bucket_mb` megabytes (default 25) or
// kMaxTensors gradients. Each bucket is one all_reduce node, placed right after the node that
// computes its last gradient: the runtime starts its all-reduce there while the backward pass
// goes on (runtime/distributed/), and waits for it only where its results are read. Few buckets
// amortize each collective's latency; many let communication start earlier.
//
//   %grad.fc2.weight.local = ..., %grad.fc2.bias.local = ... (the backward pass)
//   %grad.fc2.weight, %grad.fc2.bias = all_reduce(%grad.fc2.weight.local, %grad.fc2.bias.local)
//
// The pass knows nothing of ranks: the program is the same on all of them (the dropouts' word
// offsets, which differ, are set with the training graph: compiler/training_graph.h).
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "passes/pass.h"

namespace kiln::passes {
namespace {

constexpr std::string_view kPass = "data-parallel";
constexpr std::string_view kGradPrefix = "grad.";
constexpr std::string_view kNextPrefix = "next.";
// A collective's kernel takes two pointers per tensor (the one-process copy): 128 keep its
// parameters within the 4,096 bytes every CUDA driver accepts.
constexpr size_t kMaxTensors = 128;

// An output the pass sends through a collective.
struct Output {
  size_t index = 0;            // among the graph's outputs
  ir::Value* value = nullptr;  // grad.P or next.X
  size_t first_use = 0;        // grad.P: position of the first node that reads P
};

int64_t bytes_of(const ir::Value* value) {
  return ir::num_elements(value->type.shape) * static_cast<int64_t>(ir::dtype_size(value->type.dtype));
}

class Rewriter {
 public:
  Rewriter(ir::Graph& graph, PassContext& context) : graph_(graph), context_(context) {
    for (size_t i = 0; i < graph.outputs.size(); ++i) names_.push_back(graph.output_name(i));
    renumber();
  }

  size_t position(const ir::Node* node) const { return position_.at(node); }

  // One `op` node over `group`'s values, right after the last of them is computed; the graph's
  // outputs become its results, which take the values' names (the values become NAME.local).
  // False when the fuel ran out.
  bool insert(ir::OpId op, ir::AttrMap attrs, const std::string& node_name,
              const std::vector<Output>& group, const std::string& what) {
    if (!context_.take_fuel(kPass, what)) return false;
    const ir::Node* last = nullptr;
    for (const Output& output : group) {
      const ir::Node* producer = output.value->producer;
      if (producer != nullptr && (last == nullptr || position(producer) > position(last)))
        last = producer;
    }
    std::vector<ir::Value*> inputs;
    std::vector<std::pair<std::string, ir::TensorType>> results;
    for (const Output& output : group) {
      inputs.push_back(output.value);
      // The result takes the name (grad.P, what append-optimizer reads, even from printed IR).
      // A value that is a parameter or an input keeps its name; its result is NAME.mean.
      std::string name = output.value->name;
      if (output.value->producer != nullptr)
        output.value->name = graph_.unique_name(name + ".local");
      else
        name = graph_.unique_name(name + ".mean");
      results.emplace_back(name, output.value->type);
    }
    // Right after `last`: before the node that follows it (or at the end).
    const ir::Node* before = nullptr;
    if (last == nullptr) {
      before = graph_.nodes().empty() ? nullptr : graph_.nodes().front().get();
    } else if (position(last) + 1 < graph_.nodes().size()) {
      before = graph_.nodes()[position(last) + 1].get();
    }
    ir::Node* node = before ? graph_.insert_node_before(before, op, node_name, inputs, attrs, results)
                            : graph_.add_node(op, node_name, inputs, attrs, results);
    for (size_t k = 0; k < group.size(); ++k) graph_.outputs[group[k].index] = node->results[k];
    renumber();
    changed_ = true;
    return true;
  }

  // The outputs keep their names on the new values.
  bool finish() {
    if (changed_) graph_.output_names = names_;
    return changed_;
  }
  const std::string& name(size_t index) const { return names_[index]; }

 private:
  void renumber() {
    position_.clear();
    for (const auto& node : graph_.nodes()) position_.emplace(node.get(), position_.size());
  }

  ir::Graph& graph_;
  PassContext& context_;
  std::vector<std::string> names_;
  std::map<const ir::Node*, size_t> position_;
  bool changed_ = false;
};

}  // namespace

bool DataParallel::run(ir::Graph& graph, PassContext& context) {
  context.check_options(kPass, {"bucket_mb"});
  const double bucket_mb = context.number_option(kPass, "bucket_mb", 25.0);
  if (!(bucket_mb > 0))
    throw Error("--passes", fmt::format("pass '{}': option 'bucket_mb' must be > 0, got {}",
                                        kPass, bucket_mb));
  const auto bucket_bytes = static_cast<int64_t>(bucket_mb * 1024 * 1024);

  Rewriter rewriter(graph, context);
  std::vector<Output> gradients, states;
  for (size_t i = 0; i < graph.outputs.size(); ++i) {
    const std::string& name = graph.output_name(i);
    ir::Value* value = graph.outputs[i];
    if (value->producer != nullptr && (value->producer->op == ir::OpId::AllReduce ||
                                       value->producer->op == ir::OpId::Broadcast)) {
      context.debug(kPass, "the graph already communicates; nothing to do");
      return false;
    }
    // State the step computes (not an input passed through): the root's on every rank.
    if (name.rfind(kNextPrefix, 0) == 0 && value->producer != nullptr) {
      states.push_back({i, value, 0});
      continue;
    }
    if (name.rfind(kGradPrefix, 0) != 0) continue;
    const ir::Value* param = graph.find_value(name.substr(kGradPrefix.size()));
    if (param == nullptr || param->role != ir::ValueRole::Parameter) continue;
    const std::vector<ir::Node*> users = graph.users(param);
    gradients.push_back({i, value, users.empty() ? 0 : rewriter.position(users.front())});
  }
  if (gradients.empty())
    throw Error("--passes", fmt::format("pass '{}': the graph has no gradient outputs "
                                        "grad.<parameter>; run autodiff first",
                                        kPass));
  // Reverse order of the forward pass; parameters first read by the same node keep their order.
  std::stable_sort(gradients.begin(), gradients.end(),
                   [](const Output& a, const Output& b) { return a.first_use > b.first_use; });

  // A bucket closes at bucket_mb, at kMaxTensors, or where the dtype changes (one transfer).
  std::vector<std::vector<Output>> buckets(1);
  int64_t bytes = 0;
  for (const Output& gradient : gradients) {
    if (!buckets.back().empty() &&
        (bytes >= bucket_bytes || buckets.back().size() == kMaxTensors ||
         buckets.back().back().value->type.dtype != gradient.value->type.dtype)) {
      buckets.emplace_back();
      bytes = 0;
    }
    buckets.back().push_back(gradient);
    bytes += bytes_of(gradient.value);
  }
  for (size_t b = 0; b < buckets.size(); ++b) {
    int64_t total = 0;
    for (const Output& gradient : buckets[b]) total += bytes_of(gradient.value);
    const std::string what = fmt::format("bucket {}: {} gradient(s), {} bytes, from {}", b,
                                         buckets[b].size(), total,
                                         rewriter.name(buckets[b].front().index));
    if (!rewriter.insert(ir::OpId::AllReduce, {{"bucket", static_cast<int64_t>(b)}},
                         fmt::format("all_reduce.bucket{}", b), buckets[b], what))
      return rewriter.finish();
  }
  for (size_t first = 0; first < states.size(); first += kMaxTensors) {
    const std::vector<Output> group(states.begin() + static_cast<std::ptrdiff_t>(first),
                                    states.begin() + static_cast<std::ptrdiff_t>(
                                                         std::min(states.size(), first + kMaxTensors)));
    int64_t total = 0;
    for (const Output& state : group) total += bytes_of(state.value);
    const std::string what = fmt::format("broadcast from rank 0: {} state tensor(s), {} bytes, "
                                         "from {}",
                                         group.size(), total, rewriter.name(group.front().index));
    if (!rewriter.insert(ir::OpId::Broadcast, {{"root", int64_t{0}}},
                         fmt::format("broadcast.state{}", first / kMaxTensors), group, what))
      break;
  }
  return rewriter.finish();
}

}  // namespace kiln::passes
