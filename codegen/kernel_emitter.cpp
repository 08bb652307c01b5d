#include "codegen/kernel_emitter.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "ir/diagnostic.h"

namespace kiln::codegen {

namespace {

// The registration hooks of codegen/kernels/, each a family of ops with its own table.
enum class EmitterFamily {
  Elementwise,
  Index,
  Shape,
  Reduce,
  Nn,
  NormTrain,
  Optimizer,
  Grad,
  Fused
};

// Which family emits `op`'s kernel. A switch without a default: a new row in ir/ops.def does
// not compile (-Wswitch; an error with -Werror, as CI builds) until it is placed here, and the
// family's table must then hold its emitter (tests/unit/codegen_nn_test.cpp checks every op).
// Scalar-expression rows (activations, their backward ops, unary math) need nothing: their
// cases and emitters both come from the row itself.
EmitterFamily emitter_family(ir::OpId op) {
  using ir::OpId;
  switch (op) {
#define KILN_OP(...)
#define KILN_ACTIVATION(Id, ...) case OpId::Id: case OpId::Id##Grad:
#define KILN_MATH(Id, ...) case OpId::Id:
#include "ir/ops.def"
    case OpId::Add: case OpId::Sub: case OpId::Mul: case OpId::Div: case OpId::Maximum:
    case OpId::Minimum: case OpId::Neg: case OpId::Abs: case OpId::Clip: case OpId::Cast:
    case OpId::Dropout:
    case OpId::Power:
    case OpId::Mod:
    case OpId::BitShift:
    case OpId::Equal:
    case OpId::Less:
    case OpId::LessEqual:
    case OpId::Greater:
    case OpId::GreaterEqual:
    case OpId::LogicalAnd:
    case OpId::LogicalOr:
    case OpId::LogicalXor:
    case OpId::LogicalNot:
    case OpId::Where:
    case OpId::IsNan:
    case OpId::IsInf:
      return EmitterFamily::Elementwise;
    // index.cpp
    case OpId::Argmax:
    case OpId::Argmin:
    case OpId::Gather:
    case OpId::GatherElements:
    case OpId::GatherElementsGrad:
    case OpId::ExpandTwoFour:
      return EmitterFamily::Index;
    case OpId::Reshape: case OpId::Flatten: case OpId::Transpose: case OpId::Concat:
    case OpId::Slice:
      return EmitterFamily::Shape;
    // Row and whole-tensor reductions: reduce.cpp, normalize.cpp, loss.cpp.
    case OpId::ReduceSum: case OpId::ReduceMean: case OpId::ReduceMax: case OpId::PairwiseSum:
    case OpId::Softmax:
    case OpId::LogSoftmax: case OpId::LayerNorm: case OpId::RmsNorm: case OpId::SoftmaxCrossEntropy:
    case OpId::MseLoss:
      return EmitterFamily::Reduce;
    // GEMMs (nn.cpp), pooling and per-channel ops (pool_norm.cpp), their backward (nn_grad.cpp).
    case OpId::Conv2d: case OpId::Matmul: case OpId::Dense: case OpId::BiasAdd:
    case OpId::MaxPool2d: case OpId::AvgPool2d: case OpId::GlobalAvgPool: case OpId::BatchNorm:
    case OpId::Conv2dGradInput: case OpId::Conv2dGradWeight: case OpId::MaxPool2dGrad:
    case OpId::AvgPool2dGrad: case OpId::Attention: case OpId::AttentionGrad:
      return EmitterFamily::Nn;
    case OpId::BatchNormTrain: case OpId::BatchNormTrainGrad: case OpId::LayerNormGrad:
    case OpId::RmsNormGrad: case OpId::BatchNormChunkStats: case OpId::BatchNormChunkSums:
      return EmitterFamily::NormTrain;
    case OpId::SgdUpdate: case OpId::AdamUpdate: case OpId::AdamwUpdate:
    case OpId::LrSchedule: case OpId::GradNormClip: case OpId::LossScaleUpdate:
    case OpId::PruneMask: case OpId::AllReduce: case OpId::Broadcast:
      return EmitterFamily::Optimizer;
    // grad_elementwise.cpp, grad_softmax.cpp, grad_shape.cpp.
    case OpId::BroadcastTo: case OpId::Scale: case OpId::AbsGrad: case OpId::ClipGrad:
    case OpId::SliceGrad: case OpId::MaximumShare: case OpId::MinimumShare:
    case OpId::SoftmaxGrad: case OpId::LogSoftmaxGrad: case OpId::SoftmaxCrossEntropyGrad:
      return EmitterFamily::Grad;
    case OpId::Kernel:
      return EmitterFamily::Fused;
  }
  KILN_CHECK(false) << "op id " << static_cast<int>(op) << " is outside the op table";
  return EmitterFamily::Fused;
}

EmitterTable make_table(void (*add_emitters)(EmitterTable&)) {
  EmitterTable table;
  add_emitters(table);
  return table;
}

const EmitterTable& family_table(EmitterFamily family) {
  static const EmitterTable elementwise = make_table(add_elementwise_emitters);
  static const EmitterTable index = make_table(add_index_emitters);
  static const EmitterTable shape = make_table(add_shape_emitters);
  static const EmitterTable reduce = make_table(add_reduce_emitters);
  static const EmitterTable nn = make_table(add_nn_emitters);
  static const EmitterTable norm_train = make_table(add_norm_train_emitters);
  static const EmitterTable optimizer = make_table(add_optimizer_emitters);
  static const EmitterTable grad = make_table(add_grad_emitters);
  static const EmitterTable fused = make_table(add_fused_emitters);
  switch (family) {
    case EmitterFamily::Elementwise: return elementwise;
    case EmitterFamily::Index: return index;
    case EmitterFamily::Shape: return shape;
    case EmitterFamily::Reduce: return reduce;
    case EmitterFamily::Nn: return nn;
    case EmitterFamily::NormTrain: return norm_train;
    case EmitterFamily::Optimizer: return optimizer;
    case EmitterFamily::Grad: return grad;
    case EmitterFamily::Fused: return fused;
  }
  KILN_CHECK(false) << "emitter family " << static_cast<int>(family) << " has no table";
  return fused;
}

}  // namespace

const KernelEmitter* find_kernel_emitter(ir::OpId op) {
  for (const auto& [id, emitter] : family_table(emitter_family(op)))
    if (id == op) return &emitter;
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
    case ir::DType::F64: return "double";
    case ir::DType::I8: return "signed char";
    case ir::DType::U8: return "unsigned char";
    case ir::DType::I16: return "short";
    case ir::DType::U16: return "unsigned short";
    case ir::DType::U32: return "unsigned int";
    case ir::DType::U64: return "unsigned long long";
  }
  return "?";
}

std::string_view compute_type(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::F32: case ir::DType::F16: case ir::DType::BF16: return "float";
    case ir::DType::I64: return "long long";
    // Up to 16 bits, int holds every value (and C++ promotes to it anyway).
    case ir::DType::I32: case ir::DType::Bool: case ir::DType::I8: case ir::DType::U8:
    case ir::DType::I16: case ir::DType::U16:
      return "int";
    case ir::DType::U32: return "long long";
    case ir::DType::U64: return "unsigned long long";
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
  if (dtype == ir::DType::I64 || dtype == ir::DType::U32)
    return fmt::format("{}LL", static_cast<long long>(value));
  if (dtype == ir::DType::U64) return fmt::format("{}ULL", static_cast<unsigned long long>(value));
  return fmt::format("{}", static_cast<long long>(value));
}

uint32_t grid_stride_blocks(int64_t count, uint32_t block) {
  // 132 SMs (H100) x 8 resident blocks of 256 threads is enough to keep any current GPU busy;
  // past that the grid-stride loop covers the rest.
  constexpr int64_t kMaxBlocks = 132 * 8;
  const int64_t needed = (count + block - 1) / block;
  return static_cast<uint32_t>(std::clamp<int64_t>(needed, 1, kMaxBlocks));
}

std::string dynamic_count(const std::optional<DynamicRows>& rows, std::string_view name, std::string_view type,
                          int64_t count) {
  const std::string_view suffix = type == "long long" ? "LL" : "";
  if (!rows) return fmt::format("constexpr {} {} = {}{};", type, name, count, suffix);
  const int64_t bound = rows->bound;
  KILN_CHECK(bound > 0 && count % bound == 0) << name << ": " << count << " rows do not split into " << bound << " blocks";
  return fmt::format("const {} {} = static_cast<{}>(kiln_dim_size) * {};  // the real rows: {} per unit of "
                     "the dynamic dim (<= {})",
                     type, name, type, count / bound, count / bound, bound);
}

std::string_view count_qualifier(const KernelRequest& request) {
  return request.dynamic_rows ? "const" : "constexpr";
}

}  // namespace kiln::codegen
