// A dense, row-major tensor held in host memory: parameter data, run inputs and outputs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "ir/shape.h"

namespace kiln::ir {

class Tensor {
 public:
  Tensor() = default;
  // Zero-filled tensor of the given type (shape must be valid).
  explicit Tensor(TensorType type);
  Tensor(TensorType type, std::vector<std::byte> bytes);  // bytes.size() must match the type

  const TensorType& type() const { return type_; }
  DType dtype() const { return type_.dtype; }
  const Shape& shape() const { return type_.shape; }
  int64_t num_elements() const { return ir::num_elements(type_.shape); }

  std::byte* data() { return bytes_.data(); }
  const std::byte* data() const { return bytes_.data(); }
  const std::vector<std::byte>& bytes() const { return bytes_; }
  std::size_t byte_size() const { return bytes_.size(); }

  // Element `index` (flat, row-major) converted to double; bool reads as 0 or 1.
  double get(int64_t index) const;
  // Stores `value` converted to the element type: rounding to nearest for floats, truncation
  // toward zero for integers (as a C++ or CUDA cast does), value != 0 for bool.
  void set(int64_t index, double value);

  std::vector<double> to_doubles() const;
  static Tensor from_doubles(TensorType type, const std::vector<double>& values);

 private:
  TensorType type_;
  std::vector<std::byte> bytes_;
};

// Tensor data that someone else owns (a NumPy array handed to the Python API), with its type:
// read during one call and never kept, so that inputs reach the executable without a copy.
struct TensorView {
  TensorType type;
  const std::byte* data = nullptr;  // num_elements(type.shape) elements of type.dtype

  static TensorView of(const Tensor& tensor) { return {tensor.type(), tensor.data()}; }
  std::size_t byte_size() const {
    return static_cast<std::size_t>(num_elements(type.shape)) * dtype_size(type.dtype);
  }
};
// The views of `tensors`, and a copy of each view's data as an owned tensor.
std::vector<TensorView> views_of(const std::vector<Tensor>& tensors);
std::vector<Tensor> copies_of(const std::vector<TensorView>& views);

// IEEE binary16 and bfloat16 conversions, round to nearest even.
uint16_t float_to_half_bits(float value);
float half_bits_to_float(uint16_t bits);
uint16_t float_to_bfloat16_bits(float value);
float bfloat16_bits_to_float(uint16_t bits);

}  // namespace kiln::ir
