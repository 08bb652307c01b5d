// Element types of kiln tensors.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace kiln::ir {

// f64 is for the reference interpreter (gradient checks and oracles in double); codegen has no
// f64 kernels and says so. The small and unsigned integers (ONNX's int8 ... uint64) are read,
// written, imported and evaluated by the reference interpreter; codegen has no kernels for them
// yet and says so. New types go at the end: packages and the C++ API number them.
enum class DType { F32, F16, BF16, I32, I64, Bool, F64, I8, U8, I16, U16, U32, U64 };

inline constexpr DType kAllDTypes[] = {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64,
                                       DType::Bool, DType::F64, DType::I8, DType::U8, DType::I16,
                                       DType::U16, DType::U32, DType::U64};

// "f32", "f16", "bf16", "i32", "i64", "bool", "f64", "i8", "u8", "i16", "u16", "u32", "u64".
std::string_view dtype_name(DType dtype);
// The names above and the common spellings of NumPy and PyTorch: float32/float, float16/half,
// bfloat16, int32/int, int64/long, bool, float64/double, int8, uint8, int16, uint16, uint32,
// uint64.
std::optional<DType> parse_dtype(std::string_view name);
// "f32, f16, bf16, ...": for "expected one of ..." messages.
std::string_view dtype_names_list();
// Whether `value` converts to `dtype` without leaving its range: a finite value beyond a float
// type's largest finite value (it would become infinity), or an integer type's value that is not
// integral or out of range, does not fit. NaN and infinities fit float types (they are values
// there); bool takes any value (nonzero is true).
bool fits_dtype(double value, DType dtype);
std::size_t dtype_size(DType dtype);  // bytes per element
bool is_floating(DType dtype);
bool is_integer(DType dtype);   // every integer type (not bool)
bool is_unsigned(DType dtype);  // u8, u16, u32, u64
// What a GEMM over `dtype` operands sums in: f32 for bf16 and f16 (the tensor cores' f32
// accumulators, rounded once at the store), else `dtype`. Split-K partial sums (k_chunk) have
// this dtype, so a split GEMM rounds once too, after their reduce_sum.
DType accumulation_dtype(DType dtype);
// The smallest and largest values of an integer type, as doubles (u64's and i64's upper ends
// round up to 2^64 and 2^63).
double integer_min(DType dtype);
double integer_max(DType dtype);

}  // namespace kiln::ir
