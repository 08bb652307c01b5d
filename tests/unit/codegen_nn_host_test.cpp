// The neural-network kernels compiled for real GPUs (NVRTC, sm_80 and sm_90: no spills, no
// stack frame) and run on the host backend against the reference interpreter, over sweeps of
// shapes that hit every edge of the 64x64x16 GEMM tiles and every window option.
//
// Tolerance: |got - want| <= 1e-5 * sqrt(terms) * (1 + |want|) for f32, where terms is the
// number of products summed into one output (K for GEMMs, the window for pooling); 1e-3 (f16)
// and 8e-3 (bf16) in place of 1e-5. See codegen_nn_util.h.
#include <gtest/gtest.h>

#include <iostream>

#include "codegen_nn_util.h"

namespace kiln::codegen {
namespace {

using ir::DType;
using ir::TensorType;
using testing::check_cases;
using testing::CheckOptions;
using testing::OpCase;
using Ints = std::vector<int64_t>;
using Schedule = runtime::host::Schedule;

TensorType f32(ir::Shape shape) { return TensorType{DType::F32, std::move(shape)}; }

// The sizes the sweep draws from: 1, below a tile, a K tile, just past it, a full tile, ragged,
// and two tiles plus one.
constexpr int64_t kSizes[] = {1, 7, 16, 33, 64, 100, 129};
constexpr int kNumSizes = 7;

OpCase matmul(int64_t m, int64_t n, int64_t k) {
  return {"matmul", {f32({m, k}), f32({k, n})}, {}, k};
}

// Each size appears in each of M, N and K, paired with different sizes (shifts through the
// list), instead of all 343 combinations.
std::vector<OpCase> matmul_sweep(int shift_n, int shift_k) {
  std::vector<OpCase> cases;
  for (int i = 0; i < kNumSizes; ++i)
    cases.push_back(matmul(kSizes[i], kSizes[(i + shift_n) % kNumSizes],
                           kSizes[(i + shift_k) % kNumSizes]));
  return cases;
}

TEST(CodegenNnHost, MatmulSweepA) {
  std::vector<OpCase> cases = matmul_sweep(0, 0);  // (1,1,1) ... (129,129,129)
  check_cases("matmul_sweep_a", cases);
}

TEST(CodegenNnHost, MatmulSweepB) { check_cases("matmul_sweep_b", matmul_sweep(1, 3)); }

TEST(CodegenNnHost, MatmulSweepC) { check_cases("matmul_sweep_c", matmul_sweep(4, 2)); }

TEST(CodegenNnHost, MatmulBatchedBroadcastAndTransposed) {
  const std::vector<OpCase> cases = {
      // Batch dims broadcast both ways: out [2,3].
      {"matmul", {f32({2, 1, 5, 7}), f32({3, 7, 9})}, {}, 7},
      // One a for every batch of b.
      {"matmul", {f32({33, 17}), f32({2, 2, 17, 65})}, {}, 17},
      // One b for every batch of a: folded into the rows.
      {"matmul", {f32({4, 33, 16}), f32({16, 7})}, {}, 16},
      // Transposes: a stored [K,M], b stored [N,K], both.
      {"matmul", {f32({3, 33, 7}), f32({3, 33, 100})}, {{"transpose_a", true}}, 33},
      {"matmul", {f32({2, 65, 19}), f32({1, 70, 19})}, {{"transpose_b", true}}, 19},
      {"matmul", {f32({2, 20, 66}), f32({67, 20})},
       {{"transpose_a", true}, {"transpose_b", true}}, 20},
      // Reduced-precision operands are staged as float.
      {"matmul", {TensorType{DType::F16, {2, 9, 40}}, TensorType{DType::F16, {40, 70}}}, {}, 40},
      {"matmul", {TensorType{DType::BF16, {17, 24}}, TensorType{DType::BF16, {24, 5}}}, {}, 24},
  };
  check_cases("matmul_batched", cases);
}

TEST(CodegenNnHost, Dense) {
  const std::vector<OpCase> cases = {
      {"dense", {f32({1, 16}), f32({10, 16}), f32({10})}, {}, 16},
      {"dense", {f32({3, 5, 33}), f32({7, 33})}, {}, 33},
      {"dense", {f32({100, 129}), f32({65, 129}), f32({65})}, {}, 129},
      {"dense", {f32({1}), f32({1, 1}), f32({1})}, {}, 1},
  };
  check_cases("dense", cases);
}

OpCase conv(ir::Shape x, ir::Shape w, ir::AttrMap attrs, bool bias = true,
            DType dtype = DType::F32) {
  OpCase c{"conv2d", {TensorType{dtype, x}, TensorType{dtype, w}}, std::move(attrs),
           w[1] * w[2] * w[3]};
  if (bias) c.operands.push_back(TensorType{dtype, {w[0]}});
  return c;
}

TEST(CodegenNnHost, Conv2dWindows) {
  const std::vector<OpCase> cases = {
      conv({1, 3, 9, 9}, {8, 3, 3, 3}, {{"stride", Ints{2, 2}}}),
      conv({2, 4, 10, 7}, {5, 4, 3, 2}, {{"pad", Ints{1, 0, 2, 1}}}),          // asymmetric
      conv({1, 3, 11, 11}, {4, 3, 3, 3}, {{"dilation", Ints{2, 2}}, {"pad", Ints{2, 2, 2, 2}}}),
      conv({2, 5, 7, 9}, {6, 5, 1, 1}, {}, false),                              // 1x1
      conv({1, 2, 13, 5}, {3, 2, 5, 3}, {{"stride", Ints{3, 2}}, {"dilation", Ints{1, 2}},
                                         {"pad", Ints{2, 1, 0, 3}}}),
      conv({1, 1, 1, 1}, {1, 1, 1, 1}, {}),                                     // 1 everywhere
  };
  check_cases("conv2d_windows", cases);
}

TEST(CodegenNnHost, Conv2dGroups) {
  const std::vector<OpCase> cases = {
      conv({2, 8, 9, 9}, {6, 4, 3, 3}, {{"groups", int64_t{2}}, {"pad", Ints{1, 1, 1, 1}}}),
      // Depthwise: one input channel per group.
      conv({1, 16, 15, 15}, {16, 1, 3, 3}, {{"groups", int64_t{16}}, {"stride", Ints{2, 2}},
                                            {"pad", Ints{1, 1, 1, 1}}}),
      // More than a tile of output channels per group and of pixels.
      conv({1, 6, 12, 12}, {140, 3, 3, 3}, {{"groups", int64_t{2}}}),
      conv({1, 4, 6, 6}, {8, 4, 3, 3}, {{"pad", Ints{1, 1, 1, 1}}}, true, DType::BF16),
  };
  check_cases("conv2d_groups", cases);
}

TEST(CodegenNnHost, Pooling) {
  const std::vector<OpCase> cases = {
      {"max_pool2d", {f32({1, 3, 9, 9})}, {{"kernel", Ints{2, 2}}}, 4},
      {"max_pool2d", {f32({2, 2, 10, 7})},
       {{"kernel", Ints{3, 3}}, {"stride", Ints{2, 1}}, {"pad", Ints{1, 0, 1, 1}}}, 9},
      {"max_pool2d", {f32({1, 2, 11, 11})},
       {{"kernel", Ints{3, 2}}, {"dilation", Ints{2, 2}}, {"pad", Ints{1, 1, 0, 0}}}, 6},
      {"avg_pool2d", {f32({1, 3, 9, 9})}, {{"kernel", Ints{3, 3}}, {"stride", Ints{2, 2}},
                                           {"pad", Ints{1, 1, 1, 1}}}, 9},
      {"avg_pool2d", {f32({2, 2, 8, 11})}, {{"kernel", Ints{3, 3}}, {"pad", Ints{1, 0, 0, 1}},
                                            {"count_include_pad", false}}, 9},
      {"global_avg_pool", {f32({2, 3, 1, 1})}, {}, 1},
      {"global_avg_pool", {f32({1, 5, 7, 7})}, {}, 49},
      {"global_avg_pool", {f32({3, 7, 13, 13})}, {}, 169},  // 21 planes: 3 blocks of 8 warps
  };
  check_cases("pooling", cases);
}

TEST(CodegenNnHost, BiasAddAndBatchNorm) {
  const TensorType c5 = f32({5});
  const std::vector<OpCase> cases = {
      {"bias_add", {f32({2, 5, 3, 3}), c5}},
      {"bias_add", {f32({4, 7}), f32({7})}, {{"axis", int64_t{-1}}}},
      {"bias_add", {f32({3, 4, 5}), c5}, {{"axis", int64_t{2}}}},
      {"batch_norm", {f32({2, 5, 3, 3}), c5, c5, c5, c5}, {}, 4},
      {"batch_norm", {f32({6, 5}), c5, c5, c5, c5}, {{"epsilon", 0.001}}, 4},
      // Training: per channel 2*9 values (fewer than the block), 300 (more), 6 (inner 1).
      {"batch_norm", {f32({2, 5, 3, 3}), c5, c5, c5, c5}, {{"training", true}}, 18},
      {"batch_norm", {f32({3, 5, 10, 10}), c5, c5, c5, c5}, {{"training", true}}, 300},
      {"batch_norm", {f32({6, 5}), c5, c5, c5, c5}, {{"training", true}}, 6},
  };
  check_cases("bias_batch_norm", cases);
}

// NaN wins a max pool as in torch (kiln_max), and poisons an average and a GEMM row.
TEST(CodegenNnHost, NanPropagates) {
  CheckOptions options;
  options.nvrtc = false;
  options.edit_inputs = [](std::vector<ir::Tensor>& inputs) {
    inputs[0].set(7, std::nan(""));   // max pool: a window in the middle
    inputs[1].set(0, std::nan(""));   // avg pool: the first window
    inputs[2].set(3, std::nan(""));   // matmul: row 0 of a
  };
  const std::vector<OpCase> cases = {
      {"max_pool2d", {f32({1, 1, 6, 6})}, {{"kernel", Ints{2, 2}}, {"pad", Ints{1, 1, 0, 0}}}, 4},
      {"avg_pool2d", {f32({1, 1, 6, 6})}, {{"kernel", Ints{3, 3}}}, 9},
      matmul(5, 6, 7),
  };
  check_cases("nan", cases, options);
}

// The max pool's and its gradient's host bodies (a block's windows in one loop; windows inside
// x as a chain of maxss, the gradient's first maximum picked with masks) must give the CUDA
// bodies' bits: interior windows, cells that reach a ragged edge (9 = 4 windows of 2 + 1),
// padding and dilation (the general path), ties among small integers and between +0 and -0
// (the pool keeps the last of the largest, its gradient the first), and NaNs (the first wins).
TEST(CodegenNnHost, MaxPoolHostBodies) {
  CheckOptions options;
  options.edit_inputs = [](std::vector<ir::Tensor>& inputs) {
    for (ir::Tensor& t : inputs) {
      for (int64_t i = 0; i < t.num_elements(); ++i) t.set(i, std::round(t.get(i) * 2));
      for (int64_t i = 3; i < t.num_elements(); i += 7) t.set(i, i % 2 ? -0.0 : 0.0);
      for (int64_t i = 5; i < t.num_elements(); i += 23) t.set(i, std::nan(""));
      if (t.num_elements() <= 10) continue;  // a small dy
      t.set(1, std::nan(""));
      t.set(10, std::nan(""));  // a window's second row, after a first NaN or not
    }
  };
  const auto pool_grad = [](ir::Shape dy, ir::Shape x, Ints kernel, ir::AttrMap attrs) {
    attrs["kernel"] = kernel;
    return OpCase{"max_pool2d_grad", {f32(std::move(dy)), f32(std::move(x))}, std::move(attrs), 1};
  };
  const std::vector<OpCase> cases = {
      pool_grad({2, 3, 4, 4}, {2, 3, 8, 8}, {2, 2}, {}),
      pool_grad({1, 3, 4, 4}, {1, 3, 9, 9}, {2, 2}, {}),
      pool_grad({1, 2, 2, 2}, {1, 2, 7, 8}, {2, 3}, {{"stride", Ints{3, 3}}}),
      pool_grad({1, 2, 5, 5}, {1, 2, 9, 9}, {2, 2}, {{"pad", Ints{1, 1, 1, 1}}}),
      pool_grad({1, 2, 3, 3}, {1, 2, 11, 11}, {2, 2}, {{"stride", Ints{4, 4}}, {"dilation", Ints{2, 2}}}),
      {"max_pool2d", {f32({2, 3, 8, 8})}, {{"kernel", Ints{2, 2}}}, 4},
      {"max_pool2d", {f32({1, 2, 9, 9})}, {{"kernel", Ints{3, 3}}, {"stride", Ints{2, 2}},
                                          {"pad", Ints{1, 1, 1, 1}}}, 9},
      {"max_pool2d", {f32({1, 2, 11, 11})}, {{"kernel", Ints{2, 3}}, {"dilation", Ints{2, 2}}}, 6},
  };
  check_cases("max_pool_host_bodies", cases, options);
}

// A missing or misplaced barrier shows up as a wrong result under some order of the threads.
TEST(CodegenNnHost, GemmsAgreeUnderEverySchedule) {
  CheckOptions options;
  options.schedules = {Schedule{}, Schedule{Schedule::Kind::Reverse, 0},
                       Schedule{Schedule::Kind::Random, 7}};
  options.nvrtc = false;  // compiled by the sweeps above
  const std::vector<OpCase> cases = {
      matmul(100, 70, 40),
      conv({1, 5, 12, 12}, {66, 5, 3, 3}, {{"pad", Ints{1, 1, 1, 1}}}),
  };
  check_cases("schedules", cases, options);
}

// Host run times of two reference sizes, for the report (not a benchmark: fibers on a CPU).
TEST(CodegenNnHost, ReferenceSizesRunInReasonableTime) {
  CheckOptions options;
  options.nvrtc = false;
  const auto matmul_256 = check_cases("matmul_256", {matmul(256, 256, 256)}, options);
  const auto seed_conv2 = check_cases(
      "seed_conv2", {conv({1, 32, 13, 13}, {64, 32, 3, 3}, {})}, options);
  std::cout << "host run: matmul 256x256x256 " << matmul_256.host_seconds * 1e3
            << " ms; seed CNN conv2 (64x32x3x3 on 13x13) " << seed_conv2.host_seconds * 1e3
            << " ms\n";
  EXPECT_LT(matmul_256.host_seconds, 2.0);
  EXPECT_LT(seed_conv2.host_seconds, 2.0);
}

}  // namespace
}  // namespace kiln::codegen
