// The pieces of the CUDA backend's library path that need neither a device nor a mock: the
// arena's workspace region, and the cuBLASLt and cuDNN function tables against the libraries
// installed with the toolkit (dlopen and dlsym only; a handle would need a device).
#include <gtest/gtest.h>

#include "ir/diagnostic.h"
#include "runtime/cuda/cublaslt_api.h"
#include "runtime/cuda/cudnn_api.h"
#include "runtime/cuda/plan.h"

namespace kiln::runtime::cuda {
namespace {

using codegen::BufferRole;

codegen::Buffer make_buffer(std::string name, int64_t bytes, BufferRole role,
                            int64_t arena_offset = -1) {
  codegen::Buffer buffer;
  buffer.name = std::move(name);
  buffer.bytes = bytes;
  buffer.role = role;
  buffer.arena_offset = arena_offset;
  return buffer;
}

TEST(LibraryArena, WorkspaceFollowsTheActivations) {
  const std::vector<codegen::Buffer> buffers = {
      make_buffer("x", 100, BufferRole::Input),
      make_buffer("t", 1000, BufferRole::Intermediate, 0),
      make_buffer("y", 40, BufferRole::Output)};
  const ArenaLayout layout = plan_arena(buffers, 1000);
  EXPECT_EQ(layout.offsets[0], 0);
  EXPECT_EQ(layout.offsets[2], 256);
  EXPECT_EQ(layout.offsets[1], 512);         // the activation region
  EXPECT_EQ(layout.workspace_offset, 1536);  // after t's 1000 bytes, aligned
  EXPECT_EQ(layout.workspace_bytes, 1024);
  EXPECT_EQ(layout.total_bytes, 2560);
  EXPECT_EQ(plan_arena(buffers).workspace_offset, -1);
  EXPECT_EQ(plan_arena(buffers).total_bytes, 1536);
}

TEST(LibraryArena, WorkspaceIsTheLargestUsableCall) {
  codegen::Program program;
  codegen::Kernel conv, dense, plain;
  conv.library.emplace().library = "cudnn";
  conv.library->workspace_bytes = 3000;
  dense.library.emplace().library = "cublasLt";
  dense.library->workspace_bytes = 5000;
  program.kernels = {conv, dense, plain};
  EXPECT_EQ(library_workspace_bytes(program, {true, true}), 5120);
  EXPECT_EQ(library_workspace_bytes(program, {false, true}), 3072);
  EXPECT_EQ(library_workspace_bytes(program, {false, false}), 0);
}

// The installed libraries export every function with the header's name (dlopen and dlsym need
// no GPU; creating a handle would).
TEST(LibraryApis, ResolveAgainstTheInstalledLibraries) {
  // The process-wide tables, which are never unloaded: a vendor library's own allocations
  // stay reachable (LeakSanitizer) and its code mapped for anything that still runs at exit.
  const CublasLtApi* lt = nullptr;
  const CudnnApi* dnn = nullptr;
  try {
    lt = &cublaslt();
    dnn = &cudnn();
  } catch (const Error& error) {
    if (error.diagnostic().message.find("not found") != std::string::npos)
      GTEST_SKIP() << "library not installed: " << error.diagnostic().message;
    throw;
  }
  EXPECT_NE(lt->cublasLtMatmul, nullptr);
  EXPECT_GE(lt->cublasLtGetVersion() / 10000, 13u);
  EXPECT_EQ(lt->describe(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmul", "kernel 'd'").rfind(
                "cublasLtMatmul failed for kernel 'd': CUBLAS_STATUS_NOT_SUPPORTED (", 0),
            0u);
  EXPECT_NE(dnn->cudnnConvolutionBiasActivationForward, nullptr);
  EXPECT_EQ(dnn->version() / 10000, 9u);
  EXPECT_EQ(dnn->describe(CUDNN_STATUS_BAD_PARAM, "cudnnSetStream"),
            "cudnnSetStream failed: CUDNN_STATUS_BAD_PARAM");
}

TEST(LibraryApis, MissingLibraryOrFunctionIsAClearError) {
  try {
    CublasLtApi::load("libkiln_no_such_library.so");
    FAIL() << "loaded a missing library";
  } catch (const Error& error) {
    EXPECT_EQ(error.diagnostic().message.rfind(
                  "cuBLASLt: libkiln_no_such_library.so not found (", 0),
              0u)
        << error.diagnostic().message;
  }
  try {
    CudnnApi::load("libm.so.6");
    FAIL() << "took libm for cuDNN";
  } catch (const Error& error) {
    EXPECT_EQ(error.diagnostic().message,
              "cuDNN: libm.so.6 has no function cudnnGetVersion (kiln needs cuDNN 9's legacy "
              "API)");
  }
}

}  // namespace
}  // namespace kiln::runtime::cuda
