#include "ir/shape.h"

#include <algorithm>

namespace kiln::ir {

std::optional<int64_t> checked_num_elements(const Shape& shape) {
  int64_t count = 1;
  for (int64_t dim : shape) {
    // Dividing first keeps count * dim from overflowing int64 (both may be near 2^48).
    if (dim < 1 || dim > kMaxElements / count) return std::nullopt;
    count *= dim;
  }
  return count;
}

int64_t num_elements(const Shape& shape) { return num_elements(shape, 0, shape.size()); }

int64_t num_elements(const Shape& shape, size_t begin, size_t end) {
  int64_t count = 1;
  for (size_t d = begin; d < end; ++d) count *= shape[d];
  return count;
}

std::string shape_to_string(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ",";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    // Align from the right; missing leading dims count as 1.
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::optional<int> normalize_axis(int64_t axis, int rank) {
  if (axis < -rank || axis >= rank) return std::nullopt;
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

std::vector<int64_t> row_major_strides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

std::string TensorType::to_string() const {
  return std::string(dtype_name(dtype)) + shape_to_string(shape);
}

}  // namespace kiln::ir
