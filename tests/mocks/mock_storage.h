// Elements of f32, bf16 and f16 tensors for the mock libraries: read widened to float, written
// rounded to nearest even, as cuDNN's PSEUDO_BFLOAT16 / PSEUDO_HALF configurations and
// cuBLASLt's 16-bit layouts store results they computed in f32.
#pragma once

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

inline float load(const void* data, Storage storage, size_t index) {
  switch (storage) {
    case Storage::F32: return static_cast<const float*>(data)[index];
    case Storage::Bf16: return bf16_to_float(static_cast<const uint16_t*>(data)[index]);
    case Storage::F16: return static_cast<float>(static_cast<const _Float16*>(data)[index]);
  }
  return 0.0f;
}

inline void store(void* data, Storage storage, size_t index, float value) {
  switch (storage) {
    case Storage::F32: static_cast<float*>(data)[index] = value; return;
    case Storage::Bf16: static_cast<uint16_t*>(data)[index] = float_to_bf16(value); return;
    case Storage::F16: static_cast<_Float16*>(data)[index] = static_cast<_Float16>(value); return;  // nearest even
  }
}

}  // namespace kiln_mock
