// The host backend's checks: strict mode (divergent barriers, shuffles reading outside their
// mask), deadlocks reported instead of hanging, and warp collectives with partial masks.
#include <gtest/gtest.h>

#include <algorithm>

#include "ir/diagnostic.h"
#include "tests/unit/host_test_util.h"

namespace kiln::runtime::host {
namespace {

using testing::options_for;

const char* const kKernels = R"(
// Each half of the block reaches a different __syncthreads.
extern "C" __global__ void __launch_bounds__(64) divergent_0(float* __restrict__ out) {
  if (threadIdx.x < 32) {
    out[threadIdx.x] = 1.0f;
    __syncthreads();
  } else {
    out[threadIdx.x] = 2.0f;
    __syncthreads();
  }
}

// Half the block returns before the barrier the other half waits at.
extern "C" __global__ void __launch_bounds__(64) early_exit_1(float* __restrict__ out) {
  if (threadIdx.x >= 32) return;
  __syncthreads();
  out[threadIdx.x] = 1.0f;
}

// Lanes 16-31 return before a full-warp shuffle.
extern "C" __global__ void __launch_bounds__(32) warp_exit_2(float* __restrict__ out) {
  const float v = static_cast<float>(threadIdx.x);
  if (threadIdx.x >= 16) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, v, 1);
}

// Lanes 0-15 read lane 20, outside their mask.
extern "C" __global__ void __launch_bounds__(32) outside_mask_3(float* __restrict__ out) {
  float v = static_cast<float>(threadIdx.x);
  if (threadIdx.x < 16) v = __shfl_sync(0x0000ffffu, v, 20);
  out[threadIdx.x] = v;
}

// Two half-warp collectives at once: a butterfly sum in the low half, an inclusive prefix sum
// (width 16) in the high half.
extern "C" __global__ void __launch_bounds__(64) half_warps_4(
    const float* __restrict__ x, float* __restrict__ out) {
  const unsigned lane = threadIdx.x % 32;
  float v = x[threadIdx.x];
  if (lane < 16) {
    for (int offset = 8; offset > 0; offset >>= 1) v += __shfl_xor_sync(0x0000ffffu, v, offset);
  } else {
    for (unsigned offset = 1; offset < 16; offset <<= 1) {
      const float up = __shfl_up_sync(0xffff0000u, v, offset, 16);
      if ((lane & 15) >= offset) v += up;
    }
  }
  out[threadIdx.x] = v;
}

// Votes, block-wide reducing barriers and warp reductions over 96 threads (3 warps).
extern "C" __global__ void __launch_bounds__(96) votes_5(
    const int* __restrict__ x, int* __restrict__ out) {
  const int t = threadIdx.x;
  const int p = x[t] > 0;
  int* o = out + t * 8;
  o[0] = static_cast<int>(__ballot_sync(0xffffffffu, p));
  o[1] = __any_sync(0xffffffffu, p);
  o[2] = __all_sync(0xffffffffu, p);
  o[3] = __syncthreads_count(p);
  o[4] = __syncthreads_and(p);
  o[5] = __syncthreads_or(p);
  __syncwarp();
  o[6] = __reduce_add_sync(0xffffffffu, x[t]);
  o[7] = __reduce_max_sync(0xffffffffu, x[t]);
}

// A 48-thread block: warp 1 has 16 lanes; a full mask means the lanes that exist.
extern "C" __global__ void __launch_bounds__(48) partial_warp_6(
    const float* __restrict__ x, float* __restrict__ out) {
  float v = x[threadIdx.x];
  for (int offset = 8; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  out[threadIdx.x] = v;
}

// Lanes of one warp call different collectives with the same mask.
extern "C" __global__ void __launch_bounds__(32) disagree_7(float* __restrict__ out) {
  float v = static_cast<float>(threadIdx.x);
  if (threadIdx.x < 16) __syncwarp();
  else v = __shfl_xor_sync(0xffffffffu, v, 1);
  out[threadIdx.x] = v;
}

// Lane 0 waits at the block barrier while the rest of its warp waits for it in a shuffle.
extern "C" __global__ void __launch_bounds__(32) barrier_vs_warp_8(float* __restrict__ out) {
  float v = static_cast<float>(threadIdx.x);
  if (threadIdx.x == 0) __syncthreads();
  v = __shfl_xor_sync(0xffffffffu, v, 1);
  if (threadIdx.x != 0) __syncthreads();
  out[threadIdx.x] = v;
}

// A correct kernel with two barriers per iteration: strict mode must accept it.
extern "C" __global__ void __launch_bounds__(128) rotate_9(
    const float* __restrict__ x, float* __restrict__ out) {
  float* s = reinterpret_cast<float*>(kiln_smem);
  const int t = threadIdx.x;
  float v = x[t];
  for (int step = 0; step < 5; ++step) {
    s[t] = v;
    __syncthreads();
    v = s[(t + 1) % 128];
    __syncthreads();
  }
  out[t] = v;
}

// A shuffle whose mask leaves out the calling lane.
extern "C" __global__ void __launch_bounds__(32) not_in_mask_10(float* __restrict__ out) {
  out[threadIdx.x] = __shfl_sync(0x1u, 1.0f, 0);
}
)";

std::string entry(const std::string& kernel, const std::string& params) {
  return "extern \"C\" void kiln_host_entry_" + kernel + "(void* const* args) {\n  " + kernel +
         "(" + params + ");\n}\n";
}

std::string test_source() {
  const std::string out0 = "static_cast<float*>(args[0])";
  const std::string in_out = "static_cast<const float*>(args[0]), static_cast<float*>(args[1])";
  return testing::translation_unit(
      kKernels,
      entry("divergent_0", out0) + entry("early_exit_1", out0) + entry("warp_exit_2", out0) +
          entry("outside_mask_3", out0) + entry("half_warps_4", in_out) +
          entry("votes_5", "static_cast<const int*>(args[0]), static_cast<int*>(args[1])") +
          entry("partial_warp_6", in_out) + entry("disagree_7", out0) +
          entry("barrier_vs_warp_8", out0) + entry("rotate_9", in_out) +
          entry("not_in_mask_10", out0));
}

// The line of the translation unit holding `needle`: what __builtin_LINE() reports there.
int line_of(const std::string& needle) {
  const std::string source = test_source();
  const size_t at = source.find(needle);
  return at == std::string::npos
             ? -1
             : 1 + static_cast<int>(std::count(source.begin(), source.begin() + at, '\n'));
}

class HostStrictTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static HostModule compiled =
        HostModule::compile(test_source(), "host_strict_test", testing::test_cache());
    module_ = &compiled;
  }

  // Runs `kernel` on one block with a single float output; returns the error text, or "".
  std::string run(const std::string& kernel, uint32_t threads, const HostOptions& options,
                  bool uses_barriers = true) {
    std::vector<float> out(threads, 0.0f);
    void* args[] = {out.data()};
    try {
      module_->launch(kernel, args, {2, 1, 1}, {threads, 1, 1}, 0, uses_barriers, options);
    } catch (const Error& error) {
      return error.what();
    }
    return "";
  }

  const HostModule* module_ = nullptr;
};

#define EXPECT_CONTAINS(text, part) \
  EXPECT_NE(std::string(text).find(part), std::string::npos) << "in: " << (text)

TEST_F(HostStrictTest, DivergentBarriersFailInStrictModeOnly) {
  for (const char* schedule : {"order", "reverse", "random:3"}) {
    const std::string error = run("divergent_0", 64, options_for(schedule, 1, true));
    // Schedules also reorder blocks: the first block to run fails, block 1 under "reverse".
    EXPECT_CONTAINS(error, "kernel 'divergent_0' block (");
    EXPECT_CONTAINS(error, "error: strict: divergent barriers");
    EXPECT_CONTAINS(error, "reached __syncthreads at line");
    EXPECT_EQ(run("divergent_0", 64, options_for(schedule, 2, false)), "");
  }
}

TEST_F(HostStrictTest, ExitedThreadsAtABarrierAreADeadlockNotAHang) {
  for (bool strict : {false, true}) {
    const std::string error = run("early_exit_1", 64, options_for("order", 1, strict));
    EXPECT_CONTAINS(error,
                    "kernel 'early_exit_1' block (0,0,0): error: deadlock: 32 of 64 threads "
                    "wait at __syncthreads");
    EXPECT_CONTAINS(error, "32 exited without reaching it (first: thread (32,0,0))");
  }
  EXPECT_CONTAINS(run("early_exit_1", 64, options_for("random:9", 2)), "deadlock");
}

TEST_F(HostStrictTest, ShuffleWithExitedLanesIsADeadlock) {
  const std::string error = run("warp_exit_2", 32, options_for("order"));
  EXPECT_CONTAINS(error, "deadlock: thread (0,0,0) waits in __shfl_xor_sync");
  EXPECT_CONTAINS(error, "mask 0xffffffff) for lane 16 (thread (16,0,0)), which has exited");
}

TEST_F(HostStrictTest, ShuffleSourceOutsideMask) {
  const std::string error = run("outside_mask_3", 32, options_for("order", 1, true));
  EXPECT_CONTAINS(error, "strict: __shfl_sync");
  EXPECT_CONTAINS(error, "lane 0 reads lane 20, outside mask 0x0000ffff");
  // Without strict mode the lane keeps its own value.
  std::vector<float> out(32);
  void* args[] = {out.data()};
  module_->launch("outside_mask_3", args, {1, 1, 1}, {32, 1, 1}, 0, true, options_for("order"));
  for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], static_cast<float>(i));
}

TEST_F(HostStrictTest, CallerOutsideItsMaskIsAnError) {
  const int line = line_of("__shfl_sync(0x1u");
  EXPECT_CONTAINS(run("not_in_mask_10", 32, options_for("order")),
                  "__shfl_sync (line " + std::to_string(line) +
                      ") by thread (1,0,0): mask 0x00000001 does not include the calling lane 1");
}

TEST_F(HostStrictTest, LanesDisagreeingOnTheCollectiveAreAnError) {
  EXPECT_CONTAINS(run("disagree_7", 32, options_for("order")), "warp 0: lanes disagree");
}

TEST_F(HostStrictTest, WarpWaitingForALaneAtABarrierIsADeadlock) {
  const int line = line_of("if (threadIdx.x == 0) __syncthreads();");
  EXPECT_CONTAINS(run("barrier_vs_warp_8", 32, options_for("reverse")),
                  "for lane 0 (thread (0,0,0)), which waits at __syncthreads (line " +
                      std::to_string(line) + ")");
}

TEST_F(HostStrictTest, HalfWarpMasksWork) {
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) x[i] = static_cast<float>(i % 7 + 1);
  for (const char* schedule : {"order", "reverse", "random:11"}) {
    std::vector<float> out(64);
    void* args[] = {x.data(), out.data()};
    module_->launch("half_warps_4", args, {1, 1, 1}, {64, 1, 1}, 0, true,
                    options_for(schedule, 1, true));
    for (int warp = 0; warp < 2; ++warp) {
      float low = 0.0f, prefix = 0.0f;
      for (int lane = 0; lane < 16; ++lane) low += x[warp * 32 + lane];
      for (int lane = 0; lane < 16; ++lane) {
        EXPECT_EQ(out[warp * 32 + lane], low) << schedule;
        prefix += x[warp * 32 + 16 + lane];
        EXPECT_EQ(out[warp * 32 + 16 + lane], prefix) << schedule << " lane " << 16 + lane;
      }
    }
  }
}

TEST_F(HostStrictTest, VotesAndReducingBarriers) {
  std::vector<int> x(96);
  // Warp 0 mixed, warp 1 all non-positive, warp 2 all positive.
  for (int i = 0; i < 32; ++i) x[i] = (i % 5 == 0) ? -i : i + 1;
  for (int i = 32; i < 64; ++i) x[i] = -(i % 4);
  for (int i = 64; i < 96; ++i) x[i] = i;
  std::vector<int> out(96 * 8);
  void* args[] = {x.data(), out.data()};
  module_->launch("votes_5", args, {1, 1, 1}, {96, 1, 1}, 0, true,
                  options_for("random:2", 1, true));
  int count = 0;
  for (int v : x) count += v > 0;
  for (int t = 0; t < 96; ++t) {
    const int warp = t / 32;
    unsigned ballot = 0;
    int sum = 0, max = x[warp * 32];
    for (int lane = 0; lane < 32; ++lane) {
      const int v = x[warp * 32 + lane];
      ballot |= static_cast<unsigned>(v > 0) << lane;
      sum += v;
      max = std::max(max, v);
    }
    const int* o = &out[t * 8];
    EXPECT_EQ(static_cast<unsigned>(o[0]), ballot) << t;
    EXPECT_EQ(o[1], ballot != 0) << t;
    EXPECT_EQ(o[2], ballot == 0xffffffffu) << t;
    EXPECT_EQ(o[3], count) << t;
    EXPECT_EQ(o[4], count == 96) << t;
    EXPECT_EQ(o[5], count > 0) << t;
    EXPECT_EQ(o[6], sum) << t;
    EXPECT_EQ(o[7], max) << t;
  }
}

TEST_F(HostStrictTest, PartialLastWarp) {
  std::vector<float> x(48);
  for (int i = 0; i < 48; ++i) x[i] = static_cast<float>(i);
  std::vector<float> out(48);
  void* args[] = {x.data(), out.data()};
  module_->launch("partial_warp_6", args, {1, 1, 1}, {48, 1, 1}, 0, true,
                  options_for("order", 1, true));
  for (int i = 0; i < 48; ++i) {
    const int base = i / 16 * 16;  // xor offsets 8..1 sum 16-lane groups
    float expected = 0.0f;
    for (int j = base; j < base + 16; ++j) expected += x[j];
    EXPECT_EQ(out[i], expected) << i;
  }
}

TEST_F(HostStrictTest, StrictModeAcceptsCorrectKernels) {
  std::vector<float> x(128), out(128);
  for (int i = 0; i < 128; ++i) x[i] = static_cast<float>(i);
  void* args[] = {x.data(), out.data()};
  for (const char* schedule : {"order", "reverse", "random:5"}) {
    module_->launch("rotate_9", args, {3, 1, 1}, {128, 1, 1}, 128 * sizeof(float), true,
                    options_for(schedule, 2, true));
    for (int i = 0; i < 128; ++i) EXPECT_EQ(out[i], x[(i + 5) % 128]) << schedule;
  }
}

}  // namespace
}  // namespace kiln::runtime::host
