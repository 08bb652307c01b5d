// The modeled cost of a node or fused kernel: floating-point operations and DRAM bytes, and
// the roofline time they take on one reference GPU. `kiln inspect` prints these per kernel.
//
// It is a model, not a measurement; its conventions (docs/inspect.md has the table per op):
//  - FLOPs count the arithmetic an op needs, not the instructions a kernel issues. A
//    multiply-add is 2. Every elementwise function is 1 per result element, whether it is an
//    add or a transcendental (exp, tanh, erf in gelu): these ops are memory bound, and pricing
//    exp at 1 or 20 does not move them off the memory roof.
//  - Data movement is free of FLOPs: shape ops, cast, inference dropout.
//  - Bytes: every distinct operand is read once and every result written once, at its dtype's
//    size times its element count (perfect caching inside a kernel, none between kernels).
//  - A fused `kernel` node: the FLOPs of its body nodes, and the bytes of the kernel node's own
//    operands and results, since what passes between body nodes stays on chip.
#pragma once

#include <cstdint>
#include <string_view>

#include "codegen/program.h"
#include "ir/graph.h"

namespace kiln::codegen {

struct NodeCost {
  int64_t flops = 0;
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;

  int64_t bytes() const { return bytes_read + bytes_written; }
};

NodeCost node_cost(const ir::Node& node);

// The DRAM bytes the node would move had each of its source nodes run as a kernel of its own:
// the sum of the body nodes' own bytes for a fused kernel; for attention, the matmul, softmax,
// matmul chain it replaces (its S x S scores written and read twice); node_cost(node).bytes()
// otherwise.
int64_t unfused_bytes(const ir::Node& node);

// A roofline: a kernel takes the longer of its compute time and its memory time.
struct Roofline {
  const char* device;
  double flops_per_second;  // f32 on the FMA units
  double dram_bytes_per_second;
  double tf32_flops_per_second;  // dense TF32 on tensor cores (mma.sync kernels)
  double half_flops_per_second;  // dense bf16 and f16 on tensor cores, f32 sums

  double compute_seconds(int64_t flops) const { return static_cast<double>(flops) / flops_per_second; }
  double memory_seconds(int64_t bytes) const { return static_cast<double>(bytes) / dram_bytes_per_second; }
  double seconds(int64_t flops, int64_t bytes) const {
    return compute_seconds(flops) > memory_seconds(bytes) ? compute_seconds(flops) : memory_seconds(bytes);
  }
  // The tensor cores' peak for operands of `format` (tf32, bf16, f16).
  double tensor_core_flops_per_second(Precision format) const {
    return format == Precision::Tf32 ? tf32_flops_per_second : half_flops_per_second;
  }
  // "compute" when the FLOPs take longer than the bytes, else "memory".
  std::string_view bound(int64_t flops, int64_t bytes) const {
    return compute_seconds(flops) > memory_seconds(bytes) ? "compute" : "memory";
  }
};

// NVIDIA H100 SXM5: 3.35 TB/s of HBM3 and 66.9 TFLOP/s of f32 on the CUDA cores (no tensor
// cores: kiln's generated kernels do not use them).
// NVIDIA's H100 SXM datasheet: 67 TFLOP/s FP32, 3.35 TB/s HBM3, 989 TFLOP/s TF32 and 1,979
// BF16/FP16 with 2:4 sparsity, so 494.7 and 989.4 dense.
inline constexpr Roofline kH100{"H100 SXM", 66.9e12, 3.35e12, 494.7e12, 989.4e12};

// The modeled time of one kernel on an H100 SXM (docs/inspect.md, "The model"): the longer of
// its bytes at DRAM speed and its FLOPs at its unit's peak times an efficiency. GEMM kernels
// are not at peak: the efficiency multiplies what the template reaches at best (kFmaTemplate,
// kTensorCoreTemplate...) by its tiles' useful share (ragged edges, padded k) and by its
// waves' (blocks over kSms x blocks per SM, the last wave partly idle); a library call gets
// kLibrary. Other kernels are counted at the FMA peak and are memory bound in practice.
struct KernelTime {
  double seconds = 0;
  std::string_view bound;   // "compute" or "memory"
  double efficiency = 1;    // of the unit's peak, for compute
  double bandwidth_share = 1;  // of the DRAM bandwidth its grid can draw (kSms)
  std::string_view unit;    // "f32 FMA", "TF32 tensor-core": what the peak is of
  double compute_seconds = 0;  // its FLOPs at the unit's peak times the efficiency
  double memory_seconds = 0;   // its bytes at its share of the DRAM bandwidth
  // A cuDNN convolution on tensor cores: at most this much more, if cuDNN transforms kiln's NCHW
  // operands to NHWC and the result back around its tensor-core kernel (kNchwTransforms); 0
  // otherwise. Not in `seconds`: cuDNN has NCHW tensor-core kernels too, and picks per problem.
  double layout_transform_seconds = 0;
};

// The assumptions, with why (docs/inspect.md lists them too):
inline constexpr int kSms = 132;  // H100 SXM
// The FMA template issues 8 shared loads per 16 FMAs and two barriers per 16-deep k tile: at
// most 2/3 of the issue slots do FMAs; half the peak is its ceiling.
inline constexpr double kFmaTemplate = 0.5;
// mma.sync reaches about 35 % of an H100's tensor peak in FlashAttention-2 (Shah et al.,
// FlashAttention-3, 2024); the rest needs wgmma and TMA. With its loads staged through
// registers (no overlap with the mma) the template gets less: 25 %.
inline constexpr double kTensorCoreTemplate = 0.35;
inline constexpr double kTensorCoreStaged = 0.25;
// cuBLASLt and cuDNN on large problems.
inline constexpr double kLibrary = 0.7;
// cuDNN "may use padding, folding, and NCHW-to-NHWC transformations to call the Tensor Core
// operations" (its legacy API's docs, "Data and Filter Formats"); PyTorch's channels_last exists
// to avoid them. The bound on what kiln's NCHW tensors cost: each operand read and written once
// more on the way in, the result once more on the way out, at the DRAM peak.
inline constexpr int kNchwTransforms = 2;  // extra passes over each byte the call moves
// A backward convolution not on the GEMM template (conv2d_grad_input, and conv2d_grad_weight when
// its direct loops are chosen: codegen/kernels/nn_grad.cpp) gathers one dot product per result,
// serially, with no shared-memory reuse: every
// multiply-add loads two floats through L1, at about 64 B per clock per SM (16.7 TB/s on 132
// SMs at 1.98 GHz), 4.2 TFLOP/s or 6 % of the FMA peak; times their waves.
inline constexpr double kDirectLoop = 0.06;
// A grid of fewer blocks than SMs leaves the other SMs' share of DRAM bandwidth unused: an SM
// is assumed to draw at most 1/kSms of it. Not for library calls, whose grids kiln does not
// know.
// A streaming kernel (any but a GEMM) also needs threads to keep DRAM busy: at 3.35 TB/s and
// ~700 ns of loaded latency, Little's law wants ~2.3 MB in flight, 17.8 KB per SM, about
// kStreamThreadsPerSm threads each with four 4-byte loads in flight (an unrolled loop). Fewer
// resident threads draw proportionally less: one 256-thread block per channel of a 64-channel
// batch norm streams at 64 x 256 / (132 x 1024) = 12 % of the peak. The GEMM templates keep
// whole tiles in flight (cp.async stages, kilobytes per block) and are charged by blocks only.
inline constexpr int kStreamThreadsPerSm = 1024;

// `active_blocks_per_sm`: the kernel's occupancy on the modeled arch (sm_90), 0 when unknown
// (then 1).
KernelTime model_kernel_time(const Kernel& kernel, int active_blocks_per_sm,
                             const Roofline& roofline = kH100);

}  // namespace kiln::codegen
