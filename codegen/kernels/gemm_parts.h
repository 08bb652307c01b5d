// Pieces of the GEMM template (gemm.cpp) shared with its host-specific body (gemm_host.cpp)
// and its tiling decisions (gemm_tiling.cpp): both bodies guard loads past K alike and store
// results with the same epilogue.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codegen/kernels/emit_util.h"
#include "codegen/kernels/gemm.h"

namespace kiln::codegen::nn::gemm_parts {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The shared memory of the kernel for `spec` with `tiling` (gemm_tiling.cpp): its stages of A
// and B tiles (a cp.async operand with k contiguous is outer-major, [outer][kTileK + pad]; the
// others k-major, [kTileK][outer + pad]), then the row statistics of fused norms.
uint32_t gemm_shared_bytes(const GemmSpec& spec, const GemmTiling& tiling);

// `a && b` of the non-empty terms, or empty when none.
std::string conjunction(const std::vector<std::string>& terms);

// The end of the K range a block sums (split-K: of its chunk), and whether loads past it must
// be guarded: when it is not a multiple of the k tile.
std::string k_end(const GemmSpec& spec);
bool k_ragged(const GemmSpec& spec, const GemmTiling& tiling);

// The result at (`row`, `col`), in scope, whose sum is `accumulator`: the epilogue hook and the
// store, guarded where the tile overhangs the matrix.
void emit_result(BodyWriter& w, const GemmSpec& spec, const GemmTiling& tiling,
                 const std::string& accumulator);

// Sparse tensor cores (GemmTiling::sparse_a, gemm_sparse.cpp): the cp.async copies of A's kept
// values for the k tile at k_next into the stage `a_dst`, and the main loop's step: fragments,
// metadata, mma.sp.
void async_two_four_copies(BodyWriter& w, const GemmSpec& spec);
void mma_step_sparse(BodyWriter& w, const GemmSpec& spec, const GemmTiling& tiling, bool b_outer_major);

// Whether the kernel for `spec` gets a host-specific body (FMA or tensor cores): without a norm
// prologue that has no host setup (its row statistics the block's threads compute together,
// with a barrier), and with operands' setups that can run once per row or column.
bool host_body_applies(const GemmSpec& spec, const GemmTiling& tiling);

// The host-specific body (gemm_host.cpp), placed where the block's position and problem are
// known (after the batch setup), under #ifndef __CUDACC__.
void emit_host_body(BodyWriter& w, const GemmSpec& spec, const GemmTiling& tiling);

}  // namespace kiln::codegen::nn::gemm_parts
