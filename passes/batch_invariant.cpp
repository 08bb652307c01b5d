// batch-invariant: every sum over the batch of a training step is computed per sample and the
// samples' sums are added in one fixed tree, so that a gradient's bits do not depend on how the
// batch is cut: one process over a batch of 16 and two ranks over 8 each (the ranks' sums then
// added the same way, runtime/distributed/) compute the same numbers.
//
// A GEMM or reduction over the batch normally folds sample after sample into one accumulator,
// and a rank folds only its own samples before the ranks' sums are added: another order, other
// last bits (docs/distributed.md). Here each such node is cut at the sample boundaries, which
// are the same in every cut of the batch, and pairwise_sum (ir/ops.def, ir/pairwise_sum.h) adds
// the per-sample partials in a tree whose aligned power-of-two blocks are subtrees:
//
//   %grad.w = conv2d_grad_weight(%dy, %x) {shape = [64,32,3,3]} : f32[64,32,3,3]   (N = 16)
// becomes
//   %grad.w.samples = conv2d_grad_weight(%dy, %x) {k_chunk = 121, shape = [64,32,3,3]}
//       : f32[16,64,32,3,3]                                    (k_chunk = OH x OW: one sample)
//   %grad.w = pairwise_sum(%grad.w.samples) : f32[64,32,3,3]
//
// and likewise a matmul with transpose_a over K = N x T rows (dense's weight gradient: k_chunk
// T), and a reduce_sum over the batch axis (a bias gradient: a reduce_sum over the other axes
// keeps one partial per sample, then pairwise_sum; rows N x T are first viewed as [N, T, ...]).
// The batch N is the leading dim of the graph's inputs (the training step's data); rows are taken
// to be batch-major (sample after sample), as kiln lays out a dense layer's flattened rows. A
// sequence-first layout would still sum correctly, in chunks that do not follow the samples.
//
// The cost: one partial result per sample (N times a weight's size, in the arena) and GEMMs of
// one sample's K each. Only what makes bits depend on the cut is rewritten; the training
// pipeline with this pass leaves out split-k, split-batch-norm and split-reductions, whose
// chunks are chosen from sizes that grow with the batch.
//
// Refusals, logged under --debug-only=batch-invariant: inputs without a common batch dim (the
// whole pass), a node whose rows are not a multiple of the batch, a non-float sum, a node
// already split; and the sums over the batch that stay inside a kernel with their own order
// (batch-norm statistics, layer/RMS-norm scale gradients, embedding gradients, the loss value).
#include <fmt/format.h>

#include <unordered_set>

#include "passes/pass.h"
#include "passes/rewrite_util.h"

namespace kiln::passes {
namespace {

constexpr std::string_view kPass = "batch-invariant";

// The batch: the leading dim shared by every input of rank >= 1; 0 when there is none.
int64_t batch_of(const ir::Graph& graph, std::string& why) {
  int64_t batch = 0;
  for (const ir::Value* input : graph.inputs) {
    if (input->type.rank() == 0) continue;
    const int64_t n = input->type.shape[0];
    if (batch != 0 && n != batch) {
      why = fmt::format("the inputs disagree on the batch (leading dims {} and {})", batch, n);
      return 0;
    }
    batch = n;
  }
  if (batch <= 0) why = "no input has a batch dim";
  return batch;
}

// Why `node` keeps its order although it sums over the batch; empty when it does not.
std::string kept_order(const ir::Node& node) {
  switch (node.op) {
    case ir::OpId::BatchNormTrain: case ir::OpId::BatchNormTrainGrad:
    case ir::OpId::BatchNormChunkStats: case ir::OpId::BatchNormChunkSums:
      return "batch statistics are each cut's own (no cut of the batch gives the same ones)";
    case ir::OpId::LayerNormGrad: case ir::OpId::RmsNormGrad:
      return "its scale and bias gradients are summed over the rows inside its kernel";
    case ir::OpId::GatherElementsGrad:
      return "its gradient rows are added inside its kernel, in index order";
    case ir::OpId::SoftmaxCrossEntropy: case ir::OpId::MseLoss:
      return "the loss value's mean over the batch (it reports; no gradient reads it)";
    default:
      return "";
  }
}

class Rewriter {
 public:
  Rewriter(ir::Graph& graph, PassContext& context, int64_t batch)
      : graph_(graph), context_(context), batch_(batch), names_(graph) {}

  bool run() {
    std::vector<ir::Node*> nodes;
    for (const auto& node : graph_.nodes()) nodes.push_back(node.get());
    for (ir::Node* node : nodes) visit(*node);
    if (dead_.empty()) return false;
    replace_and_erase(graph_, replacements_, dead_);
    return true;
  }

 private:
  void visit(ir::Node& node) {
    const std::string who = fmt::format("{} (%{})", node.describe(),
                                        node.results.empty() ? "" : node.results[0]->name);
    if (const std::string why = kept_order(node); !why.empty()) {
      context_.debug(kPass, fmt::format("keeps its order: {}: {}", who, why));
      return;
    }
    std::string why;
    switch (node.op) {
      case ir::OpId::Conv2dGradWeight: why = per_sample_gemm(node, conv_sample_k(node)); break;
      case ir::OpId::Matmul: why = matmul(node); break;
      case ir::OpId::ReduceSum: why = reduce_sum(node); break;
      default: return;
    }
    if (!why.empty()) context_.debug(kPass, fmt::format("not rewritten: {}: {}", who, why));
  }

  // One sample's K of a weight gradient: its dy's OH x OW.
  int64_t conv_sample_k(const ir::Node& node) const {
    const ir::Shape& dy = node.inputs[0]->type.shape;
    return dy[0] == batch_ ? dy[2] * dy[3] : 0;
  }

  std::string matmul(ir::Node& node) {
    const auto flag = [&](const char* name) {
      const auto it = node.attrs.find(name);
      return it != node.attrs.end() && std::get<bool>(it->second);
    };
    if (!flag("transpose_a")) return "";  // sums over features, not over the batch
    const ir::Shape& a = node.inputs[0]->type.shape;
    if (a.size() != 2 || node.inputs[1]->type.rank() != 2) return "a batched matmul sums per batch entry";
    if (a[0] % batch_ != 0)
      return fmt::format("its {} summed rows are not a multiple of the batch {}", a[0], batch_);
    return per_sample_gemm(node, a[0] / batch_);
  }

  // The GEMM as per-sample partials (k_chunk = one sample's K), then their pairwise_sum.
  std::string per_sample_gemm(ir::Node& node, int64_t sample_k) {
    if (sample_k <= 0) return fmt::format("its leading dim is not the batch {}", batch_);
    if (std::get<int64_t>(node.attrs.at("k_chunk")) > 0) return "already split (k_chunk)";
    ir::Value* old_out = node.results[0];
    if (!ir::is_floating(old_out->type.dtype)) return "not a float sum";
    if (!context_.take_fuel(kPass, "per-sample partials of " + node.describe())) return "out of fuel";
    const std::string out_name = old_out->name;
    old_out->name = names_.take(out_name + ".whole");
    names_.release(out_name);
    ir::AttrMap attrs = node.attrs;
    attrs["k_chunk"] = sample_k;
    NodeInserter insert(graph_, names_, node);
    ir::Value* samples = insert.add(node.op, node.inputs, std::move(attrs), out_name + ".samples");
    finish(node, insert.add(ir::OpId::PairwiseSum, {samples}, {}, out_name),
           fmt::format("{} partials of {} term{}", batch_, sample_k, sample_k == 1 ? "" : "s"));
    return "";
  }

  std::string reduce_sum(ir::Node& node) {
    const ir::TensorType& x = node.inputs[0]->type;
    if (!ir::is_floating(x.dtype)) return "";  // integer sums are exact in any order
    const std::vector<int64_t> axes = reduced_axes(node);
    if (axes.empty() || axes[0] != 0) return "";  // not over the batch
    if (x.shape[0] % batch_ != 0)
      return fmt::format("its {} rows are not a multiple of the batch {}", x.shape[0], batch_);
    if (!context_.take_fuel(kPass, "per-sample sums of " + node.describe())) return "out of fuel";
    ir::Value* old_out = node.results[0];
    const std::string out_name = old_out->name;
    old_out->name = names_.take(out_name + ".whole");
    names_.release(out_name);
    NodeInserter insert(graph_, names_, node);
    // Rows N x T: view them as [N, T, ...], T reduced with the other axes.
    ir::Value* rows = node.inputs[0];
    std::vector<int64_t> rest(axes.begin() + 1, axes.end());
    if (x.shape[0] != batch_) {
      ir::Shape split{batch_, x.shape[0] / batch_};
      split.insert(split.end(), x.shape.begin() + 1, x.shape.end());
      rows = insert.add(ir::OpId::Reshape, {rows}, {{"shape", split}}, out_name + ".rows");
      for (int64_t& a : rest) ++a;
      rest.insert(rest.begin(), 1);
    }
    // One sum per sample, [N, kept...], then the samples' tree.
    ir::Value* samples = rows;
    if (!rest.empty())
      samples = insert.add(ir::OpId::ReduceSum, {rows}, {{"axes", rest}, {"keepdims", false}},
                           out_name + ".samples");
    const bool keepdims = std::get<bool>(node.attrs.at("keepdims"));  // reduced axes stay as 1s
    ir::Value* sum = insert.add(ir::OpId::PairwiseSum, {samples}, {},
                                keepdims ? out_name + ".sum" : out_name);
    if (keepdims) sum = insert.add(ir::OpId::Reshape, {sum}, {{"shape", old_out->type.shape}}, out_name);
    finish(node, sum, rest.empty() ? "the samples' pairwise_sum" : "per-sample reduce_sum, then pairwise_sum");
    return "";
  }

  void finish(ir::Node& node, ir::Value* result, const std::string& how) {
    replacements_[node.results[0]] = result;
    dead_.insert(&node);
    context_.debug(kPass, fmt::format("%{}: {}", result->name, how));
  }

  ir::Graph& graph_;
  PassContext& context_;
  const int64_t batch_;
  NameTable names_;
  Replacements replacements_;
  std::unordered_set<const ir::Node*> dead_;
};

}  // namespace

bool BatchInvariant::run(ir::Graph& graph, PassContext& context) {
  context.check_options(kPass, {});
  std::string why;
  const int64_t batch = batch_of(graph, why);
  if (batch == 0) {
    context.debug(kPass, "not run: " + why);
    return false;
  }
  return Rewriter(graph, context, batch).run();
}

}  // namespace kiln::passes
