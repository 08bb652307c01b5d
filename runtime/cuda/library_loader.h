// dlopen and dlsym for the vendor libraries (cublaslt_api.h, cudnn_api.h), which kiln never
// links: a binary without them installed still runs, on the generated kernels.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "ir/diagnostic.h"

namespace kiln::runtime::cuda {

// An open shared library, closed on destruction.
class SharedLibrary {
 public:
  // Throws kiln::Error "<what>: <path> not found (<dlerror>)": `what` names the library for a
  // user ("cuBLASLt").
  SharedLibrary(const std::string& path, std::string_view what);
  ~SharedLibrary();
  SharedLibrary(const SharedLibrary&) = delete;
  SharedLibrary& operator=(const SharedLibrary&) = delete;

  // The address of `symbol`; throws kiln::Error "<what>: <path> has no function <symbol>
  // (<why>)" when it is missing: `why` is the likely cause ("older than cuDNN 9").
  void* symbol(const char* symbol, std::string_view why) const;
  const std::string& path() const { return path_; }

 private:
  void* handle_ = nullptr;
  std::string path_;
  std::string what_;
};

// The resolved address as a function pointer of the declared type.
template <typename Function>
Function resolve(const SharedLibrary& library, const char* symbol, std::string_view why) {
  return reinterpret_cast<Function>(library.symbol(symbol, why));
}

// The process-wide `Api` loaded from `path` by Api::load, once per path (thread-safe); a
// failure is kept and thrown again on every call. Never unloaded, so executables destroyed
// during static destruction still have their library.
template <typename Api>
const Api& load_once(const std::string& path) {
  struct Entry {
    std::unique_ptr<Api> api;
    std::optional<Error> error;
  };
  static std::mutex& mutex = *new std::mutex();
  static auto& entries = *new std::map<std::string, Entry>();
  std::lock_guard lock(mutex);
  auto [it, inserted] = entries.try_emplace(path);
  if (inserted) {
    try {
      it->second.api = Api::load(path);
    } catch (const Error& error) {
      it->second.error = error;
    }
  }
  if (it->second.error) throw *it->second.error;
  return *it->second.api;
}

}  // namespace kiln::runtime::cuda
