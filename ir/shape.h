// Static shapes and tensor types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ir/dtype.h"

namespace kiln::ir {

using Shape = std::vector<int64_t>;

// The largest element count kiln accepts for one tensor (2^48): well above any real model and
// far enough from int64 overflow that byte counts and index arithmetic stay exact.
inline constexpr int64_t kMaxElements = int64_t{1} << 48;

// Product of the dims, or nullopt if a dim is < 1 or the product exceeds kMaxElements.
std::optional<int64_t> checked_num_elements(const Shape& shape);
// Product of the dims of a shape already known to be valid.
int64_t num_elements(const Shape& shape);
// Product of the dims shape[begin, end) (1 for an empty range): the rows before an axis, the
// elements after it.
int64_t num_elements(const Shape& shape, size_t begin, size_t end);

// "[1,64,56,56]"; "[]" for a scalar.
std::string shape_to_string(const Shape& shape);

// NumPy broadcasting of two shapes, or nullopt when they are incompatible.
std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b);

// Maps axis in [-rank, rank) to [0, rank); nullopt when out of range.
std::optional<int> normalize_axis(int64_t axis, int rank);

// Row-major strides (in elements) of a shape.
std::vector<int64_t> row_major_strides(const Shape& shape);

struct TensorType {
  DType dtype = DType::F32;
  Shape shape;

  int rank() const { return static_cast<int>(shape.size()); }
  // "f32[1,64,56,56]"
  std::string to_string() const;
  friend bool operator==(const TensorType&, const TensorType&) = default;
};

}  // namespace kiln::ir
