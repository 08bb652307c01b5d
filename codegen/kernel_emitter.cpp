#include "codegen/kernel_emitter.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

namespace kiln::codegen {

const KernelEmitter* find_kernel_emitter(ir::OpId op) {
  static const EmitterTable table = [] {
    EmitterTable t;
    add_elementwise_emitters(t);
    add_shape_emitters(t);
    add_reduce_emitters(t);
    add_nn_emitters(t);
    add_norm_train_emitters(t);
    add_optimizer_emitters(t);
    add_grad_emitters(t);
    add_fused_emitters(t);
    return t;
  }();
  for (const auto& [name, emitter] : table)
    if (name == op) return &emitter;
  return nullptr;
}

std::string_view c_type(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::F32: return "float";
    case ir::DType::F16: return "kiln_half";
    case ir::DType::BF16: return "kiln_bf16";
    case ir::DType::I32: return "int";
    case ir::DType::I64: return "long long";
    case ir::DType::Bool: return "unsigned char";
    case ir::DType::F64: return "double";  // never emitted: emit_program refuses f64
  }
  return "?";
}

std::string_view compute_type(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::F32: case ir::DType::F16: case ir::DType::BF16: return "float";
    case ir::DType::I64: return "long long";
    case ir::DType::I32: case ir::DType::Bool: return "int";
    case ir::DType::F64: return "double";
  }
  return "?";
}

std::string load(ir::DType dtype, const std::string& expr) {
  switch (dtype) {
    case ir::DType::F16: return "kiln_half_to_float(" + expr + ")";
    case ir::DType::BF16: return "kiln_bf16_to_float(" + expr + ")";
    case ir::DType::Bool: return "static_cast<int>(" + expr + ")";
    default: return expr;
  }
}

std::string store(ir::DType dtype, const std::string& expr) {
  switch (dtype) {
    case ir::DType::F16: return "kiln_float_to_half(" + expr + ")";
    case ir::DType::BF16: return "kiln_float_to_bf16(" + expr + ")";
    case ir::DType::Bool: return "static_cast<unsigned char>((" + expr + ") != 0)";
    default: return expr;
  }
}

std::string literal(ir::DType dtype, double value) {
  if (ir::is_floating(dtype)) {
    if (std::isinf(value)) return value > 0 ? "INFINITY" : "-INFINITY";
    if (std::isnan(value)) return "__int_as_float(0x7fc00000)";
    std::string text = fmt::format("{}", static_cast<float>(value));
    if (text.find_first_of(".e") == std::string::npos) text += ".0";
    return text + "f";
  }
  if (dtype == ir::DType::I64) return fmt::format("{}LL", static_cast<long long>(value));
  return fmt::format("{}", static_cast<long long>(value));
}

uint32_t grid_stride_blocks(int64_t count, uint32_t block) {
  // 132 SMs (H100) x 8 resident blocks of 256 threads is enough to keep any current GPU busy;
  // past that the grid-stride loop covers the rest.
  constexpr int64_t kMaxBlocks = 132 * 8;
  const int64_t needed = (count + block - 1) / block;
  return static_cast<uint32_t>(std::clamp<int64_t>(needed, 1, kMaxBlocks));
}

}  // namespace kiln::codegen
