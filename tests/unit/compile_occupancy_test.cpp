// Theoretical occupancy for known configurations, checked by hand against the per-arch limits
// (sm_80/sm_90: 2048 threads, 32 blocks, 64K registers per SM in units of 256 per warp,
// 164 / 228 KB shared memory per SM with 1 KB reserved per block; sm_86/sm_89: 1536 threads,
// 16 / 24 blocks, 100 KB).
#include <gtest/gtest.h>

#include "ir/diagnostic.h"
#include "runtime/compile/occupancy.h"

namespace kiln::runtime {
namespace {

struct Case {
  const char* arch;
  int threads, registers, shared_bytes;
  int blocks, warps;
  const char* limiter;
  int max_warps = 64;
};

TEST(OccupancyTest, KnownConfigurations) {
  const Case cases[] = {
      // 8 blocks of 8 warps fill the SM; registers (8192 per block) fit 8 blocks as well.
      {"sm_90", 256, 32, 0, 8, 64, "warps"},
      {"sm_80", 256, 32, 0, 8, 64, "warps"},
      // 64 x 1024 = the whole register file for one block: half the warps.
      {"sm_90", 1024, 64, 0, 1, 32, "registers"},
      // 40 regs = 1280 per warp: 12 warps per sub-partition, 48 per SM = 6 blocks of 8 warps.
      {"sm_90", 256, 40, 0, 6, 48, "registers"},
      // 33 regs round up to the same 1280 per warp (allocation unit 256).
      {"sm_90", 256, 33, 0, 6, 48, "registers"},
      // One-warp blocks: the 32-block limit leaves half the warp slots empty.
      {"sm_90", 32, 16, 0, 32, 32, "blocks"},
      // 48 KB + 1 KB reserved per block: 164 KB fits 3, 228 KB fits 4.
      {"sm_80", 256, 32, 48 * 1024, 3, 24, "shared memory"},
      {"sm_90", 256, 32, 48 * 1024, 4, 32, "shared memory"},
      // Above the 163 KB opt-in limit of sm_80, within sm_90's 227 KB.
      {"sm_80", 256, 32, 200 * 1024, 0, 0, "shared memory"},
      {"sm_90", 256, 32, 200 * 1024, 1, 8, "shared memory"},
      {"sm_90", 256, 32, 228 * 1024, 0, 0, "shared memory"},
      // More registers than a thread may have, more threads than a block may have.
      {"sm_90", 128, 256, 0, 0, 0, "registers"},
      {"sm_90", 2048, 16, 0, 0, 0, "warps"},
      // A partial warp still takes a whole warp slot.
      {"sm_90", 48, 16, 0, 32, 64, "warps"},
      // 1536 threads per SM, 16 (sm_86) / 24 (sm_89) blocks, 100 KB shared memory per SM.
      {"sm_86", 256, 32, 0, 6, 48, "warps", 48},
      {"sm_86", 64, 32, 0, 16, 32, "blocks", 48},
      {"sm_89", 64, 32, 0, 24, 48, "warps", 48},
      {"sm_86", 128, 32, 40 * 1024, 2, 8, "shared memory", 48},
      {"sm_89", 128, 32, 100 * 1024, 0, 0, "shared memory", 48},
  };
  for (const Case& c : cases) {
    const Occupancy occupancy =
        theoretical_occupancy(c.arch, c.threads, c.registers, c.shared_bytes);
    const std::string what = std::string(c.arch) + " threads=" + std::to_string(c.threads) +
                             " regs=" + std::to_string(c.registers) +
                             " smem=" + std::to_string(c.shared_bytes);
    EXPECT_EQ(occupancy.active_blocks_per_sm, c.blocks) << what;
    EXPECT_EQ(occupancy.active_warps_per_sm, c.warps) << what;
    EXPECT_EQ(occupancy.max_warps_per_sm, c.max_warps) << what;
    EXPECT_EQ(occupancy.limiter, c.limiter) << what;
  }
}

TEST(OccupancyTest, Fraction) {
  EXPECT_DOUBLE_EQ(theoretical_occupancy("sm_90", 256, 32, 0).fraction(), 1.0);
  EXPECT_DOUBLE_EQ(theoretical_occupancy("sm_90", 1024, 64, 0).fraction(), 0.5);
  EXPECT_DOUBLE_EQ(theoretical_occupancy("sm_80", 256, 32, 48 * 1024).fraction(), 0.375);
}

TEST(OccupancyTest, UnknownArchIsUserError) {
  EXPECT_THROW(theoretical_occupancy("sm_75", 256, 32, 0), Error);
  EXPECT_THROW(theoretical_occupancy("sm_100", 256, 32, 0), Error);
}

}  // namespace
}  // namespace kiln::runtime
