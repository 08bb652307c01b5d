// The attention kernel with strided operand views, for fused kernels of kind "attention"
// (passes/fuse_attention_views.cpp); the plain op emitters register themselves
// (add_attention_emitters).
#pragma once

#include "codegen/kernel_emitter.h"

namespace kiln::codegen {

// `request.node` is the kernel node: its body holds one attention whose q, k and v come from
// body inputs through slices, reshapes and transposes, and whose output may reach a body
// output through transposes and reshapes. The attention kernel reads and writes through those
// views; nothing is materialized between.
KernelSpec emit_attention_views(const KernelRequest& request);

}  // namespace kiln::codegen
