#include "ir/dtype.h"

#include <cmath>
#include <limits>
#include <utility>

namespace kiln::ir {

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::Bool: return "bool";
    case DType::F64: return "f64";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view name) {
  for (DType dtype : kAllDTypes)
    if (dtype_name(dtype) == name) return dtype;
  static constexpr std::pair<std::string_view, DType> kAliases[] = {
      {"float32", DType::F32}, {"float", DType::F32},   {"float16", DType::F16},
      {"half", DType::F16},    {"bfloat16", DType::BF16}, {"int32", DType::I32},
      {"int", DType::I32},     {"int64", DType::I64},   {"long", DType::I64},
      {"float64", DType::F64}, {"double", DType::F64},
  };
  for (const auto& [alias, dtype] : kAliases)
    if (alias == name) return dtype;
  return std::nullopt;
}

std::string_view dtype_names_list() { return "f32, f16, bf16, i32, i64, bool, f64"; }

bool fits_dtype(double value, DType dtype) {
  switch (dtype) {
    case DType::F32: return !std::isfinite(value) || std::fabs(value) <= std::numeric_limits<float>::max();
    case DType::F16: return !std::isfinite(value) || std::fabs(value) <= 65504.0;
    case DType::BF16: return !std::isfinite(value) || std::fabs(value) <= 3.3895313892515355e38;
    case DType::F64: return true;
    case DType::Bool: return true;
    case DType::I32:
      return std::trunc(value) == value && value >= -2147483648.0 && value <= 2147483647.0;
    case DType::I64:  // 2^63 is the first double past the range
      return std::trunc(value) == value && value >= -9223372036854775808.0 &&
             value < 9223372036854775808.0;
  }
  return false;
}

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32: case DType::I32: return 4;
    case DType::F16: case DType::BF16: return 2;
    case DType::I64: case DType::F64: return 8;
    case DType::Bool: return 1;
  }
  return 0;
}

bool is_floating(DType dtype) {
  return dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16 ||
         dtype == DType::F64;
}

bool is_integer(DType dtype) { return dtype == DType::I32 || dtype == DType::I64; }

}  // namespace kiln::ir
