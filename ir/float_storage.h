// Floating-point tensors stored in a narrower float type than they compute in: kiln compile and
// kiln train's --weights-dtype keep f32 weights as bf16 or f16 (half the bytes), and whoever
// reads them back widens them to the f32 the programs take. Widening is exact; narrowing rounds
// each element to nearest even, and refuses a finite value beyond the narrow type's range
// (f16: +-65504) rather than store an infinity.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "ir/tensor.h"

namespace kiln::ir {

// The storage dtypes --weights-dtype takes: "f32" (as computed), "bf16", "f16"; nullopt else.
std::optional<DType> parse_weights_dtype(std::string_view text);

// `tensor` as stored in `dtype`: an f32 tensor rounded to bf16 or f16; any other tensor, or
// dtype f32, unchanged. A value beyond f16's range is an error: the message names the element
// ("element 17 (70000) is beyond the range of f16") for the caller to locate.
std::optional<Tensor> narrowed_for_storage(const Tensor& tensor, DType dtype, std::string* error);

// `stored` read for a slot of type `slot`: a bf16 or f16 tensor of the slot's shape widened
// exactly to an f32 slot; anything else unchanged (for the caller's own type check).
Tensor widened_from_storage(Tensor stored, const TensorType& slot);

}  // namespace kiln::ir
