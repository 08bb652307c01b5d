#include "ir/op_id.h"

#include <array>
#include <ostream>

namespace kiln::ir {
namespace {

constexpr std::array<std::string_view, kOpCount> kOpNames = {
#define KILN_OP(Id, name, kind, type_rule, inputs, min_inputs, max_inputs, summary, ...) name,
#include "ir/ops.def"
};

}  // namespace

std::string_view op_name(OpId op) { return kOpNames[static_cast<size_t>(op)]; }

std::ostream& operator<<(std::ostream& out, OpId op) { return out << op_name(op); }

std::optional<OpId> find_op_id(std::string_view name) {
  for (size_t i = 0; i < kOpNames.size(); ++i)
    if (kOpNames[i] == name) return static_cast<OpId>(i);
  return std::nullopt;
}

}  // namespace kiln::ir
