#include "ir/attribute.h"

#include <cmath>
#include <fmt/format.h>

namespace kiln::ir {

std::string_view attr_type_name(AttrType type) {
  switch (type) {
    case AttrType::Int: return "int";
    case AttrType::Float: return "float";
    case AttrType::Bool: return "bool";
    case AttrType::String: return "string";
    case AttrType::Ints: return "int list";
    case AttrType::Floats: return "float list";
  }
  return "?";
}

AttrType attr_type_of(const Attribute& value) {
  return static_cast<AttrType>(value.index());  // variant order matches AttrType
}

std::optional<Attribute> coerce_attribute(const Attribute& value, AttrType type) {
  const AttrType have = attr_type_of(value);
  if (have == type) return value;
  if (have == AttrType::Int && type == AttrType::Float)
    return static_cast<double>(std::get<int64_t>(value));
  if (have == AttrType::Ints && type == AttrType::Floats) {
    const auto& ints = std::get<std::vector<int64_t>>(value);
    return std::vector<double>(ints.begin(), ints.end());
  }
  if (have == AttrType::Floats && type == AttrType::Ints &&
      std::get<std::vector<double>>(value).empty())
    return std::vector<int64_t>{};
  return std::nullopt;
}

std::string float_to_string(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  std::string text = fmt::format("{}", value);  // shortest form that reads back exactly
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

namespace {
template <typename T, typename F>
std::string join_list(const std::vector<T>& items, F&& format_item) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ",";
    out += format_item(items[i]);
  }
  return out + "]";
}

std::string quote(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}
}  // namespace

std::string attribute_to_string(const Attribute& value) {
  switch (attr_type_of(value)) {
    case AttrType::Int: return std::to_string(std::get<int64_t>(value));
    case AttrType::Float: return float_to_string(std::get<double>(value));
    case AttrType::Bool: return std::get<bool>(value) ? "true" : "false";
    case AttrType::String: return quote(std::get<std::string>(value));
    case AttrType::Ints:
      return join_list(std::get<std::vector<int64_t>>(value),
                       [](int64_t v) { return std::to_string(v); });
    case AttrType::Floats:
      return join_list(std::get<std::vector<double>>(value), float_to_string);
  }
  return "?";
}

}  // namespace kiln::ir
