// cuDNN's backward convolutions for codegen::LibraryCall (library_runner.h): conv2d_grad_input
// is cudnnConvolutionBackwardData (dx = the transposed convolution of dy with w) and
// conv2d_grad_weight cudnnConvolutionBackwardFilter (dw = dy correlated with x over the
// batch), each described by the forward convolution's x, w and y descriptors and written with
// beta = 0, as the generated kernel overwrites its result (cuDNN API reference).
//
// Algorithms come from cuDNN's heuristics (the _v7 queries), in their order, skipping those
// that fail, need more workspace than the arena reserved, use math --precision does not allow
// (cudnn_math_allowed), or are non-deterministic (BWD_DATA_ALGO_0 and BWD_FILTER_ALGO_0 and _3 sum
// with atomics): a training step gives the same result every run, on the library path too.
#include <fmt/format.h>

#include "ir/diagnostic.h"
#include "runtime/cuda/cudnn_conv.h"
#include "runtime/cuda/library_runner.h"
#include "runtime/cuda/library_util.h"

namespace kiln::runtime::cuda {
namespace {

using codegen::ConvDirection;

class ConvGradRunner final : public LibraryRunner {
 public:
  ConvGradRunner(LibraryContext& context, const codegen::LibraryCall& call,
                 const LibraryOperands& operands, std::string_view kernel_name)
      : api_(context.cudnn()),
        handle_(context.cudnn_handle()),
        context_(kernel_context(kernel_name)),
        data_(call.conv()->direction == ConvDirection::BackwardData),
        math_(call.math),
        dtype_(call.dtype) {
    // dy has the forward output's shape: the forward convolution's descriptors describe it.
    ConvDescriptors descriptors = cudnn_conv_descriptors(api_, context_, *call.conv(), math_, dtype_);
    x_desc_ = std::move(descriptors.x);
    dy_desc_ = std::move(descriptors.y);
    w_desc_ = std::move(descriptors.w);
    conv_desc_ = std::move(descriptors.conv);

    dy_ = device_pointer(operands.args.at(call.dy_arg));
    operand_ = device_pointer(operands.args.at(data_ ? call.weight_arg : call.x_arg));
    out_ = device_pointer(operands.args.at(call.out_arg));
    workspace_ = device_pointer(operands.workspace);
    if (data_)
      choose_data_algorithm(operands.workspace_bytes, call.descriptor);
    else
      choose_filter_algorithm(operands.workspace_bytes, call.descriptor);
  }

  void enqueue() override {
    const float alpha = 1.0f, beta = 0.0f;
    if (data_) {
      check(api_.cudnnConvolutionBackwardData(handle_, &alpha, w_desc_.get(), operand_, dy_desc_.get(),
                                              dy_, conv_desc_.get(), data_algo_, workspace_,
                                              workspace_bytes_, &beta, x_desc_.get(), out_),
            "cudnnConvolutionBackwardData");
      return;
    }
    check(api_.cudnnConvolutionBackwardFilter(handle_, &alpha, x_desc_.get(), operand_, dy_desc_.get(),
                                              dy_, conv_desc_.get(), filter_algo_, workspace_,
                                              workspace_bytes_, &beta, w_desc_.get(), out_),
          "cudnnConvolutionBackwardFilter");
  }

  std::string choice() const override {
    return fmt::format("algo {} {}, {} B workspace", data_ ? "BWD_DATA" : "BWD_FILTER",
                       data_ ? static_cast<int>(data_algo_) : static_cast<int>(filter_algo_),
                       workspace_bytes_);
  }

 private:
  void check(cudnnStatus_t status, std::string_view call) const { api_.check(status, call, context_); }

  // The first heuristic result that may be used: it works, fits, keeps f32 exact unless
  // --precision allows tensor-op math, and is deterministic. Throws when none does.
  template <typename Perf>
  const Perf& first_usable(const Perf* results, int returned, size_t workspace_limit,
                           const std::string& descriptor) const {
    for (int i = 0; i < returned; ++i) {
      const Perf& result = results[i];
      if (result.status != CUDNN_STATUS_SUCCESS || result.memory > workspace_limit) continue;
      if (result.determinism != CUDNN_DETERMINISTIC) continue;
      if (!cudnn_math_allowed(result.mathType, math_, dtype_)) continue;
      return result;
    }
    throw Error("", fmt::format("cuDNN: no deterministic algorithm for {} ({}) within {} B of "
                                "workspace",
                                descriptor, context_, workspace_limit));
  }

  void choose_data_algorithm(size_t workspace_limit, const std::string& descriptor) {
    cudnnConvolutionBwdDataAlgoPerf_t results[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT] = {};
    int returned = 0;
    check(api_.cudnnGetConvolutionBackwardDataAlgorithm_v7(
              handle_, w_desc_.get(), dy_desc_.get(), conv_desc_.get(), x_desc_.get(),
              CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned, results),
          "cudnnGetConvolutionBackwardDataAlgorithm_v7");
    const auto& chosen = first_usable(results, returned, workspace_limit, descriptor);
    data_algo_ = chosen.algo;
    workspace_bytes_ = chosen.memory;
  }

  void choose_filter_algorithm(size_t workspace_limit, const std::string& descriptor) {
    cudnnConvolutionBwdFilterAlgoPerf_t results[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT] = {};
    int returned = 0;
    check(api_.cudnnGetConvolutionBackwardFilterAlgorithm_v7(
              handle_, x_desc_.get(), dy_desc_.get(), conv_desc_.get(), w_desc_.get(),
              CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &returned, results),
          "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
    const auto& chosen = first_usable(results, returned, workspace_limit, descriptor);
    filter_algo_ = chosen.algo;
    workspace_bytes_ = chosen.memory;
  }

  const CudnnApi& api_;
  cudnnHandle_t handle_;
  std::string context_;
  bool data_;  // BackwardData, else BackwardFilter
  codegen::Precision math_;  // --precision: which algorithms may run
  ir::DType dtype_;          // of every tensor
  Unique<cudnnTensorDescriptor_t> x_desc_, dy_desc_;
  Unique<cudnnFilterDescriptor_t> w_desc_;
  Unique<cudnnConvolutionDescriptor_t> conv_desc_;
  cudnnConvolutionBwdDataAlgo_t data_algo_ = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  cudnnConvolutionBwdFilterAlgo_t filter_algo_ = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  const void* dy_ = nullptr;
  const void* operand_ = nullptr;  // w (data) or x (filter)
  void* out_ = nullptr;            // dx or dw
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
};

}  // namespace

std::unique_ptr<LibraryRunner> prepare_conv_grad_call(LibraryContext& context,
                                                      const codegen::LibraryCall& call,
                                                      const LibraryOperands& operands,
                                                      std::string_view kernel_name) {
  return std::make_unique<ConvGradRunner>(context, call, operands, kernel_name);
}

}  // namespace kiln::runtime::cuda
