// The device arena layout with a memory plan: unplanned buffers first, then the activation
// region where planned intermediates keep their planned offsets (and so share space).
#include <gtest/gtest.h>

#include "runtime/cuda/plan.h"

namespace kiln::runtime::cuda {
namespace {

codegen::Buffer buffer(const char* name, int64_t bytes, codegen::BufferRole role, int64_t arena_offset) {
  codegen::Buffer b;
  b.name = name;
  b.bytes = bytes;
  b.role = role;
  b.arena_offset = arena_offset;
  return b;
}

TEST(ArenaLayout, PlannedIntermediatesShareTheActivationRegion) {
  using codegen::BufferRole;
  const std::vector<codegen::Buffer> buffers = {
      buffer("x", 100, BufferRole::Input, -1),
      buffer("a", 1000, BufferRole::Intermediate, 0),
      buffer("b", 1000, BufferRole::Intermediate, 1024),
      buffer("c", 1000, BufferRole::Intermediate, 0),  // a is dead by then: same slice
      buffer("y", 40, BufferRole::Output, -1),
  };
  const ArenaLayout layout = plan_arena(buffers);
  EXPECT_EQ(layout.offsets[0], 0);
  EXPECT_EQ(layout.offsets[4], 256);
  const int64_t activations = 512;  // after x and y, aligned
  EXPECT_EQ(layout.offsets[1], activations);
  EXPECT_EQ(layout.offsets[2], activations + 1024);
  EXPECT_EQ(layout.offsets[3], layout.offsets[1]);
  EXPECT_EQ(layout.total_bytes, activations + 1024 + 1024);
}

}  // namespace
}  // namespace kiln::runtime::cuda
