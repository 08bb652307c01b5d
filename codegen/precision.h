// The arithmetic a model's GEMMs (matmul, dense, conv2d) may use: --precision on compile, run,
// train, emit, bench and inspect.
//   f32   exact f32 products and sums on the FMA units (the default): results match the
//         reference to the usual f32 rounding;
//   tf32  tensor cores: A and B are rounded to TF32 (10 mantissa bits, to nearest, ties away)
//         as the hardware does, then multiplied exactly and summed in f32 (mma.sync m16n8k8 on
//         sm_80+; cuBLASLt's and cuDNN's TF32 math on the library path). About 8x the FMA
//         peak on an H100, with errors of order 2^-11 relative per product
//         (docs/tensor-cores.md);
//   bf16  tensor cores on bfloat16 operands (8 mantissa bits, rounded to nearest even, f32's
//         range) with f32 sums: mma.sync m16n8k16, twice TF32's peak, errors of order 2^-9;
//   f16   the same on IEEE half operands (11 mantissa bits, but a range of +-65504 and
//         subnormals below 6.1e-5: small values lose bits, tiny ones flush to zero).
// Tensors stay f32 in memory: the operands are rounded as the fragments are loaded, and every
// other op, and f64 or integer GEMMs, are not affected.
#pragma once

#include <optional>
#include <string_view>

namespace kiln::codegen {

enum class Precision { F32, Tf32, Bf16, F16 };

// "f32", "tf32", "bf16", "f16". Inline, like the enum: packages read and write it wherever
// program JSON is parsed (the fuzzers' parser library has no codegen).
inline std::string_view precision_name(Precision precision) {
  switch (precision) {
    case Precision::Tf32: return "tf32";
    case Precision::Bf16: return "bf16";
    case Precision::F16: return "f16";
    case Precision::F32: break;
  }
  return "f32";
}

// The precision named `text`, or nullopt.
inline std::optional<Precision> parse_precision(std::string_view text) {
  if (text == "f32") return Precision::F32;
  if (text == "tf32") return Precision::Tf32;
  if (text == "bf16") return Precision::Bf16;
  if (text == "f16") return Precision::F16;
  return std::nullopt;
}

// "f32, tf32, bf16, f16": for "expected one of" messages.
inline constexpr std::string_view kPrecisionNames = "f32, tf32, bf16, f16";

// Whether GEMMs at `precision` run on tensor cores with 16-bit operands (mma.sync m16n8k16).
inline bool sixteen_bit(Precision precision) {
  return precision == Precision::Bf16 || precision == Precision::F16;
}

// The dtype the autocast pass narrows to at `precision` ("bf16", "f16"), or "" (no autocast).
inline std::string_view autocast_dtype(Precision precision) {
  return sixteen_bit(precision) ? precision_name(precision) : std::string_view();
}

}  // namespace kiln::codegen
