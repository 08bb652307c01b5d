// The cuDNN descriptors of one convolution, shared by the forward runner (library_runner.cpp)
// and the backward one (conv_grad_runner.cpp): x [n, c, h, w], y (or dy) [n, k, p, q], the
// filter [k, c / groups, r, s] and the convolution (cross-correlation, PyTorch's conv2d), all
// NCHW f32, with FMA math unless tf32 allows tensor-op math.
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

// A 4-d NCHW f32 tensor descriptor. Throws kiln::Error naming `context` when cuDNN refuses.
Unique<cudnnTensorDescriptor_t> cudnn_tensor(const CudnnApi& api, const std::string& context,
                                             int64_t n, int64_t c, int64_t h, int64_t w);

// The descriptors of `c`. Checks that cuDNN's forward output is c's [n, k, p, q]: a difference
// is a kiln bug in how they are filled (KILN_CHECK).
ConvDescriptors cudnn_conv_descriptors(const CudnnApi& api, const std::string& context,
                                       const codegen::ConvCall& c, bool tf32);

}  // namespace kiln::runtime::cuda
