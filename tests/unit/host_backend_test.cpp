// The host backend end to end: hand-written CUDA kernels compiled with g++ against the prelude
// and run on the CPU, in plain-loop and fiber modes, every schedule, one and two workers.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <stdexcept>

#include "ir/diagnostic.h"
#include "tests/unit/host_test_util.h"

namespace kiln::runtime::host {
namespace {

using testing::options_for;
using testing::same_bits;

constexpr int kM = 50, kN = 40, kK = 56, kTile = 16;  // not multiples of the tile, on purpose

const char* const kKernels = R"(
// out = 2 * a + b over 1000 elements; no barriers.
extern "C" __global__ void __launch_bounds__(128) scale_add_0(
    const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < 1000) out[i] = 2.0f * a[i] + b[i];
}

// C[50x40] = A[50x56] * B[56x40] with 16x16 tiles carved from kiln_smem.
#define TILED_MATMUL(NAME, SECOND_BARRIER)                                          \
extern "C" __global__ void __launch_bounds__(256) NAME(                               \
    const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C) { \
  float* As = reinterpret_cast<float*>(kiln_smem);                                     \
  float* Bs = As + 16 * 16;                                                            \
  const int tx = threadIdx.x, ty = threadIdx.y;                                        \
  const int row = blockIdx.y * 16 + ty, col = blockIdx.x * 16 + tx;                    \
  float acc = 0.0f;                                                                    \
  for (int t = 0; t < (56 + 15) / 16; ++t) {                                           \
    const int ka = t * 16 + tx, kb = t * 16 + ty;                                      \
    As[ty * 16 + tx] = (row < 50 && ka < 56) ? A[row * 56 + ka] : 0.0f;                \
    Bs[ty * 16 + tx] = (kb < 56 && col < 40) ? B[kb * 40 + col] : 0.0f;                \
    __syncthreads();                                                                   \
    for (int k = 0; k < 16; ++k) acc += As[ty * 16 + k] * Bs[k * 16 + tx];             \
    if (SECOND_BARRIER) __syncthreads();                                               \
  }                                                                                    \
  if (row < 50 && col < 40) C[row * 40 + col] = acc;                                   \
}
TILED_MATMUL(matmul_1, true)
TILED_MATMUL(matmul_racy_2, false)

// One sum per block of 256: warp shuffles, partial sums in kiln_smem, a barrier, then warp 0.
extern "C" __global__ void __launch_bounds__(256) block_sum_3(
    const float* __restrict__ x, float* __restrict__ out) {
  float* partial = reinterpret_cast<float*>(kiln_smem);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  float v = x[blockIdx.x * 256 + tid];
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < 8 ? partial[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
    if (lane == 0) out[blockIdx.x] = v;
  }
}

// Each thread reads its left neighbour's slot with no barrier in between: a race that only
// shows when the neighbour has not run yet (reverse/random order) and the slot is poisoned.
// neighbour_race_block_10 is the same kernel with a block entry (kiln_host_block_, as codegen
// emits for kernels without barriers): one call runs the block's threads in the given order.
#define NEIGHBOUR_RACE(NAME)                                                           \
extern "C" __global__ void __launch_bounds__(64) NAME(                                \
    const float* __restrict__ x, float* __restrict__ out) {                           \
  float* s = reinterpret_cast<float*>(kiln_smem);                                     \
  const int tid = threadIdx.x;                                                        \
  s[tid] = x[tid];                                                                    \
  out[tid] = tid > 0 ? s[tid - 1] : 0.0f;                                             \
}
NEIGHBOUR_RACE(neighbour_race_4)
NEIGHBOUR_RACE(neighbour_race_block_10)

// Reads shared memory nobody wrote.
extern "C" __global__ void __launch_bounds__(32) read_unwritten_5(float* __restrict__ out) {
  out[threadIdx.x] = reinterpret_cast<const float*>(kiln_smem)[threadIdx.x];
}

// Writes one float past the end of its 64-byte arena.
extern "C" __global__ void __launch_bounds__(16) overrun_6(float* __restrict__ out) {
  float* s = reinterpret_cast<float*>(kiln_smem);
  s[threadIdx.x + 1] = 1.0f;
  out[threadIdx.x] = 0.0f;
}

// __syncthreads in a kernel launched without uses_barriers.
extern "C" __global__ void __launch_bounds__(32) needs_fibers_7(float* __restrict__ out) {
  out[threadIdx.x] = 1.0f;
  __syncthreads();
}

// Throws (not CUDA, but host C++): exceptions leave fibers and worker threads.
extern "C" __global__ void __launch_bounds__(64) throws_8(float* __restrict__ out) {
  __syncthreads();
  if (blockIdx.x == 3 && threadIdx.x == 5) throw std::runtime_error("thrown by block 3");
  out[blockIdx.x * 64 + threadIdx.x] = 1.0f;
}

// Large local array on the fiber stack (64 KB per thread).
extern "C" __global__ void __launch_bounds__(64) big_stack_9(float* __restrict__ out) {
  volatile float local[16384];
  for (int i = 0; i < 16384; ++i) local[i] = static_cast<float>(i + threadIdx.x);
  __syncthreads();
  float sum = 0.0f;
  for (int i = 0; i < 16384; i += 4096) sum += local[i];
  out[threadIdx.x] = sum;
}

// A host-specific body as codegen writes one: thread 0 does the block's work, the others return;
// the CUDA body below has a barrier. Counts the threads that run, and each block's sum.
extern "C" __global__ void __launch_bounds__(128) host_body_11(
    const float* __restrict__ x, float* __restrict__ sums, int* __restrict__ threads_run) {
  atomicAdd(threads_run, 1);
  if (kiln_host_variant()) {
    if (threadIdx.x != 0) return;
    float sum = 0.0f;
    for (int t = 0; t < 128; ++t) sum += x[blockIdx.x * 128 + t];
    sums[blockIdx.x] = sum;
    return;
  }
  float* s = reinterpret_cast<float*>(kiln_smem);
  s[threadIdx.x] = x[blockIdx.x * 128 + threadIdx.x];
  __syncthreads();
  if (threadIdx.x == 0) {
    float sum = 0.0f;
    for (int t = 0; t < 128; ++t) sum += s[t];
    sums[blockIdx.x] = sum;
  }
}
)";

const char* const kEntries = R"(
#include <stdexcept>
extern "C" void kiln_host_entry_scale_add_0(void* const* args) {
  scale_add_0(static_cast<const float*>(args[0]), static_cast<const float*>(args[1]),
              static_cast<float*>(args[2]));
}
extern "C" void kiln_host_entry_matmul_1(void* const* args) {
  matmul_1(static_cast<const float*>(args[0]), static_cast<const float*>(args[1]),
           static_cast<float*>(args[2]));
}
extern "C" void kiln_host_entry_matmul_racy_2(void* const* args) {
  matmul_racy_2(static_cast<const float*>(args[0]), static_cast<const float*>(args[1]),
                static_cast<float*>(args[2]));
}
extern "C" void kiln_host_entry_block_sum_3(void* const* args) {
  block_sum_3(static_cast<const float*>(args[0]), static_cast<float*>(args[1]));
}
extern "C" void kiln_host_entry_neighbour_race_4(void* const* args) {
  neighbour_race_4(static_cast<const float*>(args[0]), static_cast<float*>(args[1]));
}
extern "C" void kiln_host_entry_neighbour_race_block_10(void* const* args) {
  neighbour_race_block_10(static_cast<const float*>(args[0]), static_cast<float*>(args[1]));
}
extern "C" void kiln_host_block_neighbour_race_block_10(void* const* args,
                                                        kiln_host_thread* const* threads,
                                                        unsigned count) {
  for (unsigned t = 0; t < count; ++t) {
    kiln_host_current = threads[t];
    neighbour_race_block_10(static_cast<const float*>(args[0]), static_cast<float*>(args[1]));
  }
}
extern "C" void kiln_host_entry_read_unwritten_5(void* const* args) {
  read_unwritten_5(static_cast<float*>(args[0]));
}
extern "C" void kiln_host_entry_overrun_6(void* const* args) {
  overrun_6(static_cast<float*>(args[0]));
}
extern "C" void kiln_host_entry_needs_fibers_7(void* const* args) {
  needs_fibers_7(static_cast<float*>(args[0]));
}
extern "C" void kiln_host_entry_throws_8(void* const* args) {
  throws_8(static_cast<float*>(args[0]));
}
extern "C" void kiln_host_entry_big_stack_9(void* const* args) {
  big_stack_9(static_cast<float*>(args[0]));
}
extern "C" void kiln_host_entry_host_body_11(void* const* args) {
  host_body_11(static_cast<const float*>(args[0]), static_cast<float*>(args[1]),
               static_cast<int*>(args[2]));
}
)";

// <stdexcept> must come before the prelude's qualifier macros: put it first.
std::string test_source() {
  return "#include <stdexcept>\n" + testing::translation_unit(kKernels, kEntries);
}

// Compiled once for the whole file, on first use inside a test: a compile error then fails
// that test (SetUpTestSuite would turn it into skipped tests).
class HostBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static HostModule compiled =
        HostModule::compile(test_source(), "host_backend_test", testing::test_cache());
    module_ = &compiled;
  }
  const HostModule* module_ = nullptr;
};

std::vector<float> iota_floats(size_t n, float scale, float offset) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>((i * 37) % 101) * scale + offset;
  return v;
}

struct MatmulData {
  std::vector<float> a = iota_floats(kM * kK, 0.013f, -0.5f);
  std::vector<float> b = iota_floats(kK * kN, -0.021f, 0.75f);
  std::vector<float> reference = std::vector<float>(kM * kN);
  MatmulData() {
    for (int i = 0; i < kM; ++i)
      for (int j = 0; j < kN; ++j) {
        float acc = 0.0f;
        for (int k = 0; k < kK; ++k) acc += a[i * kK + k] * b[k * kN + j];
        reference[i * kN + j] = acc;
      }
  }
  std::vector<float> run(const HostModule& module, const char* kernel, const HostOptions& options) {
    std::vector<float> c(kM * kN, -1.0f);
    void* args[] = {a.data(), b.data(), c.data()};
    module.launch(kernel, args, {(kN + kTile - 1) / kTile, (kM + kTile - 1) / kTile, 1},
                  {kTile, kTile, 1}, 2 * kTile * kTile * sizeof(float), true, options);
    return c;
  }
};

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float worst = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) {
    const float d = std::fabs(a[i] - b[i]);
    worst = (d != d || d > worst) ? (d != d ? INFINITY : d) : worst;
  }
  return worst;
}

TEST_F(HostBackendTest, ElementwiseRunsAsPlainLoop) {
  std::vector<float> a = iota_floats(1000, 0.5f, -3.0f), b = iota_floats(1000, 0.25f, 1.0f);
  for (const char* schedule : {"order", "reverse", "random:3"}) {
    for (int workers : {1, 2}) {
      std::vector<float> out(1000, 0.0f);
      void* args[] = {a.data(), b.data(), out.data()};
      module_->launch("scale_add_0", args, {8, 1, 1}, {128, 1, 1}, 0, false,
                      options_for(schedule, workers));
      for (int i = 0; i < 1000; ++i) ASSERT_EQ(out[i], 2.0f * a[i] + b[i]) << schedule << " " << i;
    }
  }
}

TEST_F(HostBackendTest, TiledMatmulIsBitwiseEqualToPlainLoopInEverySchedule) {
  MatmulData data;
  for (const char* schedule : {"order", "reverse", "random:1", "random:99"}) {
    for (int workers : {1, 2}) {
      std::vector<float> c = data.run(*module_, "matmul_1", options_for(schedule, workers));
      EXPECT_TRUE(same_bits(c, data.reference))
          << schedule << ", " << workers << " worker(s): max diff "
          << max_abs_diff(c, data.reference);
    }
  }
}

TEST_F(HostBackendTest, MissingSecondBarrierIsCaught) {
  MatmulData data;
  for (const char* schedule : {"reverse", "random:1", "random:2"}) {
    for (int workers : {1, 2}) {
      std::vector<float> c = data.run(*module_, "matmul_racy_2", options_for(schedule, workers));
      EXPECT_GT(max_abs_diff(c, data.reference), 0.5f) << schedule << ", " << workers;
    }
  }
}

TEST_F(HostBackendTest, NeighbourRaceHidesInOrderAndShowsInOtherSchedules) {
  std::vector<float> x = iota_floats(64, 1.0f, 1.0f);
  // The same kernel called thread by thread, and through its block entry: both follow the
  // schedule's order.
  for (const char* kernel : {"neighbour_race_4", "neighbour_race_block_10"}) {
    auto run = [&](const std::string& schedule, bool poison) {
      std::vector<float> out(64, 0.0f);
      void* args[] = {x.data(), out.data()};
      HostOptions options = options_for(schedule);
      options.poison_shared = poison;
      module_->launch(kernel, args, {1, 1, 1}, {64, 1, 1}, 64 * sizeof(float), false, options);
      int wrong = 0;
      for (int i = 1; i < 64; ++i) wrong += !(out[i] == x[i - 1]);
      return wrong;
    };
    SCOPED_TRACE(kernel);
    EXPECT_EQ(run("order", true), 0);  // the race is real but in-order execution hides it
    EXPECT_EQ(run("reverse", true), 63);
    EXPECT_GT(run("random:5", true), 0);
  }
  EXPECT_FALSE(module_->has_block_entry("neighbour_race_4"));
  EXPECT_TRUE(module_->has_block_entry("neighbour_race_block_10"));
}

// A kernel's host body runs as thread 0 alone (lone_thread), without fibers; its CUDA body
// (cuda_variants) runs every thread through the barrier. Both give the same sums.
TEST_F(HostBackendTest, HostBodyRunsAsThreadZeroAlone) {
  constexpr int kBlocks = 5;
  std::vector<float> x = iota_floats(kBlocks * 128, 0.5f, -7.0f);
  for (const bool lone : {true, false}) {
    for (int workers : {1, 2}) {
      std::vector<float> sums(kBlocks, -1.0f);
      int threads_run = 0;
      void* args[] = {x.data(), sums.data(), &threads_run};
      HostOptions options = options_for("random:2", workers);
      options.cuda_variants = !lone;
      module_->launch("host_body_11", args, {kBlocks, 1, 1}, {128, 1, 1}, 128 * sizeof(float),
                      /*uses_barriers=*/true, options, /*lone_thread=*/lone);
      EXPECT_EQ(threads_run, lone ? kBlocks : kBlocks * 128) << "lone " << lone;
      for (int b = 0; b < kBlocks; ++b) {
        float want = 0.0f;
        for (int t = 0; t < 128; ++t) want += x[b * 128 + t];
        EXPECT_EQ(sums[b], want) << "block " << b << ", lone " << lone;
      }
    }
  }
}

TEST_F(HostBackendTest, BlockReductionWithShufflesAndBarrier) {
  constexpr int kBlocks = 6;
  std::vector<float> x(kBlocks * 256);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int>(i % 13) - 6);
  for (const char* schedule : {"order", "reverse", "random:4"}) {
    for (int workers : {1, 2}) {
      std::vector<float> out(kBlocks, -1.0f);
      void* args[] = {x.data(), out.data()};
      module_->launch("block_sum_3", args, {kBlocks, 1, 1}, {256, 1, 1}, 8 * sizeof(float), true,
                      options_for(schedule, workers));
      for (int b = 0; b < kBlocks; ++b) {
        float expected = 0.0f;  // small integers: every order sums exactly
        for (int i = 0; i < 256; ++i) expected += x[b * 256 + i];
        EXPECT_EQ(out[b], expected) << schedule << " block " << b;
      }
    }
  }
}

TEST_F(HostBackendTest, PoisonedSharedMemoryReadsAsNaN) {
  for (bool poison : {true, false}) {
    std::vector<float> out(32, 1.0f);
    void* args[] = {out.data()};
    HostOptions options = options_for("order");
    options.poison_shared = poison;
    module_->launch("read_unwritten_5", args, {1, 1, 1}, {32, 1, 1}, 32 * sizeof(float), false,
                    options);
    for (float v : out) EXPECT_EQ(std::isnan(v), poison) << v;
  }
}

TEST_F(HostBackendTest, SharedMemoryOverrunIsReported) {
  std::vector<float> out(16);
  void* args[] = {out.data()};
  try {
    module_->launch("overrun_6", args, {2, 1, 1}, {16, 1, 1}, 16 * sizeof(float), false,
                    options_for("order"));
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("kernel 'overrun_6' block (0,0,0)"), std::string::npos)
        << error.what();
    EXPECT_NE(
        std::string(error.what()).find("kiln_smem[64..67] written, past the end of its 64 bytes"),
        std::string::npos)
        << error.what();
  }
}

TEST_F(HostBackendTest, BarrierWithoutUsesBarriersIsAnError) {
  std::vector<float> out(32);
  void* args[] = {out.data()};
  try {
    module_->launch("needs_fibers_7", args, {1, 1, 1}, {32, 1, 1}, 0, false, options_for("order"));
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("uses_barriers = false"), std::string::npos)
        << error.what();
  }
}

TEST_F(HostBackendTest, ExceptionInsideFiberReachesLauncher) {
  std::vector<float> out(8 * 64);
  void* args[] = {out.data()};
  for (int workers : {1, 2}) {
    try {
      module_->launch("throws_8", args, {8, 1, 1}, {64, 1, 1}, 0, true,
                      options_for("order", workers));
      FAIL() << "expected an exception";
    } catch (const std::runtime_error& error) {
      EXPECT_STREQ(error.what(), "thrown by block 3");
    }
  }
  // The workers' stacks were unwound and are reusable: a clean launch still works.
  std::vector<float> big(64);
  void* big_args[] = {big.data()};
  module_->launch("big_stack_9", big_args, {1, 1, 1}, {64, 1, 1}, 0, true, options_for("order", 2));
  EXPECT_EQ(big[3], 0.0f + 4096.0f + 8192.0f + 12288.0f + 4 * 3.0f);
}

TEST_F(HostBackendTest, UnknownKernelAndBadLaunch) {
  EXPECT_TRUE(module_->has_kernel("matmul_1"));
  EXPECT_FALSE(module_->has_kernel("matmul_7"));
  void* args[] = {nullptr};
  EXPECT_THROW(module_->launch("matmul_7", args, {1, 1, 1}, {1, 1, 1}, 0, false, {}), Error);
  EXPECT_THROW(module_->launch("read_unwritten_5", args, {1, 1, 1}, {2048, 1, 1}, 0, false, {}),
               Error);
}

TEST(HostCompile, CompileErrorCarriesCompilerOutput) {
  const std::string source = testing::translation_unit(
      "extern \"C\" __global__ void broken_0(float* out) { out[0] = undeclared_thing_42; }\n", "");
  try {
    HostModule::compile(source, "broken", nullptr);
    FAIL() << "expected a compile error";
  } catch (const Error& error) {
    const std::string what = error.what();
    EXPECT_NE(what.find("broken: error: the host compiler (g++ "), std::string::npos) << what;
    EXPECT_NE(what.find("undeclared_thing_42"), std::string::npos) << what;
    EXPECT_NE(what.find("error:"), std::string::npos) << what;
  }
}

TEST(HostCompile, ThroughKernelCache) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("kiln-host-cache-test-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const KernelCache cache(dir.string());
  const std::string source = testing::translation_unit(
      "extern \"C\" __global__ void fill_0(float* out) { out[threadIdx.x] = 7.0f; }\n",
      "extern \"C\" void kiln_host_entry_fill_0(void* const* args) {\n"
      "  fill_0(static_cast<float*>(args[0]));\n}\n");
  auto run = [](const HostModule& module) {
    std::vector<float> out(4, 0.0f);
    void* args[] = {out.data()};
    module.launch("fill_0", args, {1, 1, 1}, {4, 1, 1}, 0, false, HostOptions{});
    return out;
  };

  ::testing::internal::CaptureStderr();
  HostModule first = HostModule::compile(source, "fill", &cache, /*verbose=*/true);
  const std::string miss = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(miss.find("kiln: host module 'fill': cache miss"), std::string::npos) << miss;
  EXPECT_NE(miss.find("host-so"), std::string::npos) << miss;
  EXPECT_EQ(cache.info().entries, 1);

  ::testing::internal::CaptureStderr();
  HostModule second = HostModule::compile(source, "fill", &cache, /*verbose=*/true);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");  // a hit says nothing
  EXPECT_NE(first.path(), second.path());  // private copies: two independent modules
  EXPECT_EQ(run(first), (std::vector<float>{7, 7, 7, 7}));
  EXPECT_EQ(run(second), (std::vector<float>{7, 7, 7, 7}));
  std::filesystem::remove_all(dir);
}

std::string load_error(const std::function<void()>& load) {
  try {
    load();
  } catch (const Error& error) {
    return error.what();
  }
  return "no error";
}

TEST(HostCompile, LoadErrors) {
  const std::string missing = load_error([] { HostModule::load("/nonexistent/kiln_module.so"); });
  EXPECT_NE(missing.find("/nonexistent/kiln_module.so: error: cannot load host module: "),
            std::string::npos)
      << missing;
  EXPECT_NE(missing.find("No such file"), std::string::npos) << missing;  // dlerror()

  const std::string foreign = load_error([] { HostModule::load("libm.so.6"); });
  EXPECT_NE(foreign.find("not a kiln host module"), std::string::npos) << foreign;

  // A module built against another version of the prelude's ABI.
  const std::string other_abi = load_error([] {
    HostModule::compile(
        "extern \"C\" void* kiln_host_tls() { return nullptr; }\n"
        "extern \"C\" int kiln_host_abi_version() { return 999; }\n",
        "old_module", nullptr);
  });
  EXPECT_NE(other_abi.find("host module built for host ABI version 999"), std::string::npos)
      << other_abi;
}

TEST(HostPrelude, EmbeddedTextAndVersion) {
  EXPECT_NE(host_prelude().find("#define KILN_HOST_ABI_VERSION"), std::string_view::npos);
  EXPECT_NE(host_prelude().find("kiln_host_tls"), std::string_view::npos);
  // The version is the 64-bit FNV-1a hash of the prelude's text in 16 hex digits, so any edit
  // of the prelude changes every host cache key. The hash is recomputed here, and checked on
  // the published FNV-1a vectors for "" and "a" first.
  const auto fnv1a = [](std::string_view text) {
    uint64_t hash = 0xcbf29ce484222325ull;
    for (unsigned char c : text) hash = (hash ^ c) * 0x100000001b3ull;
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
    return std::string(hex);
  };
  ASSERT_EQ(fnv1a(""), "cbf29ce484222325");
  ASSERT_EQ(fnv1a("a"), "af63dc4c8601ec8c");
  EXPECT_EQ(host_prelude_version(), fnv1a(host_prelude()));
}

}  // namespace
}  // namespace kiln::runtime::host
