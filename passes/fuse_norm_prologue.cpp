// fuse-norm-prologue: a layer_norm or rms_norm over the last axis whose one reader is a dense,
// or a matmul of rows by one matrix (plain, or the anchor of an epilogue kernel), joins that
// GEMM's kernel as a prologue: the
// GEMM computes each row's statistics before its K loop and normalizes A as it stages the
// tiles (codegen/kernels/fused.cpp), so the normalized rows are never stored. With it a
// pre-norm transformer block (GPT-2, ViT) is five kernels: norm + QKV projection, attention,
// output projection + residual, norm + MLP up + GELU, MLP down + residual.
//
// The norm must normalize exactly the dense's K axis (axis -1), in f32, and its result must
// have no other reader and not be a graph output. Each refusal is logged under
// --debug-only=fuse-norm-prologue.
#include <fmt/format.h>

#include "ir/kernel_region.h"
#include "ir/strided_view.h"
#include "passes/fusion_util.h"
#include "passes/pass.h"

namespace kiln::passes {
namespace {

constexpr std::string_view kPass = "fuse-norm-prologue";

// The GEMM that `consumer` computes first: the node itself, or an epilogue kernel's anchor.
const ir::Node* dense_of(const ir::Node& consumer) {
  if (!consumer.is_kernel()) return fusion::is_rows_gemm(consumer) ? &consumer : nullptr;
  if (ir::kernel_kind(consumer) != ir::kEpilogueKernel) return nullptr;
  // After the view ops the GEMM reads its rows through (fuse-gemm-views), if any.
  for (const auto& node : consumer.body->nodes()) {
    if (ir::is_view_op(node->op)) continue;
    return fusion::is_rows_gemm(*node) ? node.get() : nullptr;
  }
  return nullptr;
}

// Why `norm` cannot be `consumer`'s prologue; nullopt when it can.
std::optional<std::string> refusal(const ir::Graph& graph, const fusion::Users& users,
                                   const ir::Node& norm) {
  const ir::Value* y = norm.results[0];
  if (auto reason = fusion::stored_value_reason(graph, y, users.of(y).size())) return reason;
  const int64_t rank = y->type.rank();
  const int64_t axis = std::get<int64_t>(norm.attrs.at("axis"));
  if (axis != -1 && axis != rank - 1)
    return fmt::format("it normalizes from axis {}, not the last axis alone", axis);
  for (const ir::Value* operand : norm.inputs)
    if (operand->type.dtype != ir::DType::F32) return "it is not f32";
  const ir::Node& consumer = *users.of(y).front();
  const ir::Node* dense = dense_of(consumer);
  if (!dense)
    return fusion::ref(consumer) + " is not a dense or a matmul of rows by one matrix (or such a GEMM's epilogue kernel)";
  // Inside an epilogue kernel the dense reads the body input that stands for y, or reads it
  // through view ops (fuse-gemm-views) that keep each row of A one whole row of y: a row-wise
  // norm then commutes with them.
  const ir::Value* x = dense->inputs[0];
  if (consumer.is_kernel()) {
    std::vector<const ir::Node*> views;
    while (x->producer != nullptr && ir::is_view_op(x->producer->op)) {
      views.insert(views.begin(), x->producer);
      x = x->producer->inputs[0];
    }
    if (!views.empty() && !ir::gemm_rows_view(x, views, true))
      return fusion::ref(consumer) + " reads it through views whose rows are not whole rows of it";
    const auto& body_inputs = consumer.body->inputs;
    for (size_t i = 0; i < body_inputs.size(); ++i)
      if (consumer.inputs[i] == y && body_inputs[i] != x)
        return fusion::ref(consumer) + " reads it as another operand than the dense's rows";
    bool rows = false;
    for (size_t i = 0; i < body_inputs.size(); ++i) rows |= body_inputs[i] == x && consumer.inputs[i] == y;
    if (!rows) return fusion::ref(consumer) + " reads it as another operand than the dense's rows";
  } else if (x != y || dense->inputs[1] == y || (dense->inputs.size() > 2 && dense->inputs[2] == y)) {
    return fusion::ref(consumer) + " reads it as another operand than the dense's rows";
  }
  if (dense->inputs[0]->type.dtype != ir::DType::F32) return "the GEMM is not f32";
  return std::nullopt;
}

}  // namespace

bool FuseNormPrologue::run(ir::Graph& graph, PassContext& context) {
  const fusion::Users users(graph);
  std::vector<ir::KernelGroup> groups;
  for (const auto& node : graph.nodes()) {
    if (node->op != ir::OpId::LayerNorm && node->op != ir::OpId::RmsNorm) continue;
    if (auto reason = refusal(graph, users, *node)) {
      context.debug(kPass, fmt::format("not fusing {} into its reader: {}", fusion::ref(*node), *reason));
      continue;
    }
    ir::Node* consumer = users.of(node->results[0]).front();
    if (!context.take_fuel(kPass, "fuse " + fusion::ref(*node) + " into " + fusion::ref(*consumer))) break;
    context.debug(kPass, fmt::format("fused {} into {} as its prologue", fusion::ref(*node),
                                     fusion::ref(*consumer)));
    const std::string name = std::string(ir::to_string(node->op)) + "_" +
                             (consumer->is_kernel() ? consumer->name : std::string(ir::to_string(consumer->op)));
    groups.push_back({{node.get(), consumer}, name, ir::kEpilogueKernel});
  }
  if (groups.empty()) return false;
  ir::make_kernels(graph, groups);
  return true;
}

}  // namespace kiln::passes
