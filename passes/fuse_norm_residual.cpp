// fuse-norm-residual: a layer_norm or rms_norm over the last axis that a GEMM epilogue reads as
// its residual is recomputed there instead of stored: the epilogue kernel computes the
// statistics of its rows of the norm's input before its K loop, and normalizes each residual
// element as it adds it (codegen/kernels/fused.cpp).
//
// Why: a post-norm transformer block (nn.TransformerEncoderLayer's default, BERT) ends each
// half in norm(x + f(x)), and that norm is read twice: as the rows of the next GEMM and as the
// residual of the GEMM after it. Stored, it costs a kernel of its own per norm, seven kernels
// per layer. With each reader normalizing for itself (this pass takes the residual reader,
// fuse-norm-prologue, after it, the GEMM that reads the rows) the norm is never stored, and
// the block is the five kernels of a pre-norm one.
//
// A norm is taken when it normalizes the last axis alone, in f32, and is no graph output;
// every reader but at most one is an epilogue kernel of a rows GEMM (a dense, or a matmul of
// rows by one matrix) that reads it once, as a residual of the result's shape, with the
// GEMM's columns as the normalized axis; and that one other reader, if any, is a GEMM that
// fuse-norm-prologue will take it into (norm_prologue_refusal). Otherwise the norm is stored
// for someone anyway, and recomputing it would only read its input again. Each epilogue gets
// a copy of the norm in its body; the original stays for the GEMM that reads the rows, or goes.
// Refusals are logged under --debug-only=fuse-norm-residual.
#include <fmt/format.h>

#include <unordered_map>
#include <unordered_set>
#include <variant>

#include "ir/kernel_region.h"
#include "ir/strided_view.h"
#include "passes/fusion_util.h"
#include "passes/pass.h"
#include "passes/rewrite_util.h"

namespace kiln::passes {
namespace {

constexpr std::string_view kPass = "fuse-norm-residual";

bool is_norm(const ir::Node& node) {
  return node.op == ir::OpId::LayerNorm || node.op == ir::OpId::RmsNorm;
}

// Why the epilogue kernel `reader` cannot recompute `y` (the norm's result) as its residual;
// nullopt when it can.
std::optional<std::string> residual_refusal(const ir::Node& reader, const ir::Value* y) {
  if (!reader.is_kernel() || ir::kernel_kind(reader) != ir::kEpilogueKernel)
    return fusion::ref(reader) + " is no GEMM epilogue kernel";
  if (auto reason = fusion::compressed_weight_refusal(reader)) return reason;
  const ir::Node* gemm = fusion::rows_gemm_of(reader);
  if (!gemm) return fusion::ref(reader) + " does not compute a dense or a matmul of rows by one matrix";
  if (fusion::is_split_k(*gemm)) return fusion::ref(*gemm) + " computes split-K partial sums";
  const ir::Graph& body = *reader.body;
  const ir::Value* operand = nullptr;
  for (size_t i = 0; i < reader.inputs.size(); ++i)
    if (reader.inputs[i] == y) operand = body.inputs[i];
  std::vector<const ir::Node*> body_readers;
  for (const auto& node : body.nodes())
    for (const ir::Value* input : node->inputs)
      if (input == operand) {
        body_readers.push_back(node.get());
        break;
      }
  if (body_readers.size() != 1) return fusion::ref(reader) + " reads it more than once";
  const ir::Node& add = *body_readers.front();
  if (&add == gemm || ir::is_view_op(add.op) || is_norm(add) || add.results[0]->type.shape != y->type.shape)
    return fusion::ref(reader) + " reads it otherwise than as a residual of its result's shape";
  // Before and after the epilogue's views alike, a row of the result is a row of the GEMM:
  // the views keep its columns last (fuse-conv-bias-relu).
  if (y->type.shape.back() != gemm->results[0]->type.shape.back())
    return fusion::ref(reader) + "'s GEMM columns are not the normalized axis";
  return std::nullopt;
}

// The epilogue kernels to recompute `norm` in, or why none: see the file comment.
std::variant<std::vector<ir::Node*>, std::string> residual_readers(const ir::Graph& graph,
                                                                   const fusion::Users& users,
                                                                   const ir::Node& norm) {
  const ir::Value* y = norm.results[0];
  if (graph.is_output(y)) return fusion::ref(y) + " is a graph output, so it is stored";
  if (auto reason = fusion::recomputed_norm_refusal(norm)) return *reason;
  std::vector<ir::Node*> residual;
  std::vector<std::pair<const ir::Node*, std::string>> others;  // reader, why not as residual
  for (ir::Node* reader : users.of(y)) {
    if (auto reason = residual_refusal(*reader, y))
      others.push_back({reader, *reason});
    else
      residual.push_back(reader);
  }
  if (residual.empty())
    return others.empty() ? std::string("nothing reads it")
                          : "no reader takes it as an epilogue's residual (" + others.front().second + ")";
  if (others.size() > 1)
    return fmt::format("{} other readers read it stored ({})", others.size(), others.front().second);
  if (others.size() == 1) {
    if (auto reason = fusion::norm_prologue_refusal(norm, *others.front().first))
      return fmt::format("its other reader reads it stored: {} ({})", others.front().second, *reason);
  }
  return residual;
}

}  // namespace

bool FuseNormResidual::run(ir::Graph& graph, PassContext& context) {
  const fusion::Users users(graph);
  // reader kernel -> the copies of norms it recomputes
  std::unordered_map<ir::Node*, std::vector<ir::Node*>> copies;
  std::vector<ir::Node*> readers_in_order;
  std::vector<ir::Node*> norms;
  for (const auto& node : graph.nodes())
    if (is_norm(*node)) norms.push_back(node.get());
  NameTable names(graph);
  std::unordered_set<const ir::Node*> recomputed;
  for (ir::Node* norm : norms) {
    auto readers = residual_readers(graph, users, *norm);
    if (auto* reason = std::get_if<std::string>(&readers)) {
      context.debug(kPass, fmt::format("not recomputing {} in its readers: {}", fusion::ref(*norm), *reason));
      continue;
    }
    ir::Value* y = norm->results[0];
    for (ir::Node* reader : std::get<std::vector<ir::Node*>>(readers)) {
      if (!context.take_fuel(kPass, fmt::format("recomputing {} in {}, which reads it as a residual",
                                                fusion::ref(*norm), fusion::ref(*reader))))
        break;
      ir::Node* copy = graph.insert_node_before(
          reader, norm->op, norm->name, norm->inputs, norm->attrs,
          {{names.take(y->name + ".recomputed"), y->type}}, norm->loc);
      for (ir::Value*& input : reader->inputs)
        if (input == y) input = copy->results[0];
      if (copies[reader].empty()) readers_in_order.push_back(reader);
      copies[reader].push_back(copy);
      recomputed.insert(norm);
    }
  }
  if (readers_in_order.empty()) return false;
  std::vector<ir::KernelGroup> groups;
  for (ir::Node* reader : readers_in_order) {
    std::vector<ir::Node*> members = copies[reader];
    members.push_back(reader);
    groups.push_back({members, std::string(ir::to_string(members.front()->op)) + "_" + reader->name,
                      ir::kEpilogueKernel});
  }
  ir::make_kernels(graph, groups);
  // A norm whose readers all recompute it is left unread.
  const fusion::Users readers_now(graph);
  graph.erase_nodes([&](const ir::Node& node) {
    return recomputed.count(&node) > 0 && readers_now.of(node.results[0]).empty();
  });
  return true;
}

}  // namespace kiln::passes
