// OpId: the typed id of every op, one enumerator per row of the op table (ir/ops.def).
//
// Every layer dispatches on it with a `switch` that has no `default:`, so that -Wswitch lists
// each place a new op must be handled. Only the parser, the printer and the importers map
// between ids and names (op_name / find_op_id).
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>

namespace kiln::ir {

enum class OpId : uint16_t {
#define KILN_OP(Id, name, kind, type_rule, inputs, min_inputs, max_inputs, summary, ...) Id,
#include "ir/ops.def"
};

// How many ops there are (the enumerators are 0 .. kOpCount - 1).
inline constexpr int kOpCount = 0
#define KILN_OP(Id, name, kind, type_rule, inputs, min_inputs, max_inputs, summary, ...) +1
#include "ir/ops.def"
    ;

// "conv2d" for OpId::Conv2d: the op's name in model files, textual IR and kernel names.
std::string_view op_name(OpId op);
// The id of the op named `name`, or nullopt.
std::optional<OpId> find_op_id(std::string_view name);

// Streams and formats (fmt) print an op id as its name.
std::ostream& operator<<(std::ostream& out, OpId op);
inline std::string to_string(OpId op) { return std::string(op_name(op)); }

}  // namespace kiln::ir

template <>
struct fmt::formatter<kiln::ir::OpId> : fmt::formatter<std::string_view> {
  auto format(kiln::ir::OpId op, fmt::format_context& ctx) const {
    return fmt::formatter<std::string_view>::format(kiln::ir::op_name(op), ctx);
  }
};
