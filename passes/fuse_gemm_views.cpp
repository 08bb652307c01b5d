// fuse-gemm-views: a GEMM whose rows come out of transposes, reshapes and slices of another
// value reads them through their strided view (ir/strided_view.h) instead of a kernel copying
// them first. PyTorch 1.13 exports nn.MultiheadAttention sequence-first, so every encoder
// layer of ViT and nn.TransformerEncoder transposes [B, T, E] to [T, B, E] before its QKV
// projection: that transpose joins the projection's kernel, and (fuse-norm-prologue, after
// this pass) so does the layer norm before it.
//
// The GEMM must read its A operand as rows [M, K] with one B for all of them (a dense, or a
// matmul of rows by one matrix), in a kernel of kind epilogue or alone; the view must keep K
// at stride 1 (the GEMM stages tiles along k); the rows may be any strided group. A chain is
// taken from the GEMM outwards while each value has that one reader and is not a graph
// output; the longest run that stays such a view is taken. Refusals are logged under
// --debug-only=fuse-gemm-views.
#include <fmt/format.h>

#include <algorithm>

#include "ir/kernel_region.h"
#include "ir/strided_view.h"
#include "passes/fusion_util.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

constexpr std::string_view kPass = "fuse-gemm-views";

// The value `consumer` reads as its GEMM's rows, when it is such a GEMM or an epilogue kernel
// whose body starts with one reading a kernel operand; nullptr otherwise.
const ir::Value* rows_operand(const ir::Node& consumer) {
  if (!consumer.is_kernel()) return fusion::is_rows_gemm(consumer) ? consumer.inputs[0] : nullptr;
  if (ir::kernel_kind(consumer) != ir::kEpilogueKernel) return nullptr;
  const ir::Node& anchor = *consumer.body->nodes().front();
  if (!fusion::is_rows_gemm(anchor)) return nullptr;
  const auto& body_inputs = consumer.body->inputs;
  for (size_t i = 0; i < body_inputs.size(); ++i)
    if (body_inputs[i] == anchor.inputs[0]) {
      // A value read as the rows and as another operand too must stay stored.
      for (size_t j = 0; j < body_inputs.size(); ++j)
        if (j != i && consumer.inputs[j] == consumer.inputs[i]) return nullptr;
      return consumer.inputs[i];
    }
  return nullptr;
}

// The view ops to take before `consumer`, nearest the GEMM first; empty when none.
std::vector<ir::Node*> row_chain(const ir::Graph& graph, const fusion::Users& users, const ir::Node& consumer,
                                 const ir::Value* rows, PassContext& context) {
  std::vector<ir::Node*> chain;
  for (const ir::Value* value = rows; value->producer != nullptr && ir::is_view_op(value->producer->op) &&
                                      !value->producer->is_kernel();
       value = value->producer->inputs[0]) {
    if (auto reason = fusion::stored_value_reason(graph, value, users.of(value).size())) {
      context.debug(kPass, fmt::format("not taking the producer of {}: {}", fusion::ref(value), *reason));
      break;
    }
    chain.push_back(value->producer);
  }
  for (size_t length = chain.size(); length > 0; --length) {
    const std::vector<const ir::Node*> run(chain.rend() - static_cast<std::ptrdiff_t>(length), chain.rend());
    if (ir::gemm_rows_view(chain[length - 1]->inputs[0], run, false)) {
      chain.resize(length);
      return chain;
    }
    context.debug(kPass, fmt::format("{} and the ops after it do not give {} its rows as a strided view "
                                     "with k at stride 1",
                                     fusion::ref(*chain[length - 1]), fusion::ref(consumer)));
  }
  return {};
}

}  // namespace

bool FuseGemmViews::run(ir::Graph& graph, PassContext& context) {
  const fusion::Users users(graph);
  std::vector<ir::KernelGroup> groups;
  for (const auto& node : graph.nodes()) {
    const ir::Value* rows = rows_operand(*node);
    if (rows == nullptr) {
      const bool viewed = std::any_of(node->inputs.begin(), node->inputs.end(), [](const ir::Value* input) {
        return input->producer != nullptr && ir::is_view_op(input->producer->op);
      });
      if (auto reason = fusion::compressed_weight_refusal(*node); reason && viewed) context.debug(kPass, *reason);
      continue;
    }
    if (const ir::Node* gemm = fusion::rows_gemm_of(*node); gemm != nullptr && fusion::is_split_k(*gemm)) {
      context.debug(kPass, fmt::format("{}: it computes split-K partial sums; its rows stay stored",
                                       fusion::ref(*node)));
      continue;
    }
    std::vector<ir::Node*> chain = row_chain(graph, users, *node, rows, context);
    if (chain.empty()) continue;
    // Reshapes alone move nothing: fuse-elementwise folds them into their producer, and a GEMM
    // without views keeps its vendor library call (--library).
    if (std::all_of(chain.begin(), chain.end(), [](const ir::Node* op) { return ir::is_reshape_like(op->op); })) {
      context.debug(kPass, fmt::format("{}: its rows are only reshaped, which copies nothing", fusion::ref(*node)));
      continue;
    }
    if (!context.take_fuel(kPass, "read the rows of " + fusion::ref(*node) + " through views")) break;
    context.debug(kPass, fmt::format("{} reads its rows through {} view op(s)", fusion::ref(*node), chain.size()));
    std::vector<ir::Node*> members(chain.rbegin(), chain.rend());
    members.push_back(node.get());
    std::string name = std::string(ir::to_string(chain.back()->op)) + "_" +
                       (node->is_kernel() ? node->name : std::string(ir::to_string(node->op)));
    groups.push_back({std::move(members), std::move(name), ir::kEpilogueKernel});
  }
  if (groups.empty()) return false;
  ir::make_kernels(graph, groups);
  return true;
}

}  // namespace kiln::passes
