// Element types of kiln tensors.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace kiln::ir {

// f64 is for the reference interpreter (gradient checks and oracles in double); codegen has no
// f64 kernels and says so.
enum class DType { F32, F16, BF16, I32, I64, Bool, F64 };

inline constexpr DType kAllDTypes[] = {DType::F32, DType::F16, DType::BF16, DType::I32,
                                       DType::I64, DType::Bool, DType::F64};

// "f32", "f16", "bf16", "i32", "i64", "bool", "f64".
std::string_view dtype_name(DType dtype);
// The names above and the common spellings of NumPy and PyTorch: float32/float, float16/half,
// bfloat16, int32/int, int64/long, bool, float64/double.
std::optional<DType> parse_dtype(std::string_view name);
// "f32, f16, bf16, i32, i64, bool, f64": for "expected one of ..." messages.
std::string_view dtype_names_list();
// Whether `value` converts to `dtype` without leaving its range: a finite value beyond a float
// type's largest finite value (it would become infinity), or an integer type's value that is not
// integral or out of range, does not fit. NaN and infinities fit float types (they are values
// there); bool takes any value (nonzero is true).
bool fits_dtype(double value, DType dtype);
std::size_t dtype_size(DType dtype);  // bytes per element
bool is_floating(DType dtype);
bool is_integer(DType dtype);  // i32, i64 (not bool)

}  // namespace kiln::ir
