// Building blocks of the reduction kernels (reduce.cpp, normalize.cpp, loss.cpp): warp and
// block combines, and the running log-sum-exp state of softmax-like kernels.
//
// Float accumulation happens in float, in a fixed tree order: each thread folds a strided
// slice sequentially, then warps combine with __shfl_xor_sync butterflies (every lane ends
// with the same bits, since a + b == b + a in IEEE), then warps combine through shared memory
// in warp order. The reference accumulates in double, so sums differ by rounding: about
// (n / threads + log2 threads) ulp of the sum of |x| in the worst case, typically
// sqrt(n) * eps. Tests compare with 1e-5 * sqrt(n) relative to max(|ref|, 1) for inputs of
// magnitude <= 1.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "codegen/kernels/emit_util.h"

namespace kiln::codegen {

// Threads of a block for one-block-per-row kernels.
inline constexpr int64_t kRowBlock = 256;
// Rows up to this many elements get one warp; longer ones a whole block.
inline constexpr int64_t kMaxWarpRow = 1024;

enum class Combine { Sum, Max };

// Registration of the other reduction families; add_reduce_emitters calls them.
void add_normalize_emitters(EmitterTable& table);  // softmax, log_softmax, layer_norm
void add_loss_emitters(EmitterTable& table);       // softmax_cross_entropy, mse_loss
// softmax_grad, log_softmax_grad, softmax_cross_entropy_grad (grad_softmax.cpp); called by
// add_grad_emitters.
void add_grad_softmax_emitters(EmitterTable& table);

// `const int lane = ...; const int warp = ...;` and kWarpSize / kFullMask / kWarps constants
// (kWarps = warps per block, from `block_threads`).
void emit_warp_constants(BodyWriter& w, int64_t block_threads);

// Opens the loop over rows [0, rows): warp-uniform with one row per warp (`lane` and kWarps
// must be declared), or block-uniform with one row per block. The loop variable is `row`.
void open_row_loop(BodyWriter& w, bool per_warp, const std::string& type, const std::string& rows);

// Combines `var` (of C type `type`) across the 32 lanes of each warp; all lanes end with the
// result. Float sums and maxima use kiln_warp_sum / kiln_warp_max.
void emit_warp_combine(BodyWriter& w, const std::string& var, Combine combine,
                       const std::string& type);

// `var op= other` for the combine's operation on values of C type `type` (kiln_max for float
// maxima, NaN-propagating for double ones).
void emit_combine(BodyWriter& w, const std::string& var, const std::string& other,
                  Combine combine, const std::string& type);

// Combines `var` across the block: warp combine, one partial per warp in `partial` (shared,
// kWarps entries of `type`), a barrier, then every thread folds the partials in warp order, so
// all threads end with the same value. Ends with a barrier so `partial` can be reused.
void emit_block_combine(BodyWriter& w, const std::string& var, Combine combine,
                        const std::string& type, const std::string& partial);

// The host bodies' version of the two combines above: `values` holds one value per CUDA
// thread of a group of `threads` (32: one warp, emit_warp_combine; a block: emit_block_combine),
// in thread order. Declares `var` (of `type`) holding the result the CUDA threads compute, bit
// for bit: each warp's butterfly over all its lanes, then the warps' results in warp order.
// Overwrites `values`.
void emit_host_threads_combine(BodyWriter& w, const std::string& var, const std::string& values,
                               const std::string& threads, Combine combine,
                               const std::string& type);

// Host bodies of the one-warp-or-one-block-per-row kernels (layer_norm and its gradient):
// open_host_rows opens `#ifndef __CUDACC__`, `if (kiln_host_variant())`, thread 0's return
// for the others, and the loop over the block's rows (`row`, of `type`, below `rows`), as
// open_row_loop distributes them; close_host_rows closes them all after a `return`.
void open_host_rows(BodyWriter& w, bool per_warp, const std::string& type, const std::string& rows,
                    const std::string& file);
void close_host_rows(BodyWriter& w, bool per_warp);
// Inside them: `float VAR` for each (VAR, TERM) of `sums`, the sum over k < `count` of TERM
// (after the `prelude` statements, which may use `k`) as the CUDA threads compute it: each
// thread's strided fold (k = lane, lane + threads, ...) lane by lane, then
// emit_host_threads_combine. Equal bit for bit to the CUDA body's fold and combine.
void emit_host_row_sums(BodyWriter& w, const std::vector<std::pair<std::string, std::string>>& sums,
                        const std::vector<std::string>& prelude, const std::string& count);

// Inside open_host_rows (or any scope declaring kHostThreads and a `rescale` lambda):
// `float max_lanes[kHostThreads], sum_lanes[kHostThreads]`, each CUDA thread's online softmax
// state of `element` (a float of `k`, over k < `count`) after the warp merges (and, for a
// block of several warps, the block merge, which leaves every thread the same state), as
// emit_online_softmax, emit_warp_merge_softmax and emit_block_merge_softmax compute them.
void emit_host_online_softmax(BodyWriter& w, const std::string& element, const std::string& count);

// The online softmax state over a strided slice of a row: `float max_v`, `float sum_v` (sum of
// exp(v - max_v)), updated per element with the NaN and infinity behaviour of the reference
// (see reduce_util.cpp). Emits the `rescale` lambda and the declarations; `element` is a float
// expression that may use `k` (the loop variable from `first` while < `count` by `step`).
void emit_online_softmax(BodyWriter& w, const std::string& element, const std::string& first,
                         const std::string& count, const std::string& step,
                         const std::string& type);
// The `rescale` lambda used by the online softmax and its merges.
void emit_rescale_lambda(BodyWriter& w);
// Merges the online softmax states of the lanes of each warp (all lanes end with the result).
void emit_warp_merge_softmax(BodyWriter& w);
// Merges per-warp states through shared `partial_max` / `partial_sum` (kWarps each); every
// thread ends with the block's state; ends with a barrier.
void emit_block_merge_softmax(BodyWriter& w);

}  // namespace kiln::codegen
