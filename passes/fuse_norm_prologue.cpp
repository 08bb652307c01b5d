// fuse-norm-prologue: a layer_norm or rms_norm over the last axis whose one reader is a dense,
// or a matmul of rows by one matrix (plain, or the anchor of an epilogue kernel), joins that
// GEMM's kernel as a prologue: the
// GEMM computes each row's statistics before its K loop and normalizes A as it stages the
// tiles (codegen/kernels/fused.cpp), so the normalized rows are never stored. With it a
// pre-norm transformer block (GPT-2, ViT) is five kernels: norm + QKV projection, attention,
// output projection + residual, norm + MLP up + GELU, MLP down + residual.
//
// The norm must normalize exactly the dense's K axis (axis -1), in f32, and its result must
// have no other reader and not be a graph output. A cast to bf16 or f16 between the two
// (autocast's: the norm stays f32, the dense runs in 16 bits) joins as well: the prologue rounds
// the rows it normalizes. Each refusal is logged under
// --debug-only=fuse-norm-prologue.
#include <fmt/format.h>

#include "ir/kernel_region.h"
#include "ir/strided_view.h"
#include "passes/fusion_util.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

constexpr std::string_view kPass = "fuse-norm-prologue";

// The cast between `norm` and the GEMM that reads it, when autocast put one there (its only
// reader, a cast to bf16 or f16 read by one node): the prologue rounds the rows it normalizes.
ir::Node* rows_cast(const ir::Graph& graph, const fusion::Users& users, const ir::Node& norm) {
  const ir::Value* y = norm.results[0];
  if (fusion::stored_value_reason(graph, y, users.of(y).size())) return nullptr;
  ir::Node* cast = users.of(y).front();
  if (cast->is_kernel() || cast->op != ir::OpId::Cast) return nullptr;
  const ir::DType to = cast->results[0]->type.dtype;
  if (to != ir::DType::BF16 && to != ir::DType::F16) return nullptr;
  return cast;
}

// Why `norm` (through `cast`, if any) cannot be its reader's prologue; nullopt when it can.
std::optional<std::string> refusal(const ir::Graph& graph, const fusion::Users& users,
                                   const ir::Node& norm, const ir::Node* cast) {
  const ir::Value* y = cast ? cast->results[0] : norm.results[0];
  if (auto reason = fusion::stored_value_reason(graph, y, users.of(y).size())) return reason;
  return fusion::norm_prologue_refusal(norm, *users.of(y).front(), cast ? y : nullptr);
}

}  // namespace

bool FuseNormPrologue::run(ir::Graph& graph, PassContext& context) {
  const fusion::Users users(graph);
  std::vector<ir::KernelGroup> groups;
  for (const auto& node : graph.nodes()) {
    if (node->op != ir::OpId::LayerNorm && node->op != ir::OpId::RmsNorm) continue;
    ir::Node* cast = rows_cast(graph, users, *node);
    if (auto reason = refusal(graph, users, *node, cast)) {
      context.debug(kPass, fmt::format("not fusing {} into its reader: {}", fusion::ref(*node), *reason));
      continue;
    }
    ir::Node* consumer = users.of((cast ? cast : node.get())->results[0]).front();
    if (!context.take_fuel(kPass, "fuse " + fusion::ref(*node) + " into " + fusion::ref(*consumer))) break;
    context.debug(kPass, fmt::format("fused {}{} into {} as its prologue", fusion::ref(*node),
                                     cast ? " and its " + fusion::ref(*cast) : "", fusion::ref(*consumer)));
    const std::string name = std::string(ir::to_string(node->op)) + "_" +
                             (consumer->is_kernel() ? consumer->name : std::string(ir::to_string(consumer->op)));
    std::vector<ir::Node*> members = {node.get()};
    if (cast) members.push_back(cast);
    members.push_back(consumer);
    groups.push_back({std::move(members), name, ir::kEpilogueKernel});
  }
  if (groups.empty()) return false;
  ir::make_kernels(graph, groups);
  return true;
}

}  // namespace kiln::passes
