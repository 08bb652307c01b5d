// Small helpers shared by the op definitions under ir/ops/.
#pragma once

#include <string>
#include <vector>

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
// Every operand is float and combines with operand 0, so all must share its dtype.
void require_float_operands(const InferContext& ctx);
// Throws unless the attribute 'epsilon' is >= 0 (NaN is rejected too).
void require_epsilon(const InferContext& ctx);
// A dim or count as message text.
std::string str(int64_t value);
// "operand 1 ('weight')" style name of an operand, from the op's input_names.
std::string operand_name(const OpDef& def, int input);

// "[0,1,1,3]": how an int-list attribute value is quoted back in messages.
std::string ints_to_string(const std::vector<int64_t>& values);
// Maps `axis` in [-rank, rank) to [0, rank); otherwise throws OpError{"axis 3 is out of range
// for rank 2", -1, attr}.
int require_axis(int64_t axis, int rank, const std::string& attr);
// Normalizes every axis of the list attribute `attr` as above and rejects repeats, which would
// otherwise reduce or slice one axis twice.
std::vector<int> require_axes(const std::vector<int64_t>& axes, int rank, const std::string& attr);
// The result type {dtype, shape}; throws when its element count exceeds kMaxElements, so
// later stages never see a size that overflows byte or index arithmetic.
TensorType checked_result(DType dtype, Shape shape);

}  // namespace kiln::ir::ops
