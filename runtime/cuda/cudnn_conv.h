// The cuDNN descriptors of one convolution, shared by the forward runner (library_runner.cpp)
// and the backward one (conv_grad_runner.cpp): x [n, c, h, w], y (or dy) [n, k, p, q], the
// filter [k, c / groups, r, s] and the convolution (cross-correlation, PyTorch's conv2d), all
// NCHW in the call's dtype. f32 tensors get FMA math unless --precision allows tensor-op math;
// bf16 and f16 ones (cuDNN's PSEUDO_BFLOAT16 and PSEUDO_HALF configurations: f32 compute) get
// tensor-op math, which multiplies them exactly and sums in f32, as FMA math would.
#pragma once

#include <string>

#include "codegen/library_call.h"
#include "runtime/cuda/cudnn_api.h"
#include "runtime/cuda/library_util.h"

namespace kiln::runtime::cuda {

struct ConvDescriptors {
  Unique<cudnnTensorDescriptor_t> x, y;
  Unique<cudnnFilterDescriptor_t> w;
  Unique<cudnnConvolutionDescriptor_t> conv;
};

// cuDNN's name for f32, bf16 or f16 (codegen::LibraryCall::dtype).
cudnnDataType_t cudnn_data_type(ir::DType dtype);

// A 4-d tensor descriptor of logical dims [n, c, h, w], stored NCHW, or NHWC when `nhwc`.
// Throws kiln::Error naming `context` when cuDNN refuses.
Unique<cudnnTensorDescriptor_t> cudnn_tensor(const CudnnApi& api, const std::string& context,
                                             int64_t n, int64_t c, int64_t h, int64_t w,
                                             ir::DType dtype, bool nhwc = false);

// The cuDNN math type for a call's --precision (codegen::LibraryCall::math): FMA for f32,
// tensor-op math for tf32 and bf16 (cuDNN down-converts f32 tensors to f16 only; TF32 keeps
// bf16's range with more bits), tensor-op math with conversion to f16 for f16; tensor-op math
// for 16-bit tensors (`dtype`), whatever the precision.
cudnnMathType_t cudnn_math_type(codegen::Precision math, ir::DType dtype);

// Whether an algorithm cuDNN reports with `algorithm_math` may run a call whose math is `math`
// on `dtype` tensors: on f32, tensor-op algorithms only past f32 math, converting ones only for
// f16; on 16-bit tensors, any but a conversion to f16 of bf16.
bool cudnn_math_allowed(cudnnMathType_t algorithm_math, codegen::Precision math, ir::DType dtype);

// The descriptors of `c`. Checks that cuDNN's forward output is c's [n, k, p, q]: a difference
// is a kiln bug in how they are filled (KILN_CHECK).
ConvDescriptors cudnn_conv_descriptors(const CudnnApi& api, const std::string& context,
                                       const codegen::ConvCall& c, codegen::Precision math,
                                       ir::DType dtype);

}  // namespace kiln::runtime::cuda
