// The ONNX op table: one rule per (op type, opset range), like ONNX Runtime's kernel
// registrations, so the importer picks a converter by the node's op type and the model's opset
// without if-chains. A rule's range covers the opsets whose semantics its converter implements;
// an op whose definition changed has one rule per version range.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/import/onnx/onnx_context.h"

namespace kiln::compiler::onnx_import {

// The newest default-domain opset kiln accepts. Debian's onnx 1.12 knows opsets up to 17;
// rules also accept 18-22 where the op did not change (docs/import.md).
inline constexpr int kMaxOpset = 22;
inline constexpr int kMinOpset = 1;

// Converts one node; returns one operand per ONNX output the node names.
using ConvertFn = std::vector<Operand> (*)(NodeContext& node);

struct OpRule {
  std::string_view op_type;  // ONNX op type in the default domain ("Conv")
  int first_opset;           // the rule handles models importing opset first..last
  int last_opset;
  ConvertFn convert;
};

std::span<const OpRule> math_rules();   // onnx_ops_math.cpp: elementwise, activations, reductions
std::span<const OpRule> nn_rules();     // onnx_ops_nn.cpp: conv, pooling, norms, gemm, softmax
std::span<const OpRule> shape_rules();  // onnx_ops_shape.cpp: shape arithmetic, layout, constants
std::span<const OpRule> loss_rules();   // onnx_ops_loss.cpp: NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss
std::span<const OpRule> index_rules();  // onnx_ops_index.cpp: OneHot, EyeLike, Compress
std::span<const OpRule> quantize_rules();     // onnx_ops_quantize.cpp: (De)QuantizeLinear, *Integer, QLinear*
std::span<const OpRule> einsum_rules();       // onnx_ops_einsum.cpp: Einsum as reductions and batched matmuls
std::span<const OpRule> sort_rules();         // onnx_ops_sort.cpp: TopK by comparisons
std::span<const OpRule> text_rules();         // onnx_ops_text.cpp: TfIdfVectorizer
std::span<const OpRule> sample_rules();       // onnx_ops_sample.cpp: GridSample
std::span<const OpRule> spectral_rules();     // onnx_ops_spectral.cpp: DFT, STFT, MelWeightMatrix
std::span<const OpRule> control_rules();      // onnx_ops_control.cpp: If, Scan (subgraphs inlined)
std::span<const OpRule> linalg_rules();       // onnx_ops_linalg.cpp: Det
std::span<const OpRule> recurrent_rules();    // onnx_ops_recurrent.cpp: RNN, GRU, LSTM (unrolled)
std::span<const OpRule> axis_matrix_rules();  // onnx_ops_axis_matrix.cpp: Resize, Upsample, CumSum, LRN

// The rule for `op_type` at `opset`, or nullptr; `why` then says whether the op is unknown or
// which opsets it is supported at.
const OpRule* find_rule(std::string_view op_type, int opset, std::string& why);

// data gathered along `axis` at `indices` (run-time or constant; Gather's semantics, the
// indices' shape replacing the axis), through gather_elements (onnx_ops_shape.cpp).
Operand gather_along(NodeContext& node, const Operand& data, const Operand& indices, int axis);

// Conv's computation (onnx_ops_nn.cpp): x convolved with weight (and bias, if given), with the
// node's Conv attributes (auto_pad, dilations, group, kernel_shape, pads, strides).
Operand convolve(NodeContext& node, const Operand& x, const Operand& weight, const Operand* bias);
// MatMul with NumPy semantics: 1-D operands gain a unit dim that is removed again.
Operand matmul(NodeContext& node, const Operand& a, const Operand& b);

// Exact integer values of a constant (INT64_MAX stays exact).
std::vector<int64_t> tensor_ints(const ir::Tensor& tensor);
// An axis in [-rank, rank) normalized, or a ConvertError naming the attribute.
int normalize_axis_or_fail(NodeContext& node, int64_t axis, int rank, const char* what);

}  // namespace kiln::compiler::onnx_import
