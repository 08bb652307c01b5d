// Strided views: where each element of a value lies in the buffer of another, when the ops
// between them only move elements (slice, transpose, reshape, flatten). A kernel can then read
// an operand through the view instead of a kernel materializing it first: how attention reads
// q, k and v straight out of a fused QKV projection (passes/fuse_attention_views.cpp).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace kiln::ir {

// Element (i0, i1, ...) of a value of `shape` is element offset + sum(i_d * strides[d]) of
// the buffer.
//
// A dim of the value may also be made of several of these dims (`groups`): merging dims that
// no single stride spans, such as the batch and the heads of [T, B, 3·H·Dh] reshaped to
// [T, B·H, Dh], keeps them apart, and index i of the merged dim decomposes row-major over them.
// `shape` and `strides` are then finer than the value's shape; value_shape() gives it back.
struct StridedView {
  Shape shape;
  std::vector<int64_t> strides;
  int64_t offset = 0;
  std::vector<int> groups;  // dims of `shape` per dim of the value; empty: one each
  friend bool operator==(const StridedView&, const StridedView&) = default;

  Shape value_shape() const;
  // Whether the value's last `count` dims are each one dim of `shape` (one stride each).
  bool plain_trailing(size_t count) const;
};

// A row-major buffer of `shape` viewed whole.
StridedView contiguous_view(const Shape& shape);

// The view as `shape` (same element count, row-major order), when the elements stay
// addressable: dims that merge or split must be contiguous within `view` (NumPy's rule for
// reshape without a copy), except that dims which merge without being contiguous stay apart as
// a group (and a group may split again where its dims divide it). nullopt otherwise.
std::optional<StridedView> reshape_view(const StridedView& view, const Shape& shape);

// Whether `op` is one the views follow: slice, transpose, reshape, flatten.
bool is_view_op(OpId op);

// The view of `node`'s result, given the view of its operand (forwards: what a consumer of the
// result reads); nullopt when the node is not a view op or its reshape is not expressible.
std::optional<StridedView> view_after(const StridedView& operand, const Node& node);

// The view of `node`'s operand, given the view of its result (backwards: where a producer
// writes so that the result lands as `result` says). Transposes and reshapes only.
std::optional<StridedView> view_before(const StridedView& result, const Node& node);

// Through a chain of view ops, `chain[0]` reading `source` and each next op reading the result
// of the one before: the view of the last result in `source`'s buffer (forwards), or the view of
// `source` in the buffer of the last result (backwards: where a producer of `source` writes so
// that the last result lands row-major). nullopt when an op breaks the view.
std::optional<StridedView> view_through(const Value* source, const std::vector<const Node*>& chain);
std::optional<StridedView> view_written_through(const Value* source,
                                                const std::vector<const Node*>& chain);

// A GEMM's A operand [rows..., K] made by `chain` from `source`, as a [M, K] view of
// `source`'s buffer whose K has stride 1 (the GEMM stages tiles along k): the rows may be any
// strided group. nullopt otherwise. `whole_rows` also asks each row to be one whole row of
// `source` (K equal to its last dim, rows and offset on multiples of K): what a row-wise norm of
// `source` before the views needs.
std::optional<StridedView> gemm_rows_view(const Value* source, const std::vector<const Node*>& chain,
                                          bool whole_rows);

// Where a GEMM's result [rows..., N] lands in the buffer of the last of `chain` (transposes and
// reshapes it goes through), as a [M, N] view whose N has stride 1: each result row is one run
// of the final tensor. nullopt otherwise.
std::optional<StridedView> gemm_output_view(const Value* result, const std::vector<const Node*>& chain);

// The buffer position of row `row` (a C expression) of a [M, K] view: the offset plus the row
// index decomposed row-major over its pieces, as C source.
std::string row_position(const StridedView& rows_by_k, const std::string& row);

}  // namespace kiln::ir
