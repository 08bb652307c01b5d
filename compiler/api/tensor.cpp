// kiln::Tensor and .npy files for the C++ API: thin conversions to kiln's own tensors.
#include <fmt/format.h>

#include <cstring>

#include "compiler/api/api_internal.h"
#include "compiler/npy.h"
#include "ir/diagnostic.h"

namespace kiln {

namespace {
// In the order of kiln::DType (which numbers them as ir::DType does).
constexpr ir::DType kIrTypes[] = {ir::DType::F32, ir::DType::F16, ir::DType::BF16, ir::DType::I32,
                                  ir::DType::I64, ir::DType::Bool, ir::DType::F64, ir::DType::I8,
                                  ir::DType::U8,  ir::DType::I16,  ir::DType::U16, ir::DType::U32,
                                  ir::DType::U64};
ir::DType to_ir(DType dtype) { return kIrTypes[static_cast<int>(dtype)]; }
}  // namespace

std::string_view dtype_name(DType dtype) { return ir::dtype_name(to_ir(dtype)); }

Tensor::Tensor(DType dtype, std::vector<int64_t> shape) : dtype_(dtype), shape_(std::move(shape)) {
  const std::optional<int64_t> count = ir::checked_num_elements(shape_);
  if (!count) throw Error("kiln::Tensor", "invalid shape " + ir::shape_to_string(shape_));
  bytes_.resize(static_cast<size_t>(*count) * ir::dtype_size(to_ir(dtype)));
}

namespace {
// A tensor of `dtype` holding `values` (one per element; kiln::Error naming `who` otherwise).
template <typename T>
Tensor filled(const char* who, DType dtype, std::vector<int64_t> shape, const std::vector<T>& values) {
  Tensor tensor(dtype, std::move(shape));
  if (static_cast<int64_t>(values.size()) != tensor.num_elements())
    throw Error(who, fmt::format("{} values for a {}", values.size(), tensor.type_string()));
  std::memcpy(tensor.data(), values.data(), tensor.byte_size());
  return tensor;
}
}  // namespace

Tensor Tensor::from_floats(std::vector<int64_t> shape, const std::vector<float>& values) {
  return filled("kiln::Tensor::from_floats", DType::F32, std::move(shape), values);
}

Tensor Tensor::from_ints(std::vector<int64_t> shape, const std::vector<int32_t>& values) {
  return filled("kiln::Tensor::from_ints", DType::I32, std::move(shape), values);
}

int64_t Tensor::num_elements() const { return ir::num_elements(shape_); }

std::string Tensor::type_string() const { return ir::TensorType{to_ir(dtype_), shape_}.to_string(); }

std::vector<float> Tensor::to_floats() const {
  if (dtype_ != DType::F32) throw Error("kiln::Tensor::to_floats", "the tensor is " + type_string());
  std::vector<float> values(static_cast<size_t>(num_elements()));
  std::memcpy(values.data(), data(), byte_size());
  return values;
}

Tensor read_npy(const std::string& path) { return api::from_ir(compiler::read_npy(path)); }

void write_npy(const std::string& path, const Tensor& tensor) { compiler::write_npy(path, api::to_ir(tensor)); }

namespace api {

DType from_ir(ir::DType dtype) {
  for (int i = 0; i < static_cast<int>(std::size(kIrTypes)); ++i)
    if (kIrTypes[i] == dtype) return static_cast<DType>(i);
  KILN_CHECK(false) << "unknown dtype";
  return DType::F32;
}

ir::DType to_ir(DType dtype) { return kiln::to_ir(dtype); }

ir::Tensor to_ir(const Tensor& tensor) {
  std::vector<std::byte> bytes(tensor.data(), tensor.data() + tensor.byte_size());
  return ir::Tensor(ir::TensorType{kiln::to_ir(tensor.dtype()), tensor.shape()}, std::move(bytes));
}

Tensor from_ir(const ir::Tensor& tensor) {
  Tensor out(from_ir(tensor.dtype()), tensor.shape());
  std::memcpy(out.data(), tensor.data(), tensor.byte_size());
  return out;
}

}  // namespace api
}  // namespace kiln
