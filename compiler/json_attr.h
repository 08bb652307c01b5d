// Attribute values from JSON: numbers, booleans, strings and flat lists of numbers.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "ir/attribute.h"

namespace kiln::compiler {

// Converts a JSON attribute value: an integer → int, a number with a fraction or exponent →
// float, true/false → bool, a string → string, a list of integers → ints, a list of numbers with
// any non-integer → floats, [] → ints (coerced by the op schema as needed).
// Returns nullopt, with `why` set, for anything else (objects, nested or mixed lists, null).
std::optional<ir::Attribute> attribute_from_json(const nlohmann::json& value, std::string& why);

}  // namespace kiln::compiler
