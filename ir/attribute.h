// Node attributes: small typed constants such as stride = [2,2] or approximate = "tanh".
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace kiln::ir {

enum class AttrType { Int, Float, Bool, String, Ints, Floats };

using Attribute =
    std::variant<int64_t, double, bool, std::string, std::vector<int64_t>, std::vector<double>>;

// Sorted by name, so printing is deterministic.
using AttrMap = std::map<std::string, Attribute>;

// "int", "float", "bool", "string", "int list", "float list".
std::string_view attr_type_name(AttrType type);
AttrType attr_type_of(const Attribute& value);

// Converts a parsed or JSON-read value to the type an op expects, where that is lossless:
// an int to a float, an int list to a float list, an empty list of either kind to the other.
// Returns nullopt when the value does not fit the type.
std::optional<Attribute> coerce_attribute(const Attribute& value, AttrType type);

// Textual form used by the IR printer: 3, 0.5, 1.0e-05, true, "tanh", [1,1], [0.5,2.0].
// Floats always print with a '.' or an exponent so they parse back as floats.
std::string attribute_to_string(const Attribute& value);
std::string float_to_string(double value);

}  // namespace kiln::ir
