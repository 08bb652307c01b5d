#include "ir/parallel.h"

#include <algorithm>
#include <system_error>
#include <thread>
#include <vector>

namespace kiln::ir {

Pieces pieces_per_core(int64_t size, int64_t min_piece) {
  const int64_t cores = std::max(1u, std::thread::hardware_concurrency());
  return {size, std::clamp<int64_t>(min_piece > 0 ? size / min_piece : 1, 1, cores)};
}

void run_pieces(const Pieces& pieces, const std::function<void(int64_t piece)>& body) {
  std::vector<std::thread> workers;
  for (int64_t piece = 1; piece < pieces.count; ++piece) {
    try {
      workers.emplace_back(body, piece);
    } catch (const std::system_error&) {  // no thread to be had: this one does the piece
      body(piece);
    }
  }
  body(0);
  for (std::thread& worker : workers) worker.join();
}

}  // namespace kiln::ir
