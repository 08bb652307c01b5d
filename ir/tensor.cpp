#include "ir/tensor.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "ir/diagnostic.h"

namespace kiln::ir {

Tensor::Tensor(TensorType type)
    : type_(std::move(type)),
      bytes_(static_cast<size_t>(ir::num_elements(type_.shape)) * dtype_size(type_.dtype)) {}

Tensor::Tensor(TensorType type, std::vector<std::byte> bytes)
    : type_(std::move(type)), bytes_(std::move(bytes)) {
  KILN_CHECK(bytes_.size() ==
             static_cast<size_t>(ir::num_elements(type_.shape)) * dtype_size(type_.dtype))
      << "tensor byte size " << bytes_.size() << " does not match " << type_.to_string();
}

std::vector<TensorView> views_of(const std::vector<Tensor>& tensors) {
  std::vector<TensorView> views;
  views.reserve(tensors.size());
  for (const Tensor& tensor : tensors) views.push_back(TensorView::of(tensor));
  return views;
}

std::vector<Tensor> copies_of(const std::vector<TensorView>& views) {
  std::vector<Tensor> tensors;
  tensors.reserve(views.size());
  for (const TensorView& view : views) {
    Tensor& copy = tensors.emplace_back(view.type);
    if (copy.byte_size() > 0) std::memcpy(copy.data(), view.data, copy.byte_size());
  }
  return tensors;
}

namespace {
template <typename T>
T load(const std::byte* base, int64_t index) {
  T value;
  std::memcpy(&value, base + index * sizeof(T), sizeof(T));
  return value;
}

template <typename T>
void store(std::byte* base, int64_t index, T value) {
  std::memcpy(base + index * sizeof(T), &value, sizeof(T));
}

#if defined(__FLT16_MAX__)
uint16_t double_to_half_bits(double value) {
  return std::bit_cast<uint16_t>(static_cast<_Float16>(value));
}
float half_to_float(uint16_t bits) { return static_cast<float>(std::bit_cast<_Float16>(bits)); }
#else
// Compilers without _Float16 on this target (clang before 15 on x86-64, as the fuzz build's
// clang-14): the same conversions in software, one round-to-nearest-even from the double.
uint16_t double_to_half_bits(double value) {
  const uint16_t sign = std::signbit(value) ? 0x8000 : 0;
  if (std::isnan(value)) return sign | 0x7e00;
  const double magnitude = std::fabs(value);
  if (magnitude >= 65520.0) return sign | 0x7c00;  // rounds past 65504: infinity
  if (magnitude < 0x1p-14)                          // subnormal: units of 2^-24
    return sign | static_cast<uint16_t>(std::nearbyint(magnitude * 0x1p24));
  int exponent = 0;
  const double fraction = std::frexp(magnitude, &exponent);  // magnitude = fraction * 2^exponent
  int mantissa = static_cast<int>(std::nearbyint(fraction * 2048.0));  // [1024, 2048]
  --exponent;
  if (mantissa == 2048) {
    mantissa = 1024;
    ++exponent;
  }
  return sign | static_cast<uint16_t>(((exponent + 15) << 10) | (mantissa - 1024));
}
float half_to_float(uint16_t bits) {
  const float sign = (bits & 0x8000) ? -1.0f : 1.0f;
  const int exponent = (bits >> 10) & 0x1f;
  const int mantissa = bits & 0x3ff;
  if (exponent == 0x1f)
    return mantissa ? std::numeric_limits<float>::quiet_NaN()
                    : sign * std::numeric_limits<float>::infinity();
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -24);
  return sign * std::ldexp(static_cast<float>(mantissa + 1024), exponent - 25);
}
#endif

// Float-to-integer conversion that truncates toward zero and saturates instead of invoking
// undefined behaviour on out-of-range values (NaN becomes 0).
template <typename Int>
Int to_integer(double value) {
  if (std::isnan(value)) return 0;
  constexpr double lo = static_cast<double>(std::numeric_limits<Int>::min());
  constexpr double hi = static_cast<double>(std::numeric_limits<Int>::max());
  if (value <= lo) return std::numeric_limits<Int>::min();
  if (value >= hi) return std::numeric_limits<Int>::max();
  return static_cast<Int>(value);
}
// double → float rounding toward zero with the lost bits folded into the last bit ("round to
// odd"). Rounding that float to bfloat16 (8 bits of mantissa, far fewer than float's 24) then
// gives the same result as rounding the double directly: no double-rounding error.
float round_to_odd_float(double value) {
  float rounded = static_cast<float>(value);
  if (std::isnan(value) || std::isinf(rounded) || static_cast<double>(rounded) == value)
    return rounded;
  if (std::fabs(static_cast<double>(rounded)) > std::fabs(value))
    rounded = std::nextafter(rounded, 0.0f);
  return std::bit_cast<float>(std::bit_cast<uint32_t>(rounded) | 1u);
}
}  // namespace

double Tensor::get(int64_t index) const {
  const std::byte* base = bytes_.data();
  switch (type_.dtype) {
    case DType::F32: return load<float>(base, index);
    case DType::F16: return half_bits_to_float(load<uint16_t>(base, index));
    case DType::BF16: return bfloat16_bits_to_float(load<uint16_t>(base, index));
    case DType::I32: return load<int32_t>(base, index);
    case DType::I64: return static_cast<double>(load<int64_t>(base, index));
    case DType::Bool: return load<uint8_t>(base, index) != 0 ? 1.0 : 0.0;
    case DType::F64: return load<double>(base, index);
    case DType::I8: return load<int8_t>(base, index);
    case DType::U8: return load<uint8_t>(base, index);
    case DType::I16: return load<int16_t>(base, index);
    case DType::U16: return load<uint16_t>(base, index);
    case DType::U32: return load<uint32_t>(base, index);
    case DType::U64: return static_cast<double>(load<uint64_t>(base, index));
  }
  return 0;
}

void Tensor::set(int64_t index, double value) {
  std::byte* base = bytes_.data();
  switch (type_.dtype) {
    case DType::F32: store<float>(base, index, static_cast<float>(value)); return;
    case DType::F16:  // one rounding, double straight to binary16
      store<uint16_t>(base, index, double_to_half_bits(value));
      return;
    case DType::BF16:
      store<uint16_t>(base, index, float_to_bfloat16_bits(round_to_odd_float(value)));
      return;
    case DType::I32: store<int32_t>(base, index, to_integer<int32_t>(value)); return;
    case DType::I64: store<int64_t>(base, index, to_integer<int64_t>(value)); return;
    case DType::Bool: store<uint8_t>(base, index, value != 0 ? 1 : 0); return;
    case DType::F64: store<double>(base, index, value); return;
    case DType::I8: store<int8_t>(base, index, to_integer<int8_t>(value)); return;
    case DType::U8: store<uint8_t>(base, index, to_integer<uint8_t>(value)); return;
    case DType::I16: store<int16_t>(base, index, to_integer<int16_t>(value)); return;
    case DType::U16: store<uint16_t>(base, index, to_integer<uint16_t>(value)); return;
    case DType::U32: store<uint32_t>(base, index, to_integer<uint32_t>(value)); return;
    case DType::U64: store<uint64_t>(base, index, to_integer<uint64_t>(value)); return;
  }
}

// Weights pass through these (fold-batch-norm, constant folding): f32 gets a loop of its own.
std::vector<double> Tensor::to_doubles() const {
  const int64_t count = num_elements();
  std::vector<double> values(static_cast<size_t>(count));
  if (type_.dtype == DType::F32) {
    const std::byte* base = bytes_.data();
    for (int64_t i = 0; i < count; ++i) values[i] = load<float>(base, i);
    return values;
  }
  for (int64_t i = 0; i < count; ++i) values[i] = get(i);
  return values;
}

Tensor Tensor::from_doubles(TensorType type, const std::vector<double>& values) {
  Tensor tensor(std::move(type));
  KILN_CHECK(static_cast<int64_t>(values.size()) == tensor.num_elements())
      << values.size() << " values for " << tensor.type().to_string();
  const int64_t count = tensor.num_elements();
  if (tensor.dtype() == DType::F32) {
    std::byte* base = tensor.bytes_.data();
    for (int64_t i = 0; i < count; ++i) store<float>(base, i, static_cast<float>(values[i]));
    return tensor;
  }
  for (int64_t i = 0; i < count; ++i) tensor.set(i, values[i]);
  return tensor;
}

uint16_t float_to_half_bits(float value) { return double_to_half_bits(value); }

float half_bits_to_float(uint16_t bits) { return half_to_float(bits); }

uint16_t float_to_bfloat16_bits(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if (std::isnan(value)) return static_cast<uint16_t>((bits >> 16) | 0x0040);  // quiet NaN
  bits += 0x7FFF + ((bits >> 16) & 1);  // round to nearest even on the dropped 16 bits
  return static_cast<uint16_t>(bits >> 16);
}

float bfloat16_bits_to_float(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

}  // namespace kiln::ir
