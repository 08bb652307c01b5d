// Tiled shared-memory GEMM with register blocking (the classic SGEMM structure: Volkov &
// Demmel, "Benchmarking GPUs to tune dense linear algebra", SC 2008; CUTLASS's "efficient GEMM"
// notes).
//
// Per block: a kTileM x kTileN tile of out. Per K step, all threads stage a kTileM x kTileK tile
// of A and a kTileK x kTileN tile of B in shared memory (converted to float, zero outside the
// matrices so edge tiles need no special inner loop), barrier, then each thread accumulates its
// 4x4 results from registers: 8 shared loads feed 16 FMAs. A thread's rows and columns are 16
// apart (thread_m + 16 i, thread_n + 16 j), so a warp reads 2 broadcast A words and 16
// consecutive B words per step, and 16 neighbouring threads store 16 neighbouring columns.
// Every size is a compile-time constant: bounds checks are emitted only where a dimension is not
// a multiple of its tile.
//
// With --precision=tf32 the same staging feeds tensor cores instead (NVIDIA's "Warp Level
// Matrix Multiply-Accumulate Instructions" in the PTX ISA; CUTLASS's SM80 TF32 GEMMs): values
// are rounded to TF32 as they are staged, the block's 8 warps each own a grid of 16x8 tiles of
// out, and per k step of 8 a warp loads its A and B fragments from shared memory in the
// layouts mma.m16n8k8 defines and issues one mma.sync per tile. Operands read as plain f32
// skip the registers: cp.async copies them 16 bytes at a time into a ring of 2 or 3 shared
// stages, the next steps' tiles flying while this one's are computed (the PTX ISA's "Data
// Movement and Conversion Instructions: cp.async"), and ldmatrix loads their fragments. The
// tiles are padded so that a fragment load (8 rows or columns x 4 k) touches 32 banks.
// With --precision=bf16 or f16 the tiles hold 16-bit values, rounded once as they are staged
// (16-bit tensors the unit takes are copied by cp.async as stored, 8 per 16 bytes), k steps of
// 32 fill the bytes TF32's 16 do, and ldmatrix (.trans for k-major tiles) loads every fragment
// of mma.m16n8k16. Which tiling and which of these paths a GEMM takes is decided in
// gemm_tiling.cpp; this file writes the kernel.
#include "codegen/kernels/gemm.h"

#include <algorithm>
#include <limits>

#include "codegen/kernels/emit_util.h"
#include "codegen/kernels/gemm_parts.h"

namespace kiln::codegen::nn {
namespace gemm_parts {

std::string conjunction(const std::vector<std::string>& terms) {
  std::string text;
  for (const std::string& term : terms) {
    if (term.empty()) continue;
    text += (text.empty() ? "" : " && ") + term;
  }
  return text;
}

std::string k_end(const GemmSpec& spec) { return spec.k_chunk > 0 ? "k_end" : "kK"; }
bool k_ragged(const GemmSpec& spec, const GemmTiling& tiling) {
  return spec.k % tiling.tile_k != 0 || (spec.k_chunk > 0 && spec.k_chunk % tiling.tile_k != 0);
}

void emit_result(BodyWriter& w, const GemmSpec& spec, const GemmTiling& tiling,
                 const std::string& accumulator) {
  const std::string guard = conjunction({spec.m % tiling.tile_m != 0 ? "row < kM" : "",
                                         spec.n % tiling.tile_n != 0 ? "col < kN" : ""});
  if (!guard.empty()) w.open("if ({})", guard);
  w.line("{} value = {};", spec.value_type, accumulator);
  w.declare("channel", "const int channel = {};", spec.channel);
  w.line("const index_t out_index = {};", spec.out_index);
  w.lines(spec.epilogue);
  w.line("{}[out_index] = {};", spec.out_param, store(spec.out_dtype, "value"));
  if (!guard.empty()) w.close();
}

}  // namespace gemm_parts
namespace {

using namespace gemm_parts;

// A float as the shared tiles hold it: rounded once here for the tensor cores, to TF32 (still a
// float) or to the 16-bit units' bf16 or f16 bits; unchanged for the FMA units.
std::string staged(const GemmTiling& tiling, const std::string& element) {
  switch (tiling.unit) {
    case GemmUnit::TensorCoreTf32: return "kiln_tf32_round(" + element + ")";
    case GemmUnit::TensorCoreBf16: return "kiln_float_to_bf16(" + element + ")";
    case GemmUnit::TensorCoreF16: return "kiln_float_to_half(" + element + ")";
    case GemmUnit::Fma: break;
  }
  return element;
}

// Stages one operand tile into shared memory. `name` is "a" or "b"; `outer` is "row" or "col";
// `outer_size` the constant of its outer dimension, `outer_ragged` whether its last tile is partial.
void stage_tile(BodyWriter& w, const GemmSpec& spec, const GemmTiling& tiling,
                const GemmOperand& operand, const std::string& name, const std::string& outer,
                const std::string& outer_size, bool outer_ragged) {
  const std::string block_outer = "block_" + outer;
  const std::string stride = "k" + std::string(name == "a" ? "A" : "B") + "TileStride";
  w.line("#pragma unroll");
  w.open("for (int i = 0; i < kLoadsPerThread; ++i)");
  const std::string step = "k" + std::string(name == "a" ? "A" : "B") + "Step";
  std::string outer_offset = name + "_" + outer;
  std::string k_offset = name + "_k";
  (operand.k_contiguous ? outer_offset : k_offset) += " + i * " + step;
  const std::string guard = conjunction({outer_ragged ? outer + " < " + outer_size : "",
                                         k_ragged(spec, tiling) ? "k < " + k_end(spec) : ""});
  // A gather (conv) may not need the outer index when no bounds check does.
  if (mentions(guard, outer) || mentions(operand.fetch, outer))
    w.line("const {} {} = {} + {};", spec.index_type, outer, block_outer, outer_offset);
  w.line("const {} k = k0 + {};", spec.index_type, k_offset);
  w.line("{} value = 0;", spec.value_type);
  if (!guard.empty()) w.open("if ({})", guard);
  w.lines(operand.fetch);
  if (!guard.empty()) w.close();
  // Tensor cores read TF32, bf16 or f16: rounded once here, not per fragment load.
  w.line("{0}_tile[{0}_slot + i * {1}] = {2};", name,
         operand.k_contiguous ? step : step + " * " + stride, staged(tiling, "value"));
  w.close();
}

// Stages one operand tile 4 elements at a time (GemmTiling::vector_a/b): a float4 (16 bytes), or
// 4 bf16/f16 values (8 bytes) widened to a float4, along the operand's contiguous dimension per
// load, zero outside the matrices. Its contiguous size (and k's chunks) are multiples of 4, so
// a group of 4 is wholly inside or wholly outside. k contiguous: 4 neighbouring threads read one
// row's kTileK elements and scatter them down the k-major tile's rows (banks (c % 4) * 8 + c / 4
// with the FMA pad of 2: 32 distinct per warp); otherwise a warp reads 2 k-rows of 64 and stores
// them as float4s (4 x 16 bits: 8 bytes on the 16-bit tensor cores). 16-bit values the tiles
// hold as they are stored go in as loaded.
void stage_tile_vectors(BodyWriter& w, const GemmSpec& spec, const GemmTiling& tiling,
                        const GemmOperand& operand, const std::string& name,
                        const std::string& outer, const std::string& outer_size,
                        const std::string& outer_tile, bool outer_ragged) {
  const std::string stride = "k" + std::string(name == "a" ? "A" : "B") + "TileStride";
  w.line("#pragma unroll");
  w.open("for (int load = 0; load < {} * kTileK / 4 / kThreads; ++load)", outer_tile);
  w.line("const int c = threadIdx.x + load * kThreads;");
  if (operand.k_contiguous) {
    w.line("const int vector_{} = c / (kTileK / 4);", outer);
    w.line("const int vector_k = c % (kTileK / 4) * 4;");
  } else {
    w.line("const int vector_k = c / ({} / 4);", outer_tile);
    w.line("const int vector_{} = c % ({} / 4) * 4;", outer, outer_tile);
  }
  w.line("const {} {} = block_{} + vector_{};", spec.index_type, outer, outer, outer);
  w.line("const {} k = k0 + vector_k;", spec.index_type);
  const std::string guard = conjunction({outer_ragged ? outer + " < " + outer_size : "",
                                         k_ragged(spec, tiling) ? "k < " + k_end(spec) : ""});
  const bool wide = operand.address_dtype == ir::DType::F32;
  // 4 bf16 or f16 values are 4 unsigned shorts in memory (kiln_bf16, kiln_half): zero bits are +0.
  const std::string vector_type = wide ? "float4" : "ushort4";
  const std::string read = "*reinterpret_cast<const " + vector_type + "*>(" + operand.address + ")";
  const std::string name_loaded = wide ? "value" : "bits";
  if (guard.empty()) {
    w.line("const {} {} = {};", vector_type, name_loaded, read);
  } else {
    w.line("{} {} = {};", vector_type, name_loaded,
           wide ? "make_float4(0.0f, 0.0f, 0.0f, 0.0f)" : "make_ushort4(0, 0, 0, 0)");
    w.line("if ({}) {} = {};", guard, name_loaded, read);
  }
  // The tiles' own 16-bit type goes in as loaded; anything else through a float.
  const bool as_loaded = !wide && operand.address_dtype == unit_dtype(tiling.unit);
  if (!wide && !as_loaded)
    w.line("const float4 value = make_float4({}, {}, {}, {});", load(operand.address_dtype, "bits.x"),
           load(operand.address_dtype, "bits.y"), load(operand.address_dtype, "bits.z"),
           load(operand.address_dtype, "bits.w"));
  const auto element = [&](const char* lane) {
    return as_loaded ? "bits." + std::string(lane) : staged(tiling, "value." + std::string(lane));
  };
  if (operand.k_contiguous) {
    w.line("{0}_tile[vector_k * {1} + vector_{2}] = {3};", name, stride, outer, element("x"));
    w.line("{0}_tile[(vector_k + 1) * {1} + vector_{2}] = {3};", name, stride, outer, element("y"));
    w.line("{0}_tile[(vector_k + 2) * {1} + vector_{2}] = {3};", name, stride, outer, element("z"));
    w.line("{0}_tile[(vector_k + 3) * {1} + vector_{2}] = {3};", name, stride, outer, element("w"));
  } else if (as_loaded) {
    w.line("*reinterpret_cast<ushort4*>({0}_tile + vector_k * {1} + vector_{2}) = bits;", name, stride, outer);
  } else if (sixteen_bit(tiling.unit)) {
    // Two values rounded and packed per cvt (cvt.rn.bf16x2.f32), the lower index low.
    const std::string pack = tiling.unit == GemmUnit::TensorCoreBf16 ? "kiln_pack_bf16x2" : "kiln_pack_f16x2";
    w.line("*reinterpret_cast<uint2*>({0}_tile + vector_k * {1} + vector_{2}) = make_uint2({3}(value.x, value.y), "
           "{3}(value.z, value.w));",
           name, stride, outer, pack);
  } else if (tiling.unit == GemmUnit::TensorCoreTf32) {
    w.line("*reinterpret_cast<float4*>({0}_tile + vector_k * {1} + vector_{2}) = make_float4({3}, {4}, {5}, {6});",
           name, stride, outer, element("x"), element("y"), element("z"), element("w"));
  } else {
    w.line("*reinterpret_cast<float4*>({0}_tile + vector_k * {1} + vector_{2}) = value;", name,
           stride, outer);
  }
  w.close();
}

// Where each thread stages its share of an operand tile, and the operand's own setup.
void staging_position(BodyWriter& w, const GemmSpec& spec, const GemmOperand& operand,
                      const std::string& name, const std::string& outer,
                      const std::string& outer_tile) {
  const std::string step = "k" + std::string(name == "a" ? "A" : "B") + "Step";
  if (operand.k_contiguous) {
    w.comment(fmt::format("Staging {}: each thread copies one k column, kLoadsPerThread {}s "
                          "{} apart (k is contiguous in memory).",
                          name == "a" ? "A" : "B", outer, step));
    w.line("const int {}_k = threadIdx.x % kTileK;", name);
    w.line("const int {}_{} = threadIdx.x / kTileK;", name, outer);
    w.line("constexpr int {} = kThreads / kTileK;", step);
  } else {
    w.comment(fmt::format("Staging {}: each thread copies one {}, kLoadsPerThread k values "
                          "{} apart ({} is contiguous in memory).",
                          name == "a" ? "A" : "B", outer, step, outer));
    w.line("const int {}_{} = threadIdx.x % {};", name, outer, outer_tile);
    w.line("const int {}_k = threadIdx.x / {};", name, outer_tile);
    w.line("constexpr int {} = kThreads / {};", step, outer_tile);
  }
  w.comment("The thread's first slot in the shared tile; the others are constant offsets away.");
  w.line("const int {0}_slot = {0}_k * k{1}TileStride + {0}_{2};", name, name == "a" ? "A" : "B",
         outer);
  w.lines(operand.setup);
}

// CUDA's limit on grid y and z.
constexpr int64_t kMaxGridYZ = 65535;

int64_t k_splits(const GemmSpec& spec) { return spec.k_chunk > 0 ? ceil_div(spec.k, spec.k_chunk) : 1; }

// The FMA main loop's step: each thread's 4x4 results from registers, 8 shared loads per 16 FMAs.
// The multiply-add is written as fma(): NVRTC contracts `acc += a * b` into one anyway, and
// written out the host backend (which never contracts) computes the same rounding as the GPU,
// on the CPU's FMA units (twice the multiply-adds per cycle of separate multiplies and adds).
void fma_step(BodyWriter& w, const GemmSpec& spec) {
  w.line("#pragma unroll");
  w.open("for (int kk = 0; kk < kTileK; ++kk)");
  w.line("{} a_frag[kPerThreadM];", spec.value_type);
  w.line("{} b_frag[kPerThreadN];", spec.value_type);
  w.line("#pragma unroll");
  w.open("for (int i = 0; i < kPerThreadM; ++i)");
  w.line("a_frag[i] = a_tile[kk * kATileStride + thread_m + i * kThreadsM];");
  w.close();
  w.line("#pragma unroll");
  w.open("for (int j = 0; j < kPerThreadN; ++j)");
  w.line("b_frag[j] = b_tile[kk * kBTileStride + thread_n + j * kThreadsN];");
  w.close();
  w.line("#pragma unroll");
  w.open("for (int i = 0; i < kPerThreadM; ++i)");
  w.line("#pragma unroll");
  w.open("for (int j = 0; j < kPerThreadN; ++j)");
  w.line("acc[i][j] = {}(a_frag[i], b_frag[j], acc[i][j]);", spec.value_type == "double" ? "fma" : "fmaf");
  w.close();
  w.close();
  w.close();
}

// The tensor-core main loop's step: per k step of 8, the warp's A fragments (kMmaM tiles of
// 16 rows) and B fragments (kMmaN tiles of 8 columns), then one mma.sync per pair. Fragment
// layouts of mma.m16n8k8 .tf32 (PTX ISA), with g = lane_group and q = lane_quad: a0 (g, q),
// a1 (g + 8, q), a2 (g, q + 4), a3 (g + 8, q + 4); b0 (k = q, n = g), b1 (k = q + 4, n = g).
// A tile copied by cp.async is outer-major ([outer][k], when k is contiguous in memory) and
// holds raw f32, rounded to TF32 here; a staged one is k-major and already rounded. Outer-major
// tiles are read with ldmatrix.x4: an 8 x 4 block of 32-bit values whose rows run along k is
// one fragment register per lane in exactly mma's layout. (k-major tiles would need ldmatrix's
// .trans, which transposes 16-bit elements, not 32-bit ones: they keep scalar loads.)
void mma_step(BodyWriter& w, const GemmTiling& tiling, bool a_outer_major, bool b_outer_major) {
  const auto fragment = [](bool async, const std::string& element) {
    return async ? "__float_as_uint(kiln_tf32_round(" + element + "))"
                 : "__float_as_uint(" + element + ")";
  };
  w.line("#pragma unroll");
  w.open("for (int kk = 0; kk < kTileK; kk += 8)");
  w.line("unsigned int a_frag[kMmaM][4];");
  w.line("unsigned int b_frag[kMmaN][2];");
  w.line("#pragma unroll");
  w.open("for (int i = 0; i < kMmaM; ++i)");
  if (a_outer_major) {
    w.comment("ldmatrix.x4: lane l points at row l % 8 of matrix l / 8, the 8 x 4 quarters of");
    w.comment("the 16 x 8 tile in a0..a3's order (rows + 8 for odd matrices, k + 4 for the last two).");
    w.line("kiln_ldmatrix_x4(a_frag[i], a_tile + (warp_row + i * 16 + lane % 8 + lane / 8 % 2 * 8) * "
           "kATileStride + kk + lane / 16 * 4);");
    w.comment("cp.async copied raw f32: round to TF32 now.");
    w.line("#pragma unroll");
    w.line("for (int r = 0; r < 4; ++r) a_frag[i][r] = __float_as_uint(kiln_tf32_round(__uint_as_float(a_frag[i][r])));");
  } else {
    w.line("const float* a_k = a_tile + (kk + lane_quad) * kATileStride + warp_row + i * 16 + lane_group;");
    w.line("a_frag[i][0] = {};", fragment(tiling.async_a, "a_k[0]"));
    w.line("a_frag[i][1] = {};", fragment(tiling.async_a, "a_k[8]"));
    w.line("a_frag[i][2] = {};", fragment(tiling.async_a, "a_k[4 * kATileStride]"));
    w.line("a_frag[i][3] = {};", fragment(tiling.async_a, "a_k[4 * kATileStride + 8]"));
  }
  w.close();
  w.line("#pragma unroll");
  if (b_outer_major) {
    w.open("for (int j = 0; j < kMmaN; j += 2)");
    w.comment("ldmatrix.x4 for tiles j and j + 1: lane l points at column l % 8 of matrix l / 8:");
    w.comment("(j, k 0..3), (j, k 4..7), (j + 1, k 0..3), (j + 1, k 4..7), which are b_frag[j][0],");
    w.comment("b_frag[j][1], b_frag[j + 1][0] and b_frag[j + 1][1], adjacent in memory.");
    w.line("kiln_ldmatrix_x4(&b_frag[j][0], b_tile + (warp_col + (j + lane / 16) * 8 + lane % 8) * "
           "kBTileStride + kk + lane / 8 % 2 * 4);");
    w.line("#pragma unroll");
    w.open("for (int r = 0; r < 2; ++r)");
    w.line("b_frag[j][r] = __float_as_uint(kiln_tf32_round(__uint_as_float(b_frag[j][r])));");
    w.line("b_frag[j + 1][r] = __float_as_uint(kiln_tf32_round(__uint_as_float(b_frag[j + 1][r])));");
    w.close();
  } else {
    w.open("for (int j = 0; j < kMmaN; ++j)");
    w.line("const float* b_k = b_tile + (kk + lane_quad) * kBTileStride + warp_col + j * 8 + lane_group;");
    w.line("b_frag[j][0] = {};", fragment(tiling.async_b, "b_k[0]"));
    w.line("b_frag[j][1] = {};", fragment(tiling.async_b, "b_k[4 * kBTileStride]"));
  }
  w.close();
  w.line("#pragma unroll");
  w.open("for (int i = 0; i < kMmaM; ++i)");
  w.line("#pragma unroll");
  w.open("for (int j = 0; j < kMmaN; ++j)");
  w.line("kiln_mma_tf32_m16n8k8(acc[i][j], a_frag[i], b_frag[j]);");
  w.close();
  w.close();
  w.close();
}

// The 16-bit tensor-core step (bf16 or f16): per k step of 16, fragments of mma.m16n8k16 with
// two operands per register, the lower k in the low half. With g = lane_group, q = lane_quad:
// A's registers hold (g, 2q..2q+1), (g + 8, 2q..), (g, 2q + 8..), (g + 8, 2q + 8..); B's
// (k = 2q..2q+1, n = g) and (k = 2q + 8.., n = g). The tiles hold the rounded 16-bit values,
// so every fragment register is one 8 x 8 matrix of ldmatrix.x4 (the PTX ISA's "Warp-level
// matrix load instruction: ldmatrix"): lane l points at row l % 8 of matrix l / 8 and receives
// row l / 4, elements 2 (l % 4) and 2 (l % 4) + 1 of each. Outer-major tiles ([outer][k]) are
// that layout as stored; k-major ones ([k][outer]) are its transpose, which ldmatrix's .trans
// undoes (lane l then receives column l / 4, rows 2 (l % 4) and 2 (l % 4) + 1).
void mma_step_16bit(BodyWriter& w, const GemmTiling& tiling, bool a_outer_major, bool b_outer_major) {
  const bool bf16 = tiling.unit == GemmUnit::TensorCoreBf16;
  w.line("#pragma unroll");
  w.open("for (int kk = 0; kk < kTileK; kk += 16)");
  w.line("unsigned int a_frag[kMmaM][4];");
  w.line("unsigned int b_frag[kMmaN][2];");
  w.line("#pragma unroll");
  w.open("for (int i = 0; i < kMmaM; ++i)");
  w.comment("Matrices a0..a3: rows + 8 for odd ones, k + 8 for the last two.");
  if (a_outer_major)
    w.line("kiln_ldmatrix_x4(a_frag[i], a_tile + (warp_row + i * 16 + lane % 8 + lane / 8 % 2 * 8) * "
           "kATileStride + kk + lane / 16 * 8);");
  else
    w.line("kiln_ldmatrix_x4_trans(a_frag[i], a_tile + (kk + lane % 8 + lane / 16 * 8) * kATileStride + "
           "warp_row + i * 16 + lane / 8 % 2 * 8);");
  w.close();
  w.line("#pragma unroll");
  w.open("for (int j = 0; j < kMmaN; j += 2)");
  w.comment("Tiles j and j + 1 at once: (j, k 0..7), (j, k 8..15), (j + 1, k 0..7), (j + 1, k 8..15),");
  w.comment("which are b_frag[j][0], b_frag[j][1], b_frag[j + 1][0] and b_frag[j + 1][1].");
  if (b_outer_major)
    w.line("kiln_ldmatrix_x4(&b_frag[j][0], b_tile + (warp_col + (j + lane / 16) * 8 + lane % 8) * "
           "kBTileStride + kk + lane / 8 % 2 * 8);");
  else
    w.line("kiln_ldmatrix_x4_trans(&b_frag[j][0], b_tile + (kk + lane % 8 + lane / 8 % 2 * 8) * kBTileStride + "
           "warp_col + (j + lane / 16) * 8);");
  w.close();
  w.line("#pragma unroll");
  w.open("for (int i = 0; i < kMmaM; ++i)");
  w.line("#pragma unroll");
  w.open("for (int j = 0; j < kMmaN; ++j)");
  w.line("{}(acc[i][j], a_frag[i], b_frag[j]);", bf16 ? "kiln_mma_bf16_m16n8k16" : "kiln_mma_f16_m16n8k16");
  w.close();
  w.close();
  w.close();
}

// The cp.async copies of one operand's tile for the k step at `k_next` into `dst` (a stage):
// 16 bytes (kCopy elements along the contiguous dim: 4 floats, 8 bf16/f16) each, zero-filled
// outside the matrix. k contiguous: the tile is outer-major, [outer][kTileK + pad]; else
// k-major, [k][outer + 8].
void async_copies(BodyWriter& w, const GemmSpec& spec, const GemmOperand& operand,
                  const std::string& name, const std::string& outer, const std::string& outer_size,
                  const std::string& outer_tile) {
  const std::string stride = "k" + std::string(name == "a" ? "A" : "B") + "TileStride";
  w.line("#pragma unroll");
  w.open("for (int copy = 0; copy < {} * kTileK / kCopy / kThreads; ++copy)", outer_tile);
  w.line("const int c = threadIdx.x + copy * kThreads;");
  if (operand.k_contiguous) {
    w.line("const int copy_outer = c / (kTileK / kCopy);");
    w.line("const int copy_k = c % (kTileK / kCopy) * kCopy;");
  } else {
    w.line("const int copy_k = c / ({} / kCopy);", outer_tile);
    w.line("const int copy_outer = c % ({} / kCopy) * kCopy;", outer_tile);
  }
  w.line("const {} {} = block_{} + copy_outer;", spec.index_type, outer, outer);
  w.line("const {} k = k_next + copy_k;", spec.index_type);
  w.line("kiln_cp_async16({}_dst + {}, {}, {} < {} && k < {});", name,
         operand.k_contiguous ? "copy_outer * " + stride + " + copy_k"
                              : "copy_k * " + stride + " + copy_outer",
         operand.address, outer, outer_size, k_end(spec));
  w.close();
}

}  // namespace

KernelSpec emit_gemm(const GemmSpec& spec, const ir::Node& node) {
  const GemmTiling tiling = gemm_tiling(spec);
  const bool mma = on_tensor_cores(tiling.unit);
  const int64_t tiles_m = ceil_div(spec.m, tiling.tile_m);
  const int64_t tiles_n = ceil_div(spec.n, tiling.tile_n);
  const int64_t splits = k_splits(spec);
  const bool split_k = spec.k_chunk > 0;  // even into one chunk: out_index reads `split`
  if (tiles_m > kMaxGridYZ || spec.batch * splits > kMaxGridYZ)
    throw Error(node.loc.render(),
                fmt::format("{}: a GEMM of {} rows in {} problems{} does not fit a CUDA grid ({} "
                            "row tiles of {} and {} problems at most)",
                            node.describe(), spec.m, spec.batch,
                            splits > 1 ? fmt::format(" of {} K chunks", splits) : "", kMaxGridYZ,
                            tiling.tile_m, kMaxGridYZ));
  BodyWriter w;
  w.comment("Problem: out[row][col] = sum over k of A[row][k] * B[k][col].");
  w.line("using index_t = {};", spec.index_type);
  w.lines(spec.prelude);
  w.declare("kM", "constexpr index_t kM = {};  // {}", spec.m, spec.m_is);
  w.declare("kN", "constexpr index_t kN = {};  // {}", spec.n, spec.n_is);
  w.declare("kK", "constexpr index_t kK = {};  // {}", spec.k, spec.k_is);
  for (const GemmConstant& c : spec.constants) {
    const bool fits_int = c.value <= std::numeric_limits<int32_t>::max();
    w.declare(c.name, "constexpr {} {} = {};  // {}", fits_int ? "int" : "index_t", c.name,
              c.value, c.comment);
  }
  w.comment("Tiling: a block computes a kTileM x kTileN tile of out, kTileK steps of K at a time;");
  if (mma) {
    w.comment("warp (warp_m, warp_n) owns a kWarpTileM x kWarpTileN piece of it: kMmaM x kMmaN");
    w.comment("tensor-core tiles of 16 x 8, each 4 floats per lane (mma.m16n8k8's C layout).");
  } else {
    w.comment("thread (thread_m, thread_n) owns rows thread_m + i * kThreadsM and columns");
    w.comment("thread_n + j * kThreadsN of it, so a warp reads neighbouring shared words.");
  }
  w.line("constexpr int kTileM = {};", tiling.tile_m);
  w.line("constexpr int kTileN = {};", tiling.tile_n);
  w.line("constexpr int kTileK = {};", tiling.tile_k);
  w.line("constexpr int kThreads = {};", tiling.threads);
  if (mma) {
    w.line("constexpr int kWarpsM = {};", tiling.warps_m);
    w.line("constexpr int kWarpsN = {};", tiling.warps_n);
    w.line("constexpr int kWarpTileM = kTileM / kWarpsM;");
    w.line("constexpr int kWarpTileN = kTileN / kWarpsN;");
    w.line("constexpr int kMmaM = kWarpTileM / 16;");
    w.line("constexpr int kMmaN = kWarpTileN / 8;");
  } else {
    w.line("constexpr int kThreadsM = {};", kGemmThreadsM);
    w.line("constexpr int kThreadsN = {};", kGemmThreadsN);
    w.line("constexpr int kPerThreadM = kTileM / kThreadsM;");
    w.line("constexpr int kPerThreadN = kTileN / kThreadsN;");
  }
  // An operand staged through registers a float at a time, or cp.async / float4 ones.
  const bool scalar_a = !tiling.async_a && !tiling.vector_a;
  const bool scalar_b = !tiling.async_b && !tiling.vector_b;
  if (scalar_a || scalar_b) w.line("constexpr int kLoadsPerThread = kTileM * kTileK / kThreads;");
  // A cp.async operand with k contiguous keeps that layout in shared memory ([outer][k]); all
  // others are k-major.
  // Sparse tensor cores copy A's kept values as stored, rows of kTileK / 2 (gemm_sparse.cpp).
  const bool a_outer_major = tiling.sparse_a || (tiling.async_a && spec.a.k_contiguous);
  const bool b_outer_major = tiling.async_b && spec.b.k_contiguous;
  if (!mma) {
    w.comment("Shared tiles are k-major; the padding spreads stores along k over all banks.");
  } else if (sixteen_bit(tiling.unit)) {
    w.comment("Shared tiles of 16-bit values: k-major with k-rows 16 bytes apart in the banks, or");
    w.comment("(cp.async, k contiguous) outer-major with rows of kTileK + 8: either way the 8 rows");
    w.comment("of an ldmatrix matrix fall in 32 distinct banks.");
  } else {
    w.comment("Shared tiles: k-major with k-rows 8 banks apart, or (cp.async, k contiguous)");
    w.comment("outer-major with rows of kTileK + 4: either way a fragment load touches 32 banks.");
  }
  if (tiling.vector_a && !spec.a.k_contiguous)
    w.comment("A's float4s run along its rows: its k-rows start 16 bytes apart.");
  if (tiling.sparse_a)
    w.line("constexpr int kATileStride = kTileK / 2 + {};  // A's kept values: half the k", outer_major_pad(tiling));
  else if (a_outer_major)
    w.line("constexpr int kATileStride = kTileK + {};", outer_major_pad(tiling));
  else
    w.line("constexpr int kATileStride = kTileM + {};",
           k_major_pad(tiling, tiling.vector_a && !spec.a.k_contiguous));
  if (tiling.vector_b && !spec.b.k_contiguous)
    w.comment("B's float4s run along its columns: its k-rows start 16 bytes apart.");
  if (b_outer_major)
    w.line("constexpr int kBTileStride = kTileK + {};", outer_major_pad(tiling));
  else
    w.line("constexpr int kBTileStride = kTileN + {};",
           k_major_pad(tiling, tiling.vector_b && !spec.b.k_contiguous));
  w.line(a_outer_major ? "constexpr int kAStageSize = kTileM * kATileStride;"
                       : "constexpr int kAStageSize = kTileK * kATileStride;");
  // B's stage size is needed only to step past B's stages: to the next stage, or to the
  // statistics after them (an unused constant would warn under nvcc).
  const bool pipelined = tiling.stages > 1;
  if (pipelined || spec.row_stat_arrays > 0)
    w.line(b_outer_major ? "constexpr int kBStageSize = kTileN * kBTileStride;"
                         : "constexpr int kBStageSize = kTileK * kBTileStride;");
  w.line("constexpr int kStages = {};", tiling.stages);
  const std::string tile_type = tile_element(tiling, spec.value_type);
  if (pipelined) w.line("constexpr int kCopy = {};  // elements per 16-byte cp.async", elements_per_copy(tiling));
  if (sixteen_bit(tiling.unit))
    w.comment(fmt::format("The tiles hold {} bits, rounded as staged.", ir::dtype_name(unit_dtype(tiling.unit))));
  w.line("{0}* a_tiles = reinterpret_cast<{0}*>(kiln_smem);", tile_type);
  w.line("{}* b_tiles = a_tiles + kStages * kAStageSize;", tile_type);
  if (spec.row_stat_arrays > 0) {
    w.comment("Row statistics of recomputed norms, after the tiles.");
    w.line("float* extra_smem = reinterpret_cast<float*>(b_tiles + kStages * kBStageSize);");
  }
  w.blank();
  if (mma) {
    w.comment("The warp's piece of the tile, and the lane's place in mma's fragment layouts.");
    w.line("const int warp = threadIdx.x / 32;");
    w.line("const int lane = threadIdx.x % 32;");
    w.line("const int warp_row = warp / kWarpsN * kWarpTileM;");
    w.line("const int warp_col = warp % kWarpsN * kWarpTileN;");
    w.line("const int lane_group = lane / 4;  // the PTX ISA's groupID");
    w.line("const int lane_quad = lane % 4;   // threadID_in_group");
  } else {
    w.line("const int thread_m = threadIdx.x / kThreadsN;");
    w.line("const int thread_n = threadIdx.x % kThreadsN;");
  }
  w.line("const index_t block_row = static_cast<index_t>(blockIdx.y) * kTileM;");
  w.line("const index_t block_col = static_cast<index_t>(blockIdx.x) * kTileN;");
  if (split_k) {
    w.comment("Split-K: grid z walks the problems and, within each, the chunks of K; this");
    w.comment("block sums k in [k_begin, k_end) and stores its partial result.");
    w.line("constexpr int kSplits = {};", splits);
    w.line("constexpr index_t kChunk = {};", spec.k_chunk);
    w.declare(spec.z_name, "const int {} = blockIdx.z / kSplits;", spec.z_name);
    w.line("const int split = blockIdx.z % kSplits;");
    w.line("const index_t k_begin = split * kChunk;");
    w.line("const index_t k_end = k_begin + kChunk < kK ? k_begin + kChunk : kK;");
  } else {
    w.declare(spec.z_name, "const int {} = blockIdx.z;", spec.z_name);
  }
  w.lines(spec.batch_setup);
  const bool host_body = host_body_applies(spec, tiling);
  if (host_body) emit_host_body(w, spec, tiling);
  // Operands staged through registers a float at a time get their thread's position; cp.async
  // and float4 ones only their setup (a fused norm's statistics).
  if (scalar_a)
    staging_position(w, spec, spec.a, "a", "row", "kTileM");
  else
    w.lines(spec.a.setup);
  if (scalar_b)
    staging_position(w, spec, spec.b, "b", "col", "kTileN");
  else
    w.lines(spec.b.setup);
  w.blank();
  w.comment("Accumulators: constant indices after unrolling, so they live in registers.");
  if (mma)
    w.line("float acc[kMmaM][kMmaN][4];");
  else
    w.line("{} acc[kPerThreadM][kPerThreadN];", spec.value_type);
  w.line("#pragma unroll");
  w.open(mma ? "for (int i = 0; i < kMmaM; ++i)" : "for (int i = 0; i < kPerThreadM; ++i)");
  w.line("#pragma unroll");
  w.open(mma ? "for (int j = 0; j < kMmaN; ++j)" : "for (int j = 0; j < kPerThreadN; ++j)");
  if (mma) {
    w.line("#pragma unroll");
    w.line("for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.0f;");
  } else {
    w.line("acc[i][j] = 0;");
  }
  w.close();
  w.close();
  if (pipelined) {
    w.comment("cp.async copies of one k step's tiles into a stage; they land when waited for.");
    w.open("const auto copy_tiles = [&](int stage, index_t k_next)");
    if (tiling.async_a) {
      w.line("{}* a_dst = a_tiles + stage * kAStageSize;", tile_type);
      if (tiling.sparse_a)
        async_two_four_copies(w, spec);
      else
        async_copies(w, spec, spec.a, "a", "row", "kM", "kTileM");
    }
    if (tiling.async_b) {
      w.line("{}* b_dst = b_tiles + stage * kBStageSize;", tile_type);
      async_copies(w, spec, spec.b, "b", "col", "kN", "kTileN");
    }
    w.close(";");
    w.comment("The first kStages - 1 steps' copies fly before the loop, a group each (empty");
    w.comment("past the end, so that every step waits for the same count).");
    w.line("#pragma unroll");
    w.open("for (int s = 0; s < kStages - 1; ++s)");
    const std::string k_first = split_k ? "k_begin + s * kTileK" : "s * kTileK";
    w.line("if ({0} < {1}) copy_tiles(s, {0});", k_first, k_end(spec));
    w.line("kiln_cp_async_commit();");
    w.close();
  }
  const std::string next_stage = tiling.stages == 2 ? "stage ^= 1" : "stage = (stage + 1) % kStages";
  if (split_k)
    w.open(pipelined ? "for (index_t k0 = k_begin, stage = 0; k0 < k_end; k0 += kTileK, " + next_stage + ")"
                     : "for (index_t k0 = k_begin; k0 < k_end; k0 += kTileK)");
  else
    w.open(pipelined ? "for (int k0 = 0, stage = 0; k0 < kK; k0 += kTileK, " + next_stage + ")"
                     : "for (int k0 = 0; k0 < kK; k0 += kTileK)");
  w.line("{0}* a_tile = a_tiles{1};", tile_type, pipelined ? " + stage * kAStageSize" : "");
  w.line("{0}* b_tile = b_tiles{1};", tile_type, pipelined ? " + stage * kBStageSize" : "");
  if (pipelined) {
    w.comment("The copies kStages - 1 steps ahead go to the stage the last step read (it ended");
    w.comment("in a barrier); an empty group at the end keeps the count of groups in flight.");
    if (tiling.stages == 2)
      w.line("if (k0 + kTileK < {}) copy_tiles(stage ^ 1, k0 + kTileK);", k_end(spec));
    else
      w.line("if (k0 + (kStages - 1) * kTileK < {}) copy_tiles((stage + kStages - 1) % kStages, "
             "k0 + (kStages - 1) * kTileK);",
             k_end(spec));
    w.line("kiln_cp_async_commit();");
  }
  if (!tiling.async_a || !tiling.async_b) w.comment("Stage the tiles, zero outside the matrices.");
  if (tiling.vector_a)
    stage_tile_vectors(w, spec, tiling, spec.a, "a", "row", "kM", "kTileM", spec.m % tiling.tile_m != 0);
  else if (!tiling.async_a)
    stage_tile(w, spec, tiling, spec.a, "a", "row", "kM", spec.m % tiling.tile_m != 0);
  if (tiling.vector_b)
    stage_tile_vectors(w, spec, tiling, spec.b, "b", "col", "kN", "kTileN", spec.n % tiling.tile_n != 0);
  else if (!tiling.async_b)
    stage_tile(w, spec, tiling, spec.b, "b", "col", "kN", spec.n % tiling.tile_n != 0);
  if (pipelined) {
    w.comment("This step's copies have landed (the next steps' may still be in flight).");
    w.line("kiln_cp_async_wait<kStages - 1>();");
  }
  w.comment("The tiles are complete before anyone reads them.");
  w.line("__syncthreads();");
  if (tiling.sparse_a)
    mma_step_sparse(w, spec, tiling, b_outer_major);
  else if (sixteen_bit(tiling.unit))
    mma_step_16bit(w, tiling, a_outer_major, b_outer_major);
  else if (mma)
    mma_step(w, tiling, a_outer_major, b_outer_major);
  else
    fma_step(w, spec);
  w.comment("Everyone has read the tiles before the next step overwrites them.");
  w.line("__syncthreads();");
  w.close();
  w.blank();
  w.comment("Epilogue: per result, the hook (bias, activation, ...) then the store.");
  const auto result = [&](const std::string& accumulator) { emit_result(w, spec, tiling, accumulator); };
  if (mma) {
    w.comment("A lane holds rows lane_group and lane_group + 8, columns 2 lane_quad and");
    w.comment("2 lane_quad + 1 of each 16 x 8 tile.");
    w.line("#pragma unroll");
    w.open("for (int i = 0; i < kMmaM; ++i)");
    w.line("#pragma unroll");
    w.open("for (int j = 0; j < kMmaN; ++j)");
    w.line("#pragma unroll");
    w.open("for (int r = 0; r < 4; ++r)");
    w.line("const index_t row = block_row + warp_row + i * 16 + lane_group + r / 2 * 8;");
    w.line("const index_t col = block_col + warp_col + j * 8 + lane_quad * 2 + r % 2;");
    result("acc[i][j][r]");
    w.close();
  } else {
    w.line("#pragma unroll");
    w.open("for (int i = 0; i < kPerThreadM; ++i)");
    w.line("const index_t row = block_row + thread_m + i * kThreadsM;");
    w.line("#pragma unroll");
    w.open("for (int j = 0; j < kPerThreadN; ++j)");
    w.line("const index_t col = block_col + thread_n + j * kThreadsN;");
    result("acc[i][j]");
  }
  w.close();
  w.close();

  KernelSpec kernel;
  kernel.body = w.take();
  kernel.grid = Dim3{static_cast<uint32_t>(tiles_n), static_cast<uint32_t>(tiles_m),
                     static_cast<uint32_t>(spec.batch * splits)};
  kernel.block = Dim3{static_cast<uint32_t>(tiling.threads), 1, 1};
  kernel.shared_bytes = gemm_shared_bytes(spec, tiling);
  kernel.uses_barriers = true;
  kernel.tensor_cores = mma;
  if (mma) kernel.tensor_core_inputs = spec.precision;
  kernel.host_variant = host_body;
  // Split-K: each chunk is a problem of its own to the cost model.
  kernel.gemm = GemmGeometry{spec.m, spec.n, split_k ? std::min(spec.k, spec.k_chunk) : spec.k,
                             spec.batch * splits, tiling.tile_m, tiling.tile_n, tiling.tile_k,
                             tiling.async_a || tiling.async_b, tiling.sparse_a};
  kernel.note = spec.what + ", " + gemm_tiling_note(spec) +
                (split_k ? fmt::format(", split-K: {} chunk{} of {}", splits, splits == 1 ? "" : "s", spec.k_chunk) : "") +
                spec.note;
  kernel.dynamic_grid_axis = spec.dynamic_grid_axis;
  // A split-K block's loop bounds are run-time values; without a bound on blocks per SM, ptxas
  // (sm_80) aimed a gathered-patch conv on the FMA template at 8 blocks (32 registers) and
  // spilled. Two blocks of 256 threads leave it up to 128. (The tensor-core template sizes its
  // own registers well; bounding it cost modeled time.)
  // float4 staging did the same to every unguarded matmul whose operands both load as float4s
  // (sm_80, K from 32 to 256: 32 registers, 24 bytes spilled). Four blocks per SM cap them at
  // 64 registers, the most any of ResNet-50's GEMMs took unbounded; ptxas then takes 56-64
  // where it took 40, for 50 % occupancy instead of 75 %: this loop waits on its 8 shared loads
  // per 16 FMAs, which more resident warps do not speed up.
  // On tensor cores, an operand staged as 4 x 16-bit loads next to one copied by cp.async (an
  // f32 input autocast reads as stored beside a bf16 weight) met the same heuristic: 40
  // registers, 16 bytes spilled (sm_80). Any bound makes ptxas allocate normally; one block per
  // SM leaves it every register (it takes 56).
  // The 16-bit 128-tile kernels, whose k steps of 32 unroll into twice the fragment loads, took
  // up to 255 registers when unbounded or bounded at one block (a conv reading 4 x bf16 beside a
  // cp.async weight): one block of 8 warps per SM. Two blocks (128 registers) cost no spills,
  // except where an operand is staged one element at a time: 16 gathered loads per thread in
  // flight (f16, sm_80: 8 bytes spilled). Those keep one block per SM, below.
  // So are the sparse tensor cores' (ResNet-50's 128-tile sparse convolutions took up to 172
  // registers at one block per SM): two blocks, up to 128 registers, no spills.
  if (sixteen_bit(tiling.unit) && tiling.tile_m == 128 && ((!scalar_a && !scalar_b) || tiling.sparse_a))
    kernel.min_blocks_per_sm = 2;
  else if (split_k && !mma)
    kernel.min_blocks_per_sm = 2;
  else if ((tiling.vector_a || tiling.vector_b) && !mma)
    kernel.min_blocks_per_sm = 4;
  else if ((tiling.vector_a || tiling.vector_b) && mma)
    kernel.min_blocks_per_sm = 1;
  // So did a 16-bit one gathering a conv's patches one by one beside a weight copied by cp.async
  // (sm_90: 4 bytes spilled, an 8-byte stack frame).
  else if (sixteen_bit(tiling.unit) && (tiling.async_a != tiling.async_b))
    kernel.min_blocks_per_sm = 1;

  return kernel;
}

}  // namespace kiln::codegen::nn
