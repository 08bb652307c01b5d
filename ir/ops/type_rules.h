// Type rules: one function per op (or per family of ops that type alike), named in the op
// table's rows (ir/ops.def) and listed, with their words, in ir/ops/type_rules.def. Each reads
// the operand types and the complete attribute map (see InferContext) and returns the result
// types, or throws OpError. They live with their family under ir/ops/.
#pragma once

#include <string_view>
#include <vector>

#include "ir/op_registry.h"

namespace kiln::ir::type_rules {

using Types = std::vector<TensorType>;

// Per row of type_rules.def: `Types infer_x(const InferContext&)` (defined in the family's file
// under ir/ops/) and `infer_x_words`, the rule in words for docs/ops.md.
#define KILN_TYPE_RULE(function, words)            \
  Types function(const InferContext& ctx);         \
  inline constexpr std::string_view function##_words = words;
#include "ir/ops/type_rules.def"

}  // namespace kiln::ir::type_rules
