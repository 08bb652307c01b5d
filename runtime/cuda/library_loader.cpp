#include "runtime/cuda/library_loader.h"

#include <dlfcn.h>

#include <fmt/format.h>

#include "ir/diagnostic.h"

namespace kiln::runtime::cuda {

SharedLibrary::SharedLibrary(const std::string& path, std::string_view what)
    : path_(path), what_(what) {
  // RTLD_LOCAL: the library's symbols must not leak into, or be taken from, other libraries.
  handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle_ == nullptr) {
    const char* detail = dlerror();
    throw Error("", fmt::format("{}: {} not found ({})", what_, path_,
                                detail != nullptr ? detail : "no detail from the loader"));
  }
}

SharedLibrary::~SharedLibrary() {
  if (handle_ != nullptr) dlclose(handle_);
}

void* SharedLibrary::symbol(const char* symbol, std::string_view why) const {
  void* address = dlsym(handle_, symbol);
  if (address == nullptr)
    throw Error("", fmt::format("{}: {} has no function {} ({})", what_, path_, symbol, why));
  return address;
}

}  // namespace kiln::runtime::cuda
