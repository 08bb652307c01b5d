// The GEMM template on sparse tensor cores: A is a 2:4 weight kept compressed (expand_2_4's
// operands, ir/two_four.h), B is dense, and each 16 x 8 tile takes one mma.sp m16n8k32 per k
// tile of 32 instead of two mma.sync m16n8k16 (the PTX ISA's "Matrix multiply-accumulate
// operation using mma.sp instruction with sparse matrix A").
//
// Per k tile the block copies A's kept values as stored by cp.async, 16 per row (half the tile's
// k), into a ring of outer-major stage tiles (rows 48 bytes apart: an ldmatrix matrix's 8 rows
// fall in 32 distinct banks), read by ldmatrix.x4 exactly as the dense 16-bit path reads a
// 16-wide tile: the kept 16 x 16 is laid out like a dense m16n8k16's A. B's fragments cover the
// tile's 32 k: two ldmatrix.x4 per pair of 8-column tiles, k 0..15 into registers 0 and 1 and
// k 16..31 into 2 and 3 (.trans from a k-major tile, a convolution's patches; as stored from an
// outer-major one, a dense's x rows copied by cp.async when the dense runs transposed so that
// its weight is A: nn::dense_gemm_by_weight_rows). The metadata each mma.sp needs (selector 0)
// is two 16-bit words of the compressed form for lanes 4g and 4g + 1, rows g and g + 8 of the
// 16-row tile: read straight from global memory, where the rows of a block sit in a few cache
// lines, rather than staged.
#include <fmt/format.h>

#include "codegen/kernels/emit_util.h"
#include "codegen/kernels/gemm_parts.h"
#include "ir/diagnostic.h"

namespace kiln::codegen::nn {

void read_a_two_four(GemmSpec& spec, const TwoFourA& source) {
  spec.two_four_a = source;
  spec.constants.push_back({"kPositionWords", (spec.k + 15) / 16, "16-bit words of 2:4 positions per weight row"});
  // The dense element (row, k), for units without mma.sp and for the host body: the kept value
  // whose position is k's within its group of 4, or zero.
  spec.a.fetch = fmt::format(
      "const index_t sparse_row = {0} + row;\n"
      "const unsigned int group_bits = static_cast<unsigned int>({1}[sparse_row * kPositionWords + k / 16]) >> (k % 16 / 4 * 4);\n"
      "const int slot = kiln_two_four_slot(group_bits, static_cast<int>(k % 4));\n"
      "if (slot >= 0) value = {2};",
      source.first_row, source.positions, load(source.kept_dtype, source.kept + "[sparse_row * (kK / 2) + k / 4 * 2 + slot]"));
  spec.a.address.clear();  // no element is read unchanged from one address
  spec.a.k_contiguous = true;
  spec.note += fmt::format("; A 2:4 sparse ({} kept values and positions)", ir::dtype_name(source.kept_dtype));
}

namespace gemm_parts {

void async_two_four_copies(BodyWriter& w, const GemmSpec& spec) {
  const TwoFourA& source = *spec.two_four_a;
  w.comment("A's kept values: half the k tile per row, kCopy per 16-byte cp.async, zeros past M.");
  w.open("for (int c = threadIdx.x; c < kTileM * (kTileK / 2) / kCopy; c += kThreads)");
  w.line("const int copy_outer = c / (kTileK / 2 / kCopy);");
  w.line("const int copy_k = c % (kTileK / 2 / kCopy) * kCopy;");
  w.line("const index_t row = block_row + copy_outer;");
  w.line("kiln_cp_async16(a_dst + copy_outer * kATileStride + copy_k, &{}[({} + row) * (kK / 2) + k_next / 2 + copy_k], "
         "row < kM);",
         source.kept, source.first_row);
  w.close();
}

void mma_step_sparse(BodyWriter& w, const GemmSpec& spec, const GemmTiling& tiling, bool b_outer_major) {
  const TwoFourA& source = *spec.two_four_a;
  const bool bf16 = tiling.unit == GemmUnit::TensorCoreBf16;
  const bool ragged = spec.m % tiling.tile_m != 0;
  w.line("#pragma unroll");
  w.open("for (int kk = 0; kk < kTileK; kk += 32)");
  w.line("unsigned int a_frag[kMmaM][4];");
  w.line("unsigned int a_meta[kMmaM];");
  w.line("unsigned int b_frag[kMmaN][4];");
  w.line("#pragma unroll");
  w.open("for (int i = 0; i < kMmaM; ++i)");
  w.comment("The 16 x 16 kept values as a dense m16n8k16's A: rows + 8 for odd matrices, kept");
  w.comment("columns + 8 for the last two.");
  w.line("kiln_ldmatrix_x4(a_frag[i], a_tile + (warp_row + i * 16 + lane % 8 + lane / 8 % 2 * 8) * "
         "kATileStride + kk / 2 + lane / 16 * 8);");
  w.comment("Positions of rows g and g + 8, k 16 (lane % 2) .. + 15 of this step (selector 0: lanes");
  w.comment("4g and 4g + 1 supply them; the others' copies go unread). Rows past M: 0 and 1.");
  w.line("const index_t meta_row = block_row + warp_row + i * 16 + lane_group;");
  w.line("const index_t meta_word = (k0 + kk) / 16 + lane_quad % 2;");
  const auto word = [&](const std::string& row) {
    const std::string read = fmt::format("static_cast<unsigned int>({}[({} + {}) * kPositionWords + meta_word])",
                                         source.positions, source.first_row, row);
    return ragged ? fmt::format("({} < kM ? {} : 0x4444u)", row, read) : read;
  };
  w.line("a_meta[i] = {} | {} << 16;", word("meta_row"), word("meta_row + 8"));
  w.close();
  w.line("#pragma unroll");
  w.open("for (int j = 0; j < kMmaN; j += 2)");
  w.line("#pragma unroll");
  w.open("for (int half = 0; half < 2; ++half)");
  w.comment("Tiles j and j + 1, k 16 half .. + 15: registers 2 half and 2 half + 1 of each.");
  w.line("unsigned int pair[4];");
  if (b_outer_major)  // a dense's x rows copied by cp.async: [n][k] holds the fragments as stored
    w.line("kiln_ldmatrix_x4(pair, b_tile + (warp_col + (j + lane / 16) * 8 + lane % 8) * kBTileStride + "
           "kk + half * 16 + lane / 8 % 2 * 8);");
  else  // a convolution's gathered patches, or rows staged through registers: [k][n], transposed
    w.line("kiln_ldmatrix_x4_trans(pair, b_tile + (kk + half * 16 + lane % 8 + lane / 8 % 2 * 8) * kBTileStride + "
           "warp_col + (j + lane / 16) * 8);");
  w.line("b_frag[j][2 * half] = pair[0];");
  w.line("b_frag[j][2 * half + 1] = pair[1];");
  w.line("b_frag[j + 1][2 * half] = pair[2];");
  w.line("b_frag[j + 1][2 * half + 1] = pair[3];");
  w.close();
  w.close();
  w.line("#pragma unroll");
  w.open("for (int i = 0; i < kMmaM; ++i)");
  w.line("#pragma unroll");
  w.open("for (int j = 0; j < kMmaN; ++j)");
  w.line("{}(acc[i][j], a_frag[i], b_frag[j], a_meta[i]);",
         bf16 ? "kiln_mma_sp_bf16_m16n8k32" : "kiln_mma_sp_f16_m16n8k32");
  w.close();
  w.close();
  w.close();
}

}  // namespace gemm_parts
}  // namespace kiln::codegen::nn
