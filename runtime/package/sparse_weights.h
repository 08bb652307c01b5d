// Weights that are mostly zeros (kiln train --prune, --prune-pattern=2:4) stored compressed in
// packages: a bitmask with one bit per element, set where the element is not zero, followed by
// the elements that are not zero, in order. A weight matrix pruned to sparsity s then takes
// (1 - s) of its bytes plus 1/8 byte per element: 80 % zeros in f32 is 23 % of the dense bytes.
//
// "Zero" is every byte of the element zero (+0.0 for floats; -0.0 is kept as a value), so the
// round trip is exact for any dtype. The encoding is chosen per tensor, only when it is smaller
// than the dense bytes: weights that were never pruned are stored as they are.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "ir/tensor.h"

namespace kiln::runtime {

inline constexpr std::string_view kBitmaskEncoding = "bitmask";

struct BitmaskEncoded {
  std::string bytes;      // ceil(n / 8) bytes of bitmask (element i: bit i % 8 of byte i / 8), then the values
  int64_t nonzeros = 0;   // how many values follow the bitmask
};

// The bitmask encoding of `tensor`, or nullopt when it would not be smaller than its dense bytes.
std::optional<BitmaskEncoded> encode_bitmask(const ir::Tensor& tensor);

// The tensor of type `type` that `bytes` encode with `nonzeros` values; nullopt and `error` set
// ("the bitmask marks 12 elements, the entry says 10 nonzeros") when they do not fit together.
std::optional<ir::Tensor> decode_bitmask(std::string_view bytes, const ir::TensorType& type, int64_t nonzeros,
                                         std::string* error);

// The bytes the bitmask encoding of `nonzeros` values of a `type` takes.
int64_t bitmask_encoded_bytes(const ir::TensorType& type, int64_t nonzeros);

// How many elements of `tensor` are not zero (some byte set).
int64_t count_nonzeros(const ir::Tensor& tensor);

// Whether a `type` with `nonzeros` values is stored as a bitmask: when that is smaller than its
// dense bytes.
bool stored_as_bitmask(const ir::TensorType& type, int64_t nonzeros);

}  // namespace kiln::runtime
