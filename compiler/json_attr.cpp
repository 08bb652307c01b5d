#include "compiler/json_attr.h"

namespace kiln::compiler {

std::optional<ir::Attribute> attribute_from_json(const nlohmann::json& value, std::string& why) {
  if (value.is_boolean()) return value.get<bool>();
  if (value.is_number_integer()) {
    if (value.is_number_unsigned() && value.get<uint64_t>() > INT64_MAX) {
      why = "integer " + value.dump() + " is too large";
      return std::nullopt;
    }
    return value.get<int64_t>();
  }
  if (value.is_number_float()) return value.get<double>();
  if (value.is_string()) return value.get<std::string>();
  if (!value.is_array()) {
    why = "expected a number, boolean, string or list of numbers, got " +
          std::string(value.type_name());
    return std::nullopt;
  }
  bool all_integers = true;
  for (const nlohmann::json& item : value) {
    if (!item.is_number()) {
      why = "list items must be numbers, got " + std::string(item.type_name());
      return std::nullopt;
    }
    if (!item.is_number_integer() ||
        (item.is_number_unsigned() && item.get<uint64_t>() > INT64_MAX))
      all_integers = false;
  }
  if (all_integers) return value.get<std::vector<int64_t>>();
  return value.get<std::vector<double>>();
}

}  // namespace kiln::compiler
