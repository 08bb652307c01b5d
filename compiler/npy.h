// NumPy .npy files (format versions 1.0, 2.0 and 3.0): reading and writing.
//
// Supported element types: f32 (<f4), f16 (<f2), f64 (<f8, read as f32: kiln has no f64
// tensors), i32 (<i4), i64 (<i8), bool (|b1); C order only. Anything else — Fortran order, big-endian,
// another dtype, a truncated file, a header that does not parse — is a kiln::Error naming the
// file and what is wrong.
#pragma once

#include <optional>
#include <string>

#include "ir/tensor.h"

namespace kiln::compiler {

// Reads `path`. f64 data is rounded to f32 (kiln has no f64 tensors); a finite value beyond
// f32's range is an error naming the element, not an infinity.
ir::Tensor read_npy(const std::string& path);

// Writes `tensor` to `path` (format 1.0) via a temporary file renamed into place, so a failed
// write never leaves a half-written file. bf16 has no NumPy dtype and is written as <f4.
// Throws kiln::Error on I/O failure.
void write_npy(const std::string& path, const ir::Tensor& tensor);

}  // namespace kiln::compiler
