// The arithmetic a model's GEMMs (matmul, dense, conv2d) may use: --precision on compile, run,
// train, emit, bench and inspect.
//   f32   exact f32 products and sums on the FMA units (the default): results match the
//         reference to the usual f32 rounding;
//   tf32  tensor cores: A and B are rounded to TF32 (10 mantissa bits, to nearest, ties away)
//         as the hardware does, then multiplied exactly and summed in f32 (mma.sync m16n8k8 on
//         sm_80+; cuBLASLt's and cuDNN's TF32 math on the library path). About 8x the FMA
//         peak on an H100, with errors of order 2^-11 relative per product
//         (docs/tensor-cores.md).
// Other ops, and f64 or integer GEMMs, are not affected.
#pragma once

#include <optional>
#include <string_view>

namespace kiln::codegen {

enum class Precision { F32, Tf32 };

// "f32", "tf32". Inline, like the enum: packages read and write it wherever program JSON is
// parsed (the fuzzers' parser library has no codegen).
inline std::string_view precision_name(Precision precision) {
  return precision == Precision::Tf32 ? "tf32" : "f32";
}

// The precision named `text`, or nullopt.
inline std::optional<Precision> parse_precision(std::string_view text) {
  if (text == "f32") return Precision::F32;
  if (text == "tf32") return Precision::Tf32;
  return std::nullopt;
}

}  // namespace kiln::codegen
