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
#include "codegen/kernels/gemm.h"

#include <limits>

#include "codegen/kernels/emit_util.h"

namespace kiln::codegen::nn {
namespace {

// CUDA's limit on grid y and z.
constexpr int64_t kMaxGridYZ = 65535;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// `a && b` of the non-empty terms, or empty when none.
std::string conjunction(const std::vector<std::string>& terms) {
  std::string text;
  for (const std::string& term : terms) {
    if (term.empty()) continue;
    text += (text.empty() ? "" : " && ") + term;
  }
  return text;
}

// Stages one operand tile into shared memory. `name` is "a" or "b"; `outer` is "row" or "col";
// `outer_size`/`outer_tile` the constants of its outer dimension.
void stage_tile(BodyWriter& w, const GemmSpec& spec, const GemmOperand& operand,
                const std::string& name, const std::string& outer, const std::string& outer_size,
                const std::string& outer_tile, bool outer_ragged) {
  const std::string block_outer = "block_" + outer;
  const std::string stride = "k" + std::string(name == "a" ? "A" : "B") + "TileStride";
  w.line("#pragma unroll");
  w.open("for (int i = 0; i < kLoadsPerThread; ++i)");
  const std::string step = "k" + std::string(name == "a" ? "A" : "B") + "Step";
  std::string outer_offset = name + "_" + outer;
  std::string k_offset = name + "_k";
  (operand.k_contiguous ? outer_offset : k_offset) += " + i * " + step;
  const bool k_ragged = spec.k % kGemmTileK != 0;
  const std::string guard = conjunction({outer_ragged ? outer + " < " + outer_size : "",
                                         k_ragged ? "k < kK" : ""});
  // A gather (conv) may not need the outer index when no bounds check does.
  if (mentions(guard, outer) || mentions(operand.fetch, outer))
    w.line("const {} {} = {} + {};", spec.index_type, outer, block_outer, outer_offset);
  w.line("const {} k = k0 + {};", spec.index_type, k_offset);
  w.line("{} value = 0;", spec.value_type);
  if (!guard.empty()) w.open("if ({})", guard);
  w.lines(operand.fetch);
  if (!guard.empty()) w.close();
  w.line("{}_slot[i * {}] = value;", name,
         operand.k_contiguous ? step : step + " * " + stride);
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
  w.line("{3}* {0}_slot = {0}_tile + {0}_k * k{1}TileStride + {0}_{2};", name,
         name == "a" ? "A" : "B", outer, spec.value_type);
  w.lines(operand.setup);
}

}  // namespace

KernelSpec emit_gemm(const GemmSpec& spec, const ir::Node& node) {
  const int64_t tiles_m = ceil_div(spec.m, kGemmTileM);
  const int64_t tiles_n = ceil_div(spec.n, kGemmTileN);
  if (tiles_m > kMaxGridYZ || spec.batch > kMaxGridYZ)
    throw Error(node.loc.render(),
                fmt::format("{}: a GEMM of {} rows in {} problems does not fit a CUDA grid ({} "
                            "row tiles of {} and {} problems at most)",
                            node.describe(), spec.m, spec.batch, kMaxGridYZ, kGemmTileM,
                            kMaxGridYZ));
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
  w.comment("thread (thread_m, thread_n) owns rows thread_m + i * kThreadsM and columns");
  w.comment("thread_n + j * kThreadsN of it, so a warp reads neighbouring shared words.");
  w.line("constexpr int kTileM = {};", kGemmTileM);
  w.line("constexpr int kTileN = {};", kGemmTileN);
  w.line("constexpr int kTileK = {};", kGemmTileK);
  w.line("constexpr int kThreadsM = {};", kGemmThreadsM);
  w.line("constexpr int kThreadsN = {};", kGemmThreadsN);
  w.line("constexpr int kThreads = kThreadsM * kThreadsN;");
  w.line("constexpr int kPerThreadM = kTileM / kThreadsM;");
  w.line("constexpr int kPerThreadN = kTileN / kThreadsN;");
  w.line("constexpr int kLoadsPerThread = kTileM * kTileK / kThreads;");
  w.comment("Shared tiles are k-major; the padding spreads stores along k over all banks.");
  w.line("constexpr int kATileStride = kTileM + {};", kGemmTilePad);
  w.line("constexpr int kBTileStride = kTileN + {};", kGemmTilePad);
  w.line("{0}* a_tile = reinterpret_cast<{0}*>(kiln_smem);", spec.value_type);
  w.line("{}* b_tile = a_tile + kTileK * kATileStride;", spec.value_type);
  if (spec.extra_shared_slots > 0)
    w.line("{}* extra_smem = b_tile + kTileK * kBTileStride;  // row statistics of recomputed norms", spec.value_type);
  w.blank();
  w.line("const int thread_m = threadIdx.x / kThreadsN;");
  w.line("const int thread_n = threadIdx.x % kThreadsN;");
  w.line("const index_t block_row = static_cast<index_t>(blockIdx.y) * kTileM;");
  w.line("const index_t block_col = static_cast<index_t>(blockIdx.x) * kTileN;");
  w.declare(spec.z_name, "const int {} = blockIdx.z;", spec.z_name);
  w.lines(spec.batch_setup);
  staging_position(w, spec, spec.a, "a", "row", "kTileM");
  staging_position(w, spec, spec.b, "b", "col", "kTileN");
  w.blank();
  w.comment("Accumulators: constant indices after unrolling, so they live in registers.");
  w.line("{} acc[kPerThreadM][kPerThreadN];", spec.value_type);
  w.line("#pragma unroll");
  w.open("for (int i = 0; i < kPerThreadM; ++i)");
  w.line("#pragma unroll");
  w.open("for (int j = 0; j < kPerThreadN; ++j)");
  w.line("acc[i][j] = 0;");
  w.close();
  w.close();
  w.open("for (int k0 = 0; k0 < kK; k0 += kTileK)");
  w.comment("Stage both tiles, zero outside the matrices.");
  stage_tile(w, spec, spec.a, "a", "row", "kM", "kTileM", spec.m % kGemmTileM != 0);
  stage_tile(w, spec, spec.b, "b", "col", "kN", "kTileN", spec.n % kGemmTileN != 0);
  w.comment("The tiles are complete before anyone reads them.");
  w.line("__syncthreads();");
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
  w.line("acc[i][j] += a_frag[i] * b_frag[j];");
  w.close();
  w.close();
  w.close();
  w.comment("Everyone has read the tiles before the next step overwrites them.");
  w.line("__syncthreads();");
  w.close();
  w.blank();
  w.comment("Epilogue: per result, the hook (bias, activation, ...) then the store.");
  w.line("#pragma unroll");
  w.open("for (int i = 0; i < kPerThreadM; ++i)");
  w.line("const index_t row = block_row + thread_m + i * kThreadsM;");
  w.line("#pragma unroll");
  w.open("for (int j = 0; j < kPerThreadN; ++j)");
  w.line("const index_t col = block_col + thread_n + j * kThreadsN;");
  const std::string guard = conjunction({spec.m % kGemmTileM != 0 ? "row < kM" : "",
                                         spec.n % kGemmTileN != 0 ? "col < kN" : ""});
  if (!guard.empty()) w.open("if ({})", guard);
  w.line("{} value = acc[i][j];", spec.value_type);
  w.declare("channel", "const int channel = {};", spec.channel);
  w.line("const index_t out_index = {};", spec.out_index);
  w.lines(spec.epilogue);
  w.line("{}[out_index] = {};", spec.out_param, store(spec.out_dtype, "value"));
  if (!guard.empty()) w.close();
  w.close();
  w.close();

  KernelSpec kernel;
  kernel.body = w.take();
  kernel.grid = Dim3{static_cast<uint32_t>(tiles_n), static_cast<uint32_t>(tiles_m),
                     static_cast<uint32_t>(spec.batch)};
  kernel.block = Dim3{kGemmThreads, 1, 1};
  kernel.shared_bytes = (kGemmSharedSlots + spec.extra_shared_slots) *
                        (spec.value_type == "double" ? sizeof(double) : sizeof(float));
  kernel.uses_barriers = true;
  kernel.note = spec.note;
  kernel.dynamic_grid_axis = spec.dynamic_grid_axis;
  return kernel;
}

}  // namespace kiln::codegen::nn
