// The mock cuDNN (mock_vendor_libraries.h): the legacy convolution API on the host, NCHW,
// cross-correlation with padding, stride, dilation and groups, as the cuDNN API reference
// defines cudnnConvolutionForward, cudnnConvolutionBiasActivationForward and the backward
// cudnnConvolutionBackwardData and cudnnConvolutionBackwardFilter, on f32 tensors and on the
// 16-bit ones of the PSEUDO_BFLOAT16 and PSEUDO_HALF configurations (f32 compute, results
// rounded as stored).
#include <cudnn.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "tests/mocks/mock_storage.h"
#include "tests/mocks/mock_vendor_libraries.h"

using kiln_mock::Storage;

struct cudnnContext {
  cudaStream_t stream = nullptr;
  bool stream_set = false;
};
// The dims are the logical [n, c, h, w] (filters [k, c, r, s]) in either format; `nhwc` says how
// they are stored (CUDNN_TENSOR_NHWC: channels innermost, a filter KRSC).
struct cudnnTensorStruct {
  int n = 0, c = 0, h = 0, w = 0;
  Storage type = Storage::F32;
  bool nhwc = false;
  bool operator==(const cudnnTensorStruct&) const = default;
};
struct cudnnFilterStruct {
  int k = 0, c = 0, r = 0, s = 0;
  Storage type = Storage::F32;
  bool nhwc = false;
};
struct cudnnConvolutionStruct {
  int pad_h = 0, pad_w = 0, u = 1, v = 1, dilation_h = 1, dilation_w = 1, groups = 1;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  cudnnConvolutionMode_t mode = CUDNN_CONVOLUTION;
};
struct cudnnActivationStruct {
  cudnnActivationMode_t mode = CUDNN_ACTIVATION_RELU;
};

namespace {

struct Algorithm {
  cudnnConvolutionFwdAlgo_t algo;
  cudnnMathType_t math;
  size_t memory;
};
// The heuristics' fixed ranking: FFT needs more workspace than any arena reserves, Winograd
// would use tensor cores (TF32), so relu runs IMPLICIT_GEMM and the identity activation
// IMPLICIT_PRECOMP_GEMM with a little workspace.
constexpr Algorithm kAlgorithms[] = {
    {CUDNN_CONVOLUTION_FWD_ALGO_FFT, CUDNN_DEFAULT_MATH, size_t{1} << 40},
    {CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED, CUDNN_TENSOR_OP_MATH, 0},
    {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, CUDNN_FMA_MATH, 0},
    {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, CUDNN_FMA_MATH, 4096},
};

std::mutex g_mutex;
KilnMockLibraryStats g_stats;
std::map<std::string, int> g_failures;
std::string g_last_error;

cudnnStatus_t take_failure(const char* symbol) {
  auto it = g_failures.find(symbol);
  if (it == g_failures.end()) return CUDNN_STATUS_SUCCESS;
  auto status = static_cast<cudnnStatus_t>(it->second);
  g_failures.erase(it);
  g_last_error = std::string(symbol) + ": failure injected by the test";
  return status;
}

cudnnStatus_t reject(cudnnStatus_t status, std::string message) {
  g_last_error = std::move(message);
  return status;
}

// The element types the mock takes: f32, bf16, f16.
bool storage_of(cudnnDataType_t type, Storage* storage) {
  switch (type) {
    case CUDNN_DATA_FLOAT: *storage = Storage::F32; return true;
    case CUDNN_DATA_BFLOAT16: *storage = Storage::Bf16; return true;
    case CUDNN_DATA_HALF: *storage = Storage::F16; return true;
    default: return false;
  }
}

// The math kiln asks for: FMA on f32 tensors (exact f32), tensor-op math on 16-bit ones.
cudnnStatus_t check_math(const cudnnConvolutionStruct& conv, Storage type) {
  if (conv.mode != CUDNN_CROSS_CORRELATION)
    return reject(CUDNN_STATUS_BAD_PARAM, "kiln wants cross-correlation");
  const cudnnMathType_t wanted = type == Storage::F32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
  if (conv.math != wanted)
    return reject(CUDNN_STATUS_BAD_PARAM, "kiln wants FMA math on f32, tensor-op math on 16 bits");
  return CUDNN_STATUS_SUCCESS;
}

const Algorithm* find_algorithm(cudnnConvolutionFwdAlgo_t algo) {
  for (const Algorithm& a : kAlgorithms)
    if (a.algo == algo) return &a;
  return nullptr;
}

cudnnTensorStruct output_of(const cudnnConvolutionStruct& conv, const cudnnTensorStruct& x,
                            const cudnnFilterStruct& w) {
  auto out = [](int in, int pad, int kernel, int dilation, int stride) {
    return (in + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1;
  };
  return {x.n, w.k, out(x.h, conv.pad_h, w.r, conv.dilation_h, conv.u),
          out(x.w, conv.pad_w, w.s, conv.dilation_w, conv.v), x.type, x.nhwc};
}

// Everything a forward call checks before touching memory.
cudnnStatus_t check_forward(cudnnHandle_t handle, const cudnnTensorStruct& x,
                            const cudnnFilterStruct& w, const cudnnConvolutionStruct& conv,
                            const cudnnTensorStruct& y, cudnnConvolutionFwdAlgo_t algo,
                            size_t workspace_bytes, const void* workspace) {
  if (handle == nullptr || !handle->stream_set)
    return reject(CUDNN_STATUS_BAD_PARAM, "handle without a stream");
  if (x.type != w.type || y.type != x.type)
    return reject(CUDNN_STATUS_NOT_SUPPORTED, "x, w and y of different data types");
  if (x.nhwc != y.nhwc || x.nhwc != w.nhwc)
    return reject(CUDNN_STATUS_NOT_SUPPORTED, "x, w and y in different formats (NHWC tensors take an NHWC filter)");
  if (cudnnStatus_t s = check_math(conv, x.type)) return s;
  if (x.c != w.c * conv.groups || w.k % conv.groups != 0)
    return reject(CUDNN_STATUS_BAD_PARAM, "channels do not match the filter and groups");
  if (!(output_of(conv, x, w) == y)) return reject(CUDNN_STATUS_BAD_PARAM, "output dims");
  const Algorithm* a = find_algorithm(algo);
  if (a == nullptr || workspace_bytes < a->memory || (a->memory > 0 && workspace == nullptr))
    return reject(CUDNN_STATUS_BAD_PARAM, "workspace smaller than the algorithm needs");
  return CUDNN_STATUS_SUCCESS;
}

// Where element (n, c, h, w) of a tensor, and (k, c, r, s) of a filter, is stored.
int at(const cudnnTensorStruct& t, int n, int c, int h, int w) {
  return t.nhwc ? ((n * t.h + h) * t.w + w) * t.c + c : ((n * t.c + c) * t.h + h) * t.w + w;
}
int at(const cudnnFilterStruct& f, int k, int c, int r, int s) {
  return f.nhwc ? ((k * f.r + r) * f.s + s) * f.c + c : ((k * f.c + c) * f.r + r) * f.s + s;
}

// sum over the window of output element (n, k, p, q).
float correlate(const void* x, const void* w, const cudnnTensorStruct& xd,
                const cudnnFilterStruct& wd, const cudnnConvolutionStruct& conv, int n, int k,
                int p, int q) {
  const int group = k / (wd.k / conv.groups);
  float sum = 0.0f;
  for (int c = 0; c < wd.c; ++c) {
    const int channel = group * wd.c + c;
    for (int r = 0; r < wd.r; ++r) {
      const int ih = p * conv.u - conv.pad_h + r * conv.dilation_h;
      if (ih < 0 || ih >= xd.h) continue;
      for (int s = 0; s < wd.s; ++s) {
        const int iw = q * conv.v - conv.pad_w + s * conv.dilation_w;
        if (iw < 0 || iw >= xd.w) continue;
        sum += kiln_mock::load(x, xd.type, at(xd, n, channel, ih, iw)) * kiln_mock::load(w, wd.type, at(wd, k, c, r, s));
      }
    }
  }
  return sum;
}

void record(cudnnHandle_t handle, cudnnConvolutionFwdAlgo_t algo, const void* workspace,
            size_t bytes) {
  ++g_stats.calls;
  g_stats.last_stream = handle->stream;
  g_stats.last_workspace = workspace;
  g_stats.last_workspace_bytes = bytes;
  g_stats.last_choice = static_cast<int>(algo);
}

template <typename T>
cudnnStatus_t create(T** handle) {
  std::lock_guard lock(g_mutex);
  *handle = new T();
  ++g_stats.descriptors;
  return CUDNN_STATUS_SUCCESS;
}
template <typename T>
cudnnStatus_t destroy(T* handle) {
  std::lock_guard lock(g_mutex);
  delete handle;
  --g_stats.descriptors;
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

void kiln_mock_cudnn_reset() {
  std::lock_guard lock(g_mutex);
  g_stats = KilnMockLibraryStats{};
  g_failures.clear();
}
void kiln_mock_cudnn_stats(KilnMockLibraryStats* stats) {
  std::lock_guard lock(g_mutex);
  *stats = g_stats;
}
void kiln_mock_cudnn_fail_next(const char* symbol, int status) {
  std::lock_guard lock(g_mutex);
  g_failures[symbol] = status;
}

size_t cudnnGetVersion(void) { return 91900; }

const char* cudnnGetErrorString(cudnnStatus_t status) {
  switch (status) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    default: return "CUDNN_STATUS_UNKNOWN";
  }
}

void cudnnGetLastErrorString(char* message, size_t max_size) {
  std::lock_guard lock(g_mutex);
  if (max_size == 0) return;
  const size_t n = std::min(max_size - 1, g_last_error.size());
  std::memcpy(message, g_last_error.data(), n);
  message[n] = '\0';
  g_last_error.clear();
}

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  std::lock_guard lock(g_mutex);
  if (cudnnStatus_t s = take_failure("cudnnCreate")) return s;
  *handle = new cudnnContext();
  ++g_stats.handles;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  std::lock_guard lock(g_mutex);
  delete handle;
  --g_stats.handles;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream) {
  handle->stream = stream;
  handle->stream_set = true;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t* d) { return create(d); }
cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d) { return destroy(d); }
cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t format,
                                         cudnnDataType_t type, int n, int c, int h, int w) {
  Storage storage;
  if ((format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC) || !storage_of(type, &storage) || n < 1 ||
      c < 1 || h < 1 || w < 1)
    return CUDNN_STATUS_BAD_PARAM;
  *d = cudnnTensorStruct{n, c, h, w, storage, format == CUDNN_TENSOR_NHWC};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t* d) { return create(d); }
cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d) { return destroy(d); }
cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t type,
                                         cudnnTensorFormat_t format, int k, int c, int h, int w) {
  Storage storage;
  if ((format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC) || !storage_of(type, &storage) || k < 1 ||
      c < 1 || h < 1 || w < 1)
    return CUDNN_STATUS_BAD_PARAM;
  *d = cudnnFilterStruct{k, c, h, w, storage, format == CUDNN_TENSOR_NHWC};
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t* d) {
  return create(d);
}
cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d) {
  return destroy(d);
}
cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int pad_h,
                                              int pad_w, int u, int v, int dilation_h,
                                              int dilation_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t compute) {
  if (pad_h < 0 || pad_w < 0 || u < 1 || v < 1 || dilation_h < 1 || dilation_w < 1 ||
      compute != CUDNN_DATA_FLOAT)
    return CUDNN_STATUS_BAD_PARAM;
  d->pad_h = pad_h;
  d->pad_w = pad_w;
  d->u = u;
  d->v = v;
  d->dilation_h = dilation_h;
  d->dilation_w = dilation_w;
  d->mode = mode;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t d, int groups) {
  if (groups < 1) return CUDNN_STATUS_BAD_PARAM;
  d->groups = groups;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t math) {
  d->math = math;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(const cudnnConvolutionDescriptor_t conv,
                                                    const cudnnTensorDescriptor_t x,
                                                    const cudnnFilterDescriptor_t w, int* n,
                                                    int* c, int* h, int* wo) {
  const cudnnTensorStruct y = output_of(*conv, *x, *w);
  *n = y.n;
  *c = y.c;
  *h = y.h;
  *wo = y.w;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnCreateActivationDescriptor(cudnnActivationDescriptor_t* d) {
  return create(d);
}
cudnnStatus_t cudnnDestroyActivationDescriptor(cudnnActivationDescriptor_t d) {
  return destroy(d);
}
cudnnStatus_t cudnnSetActivationDescriptor(cudnnActivationDescriptor_t d,
                                           cudnnActivationMode_t mode, cudnnNanPropagation_t,
                                           double) {
  d->mode = mode;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t, const cudnnFilterDescriptor_t,
    const cudnnConvolutionDescriptor_t, const cudnnTensorDescriptor_t, const int requested,
    int* returned, cudnnConvolutionFwdAlgoPerf_t* results) {
  std::lock_guard lock(g_mutex);
  if (cudnnStatus_t s = take_failure("cudnnGetConvolutionForwardAlgorithm_v7")) return s;
  if (handle == nullptr) return CUDNN_STATUS_BAD_PARAM;
  *returned = 0;
  for (const Algorithm& a : kAlgorithms) {
    if (*returned == requested) break;
    cudnnConvolutionFwdAlgoPerf_t& r = results[(*returned)++];
    r = {};
    r.algo = a.algo;
    r.status = CUDNN_STATUS_SUCCESS;
    r.memory = a.memory;
    r.mathType = a.math;
  }
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(
    cudnnHandle_t, const cudnnTensorDescriptor_t, const cudnnFilterDescriptor_t,
    const cudnnConvolutionDescriptor_t, const cudnnTensorDescriptor_t,
    cudnnConvolutionFwdAlgo_t algo, size_t* bytes) {
  const Algorithm* a = find_algorithm(algo);
  if (a == nullptr) return CUDNN_STATUS_NOT_SUPPORTED;
  *bytes = a->memory;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void* alpha,
                                      const cudnnTensorDescriptor_t x_desc, const void* x,
                                      const cudnnFilterDescriptor_t w_desc, const void* w,
                                      const cudnnConvolutionDescriptor_t conv,
                                      cudnnConvolutionFwdAlgo_t algo, void* workspace,
                                      size_t workspace_bytes, const void* beta,
                                      const cudnnTensorDescriptor_t y_desc, void* y) {
  std::lock_guard lock(g_mutex);
  if (cudnnStatus_t s = take_failure("cudnnConvolutionForward")) return s;
  if (cudnnStatus_t s =
          check_forward(handle, *x_desc, *w_desc, *conv, *y_desc, algo, workspace_bytes, workspace))
    return s;
  const float a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);
  const cudnnTensorStruct& yd = *y_desc;
  for (int n = 0; n < yd.n; ++n)
    for (int k = 0; k < yd.c; ++k)
      for (int p = 0; p < yd.h; ++p)
        for (int q = 0; q < yd.w; ++q) {
          const int i = at(yd, n, k, p, q);
          const float sum = correlate(x, w, *x_desc, *w_desc, *conv, n, k, p, q);
          const float before = b != 0.0f ? b * kiln_mock::load(y, yd.type, i) : 0.0f;
          kiln_mock::store(y, yd.type, i, a * sum + before);
        }
  record(handle, algo, workspace, workspace_bytes);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionBiasActivationForward(
    cudnnHandle_t handle, const void* alpha1, const cudnnTensorDescriptor_t x_desc, const void* x,
    const cudnnFilterDescriptor_t w_desc, const void* w, const cudnnConvolutionDescriptor_t conv,
    cudnnConvolutionFwdAlgo_t algo, void* workspace, size_t workspace_bytes, const void* alpha2,
    const cudnnTensorDescriptor_t z_desc, const void* z, const cudnnTensorDescriptor_t bias_desc,
    const void* bias, const cudnnActivationDescriptor_t activation,
    const cudnnTensorDescriptor_t y_desc, void* y) {
  std::lock_guard lock(g_mutex);
  if (cudnnStatus_t s = take_failure("cudnnConvolutionBiasActivationForward")) return s;
  if (cudnnStatus_t s =
          check_forward(handle, *x_desc, *w_desc, *conv, *y_desc, algo, workspace_bytes, workspace))
    return s;
  const cudnnTensorStruct& yd = *y_desc;
  // The bias is stored as y is in every configuration kiln uses (f32, PSEUDO_BFLOAT16,
  // PSEUDO_HALF).
  if (!(*z_desc == yd) || !(*bias_desc == cudnnTensorStruct{1, yd.c, 1, 1, yd.type, yd.nhwc}))
    return reject(CUDNN_STATUS_BAD_PARAM, "z must match y and the bias be 1xKx1x1 of y's type");
  const bool relu = activation->mode == CUDNN_ACTIVATION_RELU;
  if (!relu && activation->mode != CUDNN_ACTIVATION_IDENTITY)
    return reject(CUDNN_STATUS_NOT_SUPPORTED, "only relu and identity");
  if (!relu && algo != CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM)
    return reject(CUDNN_STATUS_NOT_SUPPORTED, "identity needs IMPLICIT_PRECOMP_GEMM");
  const float a1 = *static_cast<const float*>(alpha1), a2 = *static_cast<const float*>(alpha2);
  for (int n = 0; n < yd.n; ++n)
    for (int k = 0; k < yd.c; ++k)
      for (int p = 0; p < yd.h; ++p)
        for (int q = 0; q < yd.w; ++q) {
          const int i = at(yd, n, k, p, q);
          float v = a1 * correlate(x, w, *x_desc, *w_desc, *conv, n, k, p, q);
          if (a2 != 0.0f) v += a2 * kiln_mock::load(z, yd.type, i);
          v += kiln_mock::load(bias, yd.type, k);
          kiln_mock::store(y, yd.type, i, relu ? std::max(v, 0.0f) : v);
        }
  record(handle, algo, workspace, workspace_bytes);
  return CUDNN_STATUS_SUCCESS;
}

// ---- backward convolutions ----------------------------------------------------------------
// The heuristics rank a non-deterministic algorithm (atomics) first, which kiln must skip, then
// a deterministic one with a little workspace.

}  // extern "C"

namespace {

template <typename Perf, typename Algo>
cudnnStatus_t backward_heuristics(cudnnHandle_t handle, int requested, int* returned, Perf* results,
                                  Algo atomic, Algo deterministic, size_t memory) {
  if (handle == nullptr || requested < 2) return CUDNN_STATUS_BAD_PARAM;
  results[0] = {};
  results[0].algo = atomic;
  results[0].determinism = CUDNN_NON_DETERMINISTIC;
  results[0].mathType = CUDNN_FMA_MATH;
  results[1] = {};
  results[1].algo = deterministic;
  results[1].determinism = CUDNN_DETERMINISTIC;
  results[1].mathType = CUDNN_FMA_MATH;
  results[1].memory = memory;
  *returned = 2;
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t, const cudnnTensorDescriptor_t,
    const cudnnConvolutionDescriptor_t, const cudnnTensorDescriptor_t, const int requested,
    int* returned, cudnnConvolutionBwdDataAlgoPerf_t* results) {
  std::lock_guard lock(g_mutex);
  if (cudnnStatus_t s = take_failure("cudnnGetConvolutionBackwardDataAlgorithm_v7")) return s;
  return backward_heuristics(handle, requested, returned, results, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0,
                             CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, 2048);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t, const cudnnTensorDescriptor_t,
    const cudnnConvolutionDescriptor_t, const cudnnFilterDescriptor_t, const int requested,
    int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* results) {
  std::lock_guard lock(g_mutex);
  if (cudnnStatus_t s = take_failure("cudnnGetConvolutionBackwardFilterAlgorithm_v7")) return s;
  return backward_heuristics(handle, requested, returned, results,
                             CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
                             1024);
}

}  // extern "C"

namespace {

// Scatters dy back through the forward window: dx[n, channel, ih, iw] += dy * w (data), or
// dw[k, c, r, s] += dy * x (filter), over every product the forward computes.
template <typename Visit>
void for_each_product(const cudnnTensorStruct& xd, const cudnnFilterStruct& wd,
                      const cudnnConvolutionStruct& conv, const cudnnTensorStruct& yd, Visit visit) {
  for (int n = 0; n < yd.n; ++n)
    for (int k = 0; k < yd.c; ++k)
      for (int p = 0; p < yd.h; ++p)
        for (int q = 0; q < yd.w; ++q) {
          const int group = k / (wd.k / conv.groups);
          for (int c = 0; c < wd.c; ++c)
            for (int r = 0; r < wd.r; ++r) {
              const int ih = p * conv.u - conv.pad_h + r * conv.dilation_h;
              if (ih < 0 || ih >= xd.h) continue;
              for (int s = 0; s < wd.s; ++s) {
                const int iw = q * conv.v - conv.pad_w + s * conv.dilation_w;
                if (iw < 0 || iw >= xd.w) continue;
                visit(at(xd, n, group * wd.c + c, ih, iw), at(wd, k, c, r, s), at(yd, n, k, p, q));
              }
            }
        }
}

cudnnStatus_t check_backward(cudnnHandle_t handle, const cudnnTensorStruct& x,
                             const cudnnFilterStruct& w, const cudnnConvolutionStruct& conv,
                             const cudnnTensorStruct& dy, const void* beta, size_t needed,
                             size_t workspace_bytes, const void* workspace) {
  if (handle == nullptr || !handle->stream_set)
    return reject(CUDNN_STATUS_BAD_PARAM, "handle without a stream");
  if (x.type != w.type || dy.type != x.type)
    return reject(CUDNN_STATUS_NOT_SUPPORTED, "x, w and dy of different data types");
  if (cudnnStatus_t s = check_math(conv, x.type)) return s;
  if (x.c != w.c * conv.groups || w.k % conv.groups != 0 || !(output_of(conv, x, w) == dy))
    return reject(CUDNN_STATUS_BAD_PARAM, "dy is not the forward output of x and w");
  if (*static_cast<const float*>(beta) != 0.0f)
    return reject(CUDNN_STATUS_NOT_SUPPORTED, "the mock overwrites: beta must be 0");
  if (workspace_bytes < needed || (needed > 0 && workspace == nullptr))
    return reject(CUDNN_STATUS_BAD_PARAM, "workspace smaller than the algorithm needs");
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void* alpha,
                                           const cudnnFilterDescriptor_t w_desc, const void* w,
                                           const cudnnTensorDescriptor_t dy_desc, const void* dy,
                                           const cudnnConvolutionDescriptor_t conv,
                                           cudnnConvolutionBwdDataAlgo_t algo, void* workspace,
                                           size_t workspace_bytes, const void* beta,
                                           const cudnnTensorDescriptor_t dx_desc, void* dx) {
  std::lock_guard lock(g_mutex);
  if (cudnnStatus_t s = take_failure("cudnnConvolutionBackwardData")) return s;
  if (algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_1)
    return reject(CUDNN_STATUS_NOT_SUPPORTED, "the mock runs BWD_DATA_ALGO_1 only");
  if (cudnnStatus_t s = check_backward(handle, *dx_desc, *w_desc, *conv, *dy_desc, beta, 2048,
                                       workspace_bytes, workspace))
    return s;
  const cudnnTensorStruct& xd = *dx_desc;
  std::vector<float> sums(static_cast<size_t>(xd.n * xd.c * xd.h * xd.w), 0.0f);
  const float a = *static_cast<const float*>(alpha);
  for_each_product(xd, *w_desc, *conv, *dy_desc, [&](int xi, int wi, int yi) {
    sums[xi] += a * kiln_mock::load(dy, xd.type, yi) * kiln_mock::load(w, xd.type, wi);
  });
  for (size_t i = 0; i < sums.size(); ++i) kiln_mock::store(dx, xd.type, i, sums[i]);
  record(handle, static_cast<cudnnConvolutionFwdAlgo_t>(algo), workspace, workspace_bytes);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void* alpha,
                                             const cudnnTensorDescriptor_t x_desc, const void* x,
                                             const cudnnTensorDescriptor_t dy_desc, const void* dy,
                                             const cudnnConvolutionDescriptor_t conv,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void* workspace,
                                             size_t workspace_bytes, const void* beta,
                                             const cudnnFilterDescriptor_t dw_desc, void* dw) {
  std::lock_guard lock(g_mutex);
  if (cudnnStatus_t s = take_failure("cudnnConvolutionBackwardFilter")) return s;
  if (algo != CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1)
    return reject(CUDNN_STATUS_NOT_SUPPORTED, "the mock runs BWD_FILTER_ALGO_1 only");
  if (cudnnStatus_t s = check_backward(handle, *x_desc, *dw_desc, *conv, *dy_desc, beta, 1024,
                                       workspace_bytes, workspace))
    return s;
  const cudnnFilterStruct& wd = *dw_desc;
  std::vector<float> sums(static_cast<size_t>(wd.k * wd.c * wd.r * wd.s), 0.0f);
  const float a = *static_cast<const float*>(alpha);
  for_each_product(*x_desc, wd, *conv, *dy_desc, [&](int xi, int wi, int yi) {
    sums[wi] += a * kiln_mock::load(dy, wd.type, yi) * kiln_mock::load(x, wd.type, xi);
  });
  for (size_t i = 0; i < sums.size(); ++i) kiln_mock::store(dw, wd.type, i, sums[i]);
  record(handle, static_cast<cudnnConvolutionFwdAlgo_t>(algo), workspace, workspace_bytes);
  return CUDNN_STATUS_SUCCESS;
}

}  // extern "C"
