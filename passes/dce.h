// The dead-node sweep of the dce pass, for passes that leave dead nodes behind (autodiff).
#pragma once

#include <cstddef>
#include <functional>

#include "ir/graph.h"

namespace kiln::passes {

// Erases the nodes at index >= `first` whose results nothing reads (no node operand, no graph
// output), in one reverse sweep (see dce.cpp), so a node only the erased nodes read goes too.
// `may_erase` is asked once per dead node, last first; a node it refuses stays, and so do its
// operands. Returns how many nodes were erased.
size_t erase_dead_nodes(ir::Graph& graph, size_t first,
                        const std::function<bool(const ir::Node&)>& may_erase);

}  // namespace kiln::passes
