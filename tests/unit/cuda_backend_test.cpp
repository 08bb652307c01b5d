// The CUDA backend without a GPU: what it says when there is no driver, the driver table
// against the toolkit's stub libcuda, and the pure decisions (arena layout, code selection,
// bindings). Running kernels on a device is tests/gpu/cuda_run_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "ir/diagnostic.h"
#include "runtime/cuda/cuda_executable.h"
#include "runtime/cuda/driver_api.h"
#include "runtime/cuda/plan.h"

namespace kiln::runtime::cuda {
namespace {

using codegen::BufferRole;

constexpr const char* kNoDriverReason = "libcuda.so.1 not found (no NVIDIA driver on this machine)";
constexpr const char* kNoDriverMessage =
    "CUDA backend: libcuda.so.1 not found (no NVIDIA driver on this machine); use "
    "--backend=host to run on the CPU";

codegen::Buffer make_buffer(std::string name, ir::TensorType type, BufferRole role, int index) {
  int64_t bytes = ir::num_elements(type.shape) * static_cast<int64_t>(ir::dtype_size(type.dtype));
  return codegen::Buffer{std::move(name), std::move(type), role, index, bytes};
}

// y = x * w (w broadcast over rows): one input, one parameter, one output, one kernel.
codegen::Program make_program() {
  codegen::Program program;
  program.graph_name = "scale";
  program.source =
      "extern \"C\" __global__ void scale_0(const float* x, const float* w, float* y) {}";
  program.buffers = {make_buffer("x", {ir::DType::F32, {2, 3}}, BufferRole::Input, 0),
                     make_buffer("w", {ir::DType::F32, {3}}, BufferRole::Parameter, 0),
                     make_buffer("y", {ir::DType::F32, {2, 3}}, BufferRole::Output, 0)};
  codegen::Kernel kernel;
  kernel.name = "scale_0";
  kernel.block = {6, 1, 1};
  kernel.args = {0, 1, 2};
  program.kernels = {kernel};
  program.outputs = {2};
  return program;
}

CudaBinary make_binary(std::vector<std::string> cubin_archs, std::string ptx_arch) {
  CudaBinary binary;
  for (std::string& arch : cubin_archs) binary.cubins[arch] = "\x7f" "ELF";
  if (!ptx_arch.empty()) binary.ptx = ".version 9.0\n";
  binary.ptx_arch = std::move(ptx_arch);
  return binary;
}

// The message of the kiln::Error `body` throws; fails the test when it throws nothing.
template <typename Body>
std::string error_message(Body body) {
  try {
    body();
  } catch (const Error& error) {
    return error.diagnostic().message;
  }
  ADD_FAILURE() << "no kiln::Error thrown";
  return "";
}

// --- without a driver ------------------------------------------------------------------------

TEST(CudaBackend, UnavailableSaysWhy) {
  std::string why;
  if (cuda_available(&why)) GTEST_SKIP() << "a CUDA driver and device are present";
  ASSERT_FALSE(why.empty());
  // Asked twice, the same answer (the driver is loaded once per process).
  std::string again;
  EXPECT_FALSE(cuda_available(&again));
  EXPECT_EQ(why, again);
  if (why.find("libcuda.so.1 not found") != std::string::npos) {
    EXPECT_EQ(why, kNoDriverReason);
  }
  EXPECT_FALSE(cuda_available());  // no `why` wanted: must not crash
}

TEST(CudaBackend, CreateThrowsTheClearErrorWithoutDriver) {
  std::string why;
  if (cuda_available(&why)) GTEST_SKIP() << "a CUDA driver and device are present";
  codegen::Program program = make_program();
  std::vector<ir::Tensor> parameters = {ir::Tensor({ir::DType::F32, {3}})};
  CudaBinary binary = make_binary({"sm_80", "sm_90"}, "compute_80");
  for (bool use_graph : {true, false}) {
    try {
      CudaExecutable::create(program, binary, parameters, CudaOptions{0, use_graph});
      FAIL() << "create() succeeded without a driver";
    } catch (const Error& error) {
      EXPECT_EQ(error.diagnostic().location, "");
      EXPECT_EQ(unavailable_reason(error), why);
      if (why == kNoDriverReason) {
        EXPECT_EQ(error.diagnostic().message, kNoDriverMessage);
        EXPECT_EQ(std::string(error.what()).rfind(std::string("error: ") + kNoDriverMessage, 0), 0u)
            << error.what();
      }
    }
  }
  EXPECT_THROW(cuda_device_info(0), Error);
}

TEST(CudaBackend, CreateChecksParametersBeforeTheDriver) {
  codegen::Program program = make_program();
  CudaBinary binary = make_binary({"sm_90"}, "compute_80");
  EXPECT_EQ(error_message([&] { CudaExecutable::create(program, binary, {}, {}); }),
            "CUDA backend: graph 'scale' takes 1 parameter, got 0");
  std::vector<ir::Tensor> wrong = {ir::Tensor({ir::DType::F16, {3}})};
  EXPECT_EQ(error_message([&] { CudaExecutable::create(program, binary, wrong, {}); }),
            "CUDA backend: parameter 'w': expected f32[3], got f16[3]");
}

// --- the driver table ------------------------------------------------------------------------

TEST(CudaDriverApi, MissingLibraryIsAClearError) {
  try {
    DriverApi::load("libkiln_no_such_driver.so.1");
    FAIL() << "loaded a library that does not exist";
  } catch (const Error& error) {
    EXPECT_EQ(error.diagnostic().message,
              "CUDA backend: libkiln_no_such_driver.so.1 not found (no NVIDIA driver on this "
              "machine); use --backend=host to run on the CPU");
    ASSERT_EQ(error.diagnostic().notes.size(), 1u);  // the dynamic loader's own words
    EXPECT_NE(error.diagnostic().notes[0].find("libkiln_no_such_driver.so.1"), std::string::npos);
    EXPECT_EQ(unavailable_reason(error),
              "libkiln_no_such_driver.so.1 not found (no NVIDIA driver on this machine)");
  }
}

// The toolkit's stub libcuda exports the whole driver API (and answers every call with
// CUDA_ERROR_STUB_LIBRARY): resolving against it proves every versioned name we dlsym exists.
TEST(CudaDriverApi, StubLibraryResolvesEveryFunction) {
  // Pin the process-wide driver first: the stub's soname is libcuda.so.1, so while it is
  // loaded a dlopen("libcuda.so.1") would find it.
  (void)cuda_available();
  std::vector<std::filesystem::path> candidates = {
      "/usr/local/cuda/lib64/stubs/libcuda.so",
      "/usr/local/cuda/targets/x86_64-linux/lib/stubs/libcuda.so"};
  if (const char* home = std::getenv("CUDA_HOME"))
    candidates.insert(candidates.begin(), std::filesystem::path(home) / "lib64/stubs/libcuda.so");
  auto found = std::find_if(candidates.begin(), candidates.end(),
                            [](const auto& path) { return std::filesystem::exists(path); });
  if (found == candidates.end()) GTEST_SKIP() << "no CUDA toolkit stub libcuda.so found";

  std::unique_ptr<DriverApi> api = DriverApi::load(found->string());
#define KILN_EXPECT_RESOLVED(symbol, signature) EXPECT_NE(api->symbol, nullptr) << #symbol;
  KILN_CUDA_DRIVER_FUNCTIONS(KILN_EXPECT_RESOLVED)
#undef KILN_EXPECT_RESOLVED
  std::string message = error_message([&] { api->initialize(); });
  EXPECT_NE(message.find("CUDA toolkit's stub library, not an NVIDIA driver"), std::string::npos)
      << message;
  // The stub cannot name errors either: the number stands in for the name.
  EXPECT_EQ(api->describe(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc"), "cuMemAlloc failed: CUresult 2");
  EXPECT_EQ(error_message([&] { api->check(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc"); }),
            "CUDA backend: cuMemAlloc failed: CUresult 2");
}

TEST(CudaDriverApi, FormatsFailures) {
  EXPECT_EQ(format_driver_failure("cuMemAlloc", "", 2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"),
            "cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)");
  EXPECT_EQ(format_driver_failure("cuLaunchKernel", "kernel 'relu_0'", 1,
                                  "CUDA_ERROR_INVALID_VALUE", "invalid argument"),
            "cuLaunchKernel failed for kernel 'relu_0': CUDA_ERROR_INVALID_VALUE (invalid "
            "argument)");
  EXPECT_EQ(format_driver_failure("cuInit", "", 9999, nullptr, nullptr),
            "cuInit failed: CUresult 9999");
  EXPECT_TRUE(is_kernel_fault(CUDA_ERROR_ILLEGAL_ADDRESS));
  EXPECT_FALSE(is_kernel_fault(CUDA_ERROR_OUT_OF_MEMORY));
  EXPECT_EQ(unavailable_reason(backend_unavailable("no CUDA device")), "no CUDA device");
  EXPECT_EQ(unavailable_reason(Error("", "something else")), "something else");
  EXPECT_EQ(unavailable_reason(Error("", "CUDA backend: cuDeviceGetCount failed: X")),
            "cuDeviceGetCount failed: X");
}

// --- arena layout ----------------------------------------------------------------------------

codegen::Buffer sized(int64_t bytes) {
  codegen::Buffer buffer;
  buffer.bytes = bytes;
  return buffer;
}

TEST(CudaArena, OffsetsAreAlignedInOrder) {
  ArenaLayout layout = plan_arena({sized(1), sized(256), sized(257), sized(4)});
  EXPECT_EQ(layout.offsets, (std::vector<int64_t>{0, 256, 512, 1024}));
  EXPECT_EQ(layout.total_bytes, 1280);
  EXPECT_EQ(plan_arena({}).total_bytes, 0);
  EXPECT_THROW(plan_arena({sized(-1)}), InternalError);
}

TEST(CudaArena, RandomBuffersNeverOverlap) {
  std::mt19937_64 random(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<codegen::Buffer> buffers;
    int64_t sum = 0;
    for (int i = 0, n = 1 + static_cast<int>(random() % 20); i < n; ++i) {
      buffers.push_back(sized(1 + static_cast<int64_t>(random() % 5000)));
      sum += buffers.back().bytes;
    }
    ArenaLayout layout = plan_arena(buffers);
    ASSERT_EQ(layout.offsets.size(), buffers.size());
    EXPECT_EQ(layout.total_bytes % kArenaAlignment, 0);
    EXPECT_LT(layout.total_bytes, sum + kArenaAlignment * static_cast<int64_t>(buffers.size()));
    for (size_t i = 0; i < buffers.size(); ++i) {
      EXPECT_EQ(layout.offsets[i] % kArenaAlignment, 0);
      EXPECT_LE(layout.offsets[i] + buffers[i].bytes, layout.total_bytes);
      if (i > 0) {
        EXPECT_GE(layout.offsets[i], layout.offsets[i - 1] + buffers[i - 1].bytes);
      }
    }
  }
}

// --- code selection --------------------------------------------------------------------------

TEST(CudaArch, ParsesArchNames) {
  EXPECT_EQ(arch_number("sm_90"), 90);
  EXPECT_EQ(arch_number("compute_80"), 80);
  EXPECT_EQ(arch_number("sm_90a"), 90);
  EXPECT_EQ(arch_number("compute_120f"), 120);
  EXPECT_EQ(arch_number("sm_"), std::nullopt);
  EXPECT_EQ(arch_number("sm_90x"), std::nullopt);
  EXPECT_EQ(arch_number("gfx90a"), std::nullopt);
  EXPECT_EQ(sm_number(8, 6), 86);
  EXPECT_EQ(sm_number(12, 0), 120);
}

TEST(CudaArch, ExactCubinElsePtx) {
  CudaBinary binary = make_binary({"sm_80", "sm_90"}, "compute_80");
  EXPECT_EQ(select_code(binary, 90), (CodeChoice{CodeKind::Cubin, "sm_90"}));
  EXPECT_EQ(select_code(binary, 80), (CodeChoice{CodeKind::Cubin, "sm_80"}));
  // An sm_80 cubin would run on sm_86, but the PTX JIT-compiled for sm_86 is better code.
  EXPECT_EQ(select_code(binary, 86), (CodeChoice{CodeKind::Ptx, "compute_80"}));
  EXPECT_EQ(select_code(binary, 120), (CodeChoice{CodeKind::Ptx, "compute_80"}));
}

TEST(CudaArch, NothingFits) {
  // PTX for a newer arch than the device cannot be JIT-compiled for it.
  EXPECT_EQ(select_code(make_binary({"sm_80", "sm_90"}, "compute_80"), 75), std::nullopt);
  EXPECT_EQ(select_code(make_binary({"sm_90"}, "compute_90"), 86), std::nullopt);
  EXPECT_EQ(select_code(make_binary({"sm_80", "sm_90"}, ""), 86), std::nullopt);  // no PTX
  EXPECT_EQ(select_code(make_binary({}, ""), 90), std::nullopt);
  // Arch-specific code runs on exactly its arch.
  EXPECT_EQ(select_code(make_binary({"sm_90a"}, ""), 90), std::nullopt);
  EXPECT_EQ(select_code(make_binary({}, "compute_90a"), 100), std::nullopt);
}

TEST(CudaArch, ArchSpecificAndFamilyPtx) {
  EXPECT_EQ(select_code(make_binary({}, "compute_90a"), 90),
            (CodeChoice{CodeKind::Ptx, "compute_90a"}));
  CudaBinary family = make_binary({}, "compute_100f");
  EXPECT_EQ(select_code(family, 100), (CodeChoice{CodeKind::Ptx, "compute_100f"}));
  EXPECT_EQ(select_code(family, 103), (CodeChoice{CodeKind::Ptx, "compute_100f"}));
  EXPECT_EQ(select_code(family, 120), std::nullopt);
  EXPECT_EQ(select_code(family, 90), std::nullopt);
}

TEST(CudaArch, DescribesTheCode) {
  EXPECT_EQ(describe_code(make_binary({"sm_90", "sm_80"}, "compute_80")),
            "cubins for sm_80, sm_90 and PTX for compute_80");
  EXPECT_EQ(describe_code(make_binary({}, "compute_80")), "PTX for compute_80");
  EXPECT_EQ(describe_code(make_binary({}, "")), "no code");
}

// --- bindings --------------------------------------------------------------------------------

TEST(CudaBindings, InputsAndParametersByIndex) {
  codegen::Program program;
  program.graph_name = "g";
  ir::TensorType type{ir::DType::F32, {4}};
  program.buffers = {make_buffer("b", type, BufferRole::Input, 1),
                     make_buffer("p", type, BufferRole::Parameter, 0),
                     make_buffer("a", type, BufferRole::Input, 0),
                     make_buffer("t", type, BufferRole::Intermediate, -1),
                     make_buffer("o", type, BufferRole::Output, 0)};
  program.outputs = {4, 3};
  ProgramBindings bindings = bind_program(program);
  EXPECT_EQ(bindings.inputs, (std::vector<int>{2, 0}));
  EXPECT_EQ(bindings.parameters, (std::vector<int>{1}));
  EXPECT_EQ(bindings.outputs, (std::vector<int>{4, 3}));
}

TEST(CudaBindings, BrokenProgramsAreInternalErrors) {
  codegen::Program duplicate = make_program();
  duplicate.buffers.push_back(make_buffer("x2", {ir::DType::F32, {1}}, BufferRole::Input, 0));
  EXPECT_THROW(bind_program(duplicate), InternalError);
  codegen::Program gap = make_program();
  gap.buffers[0].index = 1;
  EXPECT_THROW(bind_program(gap), InternalError);
  codegen::Program bad_arg = make_program();
  bad_arg.kernels[0].args.push_back(7);
  EXPECT_THROW(bind_program(bad_arg), InternalError);
  codegen::Program bad_size = make_program();
  bad_size.buffers[2].bytes = 4;
  EXPECT_THROW(bind_program(bad_size), InternalError);
  codegen::Program empty_grid = make_program();
  empty_grid.kernels[0].grid.x = 0;
  EXPECT_THROW(bind_program(empty_grid), InternalError);
}

TEST(CudaBindings, InputMismatchesAreUserErrors) {
  codegen::Program program = make_program();
  ProgramBindings bindings = bind_program(program);
  std::vector<ir::Tensor> good = {ir::Tensor({ir::DType::F32, {2, 3}})};
  EXPECT_NO_THROW(check_tensors(program, "input", bindings.inputs, good));
  EXPECT_EQ(error_message([&] { check_tensors(program, "input", bindings.inputs, std::vector<ir::Tensor>{}); }),
            "CUDA backend: graph 'scale' takes 1 input, got 0");
  std::vector<ir::Tensor> shape = {ir::Tensor({ir::DType::F32, {2, 4}})};
  EXPECT_EQ(error_message([&] { check_tensors(program, "input", bindings.inputs, shape); }),
            "CUDA backend: input 'x': expected f32[2,3], got f32[2,4]");
  std::vector<ir::Tensor> dtype = {ir::Tensor({ir::DType::I32, {2, 3}})};
  EXPECT_EQ(error_message([&] { check_tensors(program, "input", bindings.inputs, dtype); }),
            "CUDA backend: input 'x': expected f32[2,3], got i32[2,3]");
}

}  // namespace
}  // namespace kiln::runtime::cuda
