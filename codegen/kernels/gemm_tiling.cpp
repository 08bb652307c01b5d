// The GEMM template's tiling decisions (gemm.h): which tiles, which unit, how each operand
// reaches shared memory (cp.async, 4-wide loads, or one element at a time), how many cp.async
// stages fit, and the one-line note that names them in kernels' comments and in kiln inspect.
#include <algorithm>

#include "codegen/kernels/gemm.h"
#include "codegen/kernels/gemm_parts.h"

namespace kiln::codegen::nn {
namespace {

// Blocks that fill an H100 SXM (132 SMs) once: below that, tensor-core GEMMs take 64x64 tiles.
constexpr int64_t kFillingBlocks = 132;
// cp.async pipelines are at most this deep, within this much shared memory per block. Past the
// 48 KB a launch takes by default the runtime opts in (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
// 64 KB still lets 2 blocks share an sm_80 SM (164 KB) and 3 an sm_90 one (228 KB), as many as
// the 128-tile kernels' registers allow. On sm_86 and sm_89 (100 KB per SM) a 60 KB block runs
// alone: its third stage then hides the latency a second block used to.
constexpr int kMaxStages = 3;
constexpr uint32_t kSharedBudget = 64 * 1024;

}  // namespace

namespace gemm_parts {

uint32_t gemm_shared_bytes(const GemmSpec& spec, const GemmTiling& tiling) {
  const auto stage_slots = [&](bool outer_major, bool vectors_along_outer, int outer) {
    return outer_major ? outer * (tiling.tile_k + outer_major_pad(tiling))
                       : tiling.tile_k * (outer + k_major_pad(tiling, vectors_along_outer));
  };
  const bool a_outer_major = tiling.async_a && spec.a.k_contiguous;
  const bool b_outer_major = tiling.async_b && spec.b.k_contiguous;
  // Sparse tensor cores keep A's kept values only: rows of half the k tile.
  const int a_slots = tiling.sparse_a ? tiling.tile_m * (tiling.tile_k / 2 + outer_major_pad(tiling))
                                      : stage_slots(a_outer_major, tiling.vector_a && !spec.a.k_contiguous, tiling.tile_m);
  const uint32_t tile_slots = static_cast<uint32_t>(
      tiling.stages * (a_slots + stage_slots(b_outer_major, tiling.vector_b && !spec.b.k_contiguous, tiling.tile_n)));
  return tile_slots * tile_element_bytes(tiling, spec.value_type) +
         spec.row_stat_arrays * static_cast<uint32_t>(tiling.tile_m) * static_cast<uint32_t>(sizeof(float));
}

}  // namespace gemm_parts

using gemm_parts::ceil_div;

GemmTiling gemm_tiling(const GemmSpec& spec) {
  GemmTiling tiling;
  // Loads and copies of `group` elements need rows, runs (and, split-K along a contiguous k,
  // chunks) that start at multiples of it: 4 f32 are 16 bytes, 4 bf16 or f16 8, 8 of them 16.
  const auto in_groups = [&](const GemmOperand& operand, int64_t group) {
    const int64_t contiguous = operand.k_contiguous ? spec.k : &operand == &spec.a ? spec.m : spec.n;
    const bool chunk_aligned = !operand.k_contiguous || spec.k_chunk % group == 0;
    return !operand.address.empty() && contiguous % group == 0 && operand.run % group == 0 &&
           chunk_aligned;
  };
  const bool fours_a = in_groups(spec.a, 4);
  const bool fours_b = in_groups(spec.b, 4);
  if (spec.value_type != "float") return tiling;
  if (spec.precision == Precision::F32) {
    static_assert(kGemmTileM * kGemmTileK % (4 * kGemmThreads) == 0 &&
                      kGemmTileN * kGemmTileK % (4 * kGemmThreads) == 0,
                  "every thread stages the same number of groups of 4");
    tiling.vector_a = fours_a;
    tiling.vector_b = fours_b;
    return tiling;
  }
  tiling.unit = spec.precision == Precision::Bf16  ? GemmUnit::TensorCoreBf16
                : spec.precision == Precision::F16 ? GemmUnit::TensorCoreF16
                                                   : GemmUnit::TensorCoreTf32;
  tiling.pad = 8;  // k-rows 8 banks apart: conflict-free fragment loads
  tiling.warps_m = 2;
  tiling.warps_n = 4;
  const int64_t big_blocks = ceil_div(spec.m, 128) * ceil_div(spec.n, 128) * spec.batch;
  tiling.tile_m = tiling.tile_n = big_blocks >= kFillingBlocks ? 128 : 64;
  // cp.async copies bytes as they are: operands stored as the tiles hold them (f32 for TF32;
  // bf16 or f16 for the 16-bit units, whose tiles of 2-byte values take k steps of 32 in the
  // bytes TF32's take 16). The others are converted in registers, 4 at a time where they can.
  if (sixteen_bit(tiling.unit)) tiling.tile_k = 32;
  const int copy = elements_per_copy(tiling);
  tiling.async_a = spec.a.address_dtype == unit_dtype(tiling.unit) && in_groups(spec.a, copy);
  tiling.async_b = spec.b.address_dtype == unit_dtype(tiling.unit) && in_groups(spec.b, copy);
  tiling.vector_a = fours_a && !tiling.async_a;
  tiling.vector_b = fours_b && !tiling.async_b;
  // A 2:4 weight on sparse tensor cores: its kept values in the unit's format, and whole k tiles
  // (so every mma.sp's 32 k, and their positions' words, lie inside the weight's rows).
  tiling.sparse_a = spec.two_four_a && sixteen_bit(tiling.unit) &&
                    spec.two_four_a->kept_dtype == unit_dtype(tiling.unit) && spec.k % tiling.tile_k == 0 &&
                    spec.k_chunk % tiling.tile_k == 0;
  // The kept values are copied as stored, by cp.async (gemm_sparse.cpp).
  if (tiling.sparse_a) tiling.async_a = true;
  // cp.async operands: as many stages (up to kMaxStages) as keep the block's shared memory
  // within kSharedBudget: 3 at 64 tiles (30 KB) and at 128 (60 KB with both operands by
  // cp.async, plus the row statistics of fused norms).
  if (tiling.async_a || tiling.async_b) {
    tiling.stages = kMaxStages;
    while (tiling.stages > 2 && gemm_parts::gemm_shared_bytes(spec, tiling) > kSharedBudget) --tiling.stages;
  }
  return tiling;
}

namespace {

// ", A and B by float4 loads", ", A by 4 x bf16 loads", ...: the operands loaded 4 at a time.
std::string vector_loads_note(const GemmSpec& spec, const GemmTiling& t) {
  const auto kind = [](const GemmOperand& operand) {
    return operand.address_dtype == ir::DType::F32
               ? std::string("float4")
               : fmt::format("4 x {}", ir::dtype_name(operand.address_dtype));
  };
  if (t.vector_a && t.vector_b && kind(spec.a) == kind(spec.b))
    return fmt::format(", A and B by {} loads", kind(spec.a));
  std::string note;
  if (t.vector_a) note += fmt::format(", A by {} loads", kind(spec.a));
  if (t.vector_b) note += fmt::format(", B by {} loads", kind(spec.b));
  return note;
}

}  // namespace

std::string gemm_tiling_note(const GemmSpec& spec) {
  const GemmTiling t = gemm_tiling(spec);
  if (t.unit == GemmUnit::Fma)
    return fmt::format("{}x{}x{} tiles, {} threads, 4x4 per thread{}", t.tile_m, t.tile_n, t.tile_k,
                       t.threads, vector_loads_note(spec, t));
  const std::string stages = fmt::format(", {} stages", t.stages);
  const std::string copies = t.async_a && t.async_b ? "A and B by cp.async" + stages
                             : t.async_a             ? "A by cp.async" + stages
                             : t.async_b             ? "B by cp.async" + stages
                                                     : "staged through registers";
  const char* instruction = t.unit == GemmUnit::TensorCoreBf16  ? "m16n8k16, bf16"
                            : t.unit == GemmUnit::TensorCoreF16 ? "m16n8k16, f16"
                                                                : "m16n8k8, TF32";
  if (t.sparse_a)
    return fmt::format("sparse tensor cores (mma.sp m16n8k32, {} operands, A 2:4, f32 sums), {}x{}x{} tiles, "
                       "{} warps of {}x{}, A's kept values by cp.async, B {}, {} stages{}",
                       ir::dtype_name(unit_dtype(t.unit)), t.tile_m, t.tile_n, t.tile_k, t.threads / 32,
                       t.tile_m / t.warps_m, t.tile_n / t.warps_n,
                       t.async_b ? "by cp.async" : "staged through registers", t.stages, vector_loads_note(spec, t));
  return fmt::format("tensor cores (mma.sync {} operands, f32 sums), {}x{}x{} tiles, "
                     "{} warps of {}x{}, {}{}",
                     instruction, t.tile_m, t.tile_n, t.tile_k, t.threads / 32, t.tile_m / t.warps_m,
                     t.tile_n / t.warps_n, copies, vector_loads_note(spec, t));
}

}  // namespace kiln::codegen::nn
