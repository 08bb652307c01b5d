#include "ir/strided_view.h"

#include <algorithm>

namespace kiln::ir {

StridedView contiguous_view(const Shape& shape) {
  StridedView view{shape, std::vector<int64_t>(shape.size(), 1), 0};
  for (size_t d = shape.size(); d-- > 1;) view.strides[d - 1] = view.strides[d] * shape[d];
  return view;
}

std::optional<StridedView> reshape_view(const StridedView& view, const Shape& shape) {
  // Size-1 dims have no meaningful stride: drop them first, give new ones any stride.
  Shape old_shape;
  std::vector<int64_t> old_strides;
  for (size_t d = 0; d < view.shape.size(); ++d)
    if (view.shape[d] != 1) {
      old_shape.push_back(view.shape[d]);
      old_strides.push_back(view.strides[d]);
    }
  StridedView result{shape, std::vector<int64_t>(shape.size(), 1), view.offset};
  std::vector<size_t> new_dims;  // the non-1 dims of `shape`
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] != 1) new_dims.push_back(d);
  // Walk both lists in groups with equal element counts.
  size_t i = 0, j = 0;
  while (i < old_shape.size() && j < new_dims.size()) {
    size_t i_end = i + 1, j_end = j + 1;
    int64_t old_count = old_shape[i], new_count = shape[new_dims[j]];
    while (old_count != new_count) {
      if (old_count < new_count) {
        if (i_end == old_shape.size()) return std::nullopt;
        old_count *= old_shape[i_end++];
      } else {
        if (j_end == new_dims.size()) return std::nullopt;
        new_count *= shape[new_dims[j_end++]];
      }
    }
    // The old group must be one run of memory: each dim steps over the next whole.
    for (size_t k = i; k + 1 < i_end; ++k)
      if (old_strides[k] != old_strides[k + 1] * old_shape[k + 1]) return std::nullopt;
    // The new group splits that run row-major, from the innermost stride.
    int64_t stride = old_strides[i_end - 1];
    for (size_t k = j_end; k-- > j;) {
      result.strides[new_dims[k]] = stride;
      stride *= shape[new_dims[k]];
    }
    i = i_end;
    j = j_end;
  }
  if (i != old_shape.size() || j != new_dims.size()) return std::nullopt;
  return result;
}

bool is_view_op(OpId op) {
  return op == OpId::Slice || op == OpId::Transpose || op == OpId::Reshape || op == OpId::Flatten;
}

namespace {

// transpose's perm with its default (reversed) filled in and negative axes normalized.
std::vector<int64_t> perm_of(const Node& node, size_t rank) {
  std::vector<int64_t> perm = std::get<std::vector<int64_t>>(node.attrs.at("perm"));
  if (perm.empty())
    for (size_t d = rank; d-- > 0;) perm.push_back(static_cast<int64_t>(d));
  for (int64_t& p : perm)
    if (p < 0) p += static_cast<int64_t>(rank);
  return perm;
}

}  // namespace

std::optional<StridedView> view_after(const StridedView& operand, const Node& node) {
  const Shape& out = node.results[0]->type.shape;
  switch (node.op) {
    case OpId::Reshape:
    case OpId::Flatten:
      return reshape_view(operand, out);
    case OpId::Transpose: {
      const std::vector<int64_t> perm = perm_of(node, operand.shape.size());
      StridedView view{{}, {}, operand.offset};
      for (int64_t p : perm) {
        view.shape.push_back(operand.shape[static_cast<size_t>(p)]);
        view.strides.push_back(operand.strides[static_cast<size_t>(p)]);
      }
      return view;
    }
    case OpId::Slice: {
      const auto& starts = std::get<std::vector<int64_t>>(node.attrs.at("starts"));
      const auto& axes = std::get<std::vector<int64_t>>(node.attrs.at("axes"));
      const auto& steps = std::get<std::vector<int64_t>>(node.attrs.at("steps"));
      StridedView view = operand;
      const int64_t rank = static_cast<int64_t>(operand.shape.size());
      for (size_t i = 0; i < starts.size(); ++i) {
        int64_t axis = axes.empty() ? static_cast<int64_t>(i) : axes[i];
        if (axis < 0) axis += rank;
        const int64_t dim = operand.shape[static_cast<size_t>(axis)];
        int64_t start = starts[i] < 0 ? starts[i] + dim : starts[i];
        start = std::clamp<int64_t>(start, 0, dim);
        const int64_t step = steps.empty() ? 1 : steps[i];
        view.offset += start * operand.strides[static_cast<size_t>(axis)];
        view.strides[static_cast<size_t>(axis)] *= step;
      }
      view.shape = out;
      return view;
    }
    default:
      return std::nullopt;
  }
}

std::optional<StridedView> view_before(const StridedView& result, const Node& node) {
  const Shape& in = node.inputs[0]->type.shape;
  switch (node.op) {
    case OpId::Reshape:
    case OpId::Flatten:
      return reshape_view(result, in);
    case OpId::Transpose: {
      const std::vector<int64_t> perm = perm_of(node, in.size());
      StridedView view{in, std::vector<int64_t>(in.size(), 0), result.offset};
      for (size_t k = 0; k < perm.size(); ++k)
        view.strides[static_cast<size_t>(perm[k])] = result.strides[k];
      return view;
    }
    default:
      return std::nullopt;
  }
}

std::optional<StridedView> view_through(const Value* source, const std::vector<const Node*>& chain) {
  std::optional<StridedView> view = contiguous_view(source->type.shape);
  for (size_t i = 0; i < chain.size() && view; ++i) view = view_after(*view, *chain[i]);
  return view;
}

std::optional<StridedView> view_written_through(const Value* source,
                                                const std::vector<const Node*>& chain) {
  std::optional<StridedView> view =
      contiguous_view(chain.empty() ? source->type.shape : chain.back()->results[0]->type.shape);
  for (size_t i = chain.size(); i-- > 0 && view;) view = view_before(*view, *chain[i]);
  return view;
}

}  // namespace kiln::ir
