// STUB: to be written.
#include "passes/pass.h"

namespace kiln::passes {
bool CommonSubexpressionElimination::run(ir::Graph& graph, PassContext& context) { return false; }
}  // namespace kiln::passes
