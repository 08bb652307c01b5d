// Results of warp collectives, per the CUDA C++ Programming Guide ("Warp Shuffle Functions",
// "Warp Vote Functions", "Warp Reduce Functions").
#include "runtime/host/warp_collective.h"

#include "ir/tensor.h"

#include <fmt/format.h>

#include <cstring>

#define KILN_HOST_ABI_ONLY
#include "runtime/host/kiln_host_prelude.h"

namespace kiln::runtime::host::detail {
namespace {

constexpr int kKeepOwn = -1;

// The lane a shuffle reads, or kKeepOwn where CUDA defines the result as the lane's own value
// (shifted past its `width`-lane segment). srcLane wraps within the segment; up/down/xor do not.
int shuffle_source(int op, int lane, int operand, int width) {
  const int segment = lane & ~(width - 1);
  const int in_segment = lane - segment;
  switch (op) {
    case KILN_HOST_WARP_SHFL_IDX: return segment + (operand & (width - 1));
    case KILN_HOST_WARP_SHFL_UP: {
      const uint32_t delta = static_cast<uint32_t>(operand);
      return static_cast<uint32_t>(in_segment) < delta ? kKeepOwn : lane - static_cast<int>(delta);
    }
    case KILN_HOST_WARP_SHFL_DOWN: {
      const uint64_t delta = static_cast<uint32_t>(operand);
      return in_segment + delta >= static_cast<uint64_t>(width) ? kKeepOwn
                                                                : lane + static_cast<int>(delta);
    }
    case KILN_HOST_WARP_SHFL_XOR: {
      const int source = lane ^ operand;  // earlier segments may be read, later ones not
      return (source < 0 || source >= segment + width) ? kKeepOwn : source;
    }
  }
  return kKeepOwn;
}

// D = A B + C for a 16 x 8 tile held by the warp, with A (16 x K) and B (K x 8) gathered from
// the lanes' fragments and `d[lane]` the lane's accumulators: C and D in the layout every mma
// shape here shares, c0 (g, 2t), c1 (g, 2t + 1), c2 (g + 8, 2t), c3 (g + 8, 2t + 1). Each result
// is C plus the products in k order, in double, rounded once to float. Every lane's C is read
// before any D is written.
template <int K>
void accumulate_tile(float* const (&d)[kWarpSize], const double (&a)[16][K], const double (&b)[K][8]) {
  double c[16][8];
  for (int lane = 0; lane < kWarpSize; ++lane) {
    const int g = lane >> 2, t = lane & 3;
    c[g][2 * t] = d[lane][0];
    c[g][2 * t + 1] = d[lane][1];
    c[g + 8][2 * t] = d[lane][2];
    c[g + 8][2 * t + 1] = d[lane][3];
  }
  for (int lane = 0; lane < kWarpSize; ++lane) {
    const int g = lane >> 2, t = lane & 3;
    const int rows[4] = {g, g, g + 8, g + 8};
    const int cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
    for (int r = 0; r < 4; ++r) {
      double sum = c[rows[r]][cols[r]];
      for (int k = 0; k < K; ++k) sum += a[rows[r]][k] * b[k][cols[r]];
      d[lane][r] = static_cast<float>(sum);
    }
  }
}

// The accumulators of every lane of an mma.sync.
void dense_accumulators(const WarpPost* lanes, float* (&d)[kWarpSize]) {
  for (int lane = 0; lane < kWarpSize; ++lane)
    d[lane] = reinterpret_cast<const kiln_host_mma_fragments*>(lanes[lane].value)->d;
}

// A bf16 (or f16) element: the low 16 bits of `bits`, widened exactly.
double sixteen_bit_element(uint32_t bits, bool bf16) {
  const uint16_t half = static_cast<uint16_t>(bits & 0xffffu);
  return static_cast<double>(bf16 ? ir::bfloat16_bits_to_float(half) : ir::half_bits_to_float(half));
}

// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 for the whole warp. Fragment layouts of
// the PTX ISA ("Matrix Fragments for mma.m16n8k8", .tf32 and .f32), with groupID = lane >> 2
// and threadID_in_group = lane % 4:
//   A (16x8, row):  a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4)
//   B (8x8, col):   b0 (k = t, n = g), b1 (k = t + 4, n = g)
//   C, D (16x8):    c0 (g, 2t), c1 (g, 2t + 1), c2 (g + 8, 2t), c3 (g + 8, 2t + 1)
// The operands are read as tf32: their low 13 bits are ignored (codegen rounds them with
// cvt.rna.tf32.f32 first). A product of two tf32 values is exact in double, and so is a sum of
// eight of them and C up to double's rounding; D is that sum rounded once to float. The
// hardware's order and internal precision of the sum are not specified: tests allow for it
// (docs/tensor-cores.md derives the tolerance).
std::string compute_mma_tf32_m16n8k8(WarpPost* lanes, uint32_t group) {
  if (group != 0xffffffffu)
    return fmt::format("mma.sync needs all 32 lanes of the warp, got mask 0x{:08x}", group);
  const auto tf32 = [](uint32_t bits) {
    float value;
    bits &= 0xffffe000u;
    std::memcpy(&value, &bits, sizeof value);
    return static_cast<double>(value);
  };
  double a[16][8], b[8][8];
  for (int lane = 0; lane < kWarpSize; ++lane) {
    const auto* f = reinterpret_cast<const kiln_host_mma_fragments*>(lanes[lane].value);
    const int g = lane >> 2, t = lane & 3;
    a[g][t] = tf32(f->a[0]);
    a[g + 8][t] = tf32(f->a[1]);
    a[g][t + 4] = tf32(f->a[2]);
    a[g + 8][t + 4] = tf32(f->a[3]);
    b[t][g] = tf32(f->b[0]);
    b[t + 4][g] = tf32(f->b[1]);
  }
  float* d[kWarpSize];
  dense_accumulators(lanes, d);
  accumulate_tile(d, a, b);
  return "";
}

// Lane `lane`'s share of a 16 x 16 matrix of 16-bit values laid out as a dense m16n8k16's A
// (registers `a`: (g, 2t + 0/1), (g + 8, 2t + 0/1), (g, 2t + 8 + 0/1), (g + 8, 2t + 8 + 0/1),
// the lower k in the low half): mma.sync's A, and mma.sp's kept values.
void gather_16bit_a(double (&out)[16][16], const unsigned int* a, int lane, bool bf16) {
  const int g = lane >> 2, t = lane & 3;
  for (int half = 0; half < 2; ++half) {
    out[g][2 * t + half] = sixteen_bit_element(a[0] >> 16 * half, bf16);
    out[g + 8][2 * t + half] = sixteen_bit_element(a[1] >> 16 * half, bf16);
    out[g][2 * t + 8 + half] = sixteen_bit_element(a[2] >> 16 * half, bf16);
    out[g + 8][2 * t + 8 + half] = sixteen_bit_element(a[3] >> 16 * half, bf16);
  }
}

// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32 for the whole warp. Fragment
// layouts of the PTX ISA ("Matrix Fragments for mma.m16n8k16 with floating point type"), with
// g = groupID and t = threadID_in_group; each 32-bit register holds two elements, the one with
// the smaller index in its low half:
//   A (16x16, row): a0,a1 (g, 2t + 0/1)  a2,a3 (g + 8, 2t + 0/1)
//                   a4,a5 (g, 2t + 8 + 0/1)  a6,a7 (g + 8, 2t + 8 + 0/1)   (registers a[0..3])
//   B (16x8, col):  b0,b1 (k = 2t + 0/1, n = g)  b2,b3 (k = 2t + 8 + 0/1, n = g)  (b[0..1])
//   C, D (16x8):    as for m16n8k8.
// A product of two bf16 or f16 values is exact in double, and so is the sum of sixteen of them
// and C up to double's rounding; D is that sum rounded once to float (docs/tensor-cores.md).
std::string compute_mma_16bit_m16n8k16(WarpPost* lanes, uint32_t group, bool bf16) {
  if (group != 0xffffffffu)
    return fmt::format("mma.sync needs all 32 lanes of the warp, got mask 0x{:08x}", group);
  double a[16][16], b[16][8];
  for (int lane = 0; lane < kWarpSize; ++lane) {
    const auto* f = reinterpret_cast<const kiln_host_mma_fragments*>(lanes[lane].value);
    const int g = lane >> 2, t = lane & 3;
    gather_16bit_a(a, f->a, lane, bf16);
    for (int half = 0; half < 2; ++half) {
      b[2 * t + half][g] = sixteen_bit_element(f->b[0] >> 16 * half, bf16);
      b[2 * t + 8 + half][g] = sixteen_bit_element(f->b[1] >> 16 * half, bf16);
    }
  }
  float* d[kWarpSize];
  dense_accumulators(lanes, d);
  accumulate_tile(d, a, b);
  return "";
}

// mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.{bf16,f16}.{bf16,f16}.f32 with
// sparsity selector 0, for the whole warp. A (16 x 32) keeps at most 2 of every 4 consecutive
// elements of a row; the warp holds its 16 x 16 kept values and their positions. From the PTX
// ISA ("Sparse matrix storage", "Matrix fragments for sparse mma.m16n8k32 with .f16 and .bf16
// types"), with g = groupID and t = threadID_in_group:
//   kept A (16x16): as a dense m16n8k16's A: a0,a1 (g, 2t + 0/1) a2,a3 (g + 8, 2t + 0/1)
//                   a4,a5 (g, 2t + 8 + 0/1) a6,a7 (g + 8, 2t + 8 + 0/1)   (registers a[0..3]);
//                   kept column c of a row belongs to its group c / 2 (k 4 (c / 2) .. + 3)
//   B (32x8, col):  b[j] holds k = 2t + 8j + 0/1 of column n = g (j = 0..3)
//   metadata:       selector 0: lanes with t = 0 and 1 supply it; lane (g, t)'s low 16 bits
//                   hold the positions of row g's kept columns 8t .. 8t + 7 (k 16t .. 16t + 15),
//                   its high 16 bits those of row g + 8, 2 bits each, the first lowest
//   C, D:           as for m16n8k8.
// The MLIR sparse-mma integration test (sm_80, nvgpu.mma.sp.sync 16x8x32) distributes its
// operands the same way. ::ordered_metadata requires each group's two positions to increase;
// the GPU's result is undefined otherwise, so that is an error here. Products and sums as for
// m16n8k16: the 16 products per result are exact in double, D is rounded once.
std::string compute_mma_sp_16bit_m16n8k32(WarpPost* lanes, uint32_t group, bool bf16) {
  if (group != 0xffffffffu)
    return fmt::format("mma.sp needs all 32 lanes of the warp, got mask 0x{:08x}", group);
  double kept[16][16], a[16][32] = {}, b[32][8];
  uint32_t positions[16][2];  // [row][k / 16]: eight 2-bit positions
  float* d[kWarpSize];
  for (int lane = 0; lane < kWarpSize; ++lane) {
    const auto* f = reinterpret_cast<const kiln_host_mma_sp_fragments*>(lanes[lane].value);
    const int g = lane >> 2, t = lane & 3;
    d[lane] = f->d;
    if (t < 2) {
      positions[g][t] = f->metadata & 0xffffu;
      positions[g + 8][t] = f->metadata >> 16;
    }
    gather_16bit_a(kept, f->a, lane, bf16);
    for (int half = 0; half < 2; ++half)
      for (int j = 0; j < 4; ++j) b[2 * t + 8 * j + half][g] = sixteen_bit_element(f->b[j] >> 16 * half, bf16);
  }
  for (int row = 0; row < 16; ++row) {
    for (int c = 0; c < 16; c += 2) {
      const uint32_t word = positions[row][c / 8];
      const int first = static_cast<int>(word >> (2 * (c % 8)) & 3u);
      const int second = static_cast<int>(word >> (2 * (c % 8) + 2) & 3u);
      if (first >= second) {
        const int lane = row % 8 * 4 + c / 8;
        return fmt::format("mma.sp: the metadata of row {}, k {}..{} (lane {}, bits {}..{}) gives positions {} "
                           "and {}: ::ordered_metadata needs two increasing positions",
                           row, c * 2, c * 2 + 3, lane, 16 * (row / 8) + 2 * (c % 8),
                           16 * (row / 8) + 2 * (c % 8) + 3, first, second);
      }
      a[row][c / 2 * 4 + first] = kept[row][c];
      a[row][c / 2 * 4 + second] = kept[row][c + 1];
    }
  }
  accumulate_tile(d, a, b);
  return "";
}

// ldmatrix.sync.aligned.m8n8.x4.shared.b16 for the whole warp (the PTX ISA's "Warp-level
// matrix load instruction: ldmatrix"): lanes 8j .. 8j + 7 point at the rows of matrix j, 16
// bytes (8 16-bit elements) each, 16-byte aligned; lane i receives d[j] = elements 2 (i % 4)
// and 2 (i % 4) + 1 of row i / 4 of matrix j, the lower in the low half: the 32 bits at word
// i % 4. With .trans (`transpose`) it receives those of the transposed matrix: element i / 4 of
// rows 2 (i % 4) and 2 (i % 4) + 1. Every lane's rows are read before any lane's results are
// written, as on the GPU.
std::string compute_ldmatrix_x4(WarpPost* lanes, uint32_t group, bool transpose) {
  if (group != 0xffffffffu)
    return fmt::format("ldmatrix needs all 32 lanes of the warp, got mask 0x{:08x}", group);
  uint16_t rows[kWarpSize][8];
  for (int lane = 0; lane < kWarpSize; ++lane) {
    const auto* request = reinterpret_cast<const kiln_host_ldmatrix*>(lanes[lane].value);
    if (reinterpret_cast<uintptr_t>(request->row) % 16 != 0)
      return fmt::format("ldmatrix: lane {}'s row address {} is not 16-byte aligned", lane,
                         request->row);
    std::memcpy(rows[lane], request->row, sizeof rows[lane]);
  }
  const auto pair = [](uint16_t lo, uint16_t hi) { return uint32_t{lo} | uint32_t{hi} << 16; };
  for (int lane = 0; lane < kWarpSize; ++lane) {
    auto* request = reinterpret_cast<const kiln_host_ldmatrix*>(lanes[lane].value);
    const int g = lane / 4, t = lane % 4;
    for (int j = 0; j < 4; ++j) {
      const uint16_t(*matrix)[8] = rows + 8 * j;
      request->d[j] = transpose ? pair(matrix[2 * t][g], matrix[2 * t + 1][g])
                                : pair(matrix[g][2 * t], matrix[g][2 * t + 1]);
    }
  }
  return "";
}

bool is_shuffle(int op) { return op >= KILN_HOST_WARP_SHFL_IDX && op <= KILN_HOST_WARP_SHFL_XOR; }

uint64_t reduce(const WarpPost* lanes, uint32_t group, int op) {
  bool first = true;
  uint32_t acc = 0;
  for (int lane = 0; lane < kWarpSize; ++lane) {
    if (!(group >> lane & 1u)) continue;
    const uint32_t v = static_cast<uint32_t>(lanes[lane].value);
    if (first) {
      acc = v;
      first = false;
      continue;
    }
    switch (op) {
      case KILN_HOST_WARP_REDUCE_ADD: acc += v; break;
      case KILN_HOST_WARP_REDUCE_MIN_I32:
        acc = static_cast<int32_t>(v) < static_cast<int32_t>(acc) ? v : acc;
        break;
      case KILN_HOST_WARP_REDUCE_MAX_I32:
        acc = static_cast<int32_t>(v) > static_cast<int32_t>(acc) ? v : acc;
        break;
      case KILN_HOST_WARP_REDUCE_MIN_U32: acc = v < acc ? v : acc; break;
      case KILN_HOST_WARP_REDUCE_MAX_U32: acc = v > acc ? v : acc; break;
      case KILN_HOST_WARP_REDUCE_AND: acc &= v; break;
      case KILN_HOST_WARP_REDUCE_OR: acc |= v; break;
      case KILN_HOST_WARP_REDUCE_XOR: acc ^= v; break;
    }
  }
  return acc;
}

}  // namespace

std::string_view warp_op_name(int op) {
  switch (op) {
    case KILN_HOST_WARP_SHFL_IDX: return "__shfl_sync";
    case KILN_HOST_WARP_SHFL_UP: return "__shfl_up_sync";
    case KILN_HOST_WARP_SHFL_DOWN: return "__shfl_down_sync";
    case KILN_HOST_WARP_SHFL_XOR: return "__shfl_xor_sync";
    case KILN_HOST_WARP_BALLOT: return "__ballot_sync";
    case KILN_HOST_WARP_ANY: return "__any_sync";
    case KILN_HOST_WARP_ALL: return "__all_sync";
    case KILN_HOST_WARP_SYNC: return "__syncwarp";
    case KILN_HOST_WARP_REDUCE_ADD: return "__reduce_add_sync";
    case KILN_HOST_WARP_REDUCE_MIN_I32:
    case KILN_HOST_WARP_REDUCE_MIN_U32: return "__reduce_min_sync";
    case KILN_HOST_WARP_REDUCE_MAX_I32:
    case KILN_HOST_WARP_REDUCE_MAX_U32: return "__reduce_max_sync";
    case KILN_HOST_WARP_REDUCE_AND: return "__reduce_and_sync";
    case KILN_HOST_WARP_REDUCE_OR: return "__reduce_or_sync";
    case KILN_HOST_WARP_REDUCE_XOR: return "__reduce_xor_sync";
    case KILN_HOST_WARP_MMA_TF32_M16N8K8: return "mma.sync.m16n8k8.tf32";
    case KILN_HOST_WARP_LDMATRIX_X4: return "ldmatrix.x4";
    case KILN_HOST_WARP_LDMATRIX_X4_TRANS: return "ldmatrix.x4.trans";
    case KILN_HOST_WARP_MMA_BF16_M16N8K16: return "mma.sync.m16n8k16.bf16";
    case KILN_HOST_WARP_MMA_F16_M16N8K16: return "mma.sync.m16n8k16.f16";
    case KILN_HOST_WARP_MMA_SP_BF16_M16N8K32: return "mma.sp.m16n8k32.bf16";
    case KILN_HOST_WARP_MMA_SP_F16_M16N8K32: return "mma.sp.m16n8k32.f16";
  }
  return "warp collective";
}

std::string compute_collective(WarpPost* lanes, uint32_t group, bool strict) {
  int op = -1;
  for (int lane = 0; lane < kWarpSize && op < 0; ++lane)
    if (group >> lane & 1u) op = lanes[lane].op;

  if (op == KILN_HOST_WARP_MMA_TF32_M16N8K8) return compute_mma_tf32_m16n8k8(lanes, group);
  if (op == KILN_HOST_WARP_LDMATRIX_X4 || op == KILN_HOST_WARP_LDMATRIX_X4_TRANS)
    return compute_ldmatrix_x4(lanes, group, op == KILN_HOST_WARP_LDMATRIX_X4_TRANS);
  if (op == KILN_HOST_WARP_MMA_BF16_M16N8K16 || op == KILN_HOST_WARP_MMA_F16_M16N8K16)
    return compute_mma_16bit_m16n8k16(lanes, group, op == KILN_HOST_WARP_MMA_BF16_M16N8K16);
  if (op == KILN_HOST_WARP_MMA_SP_BF16_M16N8K32 || op == KILN_HOST_WARP_MMA_SP_F16_M16N8K32)
    return compute_mma_sp_16bit_m16n8k32(lanes, group, op == KILN_HOST_WARP_MMA_SP_BF16_M16N8K32);
  if (is_shuffle(op)) {
    for (int lane = 0; lane < kWarpSize; ++lane) {
      if (!(group >> lane & 1u)) continue;
      WarpPost& post = lanes[lane];
      const int source = shuffle_source(op, lane, post.operand, post.width);
      if (source == kKeepOwn) {
        post.result = post.value;
      } else if (group >> source & 1u) {
        post.result = lanes[source].value;
      } else if (strict) {
        return fmt::format("lane {} reads lane {}, outside mask 0x{:08x}", lane, source, group);
      } else {
        post.result = post.value;  // undefined in CUDA
      }
    }
    return "";
  }

  uint64_t result = 0;
  uint32_t ballot = 0;
  for (int lane = 0; lane < kWarpSize; ++lane)
    if ((group >> lane & 1u) && lanes[lane].value != 0) ballot |= 1u << lane;
  switch (op) {
    case KILN_HOST_WARP_BALLOT: result = ballot; break;
    case KILN_HOST_WARP_ANY: result = ballot != 0; break;
    case KILN_HOST_WARP_ALL: result = ballot == group; break;
    case KILN_HOST_WARP_SYNC: result = 0; break;
    default: result = reduce(lanes, group, op); break;
  }
  for (int lane = 0; lane < kWarpSize; ++lane)
    if (group >> lane & 1u) lanes[lane].result = result;
  return "";
}

}  // namespace kiln::runtime::host::detail
