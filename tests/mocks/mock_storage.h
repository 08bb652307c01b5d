// Elements of f32, bf16 and f16 tensors for the mock libraries: read widened to float, written
// rounded to nearest even, as cuDNN's PSEUDO_BFLOAT16 / PSEUDO_HALF configurations and
// cuBLASLt's 16-bit layouts store results they computed in f32.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace kiln_mock {

enum class Storage { F32, Bf16, F16 };

inline float bf16_to_float(uint16_t bits) {
  const uint32_t word = uint32_t{bits} << 16;
  float value;
  std::memcpy(&value, &word, sizeof(value));
  return value;
}

inline uint16_t float_to_bf16(float value) {
  uint32_t word;
  std::memcpy(&word, &value, sizeof(word));
  if ((word & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((word >> 16) | 0x40u);  // quiet NaN
  word += 0x7fffu + ((word >> 16) & 1u);  // to nearest, ties to even
  return static_cast<uint16_t>(word >> 16);
}

// IEEE binary16 by hand (clang 14 has no _Float16 on x86-64).
inline float half_to_float(uint16_t bits) {
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  const float sign = (bits & 0x8000) != 0 ? -1.0f : 1.0f;
  if (exponent == 0x1f) return mantissa != 0 ? std::nanf("") : sign * HUGE_VALF;
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -24);  // subnormal
  return sign * std::ldexp(static_cast<float>(mantissa + 0x400), exponent - 25);
}

inline uint16_t float_to_half(float value) {
  const uint16_t sign = std::signbit(value) ? 0x8000 : 0;
  if (std::isnan(value)) return sign | 0x7e00;
  const double magnitude = std::fabs(static_cast<double>(value));
  if (magnitude >= 65520.0) return sign | 0x7c00;  // past the largest finite value's half ulp
  if (magnitude < std::ldexp(1.0, -14)) {
    // Subnormal, in units of 2^-24, to nearest even; 1024 units is the smallest normal's bits.
    return sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(magnitude, 24)));
  }
  int exponent = 0;
  std::frexp(magnitude, &exponent);  // magnitude = m * 2^exponent, m in [0.5, 1)
  --exponent;                        // magnitude in [2^exponent, 2^(exponent + 1))
  // 11 significant bits to nearest even (scaling by a power of two is exact).
  auto significand = static_cast<int>(std::nearbyint(std::ldexp(magnitude, 10 - exponent)));
  if (significand == 0x800) {
    significand = 0x400;
    ++exponent;
  }
  if (exponent > 15) return sign | 0x7c00;
  return sign | static_cast<uint16_t>(((exponent + 15) << 10) | (significand - 0x400));
}

inline float load(const void* data, Storage storage, size_t index) {
  switch (storage) {
    case Storage::F32: return static_cast<const float*>(data)[index];
    case Storage::Bf16: return bf16_to_float(static_cast<const uint16_t*>(data)[index]);
    case Storage::F16: return half_to_float(static_cast<const uint16_t*>(data)[index]);
  }
  return 0.0f;
}

inline void store(void* data, Storage storage, size_t index, float value) {
  switch (storage) {
    case Storage::F32: static_cast<float*>(data)[index] = value; return;
    case Storage::Bf16: static_cast<uint16_t*>(data)[index] = float_to_bf16(value); return;
    case Storage::F16: static_cast<uint16_t*>(data)[index] = float_to_half(value); return;
  }
}

}  // namespace kiln_mock
