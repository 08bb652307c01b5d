#include "ir/float_storage.h"

#include <cstdio>

namespace kiln::ir {

std::optional<DType> parse_weights_dtype(std::string_view text) {
  if (text == "f32") return DType::F32;
  if (text == "bf16") return DType::BF16;
  if (text == "f16") return DType::F16;
  return std::nullopt;
}

std::optional<Tensor> narrowed_for_storage(const Tensor& tensor, DType dtype, std::string* error) {
  if (tensor.dtype() != DType::F32 || dtype == DType::F32) return tensor;
  Tensor narrowed(TensorType{dtype, tensor.shape()});
  for (int64_t i = 0; i < tensor.num_elements(); ++i) {
    const double value = tensor.get(i);
    if (!fits_dtype(value, dtype)) {
      char text[32];
      std::snprintf(text, sizeof text, "%.9g", value);
      *error = "element " + std::to_string(i) + " (" + text + ") is beyond the range of " +
               std::string(dtype_name(dtype));
      return std::nullopt;
    }
    narrowed.set(i, value);
  }
  return narrowed;
}

Tensor widened_from_storage(Tensor stored, const TensorType& slot) {
  const bool narrow = stored.dtype() == DType::BF16 || stored.dtype() == DType::F16;
  if (!narrow || slot.dtype != DType::F32 || stored.shape() != slot.shape) return stored;
  Tensor wide(slot);
  for (int64_t i = 0; i < stored.num_elements(); ++i) wide.set(i, stored.get(i));
  return wide;
}

}  // namespace kiln::ir
