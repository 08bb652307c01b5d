// ONNX Einsum (NumPy's einsum semantics), decomposed at import into reductions, transposes,
// reshapes and batched matmuls, the way opt_einsum and ONNX Runtime contract: operands are
// contracted left to right, two at a time, each pair as one matmul
//
//   A [batch, left, contracted] x B [batch, contracted, right] -> [batch, left, right]
//
// after summing away every label that only one operand has and nothing later needs. A label
// repeated within one operand ("ii") first takes the diagonal: a product with an identity mask
// and a sum over the second occurrence. Ellipsis dims broadcast, aligned from the right, as in
// NumPy; the implicit output ("ij,jk") is the ellipsis dims then the labels used once, sorted.
#include <algorithm>
#include <cctype>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <string>

#include "compiler/import/onnx/onnx_ops.h"

namespace kiln::compiler::onnx_import {
namespace {

using ir::OpId;
using Ints = std::vector<int64_t>;
using Outputs = std::vector<Operand>;

// A label: a letter's character code, or kEllipsis + j for the j-th ellipsis dim (of the
// right-aligned ellipsis block shared by all operands).
constexpr int kEllipsis = 1000;

struct Term {
  Operand value;
  std::vector<int> labels;  // one per dim
};

std::string label_name(int label) {
  return label >= kEllipsis ? "..." + std::to_string(label - kEllipsis) : std::string(1, static_cast<char>(label));
}

// The letters of one subscript and whether (and where) it has an ellipsis.
struct Subscript {
  std::vector<int> letters_before, letters_after;
  bool ellipsis = false;
};

Subscript parse_subscript(NodeContext& node, const std::string& text) {
  Subscript out;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '.') {
      if (text.compare(i, 3, "...") != 0 || out.ellipsis) node.fail("equation term '" + text + "' has a stray '.'");
      out.ellipsis = true;
      i += 2;
    } else if (std::isalpha(static_cast<unsigned char>(c))) {
      (out.ellipsis ? out.letters_after : out.letters_before).push_back(c);
    } else {
      node.fail("equation term '" + text + "' has the character '" + std::string(1, c) + "'");
    }
  }
  return out;
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts{""};
  for (char c : text) {
    if (c == separator) parts.emplace_back();
    else parts.back() += c;
  }
  return parts;
}

Operand transpose_to(NodeContext& node, Term& term, const std::vector<int>& order) {
  Ints perm;
  for (int label : order)
    perm.push_back(std::find(term.labels.begin(), term.labels.end(), label) - term.labels.begin());
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == static_cast<int64_t>(i);
  term.labels = order;
  if (!identity) term.value = node.emit(OpId::Transpose, {term.value}, {{"perm", perm}});
  return term.value;
}

// Sums away the dims of `term` whose labels `keep` lacks.
void sum_unneeded(NodeContext& node, Term& term, const std::set<int>& keep) {
  Ints axes;
  std::vector<int> kept;
  for (size_t i = 0; i < term.labels.size(); ++i) {
    if (keep.count(term.labels[i])) kept.push_back(term.labels[i]);
    else axes.push_back(static_cast<int64_t>(i));
  }
  if (axes.empty()) return;
  term.value = node.emit(OpId::ReduceSum, {term.value}, {{"axes", axes}, {"keepdims", false}});
  term.labels = kept;
}

// Replaces a label repeated within `term` by its diagonal, until none is.
void take_diagonals(NodeContext& node, Term& term) {
  for (;;) {
    size_t first = 0, second = 0;
    for (size_t i = 0; i < term.labels.size() && second == 0; ++i)
      for (size_t j = i + 1; j < term.labels.size(); ++j)
        if (term.labels[i] == term.labels[j]) {
          first = i;
          second = j;
          break;
        }
    if (second == 0) return;
    const ir::Shape& shape = term.value.type().shape;
    const int64_t n = shape[first];
    if (shape[second] != n)
      node.fail("label " + label_name(term.labels[first]) + " has sizes " + std::to_string(n) + " and " +
                std::to_string(shape[second]) + " in one operand");
    node.check_fold_size({term.value.type().dtype, {n, n}}, "the diagonal mask");
    std::vector<double> eye(static_cast<size_t>(n * n), 0.0);
    for (int64_t i = 0; i < n; ++i) eye[static_cast<size_t>(i * n + i)] = 1.0;
    ir::Shape mask_shape(shape.size(), 1);
    mask_shape[first] = mask_shape[second] = n;
    const Operand mask = node.constant(ir::Tensor::from_doubles({term.value.type().dtype, mask_shape}, eye), "diagonal");
    term.value = node.emit(OpId::ReduceSum, {node.emit(OpId::Mul, {term.value, mask})},
                           {{"axes", Ints{static_cast<int64_t>(second)}}, {"keepdims", false}});
    term.labels.erase(term.labels.begin() + static_cast<std::ptrdiff_t>(second));
  }
}

// The size of every label, broadcasting 1 against n; fails on other mismatches.
void record_sizes(NodeContext& node, const Term& term, std::map<int, int64_t>& sizes) {
  for (size_t i = 0; i < term.labels.size(); ++i) {
    const int64_t size = term.value.type().shape[i];
    auto [it, inserted] = sizes.emplace(term.labels[i], size);
    if (inserted || it->second == size || size == 1) continue;
    if (it->second == 1) {
      it->second = size;
      continue;
    }
    node.fail("label " + label_name(term.labels[i]) + " has sizes " + std::to_string(it->second) + " and " +
              std::to_string(size));
  }
}

// `term` with each dim broadcast to the label's size.
void broadcast_to_sizes(NodeContext& node, Term& term, const std::map<int, int64_t>& sizes) {
  ir::Shape target;
  for (int label : term.labels) target.push_back(sizes.at(label));
  if (target != term.value.type().shape) term.value = node.emit(OpId::BroadcastTo, {term.value}, {{"shape", target}});
}

// The number of elements the labels span; fails past 2^48 (two operands' labels together can
// name more elements than either holds: an outer product).
int64_t product(NodeContext& node, const std::vector<int>& labels, const std::map<int, int64_t>& sizes) {
  constexpr int64_t kLimit = int64_t{1} << 48;
  int64_t p = 1;
  for (int label : labels) {
    const int64_t size = sizes.at(label);
    if (size > kLimit / p) node.fail("the contraction would span more than 2^48 elements");
    p *= size;
  }
  return p;
}

// a x b over their shared labels, keeping the labels in `keep`.
Term contract(NodeContext& node, Term a, Term b, const std::set<int>& keep, const std::map<int, int64_t>& sizes) {
  std::vector<int> batch, contracted, left, right;
  for (int label : a.labels) {
    const bool shared = std::count(b.labels.begin(), b.labels.end(), label) > 0;
    (shared ? (keep.count(label) ? batch : contracted) : left).push_back(label);
  }
  for (int label : b.labels)
    if (!std::count(a.labels.begin(), a.labels.end(), label)) right.push_back(label);
  broadcast_to_sizes(node, a, sizes);
  broadcast_to_sizes(node, b, sizes);
  auto concat = [](std::initializer_list<const std::vector<int>*> parts) {
    std::vector<int> out;
    for (const auto* part : parts) out.insert(out.end(), part->begin(), part->end());
    return out;
  };
  const int64_t nb = product(node, batch, sizes), nl = product(node, left, sizes),
                nc = product(node, contracted, sizes), nr = product(node, right, sizes);
  if (nl > (int64_t{1} << 48) / nb || nr > (int64_t{1} << 48) / (nb * nl))
    node.fail("the contraction's result would have more than 2^48 elements");
  const Operand lhs = node.reshape(transpose_to(node, a, concat({&batch, &left, &contracted})), {nb, nl, nc});
  const Operand rhs = node.reshape(transpose_to(node, b, concat({&batch, &contracted, &right})), {nb, nc, nr});
  Term out;
  out.labels = concat({&batch, &left, &right});
  ir::Shape shape;
  for (int label : out.labels) shape.push_back(sizes.at(label));
  out.value = node.reshape(node.emit(OpId::Matmul, {lhs, rhs}), shape);
  return out;
}

Outputs einsum(NodeContext& node) {
  node.check_attrs({"equation"});
  std::string equation;
  for (char c : node.attr_string("equation", "")) if (c != ' ') equation += c;
  if (equation.empty()) node.fail("the equation is empty");
  const size_t arrow = equation.find("->");
  const std::vector<std::string> inputs = split(equation.substr(0, arrow), ',');
  if (static_cast<int>(inputs.size()) != node.num_inputs())
    node.fail("the equation has " + std::to_string(inputs.size()) + " input terms for " +
              std::to_string(node.num_inputs()) + " inputs");

  // Terms, with the ellipsis block right-aligned across operands.
  std::vector<Subscript> subscripts;
  int ellipsis_rank = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    subscripts.push_back(parse_subscript(node, inputs[i]));
    const Subscript& s = subscripts.back();
    const int letters = static_cast<int>(s.letters_before.size() + s.letters_after.size());
    const int rank = node.input(static_cast<int>(i)).type().rank();
    if (s.ellipsis ? rank < letters : rank != letters)
      node.fail("term '" + inputs[i] + "' does not fit input " + std::to_string(i) + " of rank " + std::to_string(rank));
    ellipsis_rank = std::max(ellipsis_rank, rank - letters);
  }
  std::vector<Term> terms;
  std::map<int, int> uses;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Subscript& s = subscripts[i];
    Term term{node.input(static_cast<int>(i)), s.letters_before};
    const int dims = term.value.type().rank() - static_cast<int>(s.letters_before.size() + s.letters_after.size());
    for (int j = 0; j < dims; ++j) term.labels.push_back(kEllipsis + ellipsis_rank - dims + j);
    term.labels.insert(term.labels.end(), s.letters_after.begin(), s.letters_after.end());
    if (!ir::is_floating(term.value.type().dtype)) node.fail("input " + std::to_string(i) + " must be floating point");
    for (int label : term.labels) ++uses[label];
    terms.push_back(std::move(term));
  }

  // The output's labels: given, or the ellipsis then the letters used once, sorted.
  std::vector<int> output;
  if (arrow != std::string::npos) {
    const Subscript s = parse_subscript(node, equation.substr(arrow + 2));
    output = s.letters_before;
    if (s.ellipsis)
      for (int j = 0; j < ellipsis_rank; ++j) output.push_back(kEllipsis + j);
    output.insert(output.end(), s.letters_after.begin(), s.letters_after.end());
    for (int label : output) {
      if (!uses.count(label)) node.fail("output label " + label_name(label) + " is in no input");
      if (std::count(output.begin(), output.end(), label) > 1) node.fail("output label " + label_name(label) + " appears twice");
    }
  } else {
    for (int j = 0; j < ellipsis_rank; ++j) output.push_back(kEllipsis + j);
    for (const auto& [label, count] : uses)
      if (label < kEllipsis && count == 1) output.push_back(label);
  }

  std::map<int, int64_t> sizes;
  for (Term& term : terms) {
    take_diagonals(node, term);
    record_sizes(node, term, sizes);
  }
  // Left to right: before each step, sum away what neither the output nor a later operand needs.
  auto needed_after = [&](size_t i) {
    std::set<int> keep(output.begin(), output.end());
    for (size_t j = i + 1; j < terms.size(); ++j) keep.insert(terms[j].labels.begin(), terms[j].labels.end());
    return keep;
  };
  Term result = terms[0];
  sum_unneeded(node, result, needed_after(0));
  for (size_t i = 1; i < terms.size(); ++i) {
    std::set<int> keep = needed_after(i);
    keep.insert(result.labels.begin(), result.labels.end());
    sum_unneeded(node, terms[i], keep);
    result = contract(node, result, terms[i], needed_after(i), sizes);
  }
  sum_unneeded(node, result, std::set<int>(output.begin(), output.end()));
  broadcast_to_sizes(node, result, sizes);
  return {transpose_to(node, result, output)};
}

constexpr OpRule kRules[] = {
    {"Einsum", 12, kMaxOpset, einsum},
};

}  // namespace

std::span<const OpRule> einsum_rules() { return kRules; }

}  // namespace kiln::compiler::onnx_import
