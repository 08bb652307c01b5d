// Philox 4x32-10, the counter-based random number generator of Salmon et al., "Parallel random
// numbers: as easy as 1, 2, 3" (SC'11). kiln draws every random number (initializers, and later
// dropout) from it, so the reference interpreter, the host backend and CUDA kernels produce the
// same stream from the same (seed, counter): the function is pure and has no state.
//
// This header is plain C++ with no dependencies so that generated CUDA code can carry an
// identical copy.
#pragma once

#include <cstdint>

namespace kiln::ir::philox {

struct Block {
  uint32_t v[4];
};

inline constexpr uint32_t kMul0 = 0xD2511F53u;
inline constexpr uint32_t kMul1 = 0xCD9E8D57u;
inline constexpr uint32_t kWeyl0 = 0x9E3779B9u;  // golden ratio
inline constexpr uint32_t kWeyl1 = 0xBB67AE85u;  // sqrt(3) - 1
inline constexpr int kRounds = 10;

// Ten rounds of Philox on `counter` under the 64-bit `key` (the seed).
inline Block philox4x32_10(Block counter, uint64_t key) {
  uint32_t k0 = static_cast<uint32_t>(key);
  uint32_t k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < kRounds; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * counter.v[0];
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * counter.v[2];
    counter = Block{{static_cast<uint32_t>(p1 >> 32) ^ counter.v[1] ^ k0, static_cast<uint32_t>(p1),
                     static_cast<uint32_t>(p0 >> 32) ^ counter.v[3] ^ k1,
                     static_cast<uint32_t>(p0)}};
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return counter;
}

// The i-th 32-bit word of the stream (seed, offset): word i lives in lane i % 4 of the block
// whose counter is (i / 4 low, i / 4 high, offset low, offset high).
inline uint32_t random_u32(uint64_t seed, uint64_t offset, uint64_t i) {
  const uint64_t block = i / 4;
  const Block out = philox4x32_10(
      Block{{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
             static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32)}},
      seed);
  return out.v[i % 4];
}

// Uniform in [0, 1) with 24 random bits: exactly representable as a float.
inline float uniform_from_u32(uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}

// Training dropout keeps element i when the top 24 bits of word i reach this threshold, so the
// decision is an integer comparison that every backend makes identically (a float comparison
// against a rounded rate could differ between compilers at the boundary). P(keep) = 1 - rate
// to within 2^-24.
inline uint32_t dropout_threshold(double rate) {
  const double scaled = rate * 16777216.0;
  const uint32_t floor = static_cast<uint32_t>(scaled);
  return floor + (static_cast<double>(floor) < scaled ? 1u : 0u);  // ceil without <cmath>
}

inline bool dropout_keeps(uint64_t seed, uint64_t step, uint64_t i, uint32_t threshold) {
  return (random_u32(seed, step, i) >> 8) >= threshold;
}

}  // namespace kiln::ir::philox
