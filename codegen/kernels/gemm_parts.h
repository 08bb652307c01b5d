// Pieces of the GEMM template (gemm.cpp) that its host-specific body (gemm_host.cpp) writes
// too: both stage tiles with the same code, so that they read the same values, and store
// results with the same epilogue.
#pragma once

#include <string>
#include <vector>

#include "codegen/kernels/emit_util.h"
#include "codegen/kernels/gemm.h"

namespace kiln::codegen::nn::gemm_parts {

// `a && b` of the non-empty terms, or empty when none.
std::string conjunction(const std::vector<std::string>& terms);

// The end of the K range a block sums (split-K: of its chunk), and whether loads past it must
// be guarded: when it is not a multiple of the k tile.
std::string k_end(const GemmSpec& spec);
bool k_ragged(const GemmSpec& spec, const GemmTiling& tiling);

// Where thread `thread` (an expression: "threadIdx.x", or a host loop's index) stages its share
// of an operand tile, and the operand's own setup. `name` is "a" or "b"; `outer` is "row" or
// "col"; `outer_tile` the constant of its tile's outer size.
void staging_position(BodyWriter& w, const GemmSpec& spec, const GemmOperand& operand,
                      const std::string& name, const std::string& outer,
                      const std::string& outer_tile, const std::string& thread);

// That thread's loads of one operand tile at k0 into `a_tile`/`b_tile`, zero outside the
// matrices. `outer_size` is the constant of the outer dimension, `outer_ragged` whether its
// last tile is partial.
void stage_tile(BodyWriter& w, const GemmSpec& spec, const GemmTiling& tiling,
                const GemmOperand& operand, const std::string& name, const std::string& outer,
                const std::string& outer_size, bool outer_ragged);

// The result at (`row`, `col`), in scope, whose sum is `accumulator`: the epilogue hook and the
// store, guarded where the tile overhangs the matrix.
void emit_result(BodyWriter& w, const GemmSpec& spec, const GemmTiling& tiling,
                 const std::string& accumulator);

// Whether the kernel for `spec` gets a host-specific body: the FMA template without a norm
// prologue (whose row statistics the block's threads compute together, with a barrier).
bool host_body_applies(const GemmSpec& spec, const GemmTiling& tiling);

// The host-specific body (gemm_host.cpp), placed where the block's position and problem are
// known (after the batch setup), under #ifndef __CUDACC__.
void emit_host_body(BodyWriter& w, const GemmSpec& spec, const GemmTiling& tiling);

}  // namespace kiln::codegen::nn::gemm_parts
