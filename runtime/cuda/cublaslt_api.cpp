#include "runtime/cuda/cublaslt_api.h"

#include <fmt/format.h>

#include "ir/diagnostic.h"

namespace kiln::runtime::cuda {

std::unique_ptr<CublasLtApi> CublasLtApi::load(const std::string& path) {
  std::unique_ptr<CublasLtApi> api(new CublasLtApi());
  api->library_ = std::make_unique<SharedLibrary>(path, "cuBLASLt");
#define KILN_CUBLASLT_RESOLVE(symbol)                                            \
  api->symbol = resolve<decltype(&::symbol)>(*api->library_, #symbol,           \
                                             "kiln needs the CUDA 13 cuBLASLt");
  KILN_CUBLASLT_FUNCTIONS(KILN_CUBLASLT_RESOLVE)
#undef KILN_CUBLASLT_RESOLVE
  return api;
}

std::string CublasLtApi::describe(cublasStatus_t status, std::string_view call,
                                  std::string_view context) const {
  // Both return a placeholder string, never null, for a status they do not know.
  std::string out = fmt::format("{} failed", call);
  if (!context.empty()) out += fmt::format(" for {}", context);
  return out + fmt::format(": {} ({})", cublasLtGetStatusName(status),
                           cublasLtGetStatusString(status));
}

void CublasLtApi::check(cublasStatus_t status, std::string_view call,
                        std::string_view context) const {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  throw Error("", "cuBLASLt: " + describe(status, call, context));
}

const CublasLtApi& cublaslt(const std::string& path) { return load_once<CublasLtApi>(path); }

}  // namespace kiln::runtime::cuda
