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
    case DType::I8: return "i8";
    case DType::U8: return "u8";
    case DType::I16: return "i16";
    case DType::U16: return "u16";
    case DType::U32: return "u32";
    case DType::U64: return "u64";
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
      {"float64", DType::F64}, {"double", DType::F64},  {"int8", DType::I8},
      {"uint8", DType::U8},    {"int16", DType::I16},   {"uint16", DType::U16},
      {"uint32", DType::U32},  {"uint64", DType::U64},
  };
  for (const auto& [alias, dtype] : kAliases)
    if (alias == name) return dtype;
  return std::nullopt;
}

std::string_view dtype_names_list() {
  return "f32, f16, bf16, f64, i8, i16, i32, i64, u8, u16, u32, u64, bool";
}

double integer_min(DType dtype) {
  switch (dtype) {
    case DType::I8: return -128.0;
    case DType::I16: return -32768.0;
    case DType::I32: return -2147483648.0;
    case DType::I64: return -9223372036854775808.0;
    default: return 0.0;
  }
}

double integer_max(DType dtype) {
  switch (dtype) {
    case DType::I8: return 127.0;
    case DType::U8: return 255.0;
    case DType::I16: return 32767.0;
    case DType::U16: return 65535.0;
    case DType::I32: return 2147483647.0;
    case DType::U32: return 4294967295.0;
    case DType::I64: return 9223372036854775808.0;   // 2^63 - 1 rounds up
    case DType::U64: return 18446744073709551616.0;  // 2^64 - 1 rounds up
    default: return 0.0;
  }
}

bool fits_dtype(double value, DType dtype) {
  switch (dtype) {
    case DType::F32: return !std::isfinite(value) || std::fabs(value) <= std::numeric_limits<float>::max();
    case DType::F16: return !std::isfinite(value) || std::fabs(value) <= 65504.0;
    case DType::BF16: return !std::isfinite(value) || std::fabs(value) <= 3.3895313892515355e38;
    case DType::F64: return true;
    case DType::Bool: return true;
    case DType::I64: case DType::U64:  // 2^63 (2^64) is the first double past the range
      return std::trunc(value) == value && value >= integer_min(dtype) && value < integer_max(dtype);
    case DType::I8: case DType::U8: case DType::I16: case DType::U16: case DType::I32:
    case DType::U32:
      return std::trunc(value) == value && value >= integer_min(dtype) && value <= integer_max(dtype);
  }
  return false;
}

DType accumulation_dtype(DType dtype) {
  return dtype == DType::BF16 || dtype == DType::F16 ? DType::F32 : dtype;
}

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32: case DType::I32: case DType::U32: return 4;
    case DType::F16: case DType::BF16: case DType::I16: case DType::U16: return 2;
    case DType::I64: case DType::F64: case DType::U64: return 8;
    case DType::Bool: case DType::I8: case DType::U8: return 1;
  }
  return 0;
}

bool is_floating(DType dtype) {
  return dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16 ||
         dtype == DType::F64;
}

bool is_integer(DType dtype) { return !is_floating(dtype) && dtype != DType::Bool; }

bool is_unsigned(DType dtype) {
  return dtype == DType::U8 || dtype == DType::U16 || dtype == DType::U32 || dtype == DType::U64;
}

}  // namespace kiln::ir
