// Warp collectives on the host (internal to runtime/host/).
//
// Each lane posts what it brings (a WarpPost) and waits; the last lane of the mask to arrive
// calls compute_collective, which fills in every lane's result, and wakes the others. Lanes
// of one warp may run disjoint collectives at once (half-warp masks), so a collective is
// identified by its lane set, not by the warp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kiln::runtime::host::detail {

inline constexpr int kWarpSize = 32;

struct WarpPost {
  int op = 0;          // KILN_HOST_WARP_* (kiln_host_prelude.h)
  uint32_t group = 0;  // the lanes taking part: the mask, limited to lanes that exist
  uint64_t value = 0;  // this lane's value (shuffles) or predicate
  int operand = 0;     // shuffle source lane, delta or lane mask
  int width = kWarpSize;
  int line = 0;         // call site
  uint64_t result = 0;  // filled in by compute_collective
};

// "__shfl_xor_sync", "__ballot_sync", ...
std::string_view warp_op_name(int op);

// Computes the result of every lane in `group`; `lanes` is indexed by lane and all lanes of
// `group` have posted the same op. Returns "" or, when a shuffle reads a lane outside the group
// and `strict` is set, what went wrong ("lane 3 reads lane 20, outside mask 0x0000ffff"); in
// non-strict mode such a lane gets its own value back.
std::string compute_collective(WarpPost* lanes, uint32_t group, bool strict);

}  // namespace kiln::runtime::host::detail
