// The GEMM template's host-specific body: what the host backend runs instead of the CUDA one.
//
// On the CPU a block's 256 CUDA threads are fibers on one OS thread, and the CUDA body's two
// barriers per k step cost more than its arithmetic (HOST_BACKEND.md: 12-22 ns per thread per
// barrier; 64 x 64 x 16 = 16,384 multiply-adds per step). The host body computes the same tile
// without barriers, as one loop nest:
//   1. stage a panel of up to kHostPanelSteps k steps of both operands through the operands'
//      own fetches (so it stages exactly what the CUDA threads stage, zeros outside the
//      matrices included), each in the order its memory wants (emit_panel_staging), and each
//      column's setup (a conv's patch position) once per block, or the operand's host_setup
//      (a norm prologue's row statistics);
//   2. multiply the panel into the block's result tile (kiln_host_gemm_multiply, in the host
//      prelude: one copy per module), 4 rows x 2 vectors of results at a time held in
//      registers, FMA instructions along contiguous columns;
//   3. store every result with the CUDA body's epilogue.
// Each result is the same sum as in the CUDA body: zero, then one fused multiply-add at a time
// in k order (the CUDA source writes fmaf; the k tiles' zero padding folded into one +0), and
// the host never contracts anything else (host_compiler.cpp). So the two bodies agree bit for
// bit, which tests check (HostOptions::cuda_variants).
// This is the loop fission of MCUDA and COX, done by the template that knows where its barriers
// are, rather than by a compiler pass over arbitrary kernels.
#include <algorithm>
#include <optional>
#include <regex>
#include <sstream>
#include <utility>

#include "codegen/kernels/gemm_parts.h"

namespace kiln::codegen::nn::gemm_parts {
namespace {

// k staged per panel: 128 k of a 64-wide A and B tile is 64 KB of stack, and the multiply
// keeps each register block of results over 128 k (8 k steps of 16, 4 of the 16-bit units' 32).
constexpr int64_t kHostPanelK = 128;
// kiln_host_gemm_multiply's register blocks (kiln_host_prelude.h) are 4 rows by one or two
// vectors (16 or 32 floats with AVX-512, 8 or 16 with AVX2): the rows and columns a tile's
// multiply covers are rounded up to 4 and 16.
constexpr int kHostRows = 4;
constexpr int kHostCols = 16;

// A setup's declarations, `const TYPE NAME = ...;` one per line (comments aside), as
// (type, name) pairs; nullopt when a line is anything else.
std::optional<std::vector<std::pair<std::string, std::string>>> setup_declarations(
    const std::string& setup) {
  static const std::regex declaration(R"(^const ([A-Za-z_][\w:]*) ([A-Za-z_]\w*) = .*;$)");
  std::vector<std::pair<std::string, std::string>> names;
  std::istringstream lines(setup);
  for (std::string line; std::getline(lines, line);) {
    line.erase(0, line.find_first_not_of(' '));
    if (line.empty() || line.rfind("//", 0) == 0) continue;
    std::smatch match;
    if (!std::regex_match(line, match, declaration)) return std::nullopt;
    names.emplace_back(match[1], match[2]);
  }
  return names;
}

// One operand as the host body stages it.
struct HostOperand {
  const GemmOperand* operand;
  std::string name, outer, outer_tile, outer_size;  // "a", "row", "kTileM", "kM"
  bool ragged;                                      // its last tile overhangs the matrix
  std::vector<std::pair<std::string, std::string>> cached;  // its setup's declarations
  std::string index() const { return name + "_" + outer; }  // a_row, b_col: what setups read
};

std::vector<HostOperand> host_operands(const GemmSpec& spec, const GemmTiling& tiling) {
  std::vector<HostOperand> operands = {
      {&spec.a, "a", "row", "kTileM", "kM", spec.m % tiling.tile_m != 0, {}},
      {&spec.b, "b", "col", "kTileN", "kN", spec.n % tiling.tile_n != 0, {}}};
  for (HostOperand& o : operands)  // host_body_applies has checked that they parse
    if (!o.operand->setup.empty() && o.operand->host_setup.empty())
      o.cached = *setup_declarations(o.operand->setup);
  return operands;
}

// The setup a CUDA thread runs for its column (!k_contiguous operands: a conv's patch
// position), once per column of the tile, into arrays.
void emit_setup_caches(BodyWriter& w, const std::vector<HostOperand>& operands) {
  for (const HostOperand& o : operands) {
    if (o.cached.empty()) continue;
    w.comment(fmt::format("The setup of {}'s CUDA threads, once per {} of the tile.",
                          o.name == "a" ? "A" : "B", o.outer == "row" ? "row" : "column"));
    for (const auto& [type, name] : o.cached) w.line("{} {}_of[{}];", type, name, o.outer_tile);
    w.open("for (int {0} = 0; {0} < {1}; ++{0})", o.index(), o.outer_tile);
    w.lines(o.operand->setup);
    for (const auto& [type, name] : o.cached) w.line("{0}_of[{1}] = {0};", name, o.index());
    w.close();
  }
}

// The size of `o`'s outer dimension: M for A, N for B.
int64_t spec_outer(const GemmSpec& spec, const HostOperand& o) { return o.name == "a" ? spec.m : spec.n; }

// A staged value as the unit multiplies it: unchanged on the FMA units; on tensor cores rounded
// to the operand format with the functions the CUDA body's fragments use (kiln_tf32_round;
// kiln_pack_bf16x2's and kiln_pack_f16x2's conversions), back in a float.
std::string rounded_for_unit(GemmUnit unit) {
  switch (unit) {
    case GemmUnit::TensorCoreTf32: return "kiln_tf32_round(value)";
    case GemmUnit::TensorCoreBf16: return "kiln_bf16_to_float(kiln_float_to_bf16(value))";
    case GemmUnit::TensorCoreF16: return "kiln_half_to_float(kiln_float_to_half(value))";
    case GemmUnit::Fma: break;
  }
  return "value";
}

// Whether the host body stages `operand` along memory (k inner) rather than k by k.
bool staged_along_memory(const GemmOperand& operand) {
  return operand.k_contiguous && !operand.host_along_k;
}

// Staging a panel, in the order a CPU wants, each value through its operand's own fetch (so
// the values are those the CUDA threads stage: a fetch depends only on (outer, k) and the setup
// of its outer index):
// - an operand contiguous along k (a weight matrix) row by row (column by column), k inner:
//   the reads run along memory. Along k, a 64-row tile reads 64 rows a K-stride apart, which
//   for K = 4608 fall in 2 of L1's 64 sets;
// - the others (a conv's gathered patches, and operands marked host_along_k: a conv's
//   grad-input weight) along k: for each k, every row (column), so that the fetch's arithmetic
//   on k alone (im2col's divisions) is the same for the whole inner loop and the compiler
//   hoists it.
// A k-contiguous A is staged [row][k], which the multiply reads as well as [k][row]; B stays
// [k][column], the multiply's vectors running along its columns.
void emit_panel_staging(BodyWriter& w, const GemmSpec& spec, const GemmTiling& tiling,
                        const std::vector<HostOperand>& operands) {
  const std::string k_guard = k_ragged(spec, tiling) ? "k < " + k_end(spec) : "";
  w.comment("1. Stage the panel, zero outside the matrices, through the operands' own fetches.");
  for (const HostOperand& o : operands) {
    const bool along_memory = staged_along_memory(*o.operand);
    const auto open_outer = [&] {
      // Only the rows (columns) the multiply reads: inside the matrix, rounded up to its blocks.
      w.open("for (int {0} = 0; {0} < {1}; ++{0})", o.index(),
             o.name == "a" ? "tile_rows" : "tile_cols");
      for (const auto& [type, name] : o.cached)
        w.line("const {0} {1} = {1}_of[{2}];", type, name, o.index());
    };
    const auto open_k = [&] {  // one loop: a copy of a row's 16 k is not worth a `rep movs`
      w.open("for (int panel_k = 0; panel_k < panel_steps * kTileK; ++panel_k)");
      w.line("const index_t k = panel_k0 + panel_k;");
    };
    w.comment(fmt::format("{}{}", o.name == "a" ? "A" : "B",
                          along_memory ? o.outer == "row" ? ", row by row, along memory:"
                                                          : ", column by column, along memory:"
                                       : ", along k:"));
    // Past the matrix's last row (column) only when the register blocks overhang it: the loop
    // stops at the last block inside it. A guard on k alone is taken out of a loop along k, so
    // that the inner loop has none on the data (g++ vectorizes no masked strided load).
    const bool outer_guard = o.ragged && spec_outer(spec, o) % (o.name == "a" ? kHostRows : kHostCols) != 0;
    std::string inner_k_guard = k_guard;
    if (along_memory) {
      open_outer();
      open_k();
    } else {
      open_k();
      if (!k_guard.empty()) {
        w.open("if (!({}))", k_guard);
        w.comment("Past the end of K: zeros.");
        w.line("for (int {0} = 0; {0} < {1}; ++{0}) {2}_panel[panel_k * {3} + {0}] = 0;", o.index(),
               o.name == "a" ? "tile_rows" : "tile_cols", o.name, o.name == "a" ? "kTileM" : "kTileN");
        w.line("continue;");
        w.close();
        inner_k_guard.clear();
      }
      open_outer();
    }
    const std::string guard = conjunction({outer_guard ? o.outer + " < " + o.outer_size : "", inner_k_guard});
    if (mentions(guard, o.outer) || mentions(o.operand->fetch, o.outer))
      w.line("const {} {} = block_{} + {};", spec.index_type, o.outer, o.outer, o.index());
    w.line("{} value = 0;", spec.value_type);
    if (!guard.empty()) w.open("if ({})", guard);
    w.lines(o.operand->fetch);
    if (!guard.empty()) w.close();
    const std::string stored = rounded_for_unit(tiling.unit);
    if (o.name == "a" && along_memory)
      w.line("a_panel[a_row][panel_k] = {};", stored);
    else
      w.line("{0}_panel[panel_k * {1} + {0}_{2}] = {3};", o.name,
             o.name == "a" ? "kTileM" : "kTileN", o.outer, stored);
    w.close();
    w.close();
  }
}

// Whether the host body can run the setup of `operand`: none; a host version of it (host_setup:
// a norm's row statistics); or plain declarations of a !k_contiguous operand, run once per
// outer index (emit_setup_caches; a k-contiguous operand's thread stages several outer
// indices, so its setup could not depend on one).
bool setup_cacheable(const GemmOperand& operand) {
  if (operand.setup.empty() || !operand.host_setup.empty()) return true;
  return !operand.k_contiguous && setup_declarations(operand.setup).has_value();
}

}  // namespace

bool host_body_applies(const GemmSpec& spec, const GemmTiling& tiling) {
  return (spec.row_stat_arrays == 0 || !spec.a.host_setup.empty()) &&
         tiling.tile_m % kHostRows == 0 && tiling.tile_n % kHostCols == 0 &&
         setup_cacheable(spec.a) && setup_cacheable(spec.b);
}

void emit_host_body(BodyWriter& out, const GemmSpec& spec, const GemmTiling& tiling) {
  const std::string& T = spec.value_type;
  const int64_t k_range = spec.k_chunk > 0 ? std::min(spec.k, spec.k_chunk) : spec.k;
  const int64_t panel_steps =
      std::min(kHostPanelK / tiling.tile_k, (k_range + tiling.tile_k - 1) / tiling.tile_k);
  BodyWriter w(0);  // its own writer: its declarations are dropped or kept on their own
  open_host_body(w, {"Host backend: the block's whole tile as one loop nest without barriers, equal bit",
                     "for bit to the CUDA body below (codegen/kernels/gemm_host.cpp). Thread 0 runs it."});
  w.line("constexpr int kHostPanelSteps = {};  // k steps staged at a time", panel_steps);
  w.line("constexpr int kHostRows = {};  // kiln_host_gemm_multiply's register block: rows", kHostRows);
  w.line("constexpr int kHostCols = {};  // and columns", kHostCols);
  w.comment("The panels without the shared tiles' padding, and aligned: the multiply's vectors");
  w.comment("run along B's and the results' rows.");
  if (staged_along_memory(spec.a))
    w.line("alignas(64) {} a_panel[kTileM][kHostPanelSteps * kTileK];", T);
  else
    w.line("alignas(64) {} a_panel[kHostPanelSteps * kTileK * kTileM];", T);
  w.line("alignas(64) {} b_panel[kHostPanelSteps * kTileK * kTileN];", T);
  w.line("alignas(64) {} acc[kTileM][kTileN] = {{}};", T);
  w.comment("Rows and columns of the tile inside the matrix, rounded up to whole register blocks.");
  // A constant where there is one: g++ at -O2 vectorizes only loops whose trip count is a
  // known multiple of the vector (the staging of a 32-row A, say).
  const auto round_up = [](int64_t n, int64_t to) { return (n + to - 1) / to * to; };
  if (spec.m < tiling.tile_m)  // one tile row
    w.line("constexpr int tile_rows = {};", round_up(spec.m, kHostRows));
  else if (spec.m % tiling.tile_m != 0)
    w.line("const int tile_rows = ((kM - block_row < kTileM ? static_cast<int>(kM - block_row) : kTileM) "
           "+ kHostRows - 1) / kHostRows * kHostRows;");
  else
    w.line("constexpr int tile_rows = kTileM;");
  if (spec.n < tiling.tile_n)  // one tile column
    w.line("constexpr int tile_cols = {};", round_up(spec.n, kHostCols));
  else if (spec.n % tiling.tile_n != 0)
    w.line("const int tile_cols = ((kN - block_col < kTileN ? static_cast<int>(kN - block_col) : kTileN) "
           "+ kHostCols - 1) / kHostCols * kHostCols;");
  else
    w.line("constexpr int tile_cols = kTileN;");
  const std::vector<HostOperand> operands = host_operands(spec, tiling);
  for (const HostOperand& o : operands) w.lines(o.operand->host_setup);
  emit_setup_caches(w, operands);
  w.open("for (index_t panel_k0 = {0}; panel_k0 < {1}; panel_k0 += kHostPanelSteps * kTileK)",
         spec.k_chunk > 0 ? "k_begin" : "0", k_end(spec));
  w.line("const index_t panel_end = panel_k0 + kHostPanelSteps * kTileK < {0} ? "
         "panel_k0 + kHostPanelSteps * kTileK : {0};",
         k_end(spec));
  w.line("const int panel_steps = static_cast<int>((panel_end - panel_k0 + kTileK - 1) / kTileK);");
  emit_panel_staging(w, spec, tiling, operands);
  const std::string a_panel = staged_along_memory(spec.a) ? "&a_panel[0][0]" : "a_panel";
  const std::string a_strides = staged_along_memory(spec.a) ? "1, kHostPanelSteps * kTileK" : "kTileM, 1";
  if (on_tensor_cores(tiling.unit)) {
    w.comment("2. Multiply (kiln_host_prelude.h) as the emulated mma.sync adds: per block of");
    w.comment("mma's k, in double, rounded once; the panel's zero padding included.");
    w.line("kiln_host_mma_multiply(&acc[0][0], kTileN, {}, {}, b_panel, kTileN, panel_steps * kTileK, {}, "
           "tile_rows, tile_cols);",
           a_panel, a_strides, tiling.sparse_a ? 32 : sixteen_bit(tiling.unit) ? 16 : 8);
  } else {
    w.comment("2. Multiply (kiln_host_prelude.h): each result sums the panel's k in order.");
    w.line("const int last_k = static_cast<int>(panel_end - (panel_k0 + (panel_steps - 1) * kTileK));");
    w.line("kiln_host_gemm_multiply<{}>(&acc[0][0], kTileN, {}, {}, b_panel, "
           "kTileN, kTileK, panel_steps, last_k, tile_rows, tile_cols);",
           T, a_panel, a_strides);
  }
  w.close();
  w.comment("3. The CUDA body's epilogue for every result.");
  w.open("for (int r = 0; r < kTileM; ++r)");
  w.line("const index_t row = block_row + r;");
  w.open("for (int c = 0; c < kTileN; ++c)");
  w.line("const index_t col = block_col + c;");
  emit_result(w, spec, tiling, "acc[r][c]");
  w.close();
  w.close();
  close_host_body(w);
  out.lines(w.take());
}

}  // namespace kiln::codegen::nn::gemm_parts
