// fuse-attention-views: an attention's q, k and v are usually slices, reshapes and transposes
// of one QKV projection ([B, T, 3·H·Dh] -> three [B, H, T, Dh]), and its output goes back
// through a transpose and a reshape to [B, T, H·Dh]. Each of those is a kernel that copies its
// tensor. This pass makes the chains part of the attention's kernel (kind "attention",
// ir/kernel_region.h): the kernel reads q, k and v and writes its output through strided views
// (ir/strided_view.h) of the projection and of the final tensor, and nothing is copied.
//
// A chain is taken op by op while each value in it has the one reader (the next op), is not a
// graph output, and the composed view stays expressible by strides: a reshape must merge or
// split dims that are contiguous in the view, except batch dims, which may merge as a group
// (the batch and the heads of a sequence-first [T, B·H, Dh] split); rows and features keep one
// stride each. Training graphs keep their chains: the
// backward pass reads the same transposed q, k, v and output. Every refusal is logged under
// --debug-only=fuse-attention-views.
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <unordered_map>

#include "ir/kernel_region.h"
#include "ir/strided_view.h"
#include "passes/fusion_util.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

constexpr std::string_view kPass = "fuse-attention-views";

// The view ops that make `operand` from a kernel operand, outermost (the operand's producer)
// first; empty when there are none to take.
std::vector<ir::Node*> operand_chain(const ir::Graph& graph, const fusion::Users& users,
                                     const ir::Value* operand, PassContext& context) {
  std::vector<ir::Node*> chain;
  const ir::Value* value = operand;
  while (value->producer != nullptr && ir::is_view_op(value->producer->op) &&
         !value->producer->is_kernel()) {
    if (auto reason = fusion::stored_value_reason(graph, value, users.of(value).size())) {
      context.debug(kPass, fmt::format("not taking the producer of {}: {}", fusion::ref(value), *reason));
      break;
    }
    chain.push_back(value->producer);
    value = value->producer->inputs[0];
  }
  // The kernel reads the source of the longest run of the chain, from the attention's side,
  // that composes to a strided view of it; an op that does not cuts the run there.
  for (size_t length = chain.size(); length > 0; --length) {
    const std::vector<const ir::Node*> run(chain.rend() - static_cast<std::ptrdiff_t>(length), chain.rend());
    const std::optional<ir::StridedView> view = ir::view_through(chain[length - 1]->inputs[0], run);
    // The kernel walks rows and features by one stride each; the batch dims may be groups.
    if (view && view->plain_trailing(2)) {
      chain.resize(length);
      return chain;
    }
    context.debug(kPass, fmt::format("{} and the ops after it are not a strided view of {}",
                                     fusion::ref(*chain[length - 1]),
                                     fusion::ref(chain[length - 1]->inputs[0])));
  }
  chain.clear();
  return chain;
}

// The transposes and reshapes that the attention's output goes through to its one final
// value, in order, as far as the output stays a strided view of that value.
std::vector<ir::Node*> output_chain(const ir::Graph& graph, const fusion::Users& users,
                                    const ir::Value* out, PassContext& context) {
  std::vector<ir::Node*> chain;
  const ir::Value* value = out;
  while (!fusion::stored_value_reason(graph, value, users.of(value).size())) {
    ir::Node* user = users.of(value)[0];
    if (user->is_kernel() || (user->op != ir::OpId::Transpose && user->op != ir::OpId::Reshape &&
                              user->op != ir::OpId::Flatten))
      break;
    chain.push_back(user);
    value = user->results[0];
  }
  // The longest start of the chain that keeps the output a strided view of its final value.
  for (; !chain.empty(); chain.pop_back()) {
    const std::optional<ir::StridedView> view = ir::view_written_through(out, {chain.begin(), chain.end()});
    if (view && view->plain_trailing(2)) break;
    context.debug(kPass, fmt::format("{} does not keep the output a strided view",
                                     fusion::ref(*chain.back())));
  }
  return chain;
}

}  // namespace

bool FuseAttentionViews::run(ir::Graph& graph, PassContext& context) {
  const fusion::Users users(graph);
  std::unordered_map<const ir::Node*, size_t> position;  // make_kernels takes members in graph order
  for (const auto& node : graph.nodes()) position.emplace(node.get(), position.size());
  std::vector<ir::KernelGroup> groups;
  for (const auto& node : graph.nodes()) {
    if (node->op != ir::OpId::Attention || node->is_kernel()) continue;
    std::vector<ir::Node*> members;
    for (size_t i = 0; i < 3; ++i)
      for (ir::Node* op : operand_chain(graph, users, node->inputs[i], context))
        if (std::find(members.begin(), members.end(), op) == members.end()) members.push_back(op);
    members.push_back(node.get());
    for (ir::Node* op : output_chain(graph, users, node->results[0], context)) members.push_back(op);
    if (members.size() == 1) {
      context.debug(kPass, fmt::format("{}: no view to take", fusion::ref(*node)));
      continue;
    }
    if (!context.take_fuel(kPass, "take the views of " + fusion::ref(*node))) break;
    context.debug(kPass, fmt::format("{}: reads and writes through {} view ops", fusion::ref(*node),
                                     members.size() - 1));
    std::sort(members.begin(), members.end(),
              [&](const ir::Node* a, const ir::Node* b) { return position.at(a) < position.at(b); });
    groups.push_back({std::move(members), "attention", ir::kAttentionKernel});
  }
  if (groups.empty()) return false;
  ir::make_kernels(graph, groups);
  return true;
}

}  // namespace kiln::passes
