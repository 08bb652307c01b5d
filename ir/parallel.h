// Cutting a range into one piece per core and running the pieces side by side: what the
// initializers' random fills and the packages' checksums of large sections have in common.
#ifndef KILN_IR_PARALLEL_H
#define KILN_IR_PARALLEL_H

#include <cstdint>
#include <functional>

namespace kiln::ir {

// [0, size) cut into `count` pieces of near-equal length. The cut depends only on size, the
// minimum piece and the machine's core count, so results that combine pieces in order are the
// same on every run.
struct Pieces {
  int64_t size = 0;
  int64_t count = 1;
  int64_t begin(int64_t piece) const { return size * piece / count; }
  int64_t end(int64_t piece) const { return size * (piece + 1) / count; }
};

// One piece per core, each at least `min_piece` long (a short range is one piece).
Pieces pieces_per_core(int64_t size, int64_t min_piece);

// Runs body(piece) for every piece: the first on the calling thread, the others on threads of
// their own, or on the calling thread when no thread can be started. `body` must not throw.
void run_pieces(const Pieces& pieces, const std::function<void(int64_t piece)>& body);

}  // namespace kiln::ir

#endif  // KILN_IR_PARALLEL_H
