// ONNX TensorProto → ir::Tensor: element types, the typed and raw data fields, and tensors kept
// in external data files (models over 2 GB; https://onnx.ai/onnx/repo-docs/ExternalData.html).
#pragma once

#include <optional>
#include <string>

#include "ir/tensor.h"

namespace onnx {
class TensorProto;
}

namespace kiln::compiler::onnx_import {

// The kiln dtype of an ONNX TensorProto.DataType, or nullopt when kiln has none.
std::optional<ir::DType> dtype_from_onnx(int elem_type);
// "FLOAT", "INT8", ... for messages.
std::string onnx_dtype_name(int elem_type);
// The ONNX TensorProto.DataType of a kiln dtype.
int onnx_dtype_of(ir::DType dtype);

// Whether the tensor has a zero dimension (no elements): kiln has no such tensors, so import
// keeps it only as an input that means "not given" when empty (Resize's roi and scales).
bool has_zero_dim(const onnx::TensorProto& proto);

// Reads a tensor's data; external data files resolve against `base_dir`. Throws ConvertError.
ir::Tensor tensor_from_proto(const onnx::TensorProto& proto, const std::string& base_dir);

}  // namespace kiln::compiler::onnx_import
