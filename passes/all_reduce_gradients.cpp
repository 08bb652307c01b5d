// all-reduce-gradients: the communication of data-parallel training, as ops of the graph.
//
// Input: a graph whose outputs include grad.P for parameters P (autodiff's product), before
// append-optimizer. Output: the same outputs, each grad.P now the result of an all_reduce node
// (ir/ops.def: the mean over the ranks), so that the optimizer step that append-optimizer
// appends updates every rank's parameters with the same averaged gradients.
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

constexpr std::string_view kPass = "all-reduce-gradients";
constexpr std::string_view kGradPrefix = "grad.";
// A bucket's kernel takes two pointers per gradient (the one-process copy): 128 keep its
// parameters within the 4,096 bytes every CUDA driver accepts.
constexpr size_t kMaxTensors = 128;

struct Gradient {
  size_t output = 0;           // index among the graph's outputs
  ir::Value* value = nullptr;  // grad.P
  size_t first_use = 0;        // position of the first node that reads P (the forward pass)
};

}  // namespace

bool AllReduceGradients::run(ir::Graph& graph, PassContext& context) {
  context.check_options(kPass, {"bucket_mb"});
  const double bucket_mb = context.number_option(kPass, "bucket_mb", 25.0);
  if (!(bucket_mb > 0))
    throw Error("--passes", fmt::format("pass '{}': option 'bucket_mb' must be > 0, got {}",
                                        kPass, bucket_mb));
  const auto bucket_bytes = static_cast<int64_t>(bucket_mb * 1024 * 1024);

  std::map<const ir::Node*, size_t> position;
  for (const auto& node : graph.nodes()) position.emplace(node.get(), position.size());
  std::vector<Gradient> gradients;
  for (size_t i = 0; i < graph.outputs.size(); ++i) {
    const std::string& name = graph.output_name(i);
    if (name.rfind(kGradPrefix, 0) != 0) continue;
    const ir::Value* param = graph.find_value(name.substr(kGradPrefix.size()));
    if (param == nullptr || param->role != ir::ValueRole::Parameter) continue;
    ir::Value* grad = graph.outputs[i];
    if (grad->producer != nullptr && grad->producer->op == ir::OpId::AllReduce) {
      context.debug(kPass, "the gradients are already all-reduced; nothing to do");
      return false;
    }
    const std::vector<ir::Node*> users = graph.users(param);
    gradients.push_back({i, grad, users.empty() ? 0 : position.at(users.front())});
  }
  if (gradients.empty())
    throw Error("--passes", fmt::format("pass '{}': the graph has no gradient outputs "
                                        "grad.<parameter>; run autodiff first",
                                        kPass));
  // Reverse order of the forward pass; parameters first read by the same node keep their order.
  std::stable_sort(gradients.begin(), gradients.end(),
                   [](const Gradient& a, const Gradient& b) { return a.first_use > b.first_use; });

  std::vector<std::vector<Gradient>> buckets(1);
  int64_t bytes = 0;
  for (const Gradient& gradient : gradients) {
    // A bucket is one transfer of one dtype.
    if (!buckets.back().empty() &&
        (bytes >= bucket_bytes || buckets.back().size() == kMaxTensors ||
         buckets.back().back().value->type.dtype != gradient.value->type.dtype)) {
      buckets.emplace_back();
      bytes = 0;
    }
    buckets.back().push_back(gradient);
    bytes += ir::num_elements(gradient.value->type.shape) *
             static_cast<int64_t>(ir::dtype_size(gradient.value->type.dtype));
  }

  // The outputs keep their names (grad.P, which append-optimizer reads) on the new values.
  std::vector<std::string> names;
  for (size_t i = 0; i < graph.outputs.size(); ++i) names.push_back(graph.output_name(i));
  bool changed = false;
  for (size_t b = 0; b < buckets.size(); ++b) {
    const std::vector<Gradient>& bucket = buckets[b];
    int64_t bucket_total = 0;
    const ir::Node* last = nullptr;  // the producer of the bucket's last gradient
    for (const Gradient& gradient : bucket) {
      bucket_total += ir::num_elements(gradient.value->type.shape) *
                      static_cast<int64_t>(ir::dtype_size(gradient.value->type.dtype));
      const ir::Node* producer = gradient.value->producer;
      if (producer != nullptr && (last == nullptr || position.at(producer) > position.at(last)))
        last = producer;
    }
    const std::string what = fmt::format("bucket {}: {} gradient(s), {} bytes, from {}", b,
                                         bucket.size(), bucket_total, names[bucket.front().output]);
    if (!context.take_fuel(kPass, what)) break;
    std::vector<ir::Value*> inputs;
    std::vector<std::pair<std::string, ir::TensorType>> results;
    for (const Gradient& gradient : bucket) {
      inputs.push_back(gradient.value);
      // The mean takes the gradient's name (grad.P, what append-optimizer reads, even from
      // printed IR); this rank's own gradient becomes grad.P.local. (A gradient that is a
      // parameter or an input keeps its name; its mean is grad.P.mean.)
      std::string name = gradient.value->name;
      if (gradient.value->producer != nullptr)
        gradient.value->name = graph.unique_name(name + ".local");
      else
        name = graph.unique_name(name + ".mean");
      results.emplace_back(name, gradient.value->type);
    }
    // Right after `last`: before the node that follows it (or at the end).
    const ir::Node* before = nullptr;
    if (last == nullptr) {
      before = graph.nodes().empty() ? nullptr : graph.nodes().front().get();
    } else {
      const size_t next = position.at(last) + 1;
      if (next < graph.nodes().size()) before = graph.nodes()[next].get();
    }
    const ir::AttrMap attrs = {{"bucket", static_cast<int64_t>(b)}};
    const std::string name = fmt::format("all_reduce.bucket{}", b);
    ir::Node* node = before ? graph.insert_node_before(before, ir::OpId::AllReduce, name, inputs,
                                                       attrs, results)
                            : graph.add_node(ir::OpId::AllReduce, name, inputs, attrs, results);
    for (size_t k = 0; k < bucket.size(); ++k) graph.outputs[bucket[k].output] = node->results[k];
    // Positions after the insertion moved by one.
    position.clear();
    for (const auto& n : graph.nodes()) position.emplace(n.get(), position.size());
    changed = true;
  }
  if (changed) graph.output_names = names;
  return changed;
}

}  // namespace kiln::passes
