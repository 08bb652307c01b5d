// STUB: to be written.
#include "codegen/kernel_emitter.h"

namespace kiln::codegen {
void add_reduce_emitters(EmitterTable& table) {}
}  // namespace kiln::codegen
