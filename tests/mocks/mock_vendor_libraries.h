// Mock cuBLASLt and cuDNN for the unit tests: two shared libraries exporting the functions kiln
// resolves (cublaslt_api.h, cudnn_api.h), used with the mock libcuda (mock_libcuda.h), whose
// device pointers are host addresses. So the library path of the CUDA backend runs end to end
// without a GPU.
//
// Each mock computes what its library documents, on the host and at once (streams are
// synchronous): cublasLtMatmul D = epilogue(alpha op(A) op(B) + beta C) on column-major
// matrices, with the bias per row of D; cudnnConvolutionBiasActivationForward
// y = act(alpha1 conv(x) + alpha2 z + bias) on NCHW tensors. They check what the libraries
// check and kiln could get wrong: descriptor consistency, leading dimensions, the identity
// activation only with IMPLICIT_PRECOMP_GEMM, a workspace as large as the algorithm needs, a
// handle bound to a stream. Their algorithm lists are fixed, so tests know which one fits.
#pragma once

#include <cstddef>

extern "C" {

struct KilnMockLibraryStats {
  int handles = 0;      // live handles
  int descriptors = 0;  // live descriptors and preferences
  int calls = 0;        // cublasLtMatmul / cudnnConvolution*Forward calls that succeeded
  const void* last_stream = nullptr;
  const void* last_workspace = nullptr;
  size_t last_workspace_bytes = 0;
  int last_choice = -1;  // cuBLASLt: the epilogue; cuDNN: the algorithm
};

// mock cuBLASLt (libkiln_mock_cublaslt.so)
void kiln_mock_cublaslt_reset();
void kiln_mock_cublaslt_stats(KilnMockLibraryStats* stats);
// The next call of `symbol` returns `status` without doing anything.
void kiln_mock_cublaslt_fail_next(const char* symbol, int status);

// mock cuDNN (libkiln_mock_cudnn.so)
void kiln_mock_cudnn_reset();
void kiln_mock_cudnn_stats(KilnMockLibraryStats* stats);
void kiln_mock_cudnn_fail_next(const char* symbol, int status);

}  // extern "C"
