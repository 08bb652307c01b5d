// Small helpers the library runners share (library_runner.cpp, conv_grad_runner.cpp).
#pragma once

#include <cuda.h>
#include <fmt/format.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>

namespace kiln::runtime::cuda {

// Owns one library object (a descriptor, a preference) and destroys it with the library's
// function; the status of a destroy is ignored, as a destructor cannot report it.
template <typename Handle>
using Unique = std::unique_ptr<std::remove_pointer_t<Handle>, std::function<void(Handle)>>;

template <typename Handle, typename Status>
Unique<Handle> own(Handle handle, Status (*destroy)(Handle)) {
  return Unique<Handle>(handle, [destroy](Handle h) { (void)destroy(h); });
}

inline void* device_pointer(CUdeviceptr address) { return reinterpret_cast<void*>(address); }

inline std::string kernel_context(std::string_view kernel_name) {
  return fmt::format("kernel '{}'", kernel_name);
}

// A dimension for cuDNN's int API; codegen checked it is below 2^31.
inline int to_int(int64_t value) { return static_cast<int>(value); }

}  // namespace kiln::runtime::cuda
