#include "runtime/cuda/cudnn_api.h"

#include <fmt/format.h>

#include <cstring>

#include "ir/diagnostic.h"

namespace kiln::runtime::cuda {
namespace {

// cuDNN encodes its version as major * 10000 + minor * 100 + patch since 9.0.
constexpr size_t kCudnnMajorScale = 10000;
constexpr size_t kCudnnMajor = 9;
// Room for cudnnGetLastErrorString; its messages are one or two lines.
constexpr size_t kLastErrorBytes = 1024;

}  // namespace

std::unique_ptr<CudnnApi> CudnnApi::load(const std::string& path) {
  std::unique_ptr<CudnnApi> api(new CudnnApi());
  api->library_ = std::make_unique<SharedLibrary>(path, "cuDNN");
#define KILN_CUDNN_RESOLVE(symbol)                                                 \
  api->symbol = resolve<decltype(&::symbol)>(*api->library_, #symbol,             \
                                             "kiln needs cuDNN 9's legacy API");
  KILN_CUDNN_FUNCTIONS(KILN_CUDNN_RESOLVE)
#undef KILN_CUDNN_RESOLVE
  api->version_ = api->cudnnGetVersion();
  // The soname promises major 9, but a renamed or copied library would not keep it.
  if (api->version_ / kCudnnMajorScale != kCudnnMajor) {
    throw Error("", fmt::format("cuDNN: {} is version {}; kiln needs cuDNN {}", path,
                                api->version_, kCudnnMajor));
  }
  return api;
}

std::string CudnnApi::describe(cudnnStatus_t status, std::string_view call,
                               std::string_view context) const {
  std::string out = fmt::format("{} failed", call);
  if (!context.empty()) out += fmt::format(" for {}", context);
  const char* name = cudnnGetErrorString(status);
  out += fmt::format(": {}", name != nullptr ? name : fmt::format("cudnnStatus_t {}",
                                                                  static_cast<int>(status)));
  // cuDNN 9 keeps a message per thread naming what it rejected (a dimension, a layout).
  char last[kLastErrorBytes] = {};
  cudnnGetLastErrorString(last, sizeof(last) - 1);
  if (std::strlen(last) > 0) out += fmt::format(" ({})", last);
  return out;
}

void CudnnApi::check(cudnnStatus_t status, std::string_view call,
                     std::string_view context) const {
  if (status == CUDNN_STATUS_SUCCESS) return;
  throw Error("", "cuDNN: " + describe(status, call, context));
}

const CudnnApi& cudnn(const std::string& path) { return load_once<CudnnApi>(path); }

}  // namespace kiln::runtime::cuda
