#include "compiler/import/onnx/onnx_tensor.h"

#include <onnx/onnx_pb.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "compiler/import/onnx/onnx_context.h"

namespace kiln::compiler::onnx_import {

namespace {
using onnx::TensorProto;

[[noreturn]] void fail(const std::string& message) { throw ConvertError{message}; }

// Bytes of external data: `location` (relative to the model), `offset`, `length`.
std::string read_external(const TensorProto& proto, const std::string& base_dir) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& entry : proto.external_data()) {
    if (entry.key() == "location") location = entry.value();
    else if (entry.key() == "offset") offset = std::stoll(entry.value());
    else if (entry.key() == "length") length = std::stoll(entry.value());
  }
  if (location.empty()) fail("tensor '" + proto.name() + "': external data without a location");
  const std::filesystem::path path = std::filesystem::path(base_dir) / location;
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("tensor '" + proto.name() + "': cannot open its external data file '" + path.string() + "'");
  in.seekg(0, std::ios::end);
  const int64_t size = in.tellg();
  if (length < 0) length = size - offset;
  if (offset < 0 || offset + length > size)
    fail("tensor '" + proto.name() + "': external data [" + std::to_string(offset) + ", +" +
         std::to_string(length) + ") runs past the end of '" + path.string() + "' (" +
         std::to_string(size) + " bytes)");
  std::string bytes(static_cast<size_t>(length), '\0');
  in.seekg(offset);
  in.read(bytes.data(), length);
  return bytes;
}

// Little-endian raw bytes of `dtype` (kiln's host byte order) → tensor.
ir::Tensor from_raw(const ir::TensorType& type, int elem_type, const std::string& raw) {
  const int64_t n = ir::num_elements(type.shape);
  const size_t want = static_cast<size_t>(n) * ir::dtype_size(type.dtype);
  if (raw.size() != want)
    fail("raw data has " + std::to_string(raw.size()) + " bytes, " + type.to_string() + " needs " +
         std::to_string(want));
  std::vector<std::byte> bytes(want);
  std::memcpy(bytes.data(), raw.data(), want);
  return ir::Tensor(type, std::move(bytes));
}
}  // namespace

std::optional<ir::DType> dtype_from_onnx(int elem_type) {
  switch (elem_type) {
    case TensorProto::FLOAT: return ir::DType::F32;
    case TensorProto::FLOAT16: return ir::DType::F16;
    case TensorProto::BFLOAT16: return ir::DType::BF16;
    case TensorProto::DOUBLE: return ir::DType::F64;
    case TensorProto::INT32: return ir::DType::I32;
    case TensorProto::INT64: return ir::DType::I64;
    case TensorProto::BOOL: return ir::DType::Bool;
    case TensorProto::INT8: return ir::DType::I8;
    case TensorProto::UINT8: return ir::DType::U8;
    case TensorProto::INT16: return ir::DType::I16;
    case TensorProto::UINT16: return ir::DType::U16;
    case TensorProto::UINT32: return ir::DType::U32;
    case TensorProto::UINT64: return ir::DType::U64;
    default: return std::nullopt;
  }
}

std::string onnx_dtype_name(int elem_type) {
  if (TensorProto::DataType_IsValid(elem_type))
    return TensorProto::DataType_Name(static_cast<TensorProto::DataType>(elem_type));
  return "data type " + std::to_string(elem_type);
}

int onnx_dtype_of(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::F32: return TensorProto::FLOAT;
    case ir::DType::F16: return TensorProto::FLOAT16;
    case ir::DType::BF16: return TensorProto::BFLOAT16;
    case ir::DType::F64: return TensorProto::DOUBLE;
    case ir::DType::I32: return TensorProto::INT32;
    case ir::DType::I64: return TensorProto::INT64;
    case ir::DType::Bool: return TensorProto::BOOL;
    case ir::DType::I8: return TensorProto::INT8;
    case ir::DType::U8: return TensorProto::UINT8;
    case ir::DType::I16: return TensorProto::INT16;
    case ir::DType::U16: return TensorProto::UINT16;
    case ir::DType::U32: return TensorProto::UINT32;
    case ir::DType::U64: return TensorProto::UINT64;
  }
  return TensorProto::UNDEFINED;
}

bool has_zero_dim(const TensorProto& proto) {
  for (int64_t dim : proto.dims())
    if (dim == 0) return true;
  return false;
}

ir::Tensor tensor_from_proto(const TensorProto& proto, const std::string& base_dir) {
  const auto dtype = dtype_from_onnx(proto.data_type());
  if (!dtype)
    fail("tensor '" + proto.name() + "' has element type " + onnx_dtype_name(proto.data_type()) +
         ", which kiln does not support yet");
  ir::TensorType type{*dtype, {}};
  for (int64_t dim : proto.dims()) {
    if (dim < 0) fail("tensor '" + proto.name() + "' has a negative dimension");
    type.shape.push_back(dim);
  }
  // kiln has no empty tensors: a zero dimension cannot be represented.
  if (!ir::checked_num_elements(type.shape))
    fail("tensor '" + proto.name() + "' has shape " + ir::shape_to_string(type.shape) +
         " (kiln tensors have at least one element)");
  const int64_t n = ir::num_elements(type.shape);
  if (proto.data_location() == TensorProto::EXTERNAL)
    return from_raw(type, proto.data_type(), read_external(proto, base_dir));
  if (proto.has_raw_data()) return from_raw(type, proto.data_type(), proto.raw_data());

  // The values are counted before the tensor is allocated: dims that declare a gigabyte with
  // no values behind them fail at once, not after the gigabyte is zeroed (a fuzz finding).
  const int64_t stored = [&]() -> int64_t {
    switch (proto.data_type()) {
      case TensorProto::FLOAT: return proto.float_data_size();
      case TensorProto::DOUBLE: return proto.double_data_size();
      case TensorProto::INT64: return proto.int64_data_size();
      case TensorProto::UINT64: case TensorProto::UINT32: return proto.uint64_data_size();
      default: return proto.int32_data_size();  // INT32, BOOL, the small integers, FLOAT16, BFLOAT16
    }
  }();
  if (stored != n)
    fail("tensor '" + proto.name() + "' holds " + std::to_string(stored) + " values, " +
         type.to_string() + " needs " + std::to_string(n));
  ir::Tensor tensor(type);
  switch (proto.data_type()) {
    case TensorProto::FLOAT:
      for (int64_t i = 0; i < n; ++i) tensor.set(i, proto.float_data(i));
      break;
    case TensorProto::DOUBLE:
      for (int64_t i = 0; i < n; ++i) tensor.set(i, proto.double_data(i));
      break;
    case TensorProto::INT64:
      std::memcpy(tensor.data(), proto.int64_data().data(), n * sizeof(int64_t));
      break;
    case TensorProto::FLOAT16:
    case TensorProto::BFLOAT16:  // int32_data holds the 16-bit patterns
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t bits = static_cast<uint16_t>(proto.int32_data(i));
        std::memcpy(tensor.data() + 2 * i, &bits, 2);
      }
      break;
    case TensorProto::UINT64:  // exact: through the bits, not a double
      std::memcpy(tensor.data(), proto.uint64_data().data(), n * sizeof(uint64_t));
      break;
    case TensorProto::UINT32:
      for (int64_t i = 0; i < n; ++i) {
        const uint64_t value = proto.uint64_data(i);
        if (value > 0xffffffffu)
          fail("tensor '" + proto.name() + "' holds " + std::to_string(value) + " at " + std::to_string(i) +
               ", beyond UINT32");
        tensor.set(i, static_cast<double>(value));
      }
      break;
    default:  // INT32, BOOL and the small integers, in int32_data
      for (int64_t i = 0; i < n; ++i) {
        const int32_t value = proto.int32_data(i);
        if (*dtype != ir::DType::Bool && !ir::fits_dtype(value, *dtype))
          fail("tensor '" + proto.name() + "' holds " + std::to_string(value) + " at " + std::to_string(i) +
               ", beyond " + onnx_dtype_name(proto.data_type()));
        tensor.set(i, value);
      }
  }
  return tensor;
}

}  // namespace kiln::compiler::onnx_import
