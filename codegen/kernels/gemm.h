// The tiled GEMM template behind matmul, dense and conv2d (implicit GEMM).
//
// out[row][col] = sum over k of A[row][k] * B[k][col], for a batch of problems (grid z). The
// callers describe how to fetch one element of A and B and where a result goes; the template
// writes the tiling, the shared-memory staging and the barriers, specialized to the shapes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "codegen/kernel_emitter.h"
#include "ir/dtype.h"
#include "ir/graph.h"

namespace kiln::codegen::nn {

// Tiling of the FMA GEMM kernels: a block computes a 64x64 tile of out with 16x16 threads, each
// owning 4x4 results, and steps through K 16 at a time. 64x64x16 keeps two float tiles at 8.4 KB
// of shared memory and 16 accumulators per thread, well inside the 255-register budget, so the
// same code compiles without spills on sm_80 and sm_90.
inline constexpr int kGemmTileM = 64;
inline constexpr int kGemmTileN = 64;
inline constexpr int kGemmTileK = 16;
inline constexpr int kGemmThreadsM = 16;
inline constexpr int kGemmThreadsN = 16;
inline constexpr int kGemmThreads = kGemmThreadsM * kGemmThreadsN;
// Shared tiles are k-major rows of 64 floats padded by 2: threads that stage a tile walking
// along k then write 32 different banks.
inline constexpr int kGemmTilePad = 2;

// What computes the products: CUDA cores (FMA), or tensor cores on sm_80+ for f32 GEMMs: mma.sync
// m16n8k8 on TF32 operands (--precision=tf32), m16n8k16 on bf16 or f16 ones (--precision=bf16,
// f16), summing in f32 either way.
enum class GemmUnit { Fma, TensorCoreTf32, TensorCoreBf16, TensorCoreF16 };

inline bool on_tensor_cores(GemmUnit unit) { return unit != GemmUnit::Fma; }
// 16-bit operands: two per fragment register, k steps of 16.
inline bool sixteen_bit(GemmUnit unit) {
  return unit == GemmUnit::TensorCoreBf16 || unit == GemmUnit::TensorCoreF16;
}

// The block tiling a GEMM kernel uses (gemm_tiling). Every tiling has 256 threads and square
// tiles: the staging loop gives each thread the same number of A and B elements.
struct GemmTiling {
  GemmUnit unit = GemmUnit::Fma;
  int tile_m = kGemmTileM, tile_n = kGemmTileN, tile_k = kGemmTileK;
  int pad = kGemmTilePad;  // floats after each k-row of a shared tile
  int threads = kGemmThreads;
  // Tensor cores: the warps' grid over the tile (warps_m x warps_n warps, each owning a
  // tile_m / warps_m x tile_n / warps_n piece of 16x8 mma tiles).
  int warps_m = 0, warps_n = 0;
  // Tensor cores: operands copied global -> shared by cp.async (GemmOperand::address set, in
  // the tiles' element type, the contiguous dim a multiple of 16 bytes: 4 floats or 8 bf16/f16
  // values per copy), in a ring of `stages` shared stages (up to 3 within kSharedBudget) so
  // that the next tiles' copies fly while this one's mma run; the others are staged through
  // registers.
  bool async_a = false, async_b = false;
  int stages = 1;
  // Operands with a plain address whose contiguous dimension holds whole groups of 4 that are
  // staged through registers load 4 elements at a time along it: one float4 (or 4 bf16/f16 in
  // 8 bytes) for four scalar loads.
  bool vector_a = false, vector_b = false;
  // A read from a 2:4 compressed weight (GemmSpec::two_four_a) on sparse tensor cores: its kept
  // values copied by cp.async as stored ([kTileM][kTileK / 2 + 8], half a k tile per row; so
  // async_a is set too), its positions read per fragment from global memory, one mma.sp
  // m16n8k32 per 16 x 8 tile and k tile of 32.
  // Needs the 16-bit units, the kept values in their format, and K (and split-K's chunks) in
  // whole k tiles; otherwise A's fetch decodes each element (read_a_two_four).
  bool sparse_a = false;
};

// The element type the unit multiplies (f32 for the FMA units and TF32, which rounds inside f32).
inline ir::DType unit_dtype(GemmUnit unit) {
  return unit == GemmUnit::TensorCoreBf16  ? ir::DType::BF16
         : unit == GemmUnit::TensorCoreF16 ? ir::DType::F16
                                           : ir::DType::F32;
}

// What the shared tiles hold: the GEMM's value type (float or double), except on the 16-bit
// tensor cores, whose tiles hold the operands already rounded to bf16 (f16), 2 bytes each:
// cp.async copies 16-bit tensors as stored, ldmatrix loads the fragments.
inline std::string tile_element(const GemmTiling& tiling, const std::string& value_type) {
  return sixteen_bit(tiling.unit) ? "unsigned short" : value_type;
}
inline uint32_t tile_element_bytes(const GemmTiling& tiling, const std::string& value_type) {
  return sixteen_bit(tiling.unit) ? 2 : value_type == "double" ? 8 : 4;
}
// Elements one 16-byte cp.async moves.
inline int elements_per_copy(const GemmTiling& tiling) { return sixteen_bit(tiling.unit) ? 8 : 4; }

// Floats after each k-row of a k-major shared tile: `tiling.pad`, except for an operand whose
// vector loads run along its outer index. Those are stored as float4s, which takes rows starting
// 16 bytes apart: the FMA tiles' pad of 2 becomes 4 (8 threads then write 32 banks); the
// tensor-core tiles' 8 stays.
inline int k_major_pad(const GemmTiling& tiling, bool vectors_along_outer) {
  return vectors_along_outer && tiling.pad % 4 != 0 ? 4 : tiling.pad;
}

// Elements after each row of an outer-major tile ([outer][kTileK + pad], cp.async operands with
// k contiguous): rows 80 bytes apart, so that ldmatrix's 8 rows of 16 bytes fall in 32 distinct
// banks: 4 floats, or 8 bf16/f16 values.
inline int outer_major_pad(const GemmTiling& tiling) { return sixteen_bit(tiling.unit) ? 8 : 4; }

// One operand as the tile loader sees it. The outer index is `row` for A and `col` for B; both it
// and `k` are in range when `fetch` runs.
struct GemmOperand {
  // True when consecutive k are adjacent in memory (A stored [M][K], B stored [N][K]): threads
  // then stage a tile walking along k, otherwise along the outer index, so global reads coalesce.
  bool k_contiguous = true;
  // Statements run once per thread before the K loop. The thread's fixed staging position is
  // known by then: `a_row`/`b_col` (outer offset within the tile) when !k_contiguous, plus
  // `block_row`/`block_col` and the z index.
  std::string setup;
  // The setup as the GEMM's host body runs it (thread 0, once per block), where `setup` has the
  // threads cooperate (a norm's row statistics): statements that give the same names the same
  // values, bit for bit. Empty: the host body runs `setup` once per outer index, which needs
  // it to be plain declarations (gemm_host.cpp).
  std::string host_setup;
  // Statements that set `value` (a float, preset to 0) to the element at (outer, k).
  std::string fetch;
  // When the element is read unchanged from memory (no view or prologue; an f32, or a bf16 or
  // f16 only widened to float): the expression of its address, of an `address_dtype` element.
  // Operands stored as the tiles hold them may be copied by cp.async on tensor cores (16 bytes
  // from a 16-byte aligned address: kiln's buffers are 256-byte aligned); the others load 16
  // (f32) or 8 bytes (4 bf16 or f16 values) at a time. Empty otherwise; whoever changes `fetch`
  // must clear it.
  std::string address;
  ir::DType address_dtype = ir::DType::F32;
  // The address is contiguous along the contiguous dimension only in runs of this many elements
  // (a conv's planes: one image's pixels), 0 when along the whole dimension. Loads and copies of
  // several elements take runs that hold whole groups of them.
  int64_t run = 0;
  // The GEMM's host body stages this k-contiguous operand k by k, its outer index inner, as it
  // does the gathered ones: the operand is contiguous along k only in runs (a conv's grad-input
  // weight: KH * KW taps; a weight gradient's dy: one image's pixels), so its fetch divides k by
  // the run length, which along k is done once per k instead of once per element, and the rows
  // (a run apart) load as 16-lane gathers.
  bool host_along_k = false;
};

struct GemmConstant {
  std::string name;     // "kOutPlane"
  int64_t value;
  std::string comment;  // why it exists, one line
};

// A GEMM's A read from a 2:4 compressed weight (expand_2_4's operands, ir/two_four.h): the
// kernel parameters of the kept values ([rows, K / 2]) and of their positions ([rows,
// ceil(K / 16)] u16), and the compressed row of A's row 0 (a conv's group * kM).
struct TwoFourA {
  std::string kept, positions;
  ir::DType kept_dtype = ir::DType::BF16;
  std::string first_row = "0";
};

struct GemmSpec {
  int64_t m = 1, n = 1, k = 1;  // sizes of one problem
  // What M, N and K are for the op, for the generated code's comments.
  std::string m_is = "rows", n_is = "columns", k_is = "terms per dot product";
  int64_t batch = 1;            // problems, one per grid z
  // For a request with dynamic_rows: the grid axis whose tiles walk the result's first dim in
  // order (rows of a dense, a folded batch; z over a matmul's batch; conv's N·OH·OW columns).
  // The kernel needs no other change: tiles past the real rows are not launched, and the ones
  // it launches compute garbage-in, garbage-out rows in the padding only.
  int dynamic_grid_axis = -1;
  std::string z_name = "batch"; // what grid z means to the caller ("batch", "group")
  std::string index_type = "int";
  std::vector<GemmConstant> constants;  // caller's shape constants, emitted before the tiling
  std::string batch_setup;      // statements after the z index is known (per-problem offsets)
  // Statements at the top of the body: what the epilogue calls (a fused kernel's element
  // functions, codegen/kernels/fused.cpp).
  std::string prelude;
  GemmOperand a, b;
  // Set by read_a_two_four: A is a 2:4 weight kept compressed.
  std::optional<TwoFourA> two_four_a;
  // The epilogue. `channel` (an expression in row, col and the z index) names the output channel
  // or feature of element (row, col): what a per-channel bias indexes. `out_index` (an
  // expression that may use channel) is its offset in `out`. `epilogue` holds statements
  // applied to the float `value` before it is stored; they may read `channel`, `out_index`
  // (a residual has out's layout) and the kernel parameters. This is the hook a fusion pass
  // extends with bias, activation and residual code.
  std::string channel;
  std::string out_index;
  std::string epilogue;
  std::string out_param = "out";
  ir::DType out_dtype = ir::DType::F32;
  // What tiles, accumulators and `value` hold: float, or double when an operand or the result is
  // f64 (the same tiling; the shared tiles take twice the bytes).
  std::string value_type = "float";
  // Shared memory the setup (a.setup: the row statistics of a prologue or residual norm) uses
  // after both tiles: this many arrays of kTileM floats, from `extra_smem` (declared by the
  // template).
  uint32_t row_stat_arrays = 0;
  // Split-K (conv2d_grad_weight's k_chunk): when > 0, each problem's K is cut into chunks of
  // this many terms, one grid z slice each (z = problem * kSplits + split), and each chunk's
  // partial result is stored on its own: `split` (0, 1, ...) is in scope for out_index. The
  // partials are summed by another kernel, in order, so the result stays deterministic.
  int64_t k_chunk = 0;
  // The arithmetic the products may use (KernelRequest::precision): other than f32, tensor
  // cores when the GEMM is f32 (value_type float); f64 GEMMs stay on the FMA units.
  Precision precision = Precision::F32;
  // For the kernel's comment: what the GEMM computes ("x * weight^T as tiled GEMM"), then what
  // fusion added ("; fused epilogue: relu"); emit_gemm puts the tiling between them.
  std::string what;
  std::string note;
};

// The tiling emit_gemm uses for `spec`: FMA 64x64 tiles; on tensor cores 128x128 tiles (8 warps
// of 64x32) when the problem fills the GPU with them, else 64x64 (8 warps of 32x16).
GemmTiling gemm_tiling(const GemmSpec& spec);
// "64x64x16 tiles, 256 threads, 4x4 per thread", or the tensor cores' equivalent: for notes.
std::string gemm_tiling_note(const GemmSpec& spec);

// The kernel for `spec`, computing `node`. Throws kiln::Error located at the node when the grid
// does not fit CUDA's limits.
KernelSpec emit_gemm(const GemmSpec& spec, const ir::Node& node);

// Makes A of `spec` (row-major [M][K] per problem, k contiguous) read from the 2:4 compressed
// weight `source` instead of its dense form: sparse tensor cores (GemmTiling::sparse_a) where
// the tiling allows, else a fetch that decodes each element (zeros where the weight was pruned).
void read_a_two_four(GemmSpec& spec, const TwoFourA& source);

// The GEMM each op is, ready for emit_gemm (nn.cpp). A fusion emitter takes the spec of the
// node it fuses into, appends to `epilogue` (and `note`), and emits it. The conv2d and dense
// specs already add their optional bias there.
GemmSpec matmul_gemm(const KernelRequest& request);
GemmSpec dense_gemm(const KernelRequest& request);
// The same dense as its transpose: out^T[feature][row] = sum over k of weight[feature][k] *
// x[row][k], so that the weight is A (the operand sparse tensor cores take compressed); the
// epilogue's `channel` is the row, and results are stored transposed back (out_index).
GemmSpec dense_gemm_by_weight_rows(const KernelRequest& request);
GemmSpec conv2d_gemm(const KernelRequest& request);
// conv2d_grad_weight(dy, x) as a GEMM per group: dW[o][c,kh,kw] = sum over n, oh, ow of
// dy[n,o,oh,ow] * x[n,c,ih,iw], A = dy read along its pixels, B = the patches gathered.
GemmSpec conv2d_grad_weight_gemm(const KernelRequest& request);
// conv2d_grad_input(dy, weight) as a GEMM per group: dx[c][n,h,w] = sum over o, kh, kw of
// W[o][c,kh,kw] * dy[n,o,oh,ow] at the outputs whose windows read (h, w).
GemmSpec conv2d_grad_input_gemm(const KernelRequest& request);

}  // namespace kiln::codegen::nn
