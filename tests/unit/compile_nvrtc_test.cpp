// NVRTC on a small hand-written translation unit (no GPU needed): PTX, cubins, the ptxas
// report, compile errors annotated with their kernel, and the cache around it all.
// Real compiles are slow-ish, so the plain result is compiled once and shared.
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>

#include "ir/diagnostic.h"
#include "runtime/compile/nvrtc.h"
#include "runtime/compile/occupancy.h"
#include "tests/unit/io_test_util.h"

namespace kiln::runtime {
namespace {

// The shape of kiln's generated code: dynamic shared memory declared under __CUDACC__,
// extern "C" kernels with __launch_bounds__. Plus one kernel with static shared memory so
// that the report's smem figure is exercised.
const char* const kTestSource = R"(// compile_nvrtc_test.cu
#ifdef __CUDACC__
extern __shared__ __align__(16) unsigned char kiln_smem[];
#endif

extern "C" __global__ void __launch_bounds__(256) relu_0(const float* x, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

// 16x16 tiles of a and b in dynamic shared memory; n is a multiple of 16.
extern "C" __global__ void __launch_bounds__(256) matmul_1(const float* a, const float* b,
                                                           float* c, int n) {
  constexpr int kTile = 16;
  float* tile_a = reinterpret_cast<float*>(kiln_smem);
  float* tile_b = tile_a + kTile * (kTile + 1);
  const int row = blockIdx.y * kTile + threadIdx.y;
  const int col = blockIdx.x * kTile + threadIdx.x;
  float acc = 0.0f;
  for (int k0 = 0; k0 < n; k0 += kTile) {
    tile_a[threadIdx.y * (kTile + 1) + threadIdx.x] = a[row * n + k0 + threadIdx.x];
    tile_b[threadIdx.y * kTile + threadIdx.x] = b[(k0 + threadIdx.y) * n + col];
    __syncthreads();
    for (int k = 0; k < kTile; ++k)
      acc += tile_a[threadIdx.y * (kTile + 1) + k] * tile_b[k * kTile + threadIdx.x];
    __syncthreads();
  }
  c[row * n + col] = acc;
}

extern "C" __global__ void __launch_bounds__(256) transpose_2(const float* in, float* out) {
  __shared__ float tile[16][17];
  tile[threadIdx.y][threadIdx.x] = in[threadIdx.y * 16 + threadIdx.x];
  __syncthreads();
  out[threadIdx.y * 16 + threadIdx.x] = tile[threadIdx.x][threadIdx.y];
}
)";

// The matmul's dynamic shared memory: a padded tile of a and a tile of b.
constexpr int kMatmulSharedBytes = (16 * 17 + 16 * 16) * 4;  // 2112

const CudaBinary& compiled_once() {
  static const CudaBinary binary = [] {
    NvrtcOptions options;  // sm_80 and sm_90, no cache
    const auto start = std::chrono::steady_clock::now();
    CudaBinary result = compile_with_nvrtc(kTestSource, "compile_nvrtc_test.cu", options);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::cout << "[ timing   ] NVRTC PTX + 2 cubins, no cache: " << seconds << " s\n";
    return result;
  }();
  return binary;
}

const KernelResources* find(const CudaBinary& binary, const std::string& kernel,
                            const std::string& arch) {
  for (const KernelResources& resources : binary.resources)
    if (resources.kernel == kernel && resources.arch == arch) return &resources;
  return nullptr;
}

TEST(NvrtcTest, VersionNamesNvrtc) {
  EXPECT_EQ(nvrtc_version().rfind("nvrtc ", 0), 0u) << nvrtc_version();
}

TEST(NvrtcTest, PtxForLowestArch) {
  const CudaBinary& binary = compiled_once();
  EXPECT_EQ(binary.ptx_arch, "compute_80");
  ASSERT_FALSE(binary.ptx.empty());
  EXPECT_NE(binary.ptx.find(".entry relu_0"), std::string::npos);
  EXPECT_NE(binary.ptx.find(".entry matmul_1"), std::string::npos);
  EXPECT_NE(binary.ptx.find(".target sm_80"), std::string::npos);
  EXPECT_EQ(binary.ptx.find('\0'), std::string::npos) << "PTX text must not carry the NUL";
  EXPECT_FALSE(binary.from_cache);
  EXPECT_EQ(binary.compiler, nvrtc_version());
}

TEST(NvrtcTest, CubinPerArchIsElf) {
  const CudaBinary& binary = compiled_once();
  ASSERT_EQ(binary.cubins.size(), 2u);
  for (const std::string arch : {"sm_80", "sm_90"}) {
    ASSERT_TRUE(binary.cubins.count(arch)) << arch;
    const std::string& cubin = binary.cubins.at(arch);
    ASSERT_GT(cubin.size(), 4u);
    EXPECT_EQ(cubin.substr(0, 4), std::string("\x7f" "ELF")) << arch;
  }
}

TEST(NvrtcTest, ResourcesPerKernelAndArch) {
  const CudaBinary& binary = compiled_once();
  EXPECT_EQ(binary.resources.size(), 6u);  // 3 kernels x 2 archs
  for (const std::string arch : {"sm_80", "sm_90"}) {
    for (const std::string kernel : {"relu_0", "matmul_1", "transpose_2"}) {
      const KernelResources* resources = find(binary, kernel, arch);
      ASSERT_NE(resources, nullptr) << kernel << " " << arch;
      EXPECT_GT(resources->registers, 0) << kernel << " " << arch;
      EXPECT_LE(resources->registers, 255);
      EXPECT_EQ(resources->spill_store_bytes, 0) << kernel << " " << arch;
      EXPECT_EQ(resources->spill_load_bytes, 0) << kernel << " " << arch;
      EXPECT_EQ(resources->stack_frame_bytes, 0) << kernel << " " << arch;
    }
    // Dynamic shared memory is not in the report; static shared memory is.
    EXPECT_EQ(find(binary, "relu_0", arch)->static_shared_bytes, 0);
    EXPECT_EQ(find(binary, "matmul_1", arch)->static_shared_bytes, 0);
    EXPECT_EQ(find(binary, "transpose_2", arch)->static_shared_bytes, 16 * 17 * 4);
    EXPECT_EQ(find(binary, "relu_0", arch)->barriers, 0);
    EXPECT_EQ(find(binary, "matmul_1", arch)->barriers, 1);
  }
}

TEST(NvrtcTest, MatmulOccupancyFromReport) {
  const KernelResources* matmul = find(compiled_once(), "matmul_1", "sm_90");
  ASSERT_NE(matmul, nullptr);
  const Occupancy occupancy =
      theoretical_occupancy("sm_90", 256, matmul->registers, kMatmulSharedBytes);
  EXPECT_GE(occupancy.active_blocks_per_sm, 4);
  EXPECT_GT(occupancy.fraction(), 0.49);
}

// One TU with two errors: in a device helper (no kernel) and in conv2d_3 after a complete
// kernel, so the annotation must not blame relu_0.
const char* const kBrokenSource = R"(#ifdef __CUDACC__
extern __shared__ __align__(16) unsigned char kiln_smem[];
#endif
__device__ float helper(float x) {
  return x * undefined_scale;
}
extern "C" __global__ void __launch_bounds__(128) relu_0(const float* x, float* out) {
  out[threadIdx.x] = fmaxf(x[threadIdx.x], 0.0f);
}
extern "C" __global__ void __launch_bounds__(128)
conv2d_3(const float* x, float* out) {
  const int i = threadIdx.x;
  out[i] = x[i] * missing_weight;
}
)";

TEST(NvrtcTest, CompileErrorNamesKernelAndLine) {
  NvrtcOptions options;
  options.archs = {"sm_90"};
  try {
    compile_with_nvrtc(kBrokenSource, "broken.cu", options);
    FAIL() << "expected a compile error";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_EQ(error.diagnostic().location, "broken.cu");
    EXPECT_NE(message.find("broken.cu(13): error"), std::string::npos) << message;
    EXPECT_NE(message.find("  in kernel 'conv2d_3', source line: out[i] = x[i] * missing_weight;"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("broken.cu(5): error"), std::string::npos) << message;
    EXPECT_NE(message.find("  outside any kernel, source line: return x * undefined_scale;"),
              std::string::npos)
        << message;
    EXPECT_EQ(message.find("in kernel 'relu_0'"), std::string::npos) << message;
  }
}

TEST(NvrtcTest, UnknownArchIsUserError) {
  NvrtcOptions options;
  options.archs = {"volta"};
  EXPECT_THROW(compile_with_nvrtc(kTestSource, "t.cu", options), Error);
  options.archs = {};
  EXPECT_THROW(compile_with_nvrtc(kTestSource, "t.cu", options), Error);
}

TEST(NvrtcTest, CacheHitMatchesColdCompile) {
  const std::filesystem::path dir = testing_util::fresh_test_dir();
  KernelCache cache(dir.string());
  NvrtcOptions options;
  options.cache = &cache;

  auto timed = [&](const NvrtcOptions& opts, double* seconds) {
    const auto start = std::chrono::steady_clock::now();
    CudaBinary binary = compile_with_nvrtc(kTestSource, "compile_nvrtc_test.cu", opts);
    *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return binary;
  };
  double cold_s = 0, hit_s = 0;
  const CudaBinary cold = timed(options, &cold_s);
  EXPECT_FALSE(cold.from_cache);
  // ptx + (cubin, resources) per arch
  EXPECT_EQ(cache.info().entries, 5);

  const CudaBinary hit = timed(options, &hit_s);
  std::cout << "[ timing   ] NVRTC PTX + 2 cubins: cold " << cold_s << " s, cache hit " << hit_s
            << " s\n";
  EXPECT_TRUE(hit.from_cache);
  EXPECT_EQ(hit.ptx, cold.ptx);
  EXPECT_EQ(hit.ptx_arch, cold.ptx_arch);
  EXPECT_EQ(hit.cubins, cold.cubins);
  ASSERT_EQ(hit.resources.size(), cold.resources.size());
  for (size_t i = 0; i < hit.resources.size(); ++i) {
    EXPECT_EQ(hit.resources[i].kernel, cold.resources[i].kernel);
    EXPECT_EQ(hit.resources[i].registers, cold.resources[i].registers);
  }

  // Changed flags miss, and --verbose says why.
  NvrtcOptions changed = options;
  changed.archs = {"sm_90"};
  changed.extra_flags = {"--use_fast_math"};
  changed.verbose = true;
  ::testing::internal::CaptureStderr();
  const CudaBinary fast = compile_with_nvrtc(kTestSource, "compile_nvrtc_test.cu", changed);
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_FALSE(fast.from_cache);
  EXPECT_EQ(fast.ptx_arch, "compute_90");
  EXPECT_NE(said.find("kiln: cache miss for kind=cubin target=sm_90"), std::string::npos) << said;
  EXPECT_NE(said.find("--use_fast_math"), std::string::npos) << said;
  EXPECT_NE(said.find(": no entry"), std::string::npos) << said;

  // A subset of the archs already compiled is all hits (sm_80's ptx doubles for sm_80 alone).
  NvrtcOptions subset = options;
  subset.archs = {"sm_80"};
  EXPECT_TRUE(compile_with_nvrtc(kTestSource, "compile_nvrtc_test.cu", subset).from_cache);
}

TEST(PtxasReportTest, CannedLog) {
  const std::string log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Function properties for helper_fn\n"
      "ptxas         .     24 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Compiling entry function 'relu_0' for 'sm_90'\n"
      "ptxas info    : Function properties for relu_0\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 8 registers, used 0 barriers\n"
      "ptxas info    : Compile time = 1.372 ms\n"
      "ptxas info    : Compiling entry function 'conv2d_3' for 'sm_80'\n"
      "ptxas info    : Function properties for conv2d_3\n"
      "ptxas         .     40 bytes stack frame, 16 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Function properties for device_helper\n"
      "ptxas         .     8 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 255 registers, used 1 barriers, 2112 bytes smem, 380 bytes cmem[0], "
      "8 bytes cmem[2]\n";
  const std::vector<KernelResources> kernels = parse_ptxas_report(log);
  ASSERT_EQ(kernels.size(), 2u);
  EXPECT_EQ(kernels[0].kernel, "relu_0");
  EXPECT_EQ(kernels[0].arch, "sm_90");
  EXPECT_EQ(kernels[0].registers, 8);
  EXPECT_EQ(kernels[0].stack_frame_bytes, 0);
  EXPECT_EQ(kernels[0].static_shared_bytes, 0);
  EXPECT_EQ(kernels[0].constant_bytes, 0);
  EXPECT_EQ(kernels[1].kernel, "conv2d_3");
  EXPECT_EQ(kernels[1].arch, "sm_80");
  EXPECT_EQ(kernels[1].registers, 255);
  EXPECT_EQ(kernels[1].barriers, 1);
  EXPECT_EQ(kernels[1].stack_frame_bytes, 40);  // not the helper's 8
  EXPECT_EQ(kernels[1].spill_store_bytes, 16);
  EXPECT_EQ(kernels[1].spill_load_bytes, 12);
  EXPECT_EQ(kernels[1].static_shared_bytes, 2112);
  EXPECT_EQ(kernels[1].constant_bytes, 388);
}

// As NVRTC 13.0 prints it for two kernels calling a __noinline__ helper.
TEST(PtxasReportTest, CalleePropertiesAfterEntry) {
  const std::string log =
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function 'k1' for 'sm_80'\n"
      "ptxas info    : Function properties for k1\n"
      "ptxas         .     128 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 40 registers, used 0 barriers, 128 bytes cumulative stack size, "
      "364 bytes cmem[0]\n"
      "ptxas info    : Compile time = 21.750 ms\n"
      "ptxas info    : Function properties for _Z6helperPfi\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Compiling entry function 'k0' for 'sm_80'\n"
      "ptxas info    : Function properties for k0\n"
      "ptxas         .     128 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 40 registers, used 0 barriers, 128 bytes cumulative stack size, "
      "364 bytes cmem[0]\n";
  const std::vector<KernelResources> kernels = parse_ptxas_report(log);
  ASSERT_EQ(kernels.size(), 2u);
  for (const KernelResources& kernel : kernels) {
    EXPECT_EQ(kernel.registers, 40) << kernel.kernel;
    EXPECT_EQ(kernel.stack_frame_bytes, 128) << kernel.kernel;
    EXPECT_EQ(kernel.constant_bytes, 364) << kernel.kernel;
  }
  EXPECT_EQ(kernels[0].kernel, "k1");
  EXPECT_EQ(kernels[1].kernel, "k0");
}

TEST(PtxasReportTest, EmptyAndUnrelatedLogs) {
  EXPECT_TRUE(parse_ptxas_report("").empty());
  EXPECT_TRUE(parse_ptxas_report("t.cu(3): warning #177-D: variable \"y\" unused\n").empty());
}

}  // namespace
}  // namespace kiln::runtime
