// fuse-conv-bias-relu: a conv2d, dense or matmul and the bias, residual add and activation
// after it become one kernel whose GEMM epilogue applies them in registers.
//
// From each GEMM node the pass follows its result forward while the next node is the value's
// only user and is one of: bias_add on the channel axis, an add of a per-channel vector, a
// scalar or a tensor of the result's shape (a ResNet residual), or an activation (relu,
// leaky_relu, sigmoid, tanh, gelu, clip). The chain ends at the first value that is stored
// anyway (a graph output, or read by two nodes) or whose consumer is none of those; each stop
// is logged with its reason under --debug-only=fuse-conv-bias-relu. A chain of at least two
// nodes becomes a kernel of kind "epilogue" (ir/kernel_region.h), named after its steps:
// conv2d_bias_relu, conv2d_bias_add_relu, dense_bias_gelu.
//
// The chain may also pass through reshapes and transposes of a dense's or row-matmul's result
// that keep its columns last at stride 1 (PyTorch's sequence-first [T·B, E] -> [T, B, E] ->
// [B, T, E] after an output projection): the kernel then stores through their view
// (ir::gemm_output_view), and the ops after them (the residual add) read the final layout.
//
// Casts that only the chain reads join it too (autocast's 16-bit copies of an image, a weight, a
// bias), unless their producer can store the 16-bit value itself: the kernel reads the f32
// tensor and rounds it as it loads. So does the expand_2_4 of a conv2d's or dense's 2:4 weight
// (sparsify-two-four): the GEMM reads the compressed weight on sparse tensor cores.
//
// Only the chain's last value leaves the kernel: every other value had one user, inside the
// chain, so no path leaves the group and comes back (the kernel cannot depend on itself).
// TensorRT and cuDNN fuse the same pattern (convolution + bias + activation, optionally + z).
#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

#include "ir/kernel_region.h"
#include "ir/strided_view.h"
#include "passes/fusion_util.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

constexpr std::string_view kPass = "fuse-conv-bias-relu";

// A transpose or reshape of the running value: the kernel writes its result through the view
// they compose (the store and the ops after them index the final layout).
bool is_output_view(const ir::Node& node) {
  return !node.is_kernel() && (node.op == ir::OpId::Transpose || ir::is_reshape_like(node.op));
}

// Why the epilogue cannot write through `view` after `chain`: the GEMM must be one matrix of
// rows by one B, and the composed view must keep its columns (the channels) last at stride 1,
// so that each result row is one run of the final tensor.
std::optional<std::string> output_view_refusal(const ir::Node& anchor, const std::vector<ir::Node*>& chain,
                                               const ir::Node& view) {
  if (!fusion::is_rows_gemm(anchor) || anchor.op == ir::OpId::Conv2d)
    return fusion::ref(anchor) + " is not a dense or a matmul of rows by one matrix";
  std::vector<const ir::Node*> views;
  for (const ir::Node* node : chain)
    if (is_output_view(*node)) views.push_back(node);
  views.push_back(&view);
  if (!ir::gemm_output_view(anchor.results[0], views))
    return ir::to_string(view.op) + " does not keep the GEMM's columns last at stride 1";
  return std::nullopt;
}

// The anchor and the consumers its epilogue takes, in order. `claimed`: the nodes of the chains
// found before this one, which become kernels.
std::vector<ir::Node*> epilogue_chain(const ir::Graph& graph, const fusion::Users& users,
                                      const std::unordered_map<const ir::Node*, std::string>& claimed,
                                      ir::Node& anchor, PassContext& context) {
  std::vector<ir::Node*> chain = {&anchor};
  const ir::Value* running = anchor.results[0];
  while (true) {
    const std::vector<ir::Node*>& readers = users.of(running);
    if (auto reason = fusion::stored_value_reason(graph, running, readers.size())) {
      context.debug(kPass, fmt::format("not fusing past {}: {}", fusion::ref(running), *reason));
      break;
    }
    ir::Node& consumer = *readers.front();
    std::optional<std::string> reason;
    if (auto kernel = claimed.find(&consumer); kernel != claimed.end())
      reason = "kernel '" + kernel->second + "' is already a fused kernel";
    else if (is_output_view(consumer))
      reason = output_view_refusal(anchor, chain, consumer);
    else
      reason = fusion::epilogue_refusal(anchor, running, consumer, true);
    if (reason) {
      context.debug(kPass, fmt::format("not fusing {} into {}: {}", fusion::ref(running),
                                       fusion::ref(consumer), *reason));
      break;
    }
    chain.push_back(&consumer);
    running = consumer.results[0];
  }
  // A view that nothing after it takes is still worth writing through (no transpose kernel);
  // a reshape alone at the end is fuse-elementwise's.
  while (chain.size() > 1 && ir::is_reshape_like(chain.back()->op) &&
         std::none_of(chain.begin() + 1, chain.end() - 1, [](const ir::Node* n) { return is_output_view(*n); }))
    chain.pop_back();
  return chain;
}

// Whether fuse-elementwise can join a cast of `producer`'s result into its kernel, which then
// stores the 16-bit value: elementwise ops and GEMM epilogues.
bool stores_casts(const ir::Node& producer) {
  if (producer.is_kernel()) {
    const std::string& kind = ir::kernel_kind(producer);
    return kind == ir::kLoopKernel || kind == ir::kEpilogueKernel;
  }
  const ir::OpKind kind = producer.def->kind;
  return kind == ir::OpKind::Elementwise || kind == ir::OpKind::Broadcast ||
         kind == ir::OpKind::OutElementwiseFusable;
}

// Casts between float types that only `chain` reads (autocast's f32 -> bf16 of an image, a
// weight, a bias, a pool's or a reshape's result): the kernel reads the f32 tensor and rounds as
// it loads, so the 16-bit copy is never stored and no kernel makes it. Not the casts an
// elementwise producer or a GEMM epilogue can store instead (fuse-elementwise): half the bytes.
std::vector<ir::Node*> operand_casts(const ir::Graph& graph, const fusion::Users& users,
                                     const std::unordered_map<const ir::Node*, std::string>& claimed,
                                     const std::vector<ir::Node*>& chain, PassContext& context) {
  std::vector<ir::Node*> casts;
  const auto in_chain = [&](const ir::Node* node) {
    return std::find(chain.begin(), chain.end(), node) != chain.end();
  };
  for (const ir::Node* node : chain)
    for (const ir::Value* input : node->inputs) {
      ir::Node* cast = input->producer;
      if (cast == nullptr || cast->is_kernel() || cast->op != ir::OpId::Cast || in_chain(cast) ||
          std::find(casts.begin(), casts.end(), cast) != casts.end())
        continue;
      const ir::Value* source = cast->inputs[0];
      std::optional<std::string> reason;
      if (!ir::is_floating(source->type.dtype) || !ir::is_floating(input->type.dtype))
        reason = "it is not a cast between float types";
      else if (const ir::Node* producer = source->producer; producer && stores_casts(*producer))
        reason = fusion::ref(*producer) + " can round it as it stores it (fuse-elementwise): half the bytes";
      else if (claimed.count(cast))
        reason = "kernel '" + claimed.at(cast) + "' already reads it";
      else if (graph.is_output(input) ||
               !std::all_of(users.of(input).begin(), users.of(input).end(), in_chain))
        reason = "its result is read outside the kernel";
      if (reason) {
        context.debug(kPass, fmt::format("not fusing {} into {}: {}", fusion::ref(*cast),
                                         fusion::ref(*chain.front()), *reason));
        continue;
      }
      casts.push_back(cast);
    }
  return casts;
}

// The expand_2_4 (sparsify-two-four) of the conv2d's or dense's weight, when only the chain
// reads it: the kernel's GEMM reads the kept values and positions themselves (sparse tensor
// cores), so the dense weight is never stored.
ir::Node* weight_expansion(const ir::Graph& graph, const fusion::Users& users,
                           const std::unordered_map<const ir::Node*, std::string>& claimed,
                           const std::vector<ir::Node*>& chain, PassContext& context) {
  const ir::Node& anchor = *chain.front();
  if (anchor.op != ir::OpId::Conv2d && anchor.op != ir::OpId::Dense) return nullptr;
  ir::Node* expand = anchor.inputs[1]->producer;
  if (expand == nullptr || expand->is_kernel() || expand->op != ir::OpId::ExpandTwoFour) return nullptr;
  std::optional<std::string> reason;
  if (claimed.count(expand))
    reason = "kernel '" + claimed.at(expand) + "' already reads it";
  else if (auto stored = fusion::stored_value_reason(graph, expand->results[0], users.of(expand->results[0]).size()))
    reason = *stored;
  if (reason) {
    context.debug(kPass, fmt::format("not fusing {} into {}: {}", fusion::ref(*expand), fusion::ref(anchor), *reason));
    return nullptr;
  }
  return expand;
}

std::string kernel_name(const std::vector<ir::Node*>& chain) {
  const ir::Node& anchor = *chain.front();
  std::string name = ir::to_string(anchor.op) + (anchor.inputs.size() > 2 ? "_bias" : "");
  const ir::Value* running = anchor.results[0];
  for (size_t i = 1; i < chain.size(); ++i) {
    name += "_" + fusion::epilogue_step_name(anchor, running, *chain[i]);
    running = chain[i]->results[0];
  }
  return name;
}

std::string describe_chain(const std::vector<ir::Node*>& chain) {
  std::string text;
  for (const ir::Node* node : chain) text += (text.empty() ? "" : ", ") + node->describe();
  return text;
}

}  // namespace

bool FuseConvBiasRelu::run(ir::Graph& graph, PassContext& context) {
  // Every chain is found on the graph as it is, then all become kernels in one sweep
  // (ir::make_kernels): a node a chain takes is off limits to the chains after it, which is
  // what they would see had each been fused as found.
  const fusion::Users users(graph);
  std::vector<ir::Node*> anchors;
  for (const auto& node : graph.nodes())
    if (fusion::is_gemm(*node)) anchors.push_back(node.get());

  std::vector<ir::KernelGroup> groups;
  std::unordered_map<const ir::Node*, std::string> claimed;  // node -> the kernel it joins
  for (ir::Node* anchor : anchors) {
    std::vector<ir::Node*> chain = epilogue_chain(graph, users, claimed, *anchor, context);
    std::vector<ir::Node*> casts = operand_casts(graph, users, claimed, chain, context);
    if (ir::Node* expand = weight_expansion(graph, users, claimed, chain, context)) casts.push_back(expand);
    if (chain.size() + casts.size() < 2) continue;
    std::string name = kernel_name(chain);
    chain.insert(chain.begin(), casts.begin(), casts.end());
    const std::string what = fmt::format("fuse {} into kernel {}", describe_chain(chain), name);
    if (!context.take_fuel(kPass, what)) break;
    for (const ir::Node* node : chain) claimed.emplace(node, name);
    groups.push_back({std::move(chain), std::move(name), ir::kEpilogueKernel});
  }
  ir::make_kernels(graph, groups);
  return !groups.empty();
}

}  // namespace kiln::passes
