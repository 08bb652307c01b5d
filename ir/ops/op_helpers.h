// Small helpers shared by the op definitions under ir/ops/.
#pragma once

#include <string>

#include "ir/op_registry.h"

namespace kiln::ir::ops {

// Throws OpError{message, input} unless operand `input` has a floating dtype.
void require_float(const InferContext& ctx, int input);
// Throws unless operand `input` is numeric (float, i32 or i64).
void require_numeric(const InferContext& ctx, int input);
// Throws unless operand `input` has exactly `rank` dims ("x must have rank 4, got f32[1,2]").
void require_rank(const InferContext& ctx, int input, int rank, const char* role);
// Throws unless operands a and b have the same dtype.
void require_same_dtype(const InferContext& ctx, int a, int b);
// "operand 1 ('weight')" style name of an operand, from the op's input_names.
std::string operand_name(const OpDef& def, int input);

}  // namespace kiln::ir::ops
