// The mock cuBLASLt (mock_vendor_libraries.h): cublasLtMatmul on the host, column-major, as
// the cuBLAS documentation defines it, so the row-major trick of library_runner.cpp is checked
// against the definition rather than against itself. Matrices are f32, bf16 or f16 (A and B of
// one type, C and D of one type, f32 or A's), multiplied and summed in f32 and rounded as D
// stores them; the bias has D's type (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE's default).
#include <cublasLt.h>

#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "tests/mocks/mock_storage.h"
#include "tests/mocks/mock_vendor_libraries.h"

using kiln_mock::Storage;

struct cublasLtContext {
  int unused = 0;
};

namespace {

struct Desc {
  int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
};
struct Layout {
  Storage type = Storage::F32;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch = 1;
  int64_t stride = 0;
};
struct Preference {
  uint64_t max_workspace = 0;
};

// The algorithms the mock offers, best first, with the workspace each needs: the first does
// not fit kiln's 4 MiB reservation, so the heuristic must skip it.
constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kAlgorithmWorkspace[] = {64 * kMiB, 1 * kMiB, 0};

std::mutex g_mutex;
KilnMockLibraryStats g_stats;
std::map<std::string, int> g_failures;

cublasStatus_t take_failure(const char* symbol) {
  auto it = g_failures.find(symbol);
  if (it == g_failures.end()) return CUBLAS_STATUS_SUCCESS;
  auto status = static_cast<cublasStatus_t>(it->second);
  g_failures.erase(it);
  return status;
}

Desc* desc(cublasLtMatmulDesc_t handle) { return reinterpret_cast<Desc*>(handle); }
Layout* layout(cublasLtMatrixLayout_t handle) { return reinterpret_cast<Layout*>(handle); }

// op(X) is rows x cols of the stored matrix, or its transpose.
uint64_t op_rows(const Layout& x, int32_t op) { return op == CUBLAS_OP_N ? x.rows : x.cols; }
uint64_t op_cols(const Layout& x, int32_t op) { return op == CUBLAS_OP_N ? x.cols : x.rows; }

// Whether D = op(A) op(B) (+ C) is well formed.
bool consistent(const Desc& d, const Layout& a, const Layout& b, const Layout& c,
                const Layout& out) {
  const uint64_t m = op_rows(a, d.transa), k = op_cols(a, d.transa);
  const uint64_t n = op_cols(b, d.transb);
  for (const Layout* x : {&a, &b, &c, &out})
    if (x->ld < static_cast<int64_t>(x->rows)) return false;  // column-major needs ld >= rows
  if (a.type != b.type || c.type != out.type || (out.type != a.type && out.type != Storage::F32))
    return false;
  return op_rows(b, d.transb) == k && c.rows == m && c.cols == n && out.rows == m &&
         out.cols == n && a.batch == out.batch && b.batch == out.batch && c.batch == out.batch;
}

// Element (i, j) of op(X); X's batch starts `offset` elements in.
float element(const void* x, const Layout& l, int64_t offset, int32_t op, uint64_t i, uint64_t j) {
  const uint64_t index = op == CUBLAS_OP_N ? i + j * l.ld : j + i * l.ld;
  return kiln_mock::load(x, l.type, static_cast<size_t>(offset + static_cast<int64_t>(index)));
}

float activate(uint32_t epilogue, float v) {
  if ((epilogue & CUBLASLT_EPILOGUE_RELU) != 0) return v > 0.0f ? v : 0.0f;
  if ((epilogue & CUBLASLT_EPILOGUE_GELU) != 0) {
    const float inner = 0.7978845608f * (v + 0.044715f * v * v * v);
    return 0.5f * v * (1.0f + std::tanh(inner));
  }
  return v;
}

}  // namespace

extern "C" {

void kiln_mock_cublaslt_reset() {
  std::lock_guard lock(g_mutex);
  g_stats = KilnMockLibraryStats{};
  g_failures.clear();
}
void kiln_mock_cublaslt_stats(KilnMockLibraryStats* stats) {
  std::lock_guard lock(g_mutex);
  *stats = g_stats;
}
void kiln_mock_cublaslt_fail_next(const char* symbol, int status) {
  std::lock_guard lock(g_mutex);
  g_failures[symbol] = status;
}

size_t cublasLtGetVersion(void) { return 130000; }

const char* cublasLtGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_UNKNOWN";
  }
}
const char* cublasLtGetStatusString(cublasStatus_t status) {
  return status == CUBLAS_STATUS_NOT_SUPPORTED ? "the functionality requested is not supported"
                                               : "mock status";
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  std::lock_guard lock(g_mutex);
  if (cublasStatus_t s = take_failure("cublasLtCreate")) return s;
  *handle = new cublasLtContext();
  ++g_stats.handles;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  std::lock_guard lock(g_mutex);
  delete handle;
  --g_stats.handles;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* handle, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
  std::lock_guard lock(g_mutex);
  if (cublasStatus_t s = take_failure("cublasLtMatmulDescCreate")) return s;
  // kiln asks for exact f32 (no TF32): anything else is a bug here.
  if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  *handle = reinterpret_cast<cublasLtMatmulDesc_t>(new Desc());
  ++g_stats.descriptors;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t handle) {
  std::lock_guard lock(g_mutex);
  delete desc(handle);
  --g_stats.descriptors;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t handle,
                                              cublasLtMatmulDescAttributes_t attribute,
                                              const void* buffer, size_t size) {
  Desc& d = *desc(handle);
  switch (attribute) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB:
      if (size != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(attribute == CUBLASLT_MATMUL_DESC_TRANSA ? &d.transa : &d.transb, buffer, size);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      if (size != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&d.epilogue, buffer, size);
      return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      if (size != sizeof(void*)) return CUBLAS_STATUS_INVALID_VALUE;
      std::memcpy(&d.bias, buffer, size);
      return CUBLAS_STATUS_SUCCESS;
    default:
      return CUBLAS_STATUS_INVALID_VALUE;
  }
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* handle, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  std::lock_guard lock(g_mutex);
  Storage storage;
  switch (type) {
    case CUDA_R_32F: storage = Storage::F32; break;
    case CUDA_R_16BF: storage = Storage::Bf16; break;
    case CUDA_R_16F: storage = Storage::F16; break;
    default: return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (rows == 0 || cols == 0) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = reinterpret_cast<cublasLtMatrixLayout_t>(new Layout{storage, rows, cols, ld});
  ++g_stats.descriptors;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t handle) {
  std::lock_guard lock(g_mutex);
  delete layout(handle);
  --g_stats.descriptors;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t handle,
                                                cublasLtMatrixLayoutAttribute_t attribute,
                                                const void* buffer, size_t size) {
  Layout& l = *layout(handle);
  if (attribute == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT && size == sizeof(int32_t)) {
    std::memcpy(&l.batch, buffer, size);
    return l.batch >= 1 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
  }
  if (attribute == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET && size == sizeof(int64_t)) {
    std::memcpy(&l.stride, buffer, size);
    return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* handle) {
  std::lock_guard lock(g_mutex);
  *handle = reinterpret_cast<cublasLtMatmulPreference_t>(new Preference());
  ++g_stats.descriptors;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t handle) {
  std::lock_guard lock(g_mutex);
  delete reinterpret_cast<Preference*>(handle);
  --g_stats.descriptors;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t handle,
                                                    cublasLtMatmulPreferenceAttributes_t attribute,
                                                    const void* buffer, size_t size) {
  if (attribute != CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES || size != sizeof(uint64_t))
    return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(&reinterpret_cast<Preference*>(handle)->max_workspace, buffer, size);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t operation, cublasLtMatrixLayout_t a,
    cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
    cublasLtMatmulPreference_t preference, int requested,
    cublasLtMatmulHeuristicResult_t results[], int* returned) {
  std::lock_guard lock(g_mutex);
  if (cublasStatus_t s = take_failure("cublasLtMatmulAlgoGetHeuristic")) return s;
  if (handle == nullptr || !consistent(*desc(operation), *layout(a), *layout(b), *layout(c),
                                       *layout(d)))
    return CUBLAS_STATUS_INVALID_VALUE;
  // Like cuBLASLt, only algorithms within the preference's workspace limit are returned.
  const uint64_t limit = reinterpret_cast<Preference*>(preference)->max_workspace;
  *returned = 0;
  for (size_t id = 0; id < std::size(kAlgorithmWorkspace) && *returned < requested; ++id) {
    if (kAlgorithmWorkspace[id] > limit) continue;
    cublasLtMatmulHeuristicResult_t& result = results[(*returned)++];
    result = {};
    result.algo.data[0] = id;
    result.workspaceSize = kAlgorithmWorkspace[id];
    result.state = CUBLAS_STATUS_SUCCESS;
    result.wavesCount = 1.0f;
  }
  return *returned > 0 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t operation,
                              const void* alpha, const void* a, cublasLtMatrixLayout_t a_layout,
                              const void* b, cublasLtMatrixLayout_t b_layout, const void* beta,
                              const void* c, cublasLtMatrixLayout_t c_layout, void* d,
                              cublasLtMatrixLayout_t d_layout, const cublasLtMatmulAlgo_t* algo,
                              void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  std::lock_guard lock(g_mutex);
  if (cublasStatus_t s = take_failure("cublasLtMatmul")) return s;
  const Desc& op = *desc(operation);
  const Layout &la = *layout(a_layout), &lb = *layout(b_layout), &lc = *layout(c_layout),
               &ld = *layout(d_layout);
  if (handle == nullptr || algo == nullptr || !consistent(op, la, lb, lc, ld))
    return CUBLAS_STATUS_INVALID_VALUE;
  const size_t needed = kAlgorithmWorkspace[algo->data[0]];
  if (workspace_bytes < needed || (needed > 0 && workspace == nullptr))
    return CUBLAS_STATUS_INVALID_VALUE;
  // In place only with identical layouts (cuBLAS docs, cublasLtMatmul).
  if (c == d && (lc.ld != ld.ld || lc.stride != ld.stride)) return CUBLAS_STATUS_INVALID_VALUE;
  switch (op.epilogue) {
    case CUBLASLT_EPILOGUE_DEFAULT: case CUBLASLT_EPILOGUE_RELU: case CUBLASLT_EPILOGUE_GELU:
      break;
    case CUBLASLT_EPILOGUE_BIAS: case CUBLASLT_EPILOGUE_RELU_BIAS: case CUBLASLT_EPILOGUE_GELU_BIAS:
      if (op.bias == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
      break;
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const float alpha_value = *static_cast<const float*>(alpha);
  const float beta_value = *static_cast<const float*>(beta);
  const uint64_t m = ld.rows, n = ld.cols, k = op_cols(la, op.transa);
  for (int32_t batch = 0; batch < ld.batch; ++batch) {
    for (uint64_t j = 0; j < n; ++j) {
      for (uint64_t i = 0; i < m; ++i) {
        float sum = 0.0f;
        for (uint64_t p = 0; p < k; ++p)
          sum += element(a, la, batch * la.stride, op.transa, i, p) *
                 element(b, lb, batch * lb.stride, op.transb, p, j);
        float v = alpha_value * sum;
        if (beta_value != 0.0f) v += beta_value * element(c, lc, batch * lc.stride, CUBLAS_OP_N, i, j);
        if ((op.epilogue & CUBLASLT_EPILOGUE_BIAS) != 0)
          v += kiln_mock::load(op.bias, ld.type, i);  // one per row of D, in D's type
        const int64_t index = batch * ld.stride + static_cast<int64_t>(i + j * ld.ld);
        kiln_mock::store(d, ld.type, static_cast<size_t>(index), activate(op.epilogue, v));
      }
    }
  }
  ++g_stats.calls;
  g_stats.last_stream = stream;
  g_stats.last_workspace = workspace;
  g_stats.last_workspace_bytes = workspace_bytes;
  g_stats.last_choice = static_cast<int>(op.epilogue);
  return CUBLAS_STATUS_SUCCESS;
}

}  // extern "C"
