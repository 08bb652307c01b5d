#include "runtime/cuda/cudnn_conv.h"

#include "ir/diagnostic.h"

namespace kiln::runtime::cuda {

cudnnDataType_t cudnn_data_type(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::F32: return CUDNN_DATA_FLOAT;
    case ir::DType::BF16: return CUDNN_DATA_BFLOAT16;
    case ir::DType::F16: return CUDNN_DATA_HALF;
    default: break;
  }
  KILN_CHECK(false) << "no cuDNN library call on " << ir::dtype_name(dtype) << " tensors";
  return CUDNN_DATA_FLOAT;
}

Unique<cudnnTensorDescriptor_t> cudnn_tensor(const CudnnApi& api, const std::string& context,
                                             int64_t n, int64_t c, int64_t h, int64_t w,
                                             ir::DType dtype, bool nhwc) {
  cudnnTensorDescriptor_t handle = nullptr;
  api.check(api.cudnnCreateTensorDescriptor(&handle), "cudnnCreateTensorDescriptor", context);
  Unique<cudnnTensorDescriptor_t> owned = own(handle, api.cudnnDestroyTensorDescriptor);
  // The dims are [n, c, h, w] in either format; the format says how they are stored.
  api.check(api.cudnnSetTensor4dDescriptor(handle, nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                           cudnn_data_type(dtype), to_int(n),
                                           to_int(c), to_int(h), to_int(w)),
            "cudnnSetTensor4dDescriptor", context);
  return owned;
}

cudnnMathType_t cudnn_math_type(codegen::Precision math, ir::DType dtype) {
  if (dtype != ir::DType::F32) return CUDNN_TENSOR_OP_MATH;
  switch (math) {
    case codegen::Precision::F32: return CUDNN_FMA_MATH;
    case codegen::Precision::Tf32:
    case codegen::Precision::Bf16: return CUDNN_TENSOR_OP_MATH;
    case codegen::Precision::F16: return CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
  }
  return CUDNN_FMA_MATH;
}

bool cudnn_math_allowed(cudnnMathType_t algorithm_math, codegen::Precision math, ir::DType dtype) {
  if (dtype != ir::DType::F32)
    return algorithm_math != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION || dtype == ir::DType::F16;
  if (algorithm_math == CUDNN_TENSOR_OP_MATH) return math != codegen::Precision::F32;
  if (algorithm_math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return math == codegen::Precision::F16;
  return true;
}

ConvDescriptors cudnn_conv_descriptors(const CudnnApi& api, const std::string& context,
                                       const codegen::ConvCall& c, codegen::Precision math,
                                       ir::DType dtype) {
  ConvDescriptors d;
  d.x = cudnn_tensor(api, context, c.n, c.c, c.h, c.w, dtype, c.nhwc);
  d.y = cudnn_tensor(api, context, c.n, c.k, c.p, c.q, dtype, c.nhwc);
  cudnnFilterDescriptor_t filter = nullptr;
  api.check(api.cudnnCreateFilterDescriptor(&filter), "cudnnCreateFilterDescriptor", context);
  d.w = own(filter, api.cudnnDestroyFilterDescriptor);
  // An NHWC convolution's filter is KRSC (cuDNN's NHWC filter format): [k, r, s, c / groups].
  api.check(api.cudnnSetFilter4dDescriptor(filter, cudnn_data_type(dtype),
                                           c.nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, to_int(c.k),
                                           to_int(c.c / c.groups), to_int(c.r), to_int(c.s)),
            "cudnnSetFilter4dDescriptor", context);
  cudnnConvolutionDescriptor_t conv = nullptr;
  api.check(api.cudnnCreateConvolutionDescriptor(&conv), "cudnnCreateConvolutionDescriptor", context);
  d.conv = own(conv, api.cudnnDestroyConvolutionDescriptor);
  // Cross-correlation is what conv2d means (PyTorch's convention); f32 compute for every dtype
  // (16-bit tensors: the PSEUDO configurations, which sum in f32 as the generated kernels do).
  api.check(api.cudnnSetConvolution2dDescriptor(conv, to_int(c.pad_h), to_int(c.pad_w),
                                                to_int(c.stride_h), to_int(c.stride_w),
                                                to_int(c.dilation_h), to_int(c.dilation_w),
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
            "cudnnSetConvolution2dDescriptor", context);
  api.check(api.cudnnSetConvolutionGroupCount(conv, to_int(c.groups)), "cudnnSetConvolutionGroupCount",
            context);
  // FMA math keeps f32 exact where the default would allow TF32 tensor cores on Ampere and
  // later; --precision=tf32, bf16 or f16 lets cuDNN use them (cudnn_math_type).
  api.check(api.cudnnSetConvolutionMathType(conv, cudnn_math_type(math, dtype)),
            "cudnnSetConvolutionMathType", context);
  int n = 0, k = 0, p = 0, q = 0;
  api.check(api.cudnnGetConvolution2dForwardOutputDim(conv, d.x.get(), filter, &n, &k, &p, &q),
            "cudnnGetConvolution2dForwardOutputDim", context);
  KILN_CHECK(n == c.n && k == c.k && p == c.p && q == c.q)
      << context << ": cuDNN computes output " << n << "x" << k << "x" << p << "x" << q
      << ", codegen " << c.n << "x" << c.k << "x" << c.p << "x" << c.q;
  return d;
}

}  // namespace kiln::runtime::cuda
