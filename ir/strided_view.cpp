#include "ir/strided_view.h"

#include <algorithm>
#include <string>

namespace kiln::ir {

namespace {

// A view as one list of (size, stride) pieces per dim of the value, outermost piece first.
struct Piece {
  int64_t size;
  int64_t stride;
};
using Pieces = std::vector<std::vector<Piece>>;

Pieces pieces_of(const StridedView& view) {
  Pieces dims;
  size_t next = 0;
  const size_t rank = view.groups.empty() ? view.shape.size() : view.groups.size();
  for (size_t d = 0; d < rank; ++d) {
    const size_t count = view.groups.empty() ? 1 : static_cast<size_t>(view.groups[d]);
    std::vector<Piece>& dim = dims.emplace_back();
    for (size_t k = 0; k < count; ++k, ++next) dim.push_back({view.shape[next], view.strides[next]});
  }
  return dims;
}

// Drops size-1 pieces (their stride means nothing) and merges neighbours that are one run of
// memory (the outer steps over the inner whole).
std::vector<Piece> coalesce(const std::vector<Piece>& pieces) {
  std::vector<Piece> out;
  for (const Piece& piece : pieces) {
    if (piece.size == 1) continue;
    if (!out.empty() && out.back().stride == piece.stride * piece.size) {
      out.back() = {out.back().size * piece.size, piece.stride};
      continue;
    }
    out.push_back(piece);
  }
  return out;
}

StridedView view_of(const Pieces& dims, int64_t offset) {
  StridedView view{{}, {}, offset, {}};
  bool grouped = false;
  for (const std::vector<Piece>& dim : dims) {
    const std::vector<Piece> pieces = dim.empty() ? std::vector<Piece>{{1, 1}} : dim;
    for (const Piece& piece : pieces) {
      view.shape.push_back(piece.size);
      view.strides.push_back(piece.stride);
    }
    view.groups.push_back(static_cast<int>(pieces.size()));
    grouped = grouped || pieces.size() != 1;
  }
  if (!grouped) view.groups.clear();
  return view;
}

// Takes the pieces of one dim of `size` off the front of `queue`, splitting the piece that
// straddles its end when the sizes divide; nullopt when they do not.
std::optional<std::vector<Piece>> take(std::vector<Piece>& queue, size_t& head, int64_t size) {
  std::vector<Piece> taken;
  int64_t product = 1;
  while (product < size) {
    if (head == queue.size() || size % product != 0) return std::nullopt;
    const int64_t need = size / product;
    Piece& piece = queue[head];
    if (piece.size <= need && need % piece.size == 0) {
      taken.push_back(piece);
      product *= piece.size;
      ++head;
    } else if (piece.size % need == 0) {
      taken.push_back({need, piece.stride * (piece.size / need)});
      piece.size /= need;
      product *= need;
    } else {
      return std::nullopt;
    }
  }
  return coalesce(taken);
}

}  // namespace

Shape StridedView::value_shape() const {
  Shape shape;
  for (const std::vector<Piece>& dim : pieces_of(*this)) {
    int64_t size = 1;
    for (const Piece& piece : dim) size *= piece.size;
    shape.push_back(size);
  }
  return shape;
}

bool StridedView::plain_trailing(size_t count) const {
  if (groups.empty()) return count <= shape.size();
  if (count > groups.size()) return false;
  return std::all_of(groups.end() - static_cast<std::ptrdiff_t>(count), groups.end(), [](int g) { return g == 1; });
}

StridedView contiguous_view(const Shape& shape) {
  StridedView view{shape, std::vector<int64_t>(shape.size(), 1), 0, {}};
  for (size_t d = shape.size(); d-- > 1;) view.strides[d - 1] = view.strides[d] * shape[d];
  return view;
}

std::optional<StridedView> reshape_view(const StridedView& view, const Shape& shape) {
  const Pieces old_dims = pieces_of(view);
  const Shape old_shape = view.value_shape();
  Pieces new_dims(shape.size());
  // Walk both shapes (their non-1 dims) in runs with equal element counts; each run's pieces,
  // made as few as memory allows, are dealt out to its new dims.
  std::vector<size_t> old_live, new_live;
  for (size_t d = 0; d < old_shape.size(); ++d)
    if (old_shape[d] != 1) old_live.push_back(d);
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] != 1) new_live.push_back(d);
  size_t i = 0, j = 0;
  while (i < old_live.size() && j < new_live.size()) {
    size_t i_end = i + 1, j_end = j + 1;
    int64_t old_count = old_shape[old_live[i]], new_count = shape[new_live[j]];
    while (old_count != new_count) {
      if (old_count < new_count) {
        if (i_end == old_live.size()) return std::nullopt;
        old_count *= old_shape[old_live[i_end++]];
      } else {
        if (j_end == new_live.size()) return std::nullopt;
        new_count *= shape[new_live[j_end++]];
      }
    }
    std::vector<Piece> run;
    for (size_t k = i; k < i_end; ++k)
      run.insert(run.end(), old_dims[old_live[k]].begin(), old_dims[old_live[k]].end());
    std::vector<Piece> queue = coalesce(run);
    size_t head = 0;
    for (size_t k = j; k < j_end; ++k) {
      std::optional<std::vector<Piece>> dim = take(queue, head, shape[new_live[k]]);
      if (!dim) return std::nullopt;
      new_dims[new_live[k]] = std::move(*dim);
    }
    i = i_end;
    j = j_end;
  }
  if (i != old_live.size() || j != new_live.size()) return std::nullopt;
  return view_of(new_dims, view.offset);
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
      const Pieces dims = pieces_of(operand);
      Pieces moved;
      for (int64_t p : perm_of(node, dims.size())) moved.push_back(dims[static_cast<size_t>(p)]);
      return view_of(moved, operand.offset);
    }
    case OpId::Slice: {
      const auto& starts = std::get<std::vector<int64_t>>(node.attrs.at("starts"));
      const auto& axes = std::get<std::vector<int64_t>>(node.attrs.at("axes"));
      const auto& steps = std::get<std::vector<int64_t>>(node.attrs.at("steps"));
      Pieces dims = pieces_of(operand);
      int64_t offset = operand.offset;
      const int64_t rank = static_cast<int64_t>(dims.size());
      for (size_t i = 0; i < starts.size(); ++i) {
        int64_t axis = axes.empty() ? static_cast<int64_t>(i) : axes[i];
        if (axis < 0) axis += rank;
        std::vector<Piece>& dim = dims[static_cast<size_t>(axis)];
        if (dim.size() != 1) return std::nullopt;  // a group has no one stride to step by
        int64_t start = starts[i] < 0 ? starts[i] + dim[0].size : starts[i];
        start = std::clamp<int64_t>(start, 0, dim[0].size);
        offset += start * dim[0].stride;
        dim[0].stride *= steps.empty() ? 1 : steps[i];
        dim[0].size = out[static_cast<size_t>(axis)];
      }
      return view_of(dims, offset);
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
      const Pieces dims = pieces_of(result);
      const std::vector<int64_t> perm = perm_of(node, in.size());
      Pieces before(in.size());
      for (size_t k = 0; k < perm.size(); ++k) before[static_cast<size_t>(perm[k])] = dims[k];
      return view_of(before, result.offset);
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

std::optional<StridedView> gemm_rows_view(const Value* source, const std::vector<const Node*>& chain,
                                          bool whole_rows) {
  const std::optional<StridedView> view = view_through(source, chain);
  if (!view) return std::nullopt;
  const Shape shape = view->value_shape();
  if (shape.empty()) return std::nullopt;
  const int64_t k = shape.back();
  std::optional<StridedView> rows = reshape_view(*view, {num_elements(shape) / k, k});
  if (!rows || !rows->plain_trailing(1) || (k > 1 && rows->strides.back() != 1)) return std::nullopt;
  if (whole_rows) {
    const Shape& in = source->type.shape;
    if (in.empty() || in.back() != k || rows->offset % k != 0) return std::nullopt;
    for (size_t d = 0; d + 1 < rows->shape.size(); ++d)
      if (rows->shape[d] > 1 && rows->strides[d] % k != 0) return std::nullopt;
  }
  return rows;
}

std::optional<StridedView> gemm_output_view(const Value* result, const std::vector<const Node*>& chain) {
  const std::optional<StridedView> view = view_written_through(result, chain);
  if (!view) return std::nullopt;
  const Shape& shape = result->type.shape;
  if (shape.empty()) return std::nullopt;
  const int64_t n = shape.back();
  std::optional<StridedView> rows = reshape_view(*view, {num_elements(shape) / n, n});
  if (!rows || !rows->plain_trailing(1) || (n > 1 && rows->strides.back() != 1)) return std::nullopt;
  return rows;
}

std::string row_position(const StridedView& rows_by_k, const std::string& row) {
  // Every piece but the last (K) is one of the rows'.
  std::string text = std::to_string(rows_by_k.offset);
  int64_t inner = 1;
  for (size_t d = rows_by_k.shape.size() - 1; d-- > 0;) {
    const int64_t size = rows_by_k.shape[d], stride = rows_by_k.strides[d];
    if (size == 1) continue;
    std::string index = inner == 1 ? row : "(" + row + ") / " + std::to_string(inner);
    if (d > 0) index = "(" + index + ") % " + std::to_string(size);
    text += " + (" + index + ") * " + std::to_string(stride);
    inner *= size;
  }
  return text;
}

}  // namespace kiln::ir
