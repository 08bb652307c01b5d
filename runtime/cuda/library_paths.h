// Where the CUDA backend loads the vendor libraries from (dlopen names; the sonames' major
// versions are the ABIs kiln is built against: CUDA 13's cuBLASLt, cuDNN 9, NCCL 2).
#pragma once

#include <string>

namespace kiln::runtime::cuda {

inline constexpr const char* kCublasLtLibraryFile = "libcublasLt.so.13";
inline constexpr const char* kCudnnLibraryFile = "libcudnn.so.9";
inline constexpr const char* kNcclLibraryFile = "libnccl.so.2";  // data-parallel training

// Tests point these at mock libraries (tests/mocks/).
struct LibraryPaths {
  std::string cublaslt = kCublasLtLibraryFile;
  std::string cudnn = kCudnnLibraryFile;
  std::string nccl = kNcclLibraryFile;
};

}  // namespace kiln::runtime::cuda
