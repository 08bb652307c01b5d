// ONNX linear algebra → kiln ops: Det by Gaussian elimination with partial pivoting, unrolled over
// the n columns (each step: pick the largest pivot, swap it up by a gather, eliminate below it).
// The determinant is the product of the pivots, negated once per swap.
#include <string>

#include "compiler/import/onnx/onnx_ops.h"

namespace kiln::compiler::onnx_import {

namespace {
using ir::OpId;
using Outputs = std::vector<Operand>;
using Ints = std::vector<int64_t>;

// Each column costs about fifteen ops; past this size a matrix wants a kernel of its own.
constexpr int64_t kMaxDetSize = 64;

Outputs det(NodeContext& node) {
  const Operand& x = node.input(0);
  const ir::TensorType& type = x.type();
  const int rank = type.rank();
  if (!ir::is_floating(type.dtype)) node.fail("input must be a float tensor, got " + type.to_string());
  if (rank < 2 || type.shape[static_cast<size_t>(rank - 1)] != type.shape[static_cast<size_t>(rank - 2)])
    node.fail("input must be [..., n, n], got " + type.to_string());
  const int64_t n = type.shape.back();
  if (n > kMaxDetSize) node.fail("matrices of " + std::to_string(n) + " x " + std::to_string(n) + " are over the " +
                                 std::to_string(kMaxDetSize) + " x " + std::to_string(kMaxDetSize) + " kiln unrolls");
  const ir::DType t = type.dtype;
  const ir::Shape batch(type.shape.begin(), type.shape.end() - 2);
  auto k_ = [&](double v) { return node.scalar(t, v); };
  auto slice = [&](const Operand& v, int axis, int64_t begin, int64_t end) {
    return node.emit(OpId::Slice, {v}, {{"starts", Ints{begin}}, {"ends", Ints{end}}, {"axes", Ints{axis}}, {"steps", Ints{1}}});
  };
  auto with = [&](ir::Shape tail) {
    ir::Shape shape = batch;
    shape.insert(shape.end(), tail.begin(), tail.end());
    return shape;
  };
  const Operand rows = node.positions(rank, rank - 2, n);  // [1..., n, 1], i64

  Operand a = x, determinant = node.fill(t, with({1, 1}), 1.0);
  for (int64_t k = 0; k < n; ++k) {
    if (k + 1 < n) {
      // The row (k or below) with the largest |a[., k]| becomes row k.
      const Operand column = node.emit(OpId::Abs, {slice(slice(a, rank - 1, k, k + 1), rank - 2, k, n)});
      const Operand best = node.emit(OpId::Add, {node.emit(OpId::Argmax, {column}, {{"axis", int64_t{rank - 2}}, {"keepdims", true}}),
                                                  node.scalar(ir::DType::I64, double(k))});  // [..., 1, 1]
      const Operand here = node.scalar(ir::DType::I64, double(k));
      const Operand source = node.emit(OpId::Where, {node.emit(OpId::Equal, {rows, here}), best,
                                                     node.emit(OpId::Where, {node.emit(OpId::Equal, {rows, best}), here, rows})});
      a = node.emit(OpId::GatherElements, {a, node.emit(OpId::BroadcastTo, {source}, {{"shape", type.shape}})},
                    {{"axis", int64_t{rank - 2}}});
      determinant = node.emit(OpId::Where, {node.emit(OpId::Equal, {best, here}), determinant, node.emit(OpId::Neg, {determinant})});
    }
    const Operand pivot = slice(slice(a, rank - 2, k, k + 1), rank - 1, k, k + 1);  // [..., 1, 1]
    determinant = node.emit(OpId::Mul, {determinant, pivot});
    if (k + 1 == n) break;
    // Rows below k lose a multiple of row k; a zero pivot (a singular matrix, determinant 0
    // already) divides by one instead, so no NaN spreads.
    const Operand safe = node.emit(OpId::Where, {node.emit(OpId::Equal, {pivot, k_(0.0)}), k_(1.0), pivot});
    std::vector<double> below(static_cast<size_t>(n), 0.0);
    for (int64_t i = k + 1; i < n; ++i) below[static_cast<size_t>(i)] = 1.0;
    const Operand mask = node.constant(ir::Tensor::from_doubles({t, {n, 1}}, below), "below_pivot");
    const Operand factor = node.emit(OpId::Mul, {node.emit(OpId::Div, {slice(a, rank - 1, k, k + 1), safe}), mask});  // [..., n, 1]
    a = node.emit(OpId::Sub, {a, node.emit(OpId::Mul, {factor, slice(a, rank - 2, k, k + 1)})});
  }
  return {node.reshape(determinant, batch)};
}

constexpr OpRule kRules[] = {
    {"Det", 11, kMaxOpset, det},
};

}  // namespace

std::span<const OpRule> linalg_rules() { return kRules; }

}  // namespace kiln::compiler::onnx_import
