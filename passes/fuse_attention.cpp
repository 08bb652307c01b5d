// fuse-attention: scaled dot-product attention written as matmul -> scale -> (mask) -> softmax
// -> matmul becomes one `attention` node, whose kernel never materializes the S x S scores
// (codegen/kernels/attention.cpp).
//
// The pattern, as PyTorch 1.13 exports nn.MultiheadAttention, nn.TransformerEncoderLayer and
// torchvision's ViT to ONNX, and as hand-written graphs spell it:
//
//   scores = matmul(q', kT)              kT = transpose(k) (last two dims swapped), or
//                                        matmul {transpose_b} of k itself
//   q'     = q, or mul/div(q, c)         c a scalar constant, folded into the scale
//   x      = scores, mul/div(scores, c), then optionally add(x, mask) (float, added) or
//            where(mask, x, -inf) (bool, true attends)
//   out    = matmul(softmax(x, last axis), v)
//
// Every intermediate must have that one reader (the scores or probabilities are not needed
// elsewhere), q, k and v must share their batch dims (heads are batch dims), and the softmax
// must run over the keys. A constant mask that is exactly causal (0 or true on and below the
// diagonal, -inf or false above it, the same for every batch index) becomes the `causal` flag,
// so the kernel skips the masked tiles instead of reading a mask. Each refusal is logged with
// its reason under --debug-only=fuse-attention. One sweep over the nodes collects the matches;
// the rewrites then apply together (passes/rewrite_util.h), so the pass stays linear.
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "passes/pass.h"
#include "passes/rewrite_util.h"

namespace kiln::passes {
namespace {

constexpr std::string_view kPass = "fuse-attention";

std::string who(const ir::Node& node) {
  return node.results.empty() ? node.describe()
                              : node.describe() + " (%" + node.results[0]->name + ")";
}

// A constant whose every element is -inf (the "hidden" branch of a where mask), seen through
// a broadcast_to.
bool all_minus_infinity(const ir::Value* value) {
  if (value->producer != nullptr && value->producer->op == ir::OpId::BroadcastTo)
    value = value->producer->inputs[0];
  if (value->role != ir::ValueRole::Parameter || !value->data) return false;
  for (double x : value->data->to_doubles())
    if (!(std::isinf(x) && x < 0)) return false;
  return true;
}

struct Match {
  ir::Node* output = nullptr;  // the final matmul, before which attention goes
  ir::Value* q = nullptr;
  ir::Value* k = nullptr;            // [..., Sk, D], or nullptr: transpose k_source by k_perm
  std::vector<int64_t> k_perm;
  ir::Value* k_source = nullptr;
  ir::Value* v = nullptr;
  ir::Value* mask = nullptr;
  double scale = 1.0;
  bool causal = false;
  std::vector<ir::Node*> replaced;   // the nodes that become dead
};

class Matcher {
 public:
  Matcher(const ir::Graph& graph, PassContext& context) : graph_(graph), context_(context) {
    for (const auto& node : graph.nodes())
      for (const ir::Value* operand : node->inputs) {
        ++uses_[operand];
        first_reader_.emplace(operand, node.get());
      }
  }

  std::optional<Match> match(ir::Node& softmax) {
    Match m;
    const ir::Value* probabilities = softmax.results[0];
    const int rank = probabilities->type.rank();
    const int64_t axis = std::get<int64_t>(softmax.attrs.at("axis"));
    if (rank < 2 || (axis != -1 && axis != rank - 1))
      return refuse(softmax, "it is not over the last axis (the keys)");
    // The probabilities feed one matmul as its left operand: out = p v.
    ir::Node* output = sole_reader(probabilities);
    if (output == nullptr || output->op != ir::OpId::Matmul || output->inputs[0] != probabilities ||
        output->inputs[1] == probabilities)
      return refuse(softmax, "its result is not read by exactly one matmul, as the left operand");
    if (std::get<bool>(output->attrs.at("transpose_a")) ||
        std::get<bool>(output->attrs.at("transpose_b")))
      return refuse(softmax, "the matmul with v transposes an operand");
    m.output = output;
    m.v = output->inputs[1];
    m.replaced = {&softmax, output};

    // Peel the mask, then scalings, down to the q k^T matmul.
    ir::Value* x = softmax.inputs[0];
    if (!single_use(x)) return refuse(softmax, "its input %" + x->name + " has other readers");
    ir::Node* producer = x->producer;
    if (producer != nullptr && producer->op == ir::OpId::Add) {
      const int scores = is_scores_side(producer->inputs[0]) ? 0 : 1;
      m.mask = producer->inputs[1 - scores];
      x = producer->inputs[scores];
      m.replaced.push_back(producer);
    } else if (producer != nullptr && producer->op == ir::OpId::Where &&
               all_minus_infinity(producer->inputs[2])) {
      m.mask = producer->inputs[0];
      x = producer->inputs[1];
      m.replaced.push_back(producer);
    }
    if (m.mask != nullptr) {
      if (!single_use(x)) return refuse(softmax, "the scores %" + x->name + " have other readers");
      if (m.mask->type.rank() > rank)
        return refuse(softmax, "the mask " + m.mask->type.to_string() + " has more dims than the scores");
    }
    x = peel_scaling(x, m);
    if (x == nullptr) return refuse(softmax, "a scaling of the scores has other readers");
    ir::Node* scores = x->producer;
    if (scores == nullptr || scores->op != ir::OpId::Matmul)
      return refuse(softmax, "the scores are not a matmul (q k^T) after scaling and masking");
    if (std::get<bool>(scores->attrs.at("transpose_a")))
      return refuse(softmax, "the q k^T matmul transposes q");
    if (x->type.shape != probabilities->type.shape)
      return refuse(softmax, "the mask broadcasts the scores to a bigger shape");
    m.replaced.push_back(scores);
    ir::Value* q = scores->inputs[0];
    if (q->producer != nullptr && single_use(q)) {
      ir::Value* inner = peel_scaling(q, m);
      if (inner != nullptr) q = inner;
    }
    m.q = q;
    if (!find_k(*scores, m)) return refuse(softmax, "k^T is not a transpose of k's last two dims");
    // Heads are batch dims: attention does not broadcast q, k and v against each other.
    const ir::Shape& qs = m.q->type.shape;
    const ir::Shape& vs = m.v->type.shape;
    const ir::Shape ks = key_shape(m);
    if (qs.size() != ks.size() || qs.size() != vs.size() ||
        !std::equal(qs.begin(), qs.end() - 2, ks.begin()) ||
        !std::equal(qs.begin(), qs.end() - 2, vs.begin()))
      return refuse(softmax, "q " + m.q->type.to_string() + ", k " +
                                 ir::TensorType{m.q->type.dtype, ks}.to_string() + " and v " +
                                 m.v->type.to_string() + " do not share their batch dims");
    if (!(m.scale > 0.0) || !std::isfinite(m.scale))
      return refuse(softmax, fmt::format("the scale {} is not a positive number", m.scale));
    if (m.mask != nullptr && is_causal_mask(*m.mask, qs[qs.size() - 2], ks[ks.size() - 2])) {
      m.mask = nullptr;
      m.causal = true;
    }
    return m;
  }

 private:
  std::optional<Match> refuse(const ir::Node& softmax, const std::string& why) {
    context_.debug(kPass, fmt::format("not fusing attention at {}: {}", who(softmax), why));
    return std::nullopt;
  }

  bool single_use(const ir::Value* value) const {
    auto it = uses_.find(value);
    return it != uses_.end() && it->second == 1 && !graph_.is_output(value);
  }

  ir::Node* sole_reader(const ir::Value* value) const {
    return single_use(value) ? first_reader_.at(value) : nullptr;
  }

  // The scores side of add(scores, mask): the operand produced by the matmul chain.
  static bool is_scores_side(const ir::Value* value) {
    for (int hops = 0; hops < 3 && value->producer != nullptr; ++hops) {
      const ir::Node* p = value->producer;
      if (p->op == ir::OpId::Matmul) return true;
      if (p->op != ir::OpId::Mul && p->op != ir::OpId::Div) return false;
      value = p->inputs[0];
    }
    return false;
  }

  // Strips mul/div by scalar constants off `x` into m.scale; nullptr when a scaling node has
  // other readers.
  ir::Value* peel_scaling(ir::Value* x, Match& m) {
    while (x->producer != nullptr &&
           (x->producer->op == ir::OpId::Mul || x->producer->op == ir::OpId::Div)) {
      ir::Node* node = x->producer;
      std::optional<double> c = scalar_constant(node->inputs[1]);
      int kept = 0;
      if (!c && node->op == ir::OpId::Mul) {
        c = scalar_constant(node->inputs[0]);
        kept = 1;
      }
      if (!c) break;
      if (node->results[0]->type.shape != node->inputs[kept]->type.shape) break;
      if (!single_use(x)) return nullptr;
      m.scale *= node->op == ir::OpId::Mul ? *c : 1.0 / *c;
      m.replaced.push_back(node);
      x = node->inputs[kept];
    }
    return x;
  }

  // k from the q k^T matmul: its operand itself under transpose_b, else the operand's
  // transpose (a transpose node composed with the swap, or a new one).
  bool find_k(const ir::Node& scores, Match& m) {
    ir::Value* b = scores.inputs[1];
    if (std::get<bool>(scores.attrs.at("transpose_b"))) {
      m.k = b;
      return true;
    }
    const int rank = b->type.rank();
    std::vector<int64_t> perm(static_cast<size_t>(rank));
    for (int d = 0; d < rank; ++d) perm[d] = d;
    ir::Value* source = b;
    if (b->producer != nullptr && b->producer->op == ir::OpId::Transpose && single_use(b)) {
      perm = std::get<std::vector<int64_t>>(b->producer->attrs.at("perm"));
      source = b->producer->inputs[0];
      m.replaced.push_back(b->producer);
    }
    std::swap(perm[rank - 2], perm[rank - 1]);
    bool identity = true;
    for (int d = 0; d < rank; ++d) identity &= perm[d] == d;
    if (identity) {
      m.k = source;
    } else {
      m.k_source = source;
      m.k_perm = perm;
    }
    return true;
  }

  static ir::Shape key_shape(const Match& m) {
    if (m.k != nullptr) return m.k->type.shape;
    ir::Shape shape;
    for (int64_t d : m.k_perm) shape.push_back(m.k_source->type.shape[d]);
    return shape;
  }

  // True when `mask` is a constant that hides exactly the keys after each query, the same way
  // for every batch index: bool (true on and below the diagonal) or additive (0 there, -inf or
  // the dtype's lowest value above).
  static bool is_causal_mask(const ir::Value& mask, int64_t queries, int64_t keys) {
    if (mask.role != ir::ValueRole::Parameter || !mask.data) return false;
    const ir::Shape& shape = mask.type.shape;
    const int rank = static_cast<int>(shape.size());
    if (rank < 2 || shape[rank - 2] != queries || shape[rank - 1] != keys) return false;
    const std::vector<double> values = mask.data->to_doubles();
    const bool is_bool = mask.type.dtype == ir::DType::Bool;
    const double lowest = mask.type.dtype == ir::DType::F16 ? -65504.0
                                                            : -std::numeric_limits<float>::max();
    for (size_t e = 0; e < values.size(); ++e) {
      const int64_t j = static_cast<int64_t>(e) % keys;
      const int64_t i = static_cast<int64_t>(e) / keys % queries;
      const double x = values[e];
      const bool hidden = is_bool ? x == 0.0 : (std::isinf(x) && x < 0) || x <= lowest;
      const bool visible = is_bool ? x != 0.0 : x == 0.0;
      if (j > i ? !hidden : !visible) return false;
    }
    return true;
  }

  const ir::Graph& graph_;
  PassContext& context_;
  std::unordered_map<const ir::Value*, size_t> uses_;          // operand slots reading each value
  std::unordered_map<const ir::Value*, ir::Node*> first_reader_;
};

}  // namespace

bool FuseAttention::run(ir::Graph& graph, PassContext& context) {
  Matcher matcher(graph, context);
  std::vector<Match> matches;
  std::unordered_set<const ir::Node*> taken;
  for (const auto& node : graph.nodes()) {
    if (node->op != ir::OpId::Softmax) continue;
    std::optional<Match> m = matcher.match(*node);
    if (!m) continue;
    bool overlaps = false;
    for (const ir::Node* n : m->replaced) overlaps |= taken.count(n) > 0;
    if (overlaps) continue;
    if (!context.take_fuel(kPass, "fuse the attention ending at " + who(*m->output))) break;
    for (const ir::Node* n : m->replaced) taken.insert(n);
    matches.push_back(std::move(*m));
  }
  if (matches.empty()) return false;

  NameTable names(graph);
  Replacements replacements;
  for (Match& m : matches) {
    ir::Node& output = *m.output;
    const std::string base = output.name.empty() ? output.results[0]->name : output.name;
    if (m.k == nullptr) {
      ir::TensorType k_type{m.k_source->type.dtype, {}};
      for (int64_t d : m.k_perm) k_type.shape.push_back(m.k_source->type.shape[d]);
      ir::Node* transpose = graph.insert_node_before(
          &output, ir::OpId::Transpose, base + ".k", {m.k_source}, {{"perm", m.k_perm}},
          {{names.take(base + ".k"), k_type}}, output.loc);
      m.k = transpose->results[0];
    }
    std::vector<ir::Value*> inputs = {m.q, m.k, m.v};
    if (m.mask != nullptr) inputs.push_back(m.mask);
    // The attention result takes the old output's name, so graph outputs and readers keep it.
    ir::Value* old_out = output.results[0];
    const std::string out_name = old_out->name;
    old_out->name = names.take(out_name + ".unfused");
    ir::Shape lse_shape = old_out->type.shape;
    lse_shape.pop_back();
    ir::Node* attention = graph.insert_node_before(
        &output, ir::OpId::Attention, base, inputs,
        {{"scale", m.scale}, {"causal", m.causal}},
        {{out_name, old_out->type},
         {names.take(base + ".lse"), ir::TensorType{ir::DType::F32, lse_shape}}},
        output.loc);
    replacements[old_out] = attention->results[0];
    context.debug(kPass, fmt::format("fused {} into attention (scale {}, {})", who(output),
                                     m.scale, m.causal ? "causal" : m.mask ? "masked" : "no mask"));
  }
  std::unordered_set<const ir::Node*> dead;
  for (const Match& m : matches) dead.insert(m.replaced.begin(), m.replaced.end());
  replace_and_erase(graph, replacements, dead);
  return true;
}

}  // namespace kiln::passes
