// ONNX TopK by comparisons, until kiln has a sort kernel: along the axis, each element's rank is
// the number of elements that come before it (greater, or equal at a lower index, for the
// largest; less for the smallest), and output r picks the element of rank r. That is n^2
// comparisons per row, so TopK is limited to kMaxComparisons in all and says so beyond; fine for
// the detection heads and small vocabularies it meets in models, not for sorting 32k logits.
#include <string>

#include "compiler/import/onnx/onnx_ops.h"

namespace kiln::compiler::onnx_import {
namespace {

using ir::OpId;
using Ints = std::vector<int64_t>;
using Outputs = std::vector<Operand>;

constexpr int64_t kMaxComparisons = int64_t{1} << 26;

Outputs top_k(NodeContext& node) {
  node.check_attrs({"axis", "k", "largest", "sorted"});
  Operand x = node.input(0);
  const int rank = x.type().rank();
  if (rank < 1) node.fail("input must have rank >= 1");
  const int axis = normalize_axis_or_fail(node, node.attr_int("axis", -1), rank, "axis");
  const int64_t n = x.type().shape[static_cast<size_t>(axis)];
  int64_t k = 0;
  if (node.opset() < 10) {
    k = node.attr_int("k", -1);
  } else {
    const auto ks = node.const_ints(1, "K");
    if (ks.size() != 1) node.fail("K must hold one value");
    k = ks[0];
  }
  if (k < 1 || k > n) node.fail("K = " + std::to_string(k) + " is outside [1, " + std::to_string(n) + "]");
  const bool largest = node.attr_int("largest", 1) != 0;
  const int64_t rows = ir::num_elements(x.type().shape) / n;
  if (n > kMaxComparisons / n || rows > kMaxComparisons / (n * n))
    node.fail("TopK over " + std::to_string(rows) + " rows of " + std::to_string(n) +
              " elements: kiln ranks by comparing every pair, up to 2^26 comparisons (a sort kernel is later work)");

  // The axis goes last: [rows..., n].
  Ints perm;
  for (int a = 0; a < rank; ++a)
    if (a != axis) perm.push_back(a);
  perm.push_back(axis);
  const bool moved = axis != rank - 1;
  if (moved) x = node.emit(OpId::Transpose, {x}, {{"perm", perm}});
  ir::Shape column = x.type().shape, row = x.type().shape;
  column.push_back(1);                       // [..., n, 1]: element i
  row.insert(row.end() - 1, 1);              // [..., 1, n]: element j
  const Operand xi = node.reshape(x, column), xj = node.reshape(x, row);

  // rank_i = #{j : x_j before x_i}; ties go to the lower index.
  const Operand i = node.positions(2, 0, n), j = node.positions(2, 1, n);
  const Operand lower_index = node.emit(OpId::Less, {j, i});
  const Operand ahead = node.emit(largest ? OpId::Greater : OpId::Less, {xj, xi});
  const Operand tie_ahead = node.emit(OpId::LogicalAnd, {node.emit(OpId::Equal, {xj, xi}), lower_index});
  const Operand before = node.emit(OpId::Cast, {node.emit(OpId::LogicalOr, {ahead, tie_ahead})}, {{"to", std::string("i64")}});
  const ir::AttrMap over_n{{"axes", Ints{rank}}, {"keepdims", false}};  // the last of rank + 1 dims
  const Operand ranks = node.emit(OpId::ReduceSum, {before}, over_n);

  // Output r takes the element of rank r: a one-hot [..., k, n] selection.
  const Operand wanted = node.positions(2, 0, k);  // [k, 1]
  const Operand pick = node.emit(OpId::Equal, {node.reshape(ranks, row), wanted});
  Operand values = node.emit(OpId::ReduceSum, {node.emit(OpId::Where, {pick, xj, node.scalar(x.type().dtype, 0.0)})}, over_n);
  Operand indices = node.emit(OpId::ReduceSum, {node.emit(OpId::Where, {pick, node.positions(2, 1, n), node.scalar(ir::DType::I64, 0.0)})}, over_n);
  if (moved) {
    Ints inverse(perm.size());
    for (size_t a = 0; a < perm.size(); ++a) inverse[static_cast<size_t>(perm[a])] = static_cast<int64_t>(a);
    values = node.emit(OpId::Transpose, {values}, {{"perm", inverse}});
    indices = node.emit(OpId::Transpose, {indices}, {{"perm", inverse}});
  }
  return {values, indices};
}

constexpr OpRule kRules[] = {
    {"TopK", 1, kMaxOpset, top_k},
};

}  // namespace

std::span<const OpRule> sort_rules() { return kRules; }

}  // namespace kiln::compiler::onnx_import
