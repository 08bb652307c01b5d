// STUB: to be written.
#include "ir/op_registry.h"

namespace kiln::ir {
void register_reduce_ops(OpRegistry& registry) {}
}  // namespace kiln::ir
