#include "runtime/cuda/driver_api.h"

#include <dlfcn.h>

#include <fmt/format.h>

#include <optional>

#include "ir/diagnostic.h"

namespace kiln::runtime::cuda {
namespace {

constexpr std::string_view kBackendPrefix = "CUDA backend: ";
constexpr std::string_view kUseHostBackend = "; use --backend=host to run on the CPU";

// dlerror() of the last failed dl* call, or a placeholder when it has none.
std::string last_dl_error() {
  const char* message = dlerror();
  return message != nullptr ? message : "no detail from the dynamic loader";
}

}  // namespace

std::unique_ptr<DriverApi> DriverApi::load(const std::string& library) {
  std::unique_ptr<DriverApi> api(new DriverApi());
  // RTLD_LOCAL: the driver's symbols must not leak into (or be taken from) other libraries.
  api->library_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (api->library_ == nullptr) {
    throw backend_unavailable(
        fmt::format("{} not found (no NVIDIA driver on this machine)", library),
        {last_dl_error()});
  }
  // The driver's version first (every driver has cuDriverGetVersion, and it needs no cuInit):
  // an old driver lacks newer functions, and 'too old' is the message that helps.
  const auto get_version = reinterpret_cast<PFN_cuDriverGetVersion_v2020>(
      dlsym(api->library_, "cuDriverGetVersion"));
  int version = 0;
  const CUresult version_result = get_version != nullptr ? get_version(&version) : CUDA_ERROR_NOT_FOUND;
  // The toolkit's stub library answers every call with CUDA_ERROR_STUB_LIBRARY: initialize()
  // names it; its functions still resolve.
  const bool stub = version_result == CUDA_ERROR_STUB_LIBRARY;
  if (version_result != CUDA_SUCCESS && !stub)
    throw backend_unavailable(fmt::format("{} is no usable NVIDIA driver (cuDriverGetVersion "
                                          "fails)", library));
  if (!stub && version < kMinimumDriverVersion) {
    throw backend_unavailable(fmt::format(
        "the NVIDIA driver supports CUDA {}.{}; kiln's kernels (compiled by NVRTC {}.{}) need "
        "a CUDA {}.{} driver, R580 or newer",
        version / 1000, version % 1000 / 10, kMinimumDriverVersion / 1000,
        kMinimumDriverVersion % 1000 / 10, kMinimumDriverVersion / 1000,
        kMinimumDriverVersion % 1000 / 10));
  }
#define KILN_CUDA_RESOLVE_FUNCTION(symbol, signature)                                        \
  api->symbol = reinterpret_cast<signature>(dlsym(api->library_, #symbol));                  \
  if (api->symbol == nullptr) {                                                              \
    throw backend_unavailable(fmt::format("{} (CUDA {}.{}) has no function {}", library,     \
                                          version / 1000, version % 1000 / 10, #symbol));    \
  }
  KILN_CUDA_DRIVER_FUNCTIONS(KILN_CUDA_RESOLVE_FUNCTION)
#undef KILN_CUDA_RESOLVE_FUNCTION
  return api;
}

DriverApi::~DriverApi() {
  if (library_ != nullptr) dlclose(library_);
}

void DriverApi::initialize() {
  CUresult result = cuInit(0);
  if (result == CUDA_ERROR_NO_DEVICE)
    throw backend_unavailable(fmt::format("no CUDA device ({})", describe(result, "cuInit")));
  if (result == CUDA_ERROR_STUB_LIBRARY) {
    // The toolkit ships a stub libcuda for linking; found first on the library path it
    // answers every call with this error, which would otherwise read as a mystery.
    throw backend_unavailable(
        "the libcuda found is the CUDA toolkit's stub library, not an NVIDIA driver (remove "
        "its directory from LD_LIBRARY_PATH)");
  }
  if (result != CUDA_SUCCESS) throw backend_unavailable(describe(result, "cuInit"));
  check(cuDriverGetVersion(&driver_version_), "cuDriverGetVersion");
}

Error backend_unavailable(std::string_view reason, std::vector<std::string> notes) {
  std::string message = fmt::format("{}{}{}", kBackendPrefix, reason, kUseHostBackend);
  return Error(Diagnostic{"", std::move(message), std::move(notes)});
}

std::string unavailable_reason(const Error& error) {
  std::string_view message = error.diagnostic().message;
  if (message.starts_with(kBackendPrefix)) message.remove_prefix(kBackendPrefix.size());
  if (message.ends_with(kUseHostBackend)) message.remove_suffix(kUseHostBackend.size());
  return std::string(message);
}

std::string format_driver_failure(std::string_view call, std::string_view context, int result,
                                  const char* name, const char* description) {
  std::string out(call);
  out += " failed";
  if (!context.empty()) {
    out += " for ";
    out += context;
  }
  out += ": ";
  if (name == nullptr) return out + fmt::format("CUresult {}", result);
  out += name;
  if (description != nullptr) out += fmt::format(" ({})", description);
  return out;
}

std::string DriverApi::describe(CUresult result, std::string_view call,
                                std::string_view context) const {
  // Both lookups leave the pointer null for a code this driver does not know (and the
  // stub library fails them outright), so their results need no separate check.
  const char* name = nullptr;
  const char* description = nullptr;
  if (cuGetErrorName(result, &name) != CUDA_SUCCESS) name = nullptr;
  if (cuGetErrorString(result, &description) != CUDA_SUCCESS) description = nullptr;
  return format_driver_failure(call, context, static_cast<int>(result), name, description);
}

bool is_kernel_fault(CUresult result) {
  switch (result) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ASSERT:
      return true;
    default:
      return false;
  }
}

void DriverApi::check(CUresult result, std::string_view call, std::string_view context) const {
  if (result == CUDA_SUCCESS) return;
  Diagnostic diagnostic{"", std::string(kBackendPrefix) + describe(result, call, context), {}};
  if (is_kernel_fault(result)) {
    // Kernels run asynchronously, so the call that reports a fault is rarely its cause.
    diagnostic.notes.push_back(
        "a kernel faulted on the device and the CUDA context can no longer be used; run with "
        "CUDA_LAUNCH_BLOCKING=1 under compute-sanitizer to find which kernel");
  }
  throw Error(std::move(diagnostic));
}

const DriverApi& driver() {
  struct State {
    std::unique_ptr<DriverApi> api;
    std::optional<Error> error;
  };
  // Leaked on purpose (see the header); a function-local static makes the first use thread-safe.
  static const State* state = [] {
    auto* loaded = new State();
    try {
      loaded->api = DriverApi::load(kDriverLibrary);
      loaded->api->initialize();
    } catch (const Error& error) {
      loaded->api.reset();
      loaded->error = error;
    }
    return loaded;
  }();
  if (state->error) throw *state->error;
  return *state->api;
}

}  // namespace kiln::runtime::cuda
