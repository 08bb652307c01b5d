#include "runtime/package/sparse_weights.h"

#include <fmt/format.h>

#include <bit>
#include <cstdint>
#include <cstring>

namespace kiln::runtime {
namespace {

// Whether every byte of the element is zero; the common widths as one load (ResNet-50's 25 M
// weights are counted on every kiln compile).
bool is_zero(const std::byte* element, size_t size) {
  if (size == 4) {
    uint32_t word;
    std::memcpy(&word, element, 4);
    return word == 0;
  }
  if (size == 2) {
    uint16_t half;
    std::memcpy(&half, element, 2);
    return half == 0;
  }
  for (size_t b = 0; b < size; ++b)
    if (element[b] != std::byte{0}) return false;
  return true;
}

}  // namespace

int64_t bitmask_encoded_bytes(const ir::TensorType& type, int64_t nonzeros) {
  const int64_t elements = ir::num_elements(type.shape);
  return (elements + 7) / 8 + nonzeros * static_cast<int64_t>(ir::dtype_size(type.dtype));
}

int64_t count_nonzeros(const ir::Tensor& tensor) {
  const size_t size = ir::dtype_size(tensor.dtype());
  int64_t nonzeros = 0;
  for (int64_t i = 0; i < tensor.num_elements(); ++i) nonzeros += !is_zero(tensor.data() + i * size, size);
  return nonzeros;
}

bool stored_as_bitmask(const ir::TensorType& type, int64_t nonzeros) {
  const int64_t elements = ir::num_elements(type.shape);
  return elements > 0 &&
         bitmask_encoded_bytes(type, nonzeros) < elements * static_cast<int64_t>(ir::dtype_size(type.dtype));
}

std::optional<BitmaskEncoded> encode_bitmask(const ir::Tensor& tensor) {
  // Counted first: a dense tensor (the usual case) costs one read and no allocation.
  const int64_t nonzeros = count_nonzeros(tensor);
  if (!stored_as_bitmask(tensor.type(), nonzeros)) return std::nullopt;
  const size_t size = ir::dtype_size(tensor.dtype());
  const int64_t elements = tensor.num_elements();
  const std::byte* data = tensor.data();
  const int64_t encoded_bytes = bitmask_encoded_bytes(tensor.type(), nonzeros);

  BitmaskEncoded encoded;
  encoded.nonzeros = nonzeros;
  encoded.bytes.assign(static_cast<size_t>(encoded_bytes), '\0');
  char* mask = encoded.bytes.data();
  char* values = mask + (elements + 7) / 8;
  for (int64_t i = 0; i < elements; ++i) {
    const std::byte* element = data + i * size;
    if (is_zero(element, size)) continue;
    mask[i / 8] = static_cast<char>(static_cast<unsigned char>(mask[i / 8]) | (1u << (i % 8)));
    std::memcpy(values, element, size);
    values += size;
  }
  return encoded;
}

std::optional<ir::Tensor> decode_bitmask(std::string_view bytes, const ir::TensorType& type, int64_t nonzeros,
                                         std::string* error) {
  const int64_t elements = ir::num_elements(type.shape);
  if (nonzeros < 0 || nonzeros > elements) {
    *error = fmt::format("{} nonzeros in a tensor of {} elements", nonzeros, elements);
    return std::nullopt;
  }
  if (static_cast<int64_t>(bytes.size()) != bitmask_encoded_bytes(type, nonzeros)) {
    *error = fmt::format("{} bytes do not hold the bitmask of a {} and {} nonzeros ({} bytes)", bytes.size(),
                         type.to_string(), nonzeros, bitmask_encoded_bytes(type, nonzeros));
    return std::nullopt;
  }
  const size_t mask_bytes = static_cast<size_t>((elements + 7) / 8);
  int64_t marked = 0;
  for (size_t b = 0; b < mask_bytes; ++b) marked += std::popcount(static_cast<unsigned char>(bytes[b]));
  const bool stray_bits = elements % 8 != 0 && (static_cast<unsigned char>(bytes[mask_bytes - 1]) >> (elements % 8)) != 0;
  if (marked != nonzeros || stray_bits) {
    *error = stray_bits ? fmt::format("the bitmask marks elements past the last of {}", elements)
                        : fmt::format("the bitmask marks {} elements, the entry says {} nonzeros", marked, nonzeros);
    return std::nullopt;
  }
  ir::Tensor tensor(type);  // zeros
  const size_t size = ir::dtype_size(type.dtype);
  const char* values = bytes.data() + mask_bytes;
  for (int64_t i = 0; i < elements; ++i) {
    if (!((static_cast<unsigned char>(bytes[static_cast<size_t>(i / 8)]) >> (i % 8)) & 1u)) continue;
    std::memcpy(tensor.data() + i * size, values, size);
    values += size;
  }
  return tensor;
}

}  // namespace kiln::runtime
