// Which kernels a vendor library can compute (--library=auto|none|cublas,cudnn).
//
// A pure function of one IR node: a plain conv2d / dense / matmul, or a fused kernel of kind
// "epilogue" (ir/kernel_region.h) whose body is such an anchor followed by bias, residual add
// and one activation. The answer is a LibraryCall only when the library computes exactly
// that, on tensors of one dtype (f32, or autocast's bf16 or f16):
//   cuDNN      cudnnConvolutionBiasActivationForward: y = act(conv(x) + z + bias), act relu
//              or identity; a conv with nothing after it is cudnnConvolutionForward.
//   cuBLASLt   cublasLtMatmul: D = epilogue(A B + C), epilogues DEFAULT, BIAS, RELU,
//              RELU_BIAS, GELU, GELU_BIAS (GELU is the tanh approximation), C the residual,
//              batches by strided batch.
// Every refusal has a reason (XLA's FusionDecision habit), for --debug-only output.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "codegen/library_call.h"
#include "codegen/precision.h"
#include "ir/graph.h"

namespace kiln::codegen {

// The value of --library: "auto" (both, each used where it loads at run time), "none", or a
// comma-separated list of "cublas" (cuBLASLt; "cublaslt" also reads) and "cudnn". Throws
// kiln::Error naming the bad item otherwise: "--library: unknown library 'cudart'; ...".
LibrarySelection parse_library_flag(std::string_view text);
// The flag's text for a selection: "none", "cublas", "cudnn" or "cublas,cudnn".
std::string library_flag_text(const LibrarySelection& selection);

// Whether the convolutions should be stored NHWC (the layout-nhwc pass): cuDNN computes them
// (`selection`) with tensor-core math (`precision` past f32), whose algorithms read NHWC as it
// is and NCHW through transforms.
inline bool cudnn_reads_nhwc(const LibrarySelection& selection, Precision precision) {
  return selection.cudnn && precision != Precision::F32;
}

// The library call that computes `node` (as emit_program makes its kernel: Kernel::args are
// the node's operands, then its results), or nullopt; `why_not`, when given, then says why
// ("leaky_relu after dense: cuBLASLt has no such epilogue"). With Precision::Tf32 (bf16, f16)
// an f32 call may round its operands for tensor cores (LibraryCall::math).
std::optional<LibraryCall> select_library_call(const ir::Node& node,
                                               const LibrarySelection& selection,
                                               Precision precision = Precision::F32,
                                               std::string* why_not = nullptr);

}  // namespace kiln::codegen
