// cuBLASLt and cuDNN calls for codegen::LibraryCall (see the header).
//
// cuBLASLt is column-major. A row-major matrix [r, c] is, byte for byte, the column-major
// matrix [c, r] (its transpose), so the row-major Y = op(A) op(B) is computed as the
// column-major Y^T = op(B)^T op(A)^T: cuBLASLt's "A" is our b and its "B" our a, each with
// its own transpose flag, and every leading dimension is a row-major row length. The bias,
// one value per column of Y, is then one per row of Y^T, which is how cuBLASLt's BIAS
// epilogue broadcasts it (cuBLAS docs, "cublasLtEpilogue_t"). The residual is C with beta = 1;
// cuBLASLt supports C == D (in place) when their layouts match, as they do here.
//
// cuDNN computes y = act(alpha1 * conv(x) + alpha2 * z + bias) (cudnnConvolutionBiasActivation-
// Forward); z is the residual, or y itself with alpha2 = 0. With the identity activation only
// CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM is allowed (cuDNN API reference).
#include "runtime/cuda/library_runner.h"

#include <fmt/format.h>

#include <functional>
#include <type_traits>

#include "ir/diagnostic.h"
#include "runtime/cuda/cudnn_conv.h"
#include "runtime/cuda/library_util.h"

namespace kiln::runtime::cuda {
namespace {

using codegen::LibraryActivation;

// How many candidates to ask cuBLASLt's heuristics for: the first that fits is taken, more
// only help when the best ones need more workspace than the arena reserved.
constexpr int kHeuristicCandidates = 8;

// ---- cuBLASLt ---------------------------------------------------------------------------------

// cuBLASLt's name for f32, bf16 or f16 (codegen::LibraryCall::dtype).
cudaDataType_t cuda_data_type(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::F32: return CUDA_R_32F;
    case ir::DType::BF16: return CUDA_R_16BF;
    case ir::DType::F16: return CUDA_R_16F;
    default: break;
  }
  KILN_CHECK(false) << "no cuBLASLt library call on " << ir::dtype_name(dtype) << " tensors";
  return CUDA_R_32F;
}

// CUBLAS_COMPUTE_32F keeps full f32 as the generated kernels do; with --precision=tf32, bf16 or
// f16 the _FAST_ types let cuBLASLt round f32 A and B to that format for the tensor cores, as they
// then do, and sum in f32. bf16 and f16 matrices are multiplied as stored (products exact) and
// summed in f32: CUBLAS_COMPUTE_32F, the scale type f32, and the bias in D's type (cuBLASLt's
// default for CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE).
cublasComputeType_t matmul_compute(const codegen::LibraryCall& call) {
  if (call.dtype != ir::DType::F32) return CUBLAS_COMPUTE_32F;
  switch (call.math) {
    case codegen::Precision::F32: return CUBLAS_COMPUTE_32F;
    case codegen::Precision::Tf32: return CUBLAS_COMPUTE_32F_FAST_TF32;
    case codegen::Precision::Bf16: return CUBLAS_COMPUTE_32F_FAST_16BF;
    case codegen::Precision::F16: return CUBLAS_COMPUTE_32F_FAST_16F;
  }
  return CUBLAS_COMPUTE_32F;
}

cublasLtEpilogue_t matmul_epilogue(const codegen::LibraryCall& call) {
  switch (call.activation) {
    case LibraryActivation::None:
      return call.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    case LibraryActivation::Relu:
      return call.bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    case LibraryActivation::GeluTanh:
      return call.bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
  }
  KILN_CHECK(false) << "unknown activation";
  return CUBLASLT_EPILOGUE_DEFAULT;
}

class MatmulRunner final : public LibraryRunner {
 public:
  MatmulRunner(LibraryContext& context, const codegen::LibraryCall& call,
               const LibraryOperands& operands, std::string_view kernel_name)
      : api_(context.cublaslt()),
        handle_(context.cublaslt_handle()),
        stream_(context.stream()),
        context_(kernel_context(kernel_name)),
        data_type_(cuda_data_type(call.dtype)) {
    const codegen::MatmulCall& m = *call.matmul();
    const auto n = static_cast<uint64_t>(m.n), k = static_cast<uint64_t>(m.k),
               rows = static_cast<uint64_t>(m.m);
    // cuBLASLt's A is our b: stored [k, n] row-major = column-major n x k (ld n), or [n, k]
    // when transposed = column-major k x n (ld k), which op T turns back into n x k.
    lt_a_ = layout(m.transpose_b ? k : n, m.transpose_b ? n : k, m.batch, m.batch_stride_b);
    lt_b_ = layout(m.transpose_a ? rows : k, m.transpose_a ? k : rows, m.batch,
                   m.batch_stride_a);
    lt_d_ = layout(n, rows, m.batch, m.m * m.n);

    cublasLtMatmulDesc_t desc = nullptr;
    check(api_.cublasLtMatmulDescCreate(&desc, matmul_compute(call), CUDA_R_32F),
          "cublasLtMatmulDescCreate");
    desc_ = own(desc, api_.cublasLtMatmulDescDestroy);
    const int32_t transa = m.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int32_t transb = m.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    set(CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof(transa));
    set(CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof(transb));
    const uint32_t epilogue = matmul_epilogue(call);
    set(CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue));
    if (call.bias) {
      // The bias batch stride stays 0: every batch adds the same bias.
      const void* bias = device_pointer(operands.args.at(call.bias_arg));
      set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
    }

    a_ = device_pointer(operands.args.at(call.x_arg));
    b_ = device_pointer(operands.args.at(call.weight_arg));
    d_ = device_pointer(operands.args.at(call.out_arg));
    c_ = call.residual ? device_pointer(operands.args.at(call.residual_arg)) : d_;
    beta_ = call.residual ? 1.0f : 0.0f;
    workspace_ = device_pointer(operands.workspace);
    choose_algorithm(operands.workspace_bytes, call.descriptor);
  }

  void enqueue() override {
    // A is b and B is a (see the file comment); C and D share one layout.
    check(api_.cublasLtMatmul(handle_, desc_.get(), &alpha_, b_, lt_a_.get(), a_, lt_b_.get(),
                              &beta_, c_, lt_d_.get(), d_, lt_d_.get(), &algo_, workspace_,
                              workspace_bytes_, stream_),
          "cublasLtMatmul");
  }

  std::string choice() const override {
    return fmt::format("cuBLASLt heuristic algorithm, {} B workspace, {:.2f} waves",
                       workspace_bytes_, waves_);
  }

 private:
  void check(cublasStatus_t status, std::string_view call) const {
    api_.check(status, call, context_);
  }
  void set(cublasLtMatmulDescAttributes_t attribute, const void* value, size_t size) {
    check(api_.cublasLtMatmulDescSetAttribute(desc_.get(), attribute, value, size),
          "cublasLtMatmulDescSetAttribute");
  }

  // A column-major matrix of `rows` x `cols` with leading dimension `rows`, `batch` times
  // at `stride` elements apart.
  Unique<cublasLtMatrixLayout_t> layout(uint64_t rows, uint64_t cols, int64_t batch,
                                        int64_t stride) {
    cublasLtMatrixLayout_t handle = nullptr;
    check(api_.cublasLtMatrixLayoutCreate(&handle, data_type_, rows, cols,
                                          static_cast<int64_t>(rows)),
          "cublasLtMatrixLayoutCreate");
    Unique<cublasLtMatrixLayout_t> owned = own(handle, api_.cublasLtMatrixLayoutDestroy);
    if (batch > 1) {
      const auto count = static_cast<int32_t>(batch);
      check(api_.cublasLtMatrixLayoutSetAttribute(handle, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                  &count, sizeof(count)),
            "cublasLtMatrixLayoutSetAttribute");
      check(api_.cublasLtMatrixLayoutSetAttribute(
                handle, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)),
            "cublasLtMatrixLayoutSetAttribute");
    }
    return owned;
  }

  void choose_algorithm(size_t workspace_limit, const std::string& descriptor) {
    cublasLtMatmulPreference_t preference = nullptr;
    check(api_.cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate");
    Unique<cublasLtMatmulPreference_t> owned =
        own(preference, api_.cublasLtMatmulPreferenceDestroy);
    const uint64_t limit = workspace_limit;
    check(api_.cublasLtMatmulPreferenceSetAttribute(
              preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &limit, sizeof(limit)),
          "cublasLtMatmulPreferenceSetAttribute");
    cublasLtMatmulHeuristicResult_t results[kHeuristicCandidates] = {};
    int returned = 0;
    check(api_.cublasLtMatmulAlgoGetHeuristic(handle_, desc_.get(), lt_a_.get(), lt_b_.get(),
                                              lt_d_.get(), lt_d_.get(), preference,
                                              kHeuristicCandidates, results, &returned),
          "cublasLtMatmulAlgoGetHeuristic");
    for (int i = 0; i < returned; ++i) {
      const cublasLtMatmulHeuristicResult_t& result = results[i];
      if (result.state != CUBLAS_STATUS_SUCCESS || result.workspaceSize > workspace_limit)
        continue;
      algo_ = result.algo;
      workspace_bytes_ = result.workspaceSize;
      waves_ = result.wavesCount;
      return;
    }
    throw Error("", fmt::format("cuBLASLt: no algorithm for {} ({}) within {} B of workspace",
                                descriptor, context_, workspace_limit));
  }

  const CublasLtApi& api_;
  cublasLtHandle_t handle_;
  CUstream stream_;
  std::string context_;
  cudaDataType_t data_type_;  // of A, B, C and D
  Unique<cublasLtMatmulDesc_t> desc_;
  Unique<cublasLtMatrixLayout_t> lt_a_, lt_b_, lt_d_;
  cublasLtMatmulAlgo_t algo_ = {};
  const void* a_ = nullptr;
  const void* b_ = nullptr;
  const void* c_ = nullptr;
  void* d_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  float waves_ = 0;
  float alpha_ = 1.0f;
  float beta_ = 0.0f;
};

// ---- cuDNN ------------------------------------------------------------------------------------

std::string_view algorithm_name(cudnnConvolutionFwdAlgo_t algo) {
  switch (algo) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: return "IMPLICIT_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM: return "IMPLICIT_PRECOMP_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM: return "GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT: return "DIRECT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT: return "FFT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING: return "FFT_TILING";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD: return "WINOGRAD";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED: return "WINOGRAD_NONFUSED";
    default: return "unknown";
  }
}

class ConvRunner final : public LibraryRunner {
 public:
  ConvRunner(LibraryContext& context, const codegen::LibraryCall& call,
             const LibraryOperands& operands, std::string_view kernel_name)
      : api_(context.cudnn()),
        handle_(context.cudnn_handle()),
        context_(kernel_context(kernel_name)),
        fused_(call.bias) {
    const codegen::ConvCall& c = *call.conv();
    // FMA math keeps f32 exact; --precision=tf32, bf16 or f16 allows tensor-op math (cudnn_conv.h).
    math_ = call.math;
    dtype_ = call.dtype;
    ConvDescriptors descriptors = cudnn_conv_descriptors(api_, context_, c, math_, dtype_);
    x_desc_ = std::move(descriptors.x);
    y_desc_ = std::move(descriptors.y);
    w_desc_ = std::move(descriptors.w);
    conv_desc_ = std::move(descriptors.conv);

    x_ = device_pointer(operands.args.at(call.x_arg));
    w_ = device_pointer(operands.args.at(call.weight_arg));
    y_ = device_pointer(operands.args.at(call.out_arg));
    z_ = y_;  // read with alpha2 = 0 when there is no residual: any valid tensor will do
    if (fused_) {
      bias_ = device_pointer(operands.args.at(call.bias_arg));
      // The bias in the tensors' dtype, as cuDNN's 16-bit configurations store it.
      bias_desc_ = cudnn_tensor(api_, context_, 1, c.k, 1, 1, dtype_, c.nhwc);
      cudnnActivationDescriptor_t activation = nullptr;
      check(api_.cudnnCreateActivationDescriptor(&activation), "cudnnCreateActivationDescriptor");
      activation_desc_ = own(activation, api_.cudnnDestroyActivationDescriptor);
      identity_ = call.activation == LibraryActivation::None;
      check(api_.cudnnSetActivationDescriptor(
                activation, identity_ ? CUDNN_ACTIVATION_IDENTITY : CUDNN_ACTIVATION_RELU,
                CUDNN_PROPAGATE_NAN, 0.0),
            "cudnnSetActivationDescriptor");
    }
    if (call.residual) {
      z_ = device_pointer(operands.args.at(call.residual_arg));
      alpha2_ = 1.0f;
      // The routine's documentation does not promise that z may be y, and an algorithm that
      // accumulates partial sums in y would read a half-updated z.
      if (z_ == y_) {
        throw Error("", fmt::format("cuDNN: {} writes its output over its residual (in place), "
                                    "which cudnnConvolutionBiasActivationForward does not "
                                    "promise to support",
                                    context_));
      }
    }
    workspace_ = device_pointer(operands.workspace);
    choose_algorithm(operands.workspace_bytes, call.descriptor);
  }

  void enqueue() override {
    const float alpha1 = 1.0f;
    if (!fused_) {
      const float beta = 0.0f;
      check(api_.cudnnConvolutionForward(handle_, &alpha1, x_desc_.get(), x_, w_desc_.get(), w_,
                                         conv_desc_.get(), algo_, workspace_, workspace_bytes_,
                                         &beta, y_desc_.get(), y_),
            "cudnnConvolutionForward");
      return;
    }
    check(api_.cudnnConvolutionBiasActivationForward(
              handle_, &alpha1, x_desc_.get(), x_, w_desc_.get(), w_, conv_desc_.get(), algo_,
              workspace_, workspace_bytes_, &alpha2_, y_desc_.get(), z_, bias_desc_.get(), bias_,
              activation_desc_.get(), y_desc_.get(), y_),
          "cudnnConvolutionBiasActivationForward");
  }

  std::string choice() const override {
    return fmt::format("algo {}, {} B workspace", algorithm_name(algo_), workspace_bytes_);
  }

 private:
  void check(cudnnStatus_t status, std::string_view call) const {
    api_.check(status, call, context_);
  }

  // The first algorithm cuDNN's heuristics rank that works, fits the workspace and keeps f32
  // exact (unless --precision allows tensor-op math); with the identity activation only
  // IMPLICIT_PRECOMP_GEMM is allowed.
  void choose_algorithm(size_t workspace_limit, const std::string& descriptor) {
    cudnnConvolutionFwdAlgoPerf_t results[CUDNN_CONVOLUTION_FWD_ALGO_COUNT] = {};
    int returned = 0;
    check(api_.cudnnGetConvolutionForwardAlgorithm_v7(
              handle_, x_desc_.get(), w_desc_.get(), conv_desc_.get(), y_desc_.get(),
              CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, results),
          "cudnnGetConvolutionForwardAlgorithm_v7");
    const bool precomp_only = fused_ && identity_;
    for (int i = 0; i < returned; ++i) {
      const cudnnConvolutionFwdAlgoPerf_t& result = results[i];
      if (result.status != CUDNN_STATUS_SUCCESS || result.memory > workspace_limit) continue;
      if (!cudnn_math_allowed(result.mathType, math_, dtype_)) continue;
      if (precomp_only && result.algo != CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM)
        continue;
      algo_ = result.algo;
      workspace_bytes_ = result.memory;
      return;
    }
    if (precomp_only) {
      // The heuristics may not rank it at all; ask for it by name.
      size_t bytes = 0;
      const cudnnStatus_t status = api_.cudnnGetConvolutionForwardWorkspaceSize(
          handle_, x_desc_.get(), w_desc_.get(), conv_desc_.get(), y_desc_.get(),
          CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, &bytes);
      if (status == CUDNN_STATUS_SUCCESS && bytes <= workspace_limit) {
        algo_ = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
        workspace_bytes_ = bytes;
        return;
      }
    }
    throw Error("", fmt::format("cuDNN: no algorithm for {} ({}) within {} B of workspace{}",
                                descriptor, context_, workspace_limit,
                                precomp_only ? " (identity activation: IMPLICIT_PRECOMP_GEMM only)"
                                             : ""));
  }

  const CudnnApi& api_;
  cudnnHandle_t handle_;
  std::string context_;
  bool fused_;            // cudnnConvolutionBiasActivationForward, else cudnnConvolutionForward
  bool identity_ = false;
  codegen::Precision math_ = codegen::Precision::F32;  // --precision: which algorithms may run
  ir::DType dtype_ = ir::DType::F32;                   // of every tensor
  Unique<cudnnTensorDescriptor_t> x_desc_, y_desc_, bias_desc_;
  Unique<cudnnFilterDescriptor_t> w_desc_;
  Unique<cudnnConvolutionDescriptor_t> conv_desc_;
  Unique<cudnnActivationDescriptor_t> activation_desc_;
  cudnnConvolutionFwdAlgo_t algo_ = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
  const void* x_ = nullptr;
  const void* w_ = nullptr;
  const void* bias_ = nullptr;
  const void* z_ = nullptr;
  void* y_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  float alpha2_ = 0.0f;
};

}  // namespace

// ---- LibraryContext ---------------------------------------------------------------------------

LibraryContext::LibraryContext(CUstream stream, LibraryPaths paths)
    : stream_(stream), paths_(std::move(paths)) {}

LibraryContext::~LibraryContext() {
  // The libraries stay loaded for the process (cublaslt() and cudnn() never unload them).
  if (cudnn_handle_ != nullptr) (void)cudnn().cudnnDestroy(cudnn_handle_);
  if (cublaslt_handle_ != nullptr) (void)cublaslt().cublasLtDestroy(cublaslt_handle_);
}

const CublasLtApi& LibraryContext::cublaslt() { return cuda::cublaslt(paths_.cublaslt); }
const CudnnApi& LibraryContext::cudnn() { return cuda::cudnn(paths_.cudnn); }

cublasLtHandle_t LibraryContext::cublaslt_handle() {
  if (cublaslt_handle_ != nullptr) return cublaslt_handle_;
  if (cublaslt_error_) throw *cublaslt_error_;
  try {
    const CublasLtApi& api = cublaslt();
    cublasLtHandle_t handle = nullptr;
    api.check(api.cublasLtCreate(&handle), "cublasLtCreate");
    cublaslt_handle_ = handle;
  } catch (const Error& error) {
    cublaslt_error_ = error;
    throw;
  }
  return cublaslt_handle_;
}

cudnnHandle_t LibraryContext::cudnn_handle() {
  if (cudnn_handle_ != nullptr) return cudnn_handle_;
  if (cudnn_error_) throw *cudnn_error_;
  try {
    const CudnnApi& api = cudnn();
    cudnnHandle_t handle = nullptr;
    api.check(api.cudnnCreate(&handle), "cudnnCreate");
    // Every call then goes to the executable's stream, so it is ordered with the kernels
    // and captured with them into the CUDA graph.
    const cudnnStatus_t status = api.cudnnSetStream(handle, stream_);
    if (status != CUDNN_STATUS_SUCCESS) {
      (void)api.cudnnDestroy(handle);
      api.check(status, "cudnnSetStream");
    }
    cudnn_handle_ = handle;
  } catch (const Error& error) {
    cudnn_error_ = error;
    throw;
  }
  return cudnn_handle_;
}

std::unique_ptr<LibraryRunner> prepare_library_call(LibraryContext& context,
                                                    const codegen::LibraryCall& call,
                                                    const LibraryOperands& operands,
                                                    std::string_view kernel_name) {
  if (const codegen::ConvCall* conv = call.conv()) {
    if (conv->direction != codegen::ConvDirection::Forward)
      return prepare_conv_grad_call(context, call, operands, kernel_name);
    return std::make_unique<ConvRunner>(context, call, operands, kernel_name);
  }
  return std::make_unique<MatmulRunner>(context, call, operands, kernel_name);
}

}  // namespace kiln::runtime::cuda
