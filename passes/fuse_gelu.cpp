// fuse-gelu: GELU written out as x · ½ · (1 + erf(x / √2)) becomes one `gelu` node, and its
// tanh approximation ½ · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³))) one `gelu` {tanh}.
//
// PyTorch exports F.gelu (nn.GELU, torchvision's ViT MLP, nn.TransformerEncoderLayer with
// activation="gelu") at opsets below 20 as
//
//   d = div(x, 1.4142135)   or mul(x, 0.70710678)
//   e = erf(d)
//   a = add(e, 1)           either operand order
//   y = mul(mul(x, a), 0.5) any grouping and order of the three factors x, a and 0.5
//
// and Hugging Face models as x * 0.5 * (1.0 + erf(x / sqrt(2.0))). As five element-wise nodes
// it fuses into a loop of its own, because x is read twice (a diamond, which a GEMM epilogue's
// one running value cannot express); as `gelu` it is one unary op that the epilogue of the
// GEMM before it takes (fuse-conv-bias-relu). Every intermediate must have that one reader,
// and the constants must match to 1e-6. Each refusal is logged with its reason under
// --debug-only=fuse-gelu. One sweep collects the matches; the rewrites apply together
// (passes/rewrite_util.h), so the pass stays linear.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <unordered_set>

#include "passes/pass.h"
#include "passes/rewrite_util.h"

namespace kiln::passes {
namespace {

constexpr std::string_view kPass = "fuse-gelu";

bool near(std::optional<double> value, double want) {
  return value && std::abs(*value - want) <= 1e-6 * std::abs(want);
}

// `value` has one reader and is not a graph output: the pattern may absorb it.
bool read_once(const ir::Graph& graph, const ir::Value* value) {
  return graph.users(value).size() == 1 && !graph.is_output(value);
}

// The node producing `value` when it is op `op` and `value` is read once.
ir::Node* sole(const ir::Graph& graph, const ir::Value* value, ir::OpId op) {
  ir::Node* producer = value->producer;
  if (producer == nullptr || producer->op != op || !read_once(graph, value)) return nullptr;
  return producer;
}

struct Match {
  ir::Value* x = nullptr;
  ir::Node* root = nullptr;                // the last mul: its result becomes gelu's
  std::vector<const ir::Node*> replaced;  // every node of the pattern, root included
  bool tanh = false;                       // the tanh approximation
};

class Matcher {
 public:
  Matcher(const ir::Graph& graph, PassContext& context) : graph_(graph), context_(context) {}

  // The exact form whose erf is `erf`, or nullopt (the reason logged).
  std::optional<Match> match_erf(ir::Node& erf) {
    Match m;
    ir::Node* scaled = sole(graph_, erf.inputs[0], ir::OpId::Div);
    if (scaled && near(scalar_constant(scaled->inputs[1]), std::sqrt(2.0))) {
      m.x = scaled->inputs[0];
    } else if ((scaled = sole(graph_, erf.inputs[0], ir::OpId::Mul)) != nullptr) {
      m.x = other_than_constant(*scaled, std::sqrt(0.5));
    }
    if (m.x == nullptr) return refuse(erf, "its input is not x / sqrt(2) (a div or mul by the constant, read only here)");
    m.replaced = {scaled};
    return match_tail(erf, m, "x * (1 + erf(x / sqrt(2))) * 0.5");
  }

  // The tanh approximation, 0.5 · x · (1 + tanh(sqrt(2/pi) · (x + 0.044715 · x³))), as
  // PyTorch exports approximate="tanh" (x · (x · x)) and Hugging Face's gelu_new (pow(x, 3)).
  std::optional<Match> match_tanh(ir::Node& tanh) {
    Match m;
    m.tanh = true;
    const char* what = "its input is not sqrt(2/pi) * (x + 0.044715 * x^3) (each intermediate read only there)";
    ir::Node* scaled = sole(graph_, tanh.inputs[0], ir::OpId::Mul);
    const ir::Value* inner_sum = scaled ? other_than_constant(*scaled, std::sqrt(2.0 / std::acos(-1.0))) : nullptr;
    ir::Node* sum = inner_sum ? sole(graph_, inner_sum, ir::OpId::Add) : nullptr;
    if (sum == nullptr) return refuse(tanh, what);
    // x + 0.044715 · x³, either order: the term is the operand a mul by the constant makes.
    for (int i : {0, 1}) {
      ir::Node* term = sole(graph_, sum->inputs[i], ir::OpId::Mul);
      const ir::Value* cube = term ? other_than_constant(*term, 0.044715) : nullptr;
      std::vector<const ir::Node*> cube_nodes;
      if (cube && is_cube_of(cube, sum->inputs[1 - i], cube_nodes)) {
        m.x = sum->inputs[1 - i];
        m.replaced = {scaled, sum, term};
        m.replaced.insert(m.replaced.end(), cube_nodes.begin(), cube_nodes.end());
      }
    }
    if (m.x == nullptr) return refuse(tanh, what);
    return match_tail(tanh, m, "0.5 * x * (1 + tanh(...))");
  }

 private:
  // The shared tail: f's one reader adds 1, and the product of x, that sum and 0.5 is rooted
  // one or two muls above the add.
  std::optional<Match> match_tail(ir::Node& f, Match& m, const std::string& form) {
    if (!ir::is_floating(m.x->type.dtype)) return refuse(f, "x is not a float tensor");
    const std::vector<ir::Node*> f_users = graph_.users(f.results[0]);
    ir::Node* plus_one = read_once(graph_, f.results[0]) ? f_users[0] : nullptr;
    if (plus_one == nullptr || plus_one->op != ir::OpId::Add || !other_than_constant(*plus_one, 1.0))
      return refuse(f, "its one reader is not an add of 1");
    m.replaced.push_back(&f);
    m.replaced.push_back(plus_one);
    ir::Node* node = plus_one;
    for (int depth = 0; depth < 2; ++depth) {
      const std::vector<ir::Node*> users = graph_.users(node->results[0]);
      if (!read_once(graph_, node->results[0]) || users[0]->op != ir::OpId::Mul) break;
      node = users[0];
      std::vector<const ir::Node*> interior;
      std::vector<const ir::Value*> leaves;
      collect_factors(*node, node, interior, leaves);
      if (is_gelu_product(leaves, m.x, plus_one->results[0]) && node->results[0]->type == m.x->type) {
        m.root = node;
        m.replaced.insert(m.replaced.end(), interior.begin(), interior.end());
        return m;
      }
    }
    return refuse(f, "the product after it is not " + form + " (each factor once, each intermediate read only there)");
  }

  // The operand of binary `node` other than a scalar constant equal to `constant`; nullptr
  // when neither operand is that constant.
  static ir::Value* other_than_constant(const ir::Node& node, double constant) {
    if (node.inputs.size() != 2) return nullptr;
    for (int i : {0, 1})
      if (near(scalar_constant(node.inputs[static_cast<size_t>(1 - i)]), constant)) return node.inputs[static_cast<size_t>(i)];
    return nullptr;
  }

  // Whether `cube` is x³: pow(x, 3), power(x, 3), x · (x · x) or (x · x) · x, each intermediate
  // read once.
  bool is_cube_of(const ir::Value* cube, const ir::Value* x, std::vector<const ir::Node*>& nodes) {
    if (ir::Node* pow = sole(graph_, cube, ir::OpId::Pow)) {
      if (pow->inputs[0] != x || !near(std::get<double>(pow->attrs.at("exponent")), 3.0)) return false;
      nodes = {pow};
      return true;
    }
    if (ir::Node* power = sole(graph_, cube, ir::OpId::Power)) {
      if (power->inputs[0] != x || !near(scalar_constant(power->inputs[1]), 3.0)) return false;
      nodes = {power};
      return true;
    }
    ir::Node* outer = sole(graph_, cube, ir::OpId::Mul);
    if (outer == nullptr) return false;
    for (int i : {0, 1}) {
      ir::Node* square = sole(graph_, outer->inputs[static_cast<size_t>(i)], ir::OpId::Mul);
      if (outer->inputs[static_cast<size_t>(1 - i)] == x && square && square->inputs[0] == x && square->inputs[1] == x) {
        nodes = {outer, square};
        return true;
      }
    }
    return false;
  }

  // The leaves of the product rooted at `node`: a mul operand produced by a mul with `node`'s
  // tree as its only reader is expanded (up to three levels), anything else is a factor.
  void collect_factors(const ir::Node& node, const ir::Node* root, std::vector<const ir::Node*>& interior,
                       std::vector<const ir::Value*>& leaves, int depth = 0) {
    interior.push_back(&node);
    for (const ir::Value* operand : node.inputs) {
      const ir::Node* inner = operand->producer;
      if (depth < 3 && inner != nullptr && inner->op == ir::OpId::Mul && inner != root &&
          read_once(graph_, operand))
        collect_factors(*inner, root, interior, leaves, depth + 1);
      else
        leaves.push_back(operand);
    }
  }

  static bool is_gelu_product(const std::vector<const ir::Value*>& leaves, const ir::Value* x,
                              const ir::Value* plus_one) {
    if (leaves.size() != 3) return false;
    int xs = 0, ones = 0, halves = 0;
    for (const ir::Value* leaf : leaves) {
      if (leaf == x) ++xs;
      else if (leaf == plus_one) ++ones;
      else if (near(scalar_constant(leaf), 0.5)) ++halves;
    }
    return xs == 1 && ones == 1 && halves == 1;
  }

  std::optional<Match> refuse(const ir::Node& erf, const std::string& why) {
    context_.debug(kPass, fmt::format("not fused: {} (%{}): {}", erf.describe(), erf.results[0]->name, why));
    return std::nullopt;
  }

  const ir::Graph& graph_;
  PassContext& context_;
};

}  // namespace

bool FuseGelu::run(ir::Graph& graph, PassContext& context) {
  Matcher matcher(graph, context);
  std::vector<Match> matches;
  std::unordered_set<const ir::Node*> taken;
  for (const auto& node : graph.nodes()) {
    if (node->op != ir::OpId::Erf && node->op != ir::OpId::Tanh) continue;
    std::optional<Match> m = node->op == ir::OpId::Erf ? matcher.match_erf(*node) : matcher.match_tanh(*node);
    if (!m) continue;
    if (std::any_of(m->replaced.begin(), m->replaced.end(), [&](const ir::Node* n) { return taken.count(n) > 0; }))
      continue;
    if (!context.take_fuel(kPass, "fuse the gelu ending at %" + m->root->results[0]->name)) break;
    taken.insert(m->replaced.begin(), m->replaced.end());
    matches.push_back(std::move(*m));
  }
  if (matches.empty()) return false;

  NameTable names(graph);
  Replacements replacements;
  for (const Match& m : matches) {
    ir::Node& root = *m.root;
    // gelu takes the product's name, so graph outputs and readers keep it.
    ir::Value* old_out = root.results[0];
    const std::string out_name = old_out->name;
    old_out->name = names.take(out_name + ".unfused");
    ir::Node* gelu = graph.insert_node_before(&root, ir::OpId::Gelu, root.name.empty() ? out_name : root.name,
                                              {m.x}, {{"approximate", std::string(m.tanh ? "tanh" : "none")}},
                                              {{out_name, old_out->type}}, root.loc);
    replacements[old_out] = gelu->results[0];
    context.debug(kPass, m.tanh ? fmt::format("fused the tanh form at %{} into gelu (tanh) of %{}", out_name, m.x->name)
                                : fmt::format("fused x * 0.5 * (1 + erf(x / sqrt(2))) at %{} into gelu (exact) of %{}",
                                              out_name, m.x->name));
  }
  std::unordered_set<const ir::Node*> dead;
  for (const Match& m : matches) dead.insert(m.replaced.begin(), m.replaced.end());
  replace_and_erase(graph, replacements, dead);
  return true;
}

}  // namespace kiln::passes
