// Strided views: where each element of a value lies in the buffer of another, when the ops
// between them only move elements (slice, transpose, reshape, flatten). A kernel can then read
// an operand through the view instead of a kernel materializing it first: how attention reads
// q, k and v straight out of a fused QKV projection (passes/fuse_attention_views.cpp).
#pragma once

#include <optional>
#include <vector>

#include "ir/graph.h"

namespace kiln::ir {

// Element (i0, i1, ...) of a value of `shape` is element offset + sum(i_d * strides[d]) of
// the buffer.
struct StridedView {
  Shape shape;
  std::vector<int64_t> strides;
  int64_t offset = 0;
  friend bool operator==(const StridedView&, const StridedView&) = default;
};

// A row-major buffer of `shape` viewed whole.
StridedView contiguous_view(const Shape& shape);

// The view as `shape` (same element count, row-major order), when the elements stay
// addressable by strides: each group of dims that merges or splits must be contiguous within
// `view` (NumPy's rule for reshape without a copy). nullopt otherwise.
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

}  // namespace kiln::ir
