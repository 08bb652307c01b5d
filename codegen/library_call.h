// A kernel that a vendor library computes on the CUDA backend in place of the generated code
// (--library, codegen/library_dispatch.h chooses). The generated kernel is always emitted too:
// the host backend runs it, and the CUDA backend falls back to it when the library is not
// installed or declines the problem. So a LibraryCall must compute exactly what the kernel
// computes, up to the rounding of a different summation order.
//
// Everything the runtime needs to build the library's descriptors is here as plain numbers;
// the runtime never looks at the graph.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include "codegen/precision.h"
#include "ir/dtype.h"

namespace kiln::codegen {

inline constexpr std::string_view kCudnnLibrary = "cudnn";
inline constexpr std::string_view kCublasLtLibrary = "cublasLt";

// Whether a library call may hold tensors of `dtype` (LibraryCall::dtype): f32, bf16, f16.
inline bool library_takes(ir::DType dtype) {
  return dtype == ir::DType::F32 || dtype == ir::DType::BF16 || dtype == ir::DType::F16;
}

// Which libraries may be used (--library; codegen/library_dispatch.h parses the flag).
struct LibrarySelection {
  bool cublaslt = false;
  bool cudnn = false;
  friend bool operator==(const LibrarySelection&, const LibrarySelection&) = default;
};

// The activation a library applies last. cuBLASLt's GELU is the tanh approximation (PyTorch
// maps only gelu(approximate="tanh") onto it for that reason).
enum class LibraryActivation { None, Relu, GeluTanh };
// "none", "relu", "gelu_tanh"
std::string_view library_activation_name(LibraryActivation activation);

// What a ConvCall computes: y = conv2d(x, w); or conv2d's input gradient dx from dy and w
// (cudnnConvolutionBackwardData); or its weight gradient dw from dy and x
// (cudnnConvolutionBackwardFilter).
enum class ConvDirection { Forward, BackwardData, BackwardFilter };
// "forward", "backward_data", "backward_filter"
std::string_view conv_direction_name(ConvDirection direction);

// y = conv2d(x, w) over NCHW (or NHWC) tensors, cross-correlation as in PyTorch (or one of its
// gradients: `direction`); every tensor in the call's dtype. The dims are the forward
// convolution's.
struct ConvCall {
  int64_t n = 1, c = 1, h = 1, w = 1;  // x: [n, c, h, w]
  int64_t k = 1, r = 1, s = 1;         // weight: [k, c / groups, r, s]
  int64_t groups = 1;
  int64_t pad_h = 0, pad_w = 0;        // symmetric: cuDNN has no asymmetric padding
  int64_t stride_h = 1, stride_w = 1;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t p = 1, q = 1;                // y: [n, k, p, q]
  ConvDirection direction = ConvDirection::Forward;
  // The tensors are stored NHWC and the filter KRSC (conv2d's layout=nhwc, ir/image_layout.h):
  // CUDNN_TENSOR_NHWC descriptors, which tensor-core algorithms read without transforming.
  // The dims above stay the logical ones.
  bool nhwc = false;
  friend bool operator==(const ConvCall&, const ConvCall&) = default;
};

// y[i] = op(a[i]) @ op(b[i]) for i < batch, every matrix row-major and contiguous, in the call's
// dtype.
// a is [m, k] ([k, m] stored when transpose_a), b is [k, n] ([n, k] stored when transpose_b),
// y is [m, n]. A batch stride of 0 gives every batch the same matrix (broadcast).
struct MatmulCall {
  int64_t batch = 1, m = 1, n = 1, k = 1;
  bool transpose_a = false, transpose_b = false;
  int64_t batch_stride_a = 0, batch_stride_b = 0;  // elements
  friend bool operator==(const MatmulCall&, const MatmulCall&) = default;
};

// out = activation(anchor + residual + bias): the anchor is the ConvCall or MatmulCall, the
// residual a tensor of out's shape, the bias one value per output channel (conv: k) or
// column (matmul: n). Argument positions index Kernel::args (operands first, then results).
struct LibraryCall {
  std::string library;     // kCudnnLibrary or kCublasLtLibrary
  std::string routine;     // "cudnnConvolutionBiasActivationForward", "cublasLtMatmul"
  std::string descriptor;  // one line for tables: "cudnn conv f32 1x1x28x28 * 32x1x3x3 ..."
  // Scratch the call may use, reserved after the activations in the device arena (one region
  // for all calls, sized for the largest: they run one at a time on one stream).
  int64_t workspace_bytes = 0;

  std::variant<ConvCall, MatmulCall> op;
  bool bias = false;
  bool residual = false;
  LibraryActivation activation = LibraryActivation::None;
  // The math the library may use (--precision): f32 holds cuBLASLt and cuDNN to f32 FMA math;
  // tf32 allows CUBLAS_COMPUTE_32F_FAST_TF32 and cuDNN's tensor-op math; bf16 cuBLASLt's
  // _FAST_16BF and (cuDNN converts f32 tensors to f16 only) cuDNN's TF32 tensor-op math; f16
  // _FAST_16F and CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION.
  Precision math = Precision::F32;
  // What every tensor the call reads and writes is stored as: f32, bf16 or f16 (autocast's
  // activations and folded weights). 16-bit tensors are cuDNN's PSEUDO_BFLOAT16 / PSEUDO_HALF
  // configurations (f32 compute) and cuBLASLt's CUDA_R_16BF / CUDA_R_16F layouts with
  // CUBLAS_COMPUTE_32F: the tensor cores read them as stored, products exact, sums in f32.
  ir::DType dtype = ir::DType::F32;

  int x_arg = 0;        // conv: x; matmul: a (-1: a backward-data conv reads no x)
  int weight_arg = 1;   // conv: the filter; matmul: b (-1: a backward-filter conv reads none)
  int bias_arg = -1;    // when bias
  int residual_arg = -1;  // when residual
  int dy_arg = -1;      // a backward conv's dy
  int out_arg = -1;     // y, or the gradient a backward conv computes

  const ConvCall* conv() const { return std::get_if<ConvCall>(&op); }
  const MatmulCall* matmul() const { return std::get_if<MatmulCall>(&op); }
  // Whether `selection` includes this call's library.
  bool selected_by(const LibrarySelection& selection) const {
    return library == kCudnnLibrary ? selection.cudnn : selection.cublaslt;
  }
};

}  // namespace kiln::codegen
