// Host backend micro-benchmark: the cost of a barrier and a shuffle per GPU thread, a block's
// fiber start-up, and a 16x16-tiled 256^3 matmul against a plain loop (with a bitwise check).
// A program, not a test: it prints figures and asserts nothing.
//
//   build/kiln_host_backend_bench [--workers N]
//
// Single-worker figures are process CPU time (best of 7), so a busy machine inflates them less
// than wall time; multi-worker figures are wall time.
#include <chrono>
#include <cstring>
#include <ctime>
#include <fmt/format.h>
#include <string>
#include <thread>
#include <vector>

#include "runtime/host/host_module.h"

namespace {

using kiln::runtime::host::HostModule;
using kiln::runtime::host::HostOptions;

constexpr int kRepeats = 7;
constexpr int kOpsPerThread = 1000;  // barriers / shuffles per thread in one launch
constexpr int kN = 256;              // matmul size

const char* const kSource = R"(
#include "kiln_host_prelude.h"
extern "C" __global__ void barriers(float* out) {
  for (int i = 0; i < 1000; ++i) __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = 1.0f;
}
extern "C" __global__ void shuffles(float* out) {
  float v = threadIdx.x;
  for (int i = 0; i < 1000; ++i) v = __shfl_xor_sync(0xffffffffu, v, 1 + (i & 15));
  out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}
extern "C" __global__ void empty(float* out) {}
extern "C" __global__ void matmul(const float* A, const float* B, float* C) {
  float* As = reinterpret_cast<float*>(kiln_smem);
  float* Bs = As + 256;
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * 16 + ty, col = blockIdx.x * 16 + tx;
  float acc = 0.0f;
  for (int t = 0; t < 256 / 16; ++t) {
    As[ty * 16 + tx] = A[row * 256 + t * 16 + tx];
    Bs[ty * 16 + tx] = B[(t * 16 + ty) * 256 + col];
    __syncthreads();
    for (int k = 0; k < 16; ++k) acc += As[ty * 16 + k] * Bs[k * 16 + tx];
    __syncthreads();
  }
  C[row * 256 + col] = acc;
}
extern "C" __global__ void scale(const float* x, float* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = 2.0f * x[i] + 1.0f;
}
extern "C" void kiln_host_entry_barriers(void* const* a) { barriers((float*)a[0]); }
extern "C" void kiln_host_entry_shuffles(void* const* a) { shuffles((float*)a[0]); }
extern "C" void kiln_host_entry_empty(void* const* a) { empty((float*)a[0]); }
extern "C" void kiln_host_entry_matmul(void* const* a) {
  matmul((const float*)a[0], (const float*)a[1], (float*)a[2]);
}
extern "C" void kiln_host_entry_scale(void* const* a) { scale((const float*)a[0], (float*)a[1]); }
)";

double cpu_ms() {
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return now.tv_sec * 1e3 + now.tv_nsec / 1e6;
}

double wall_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

template <typename F>
double best_of(double (*clock)(), F&& run) {
  double best = 1e300;
  for (int i = 0; i < kRepeats; ++i) {
    const double start = clock();
    run();
    best = std::min(best, clock() - start);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--workers") workers = std::stoi(argv[i + 1]);

  const double compile_start = wall_ms();
  const HostModule module = HostModule::compile(kSource, "host_backend_bench", nullptr);
  fmt::print("compile (g++ -O2, 5 kernels, no cache): {:.0f} ms\n", wall_ms() - compile_start);

  HostOptions one;
  one.workers = 1;
  HostOptions many;
  many.workers = workers;

  constexpr uint32_t kBlocks = 8, kThreads = 256;
  std::vector<float> out(1 << 22);
  void* out_args[] = {out.data()};
  for (const char* kernel : {"barriers", "shuffles"}) {
    const double ms = best_of(cpu_ms, [&] {
      module.launch(kernel, out_args, {kBlocks, 1, 1}, {kThreads, 1, 1}, 0, true, one);
    });
    fmt::print("{}: {:.1f} ns per thread per call (256-thread blocks, 1 worker)\n", kernel,
               ms * 1e6 / (double{kBlocks} * kThreads * kOpsPerThread));
  }
  const double setup = best_of(
      cpu_ms, [&] { module.launch("empty", out_args, {1024, 1, 1}, {256, 1, 1}, 0, true, one); });
  fmt::print("empty kernel with fibers: {:.2f} us per 256-thread block\n", setup * 1e3 / 1024);

  std::vector<float> a(kN * kN), b(kN * kN), c(kN * kN), reference(kN * kN);
  for (int i = 0; i < kN * kN; ++i) {
    a[i] = static_cast<float>(i * 37 % 101) * 0.01f;
    b[i] = static_cast<float>(i * 53 % 97) * -0.02f;
  }
  const double naive = best_of(cpu_ms, [&] {
    for (int i = 0; i < kN; ++i)
      for (int j = 0; j < kN; ++j) {
        float acc = 0.0f;
        for (int k = 0; k < kN; ++k) acc += a[i * kN + k] * b[k * kN + j];
        reference[i * kN + j] = acc;
      }
  });
  void* matmul_args[] = {a.data(), b.data(), c.data()};
  auto matmul = [&](const HostOptions& options) {
    module.launch("matmul", matmul_args, {kN / 16, kN / 16, 1}, {16, 16, 1}, 2048, true, options);
  };
  const double tiled = best_of(cpu_ms, [&] { matmul(one); });
  const double tiled_many = best_of(wall_ms, [&] { matmul(many); });
  const bool same = std::memcmp(c.data(), reference.data(), c.size() * sizeof(float)) == 0;
  fmt::print("tiled matmul 256^3: {:.1f} ms (1 worker), {:.1f} ms wall ({} workers); plain loop "
             "{:.1f} ms; bitwise equal: {}\n",
             tiled, tiled_many, workers, naive, same ? "yes" : "NO");

  std::vector<float> x(out.size(), 1.5f);
  void* scale_args[] = {x.data(), out.data()};
  const uint32_t blocks = static_cast<uint32_t>(out.size() / 256);
  const double plain = best_of(cpu_ms, [&] {
    module.launch("scale", scale_args, {blocks, 1, 1}, {256, 1, 1}, 0, false, one);
  });
  const double fibers = best_of(cpu_ms, [&] {
    module.launch("scale", scale_args, {blocks, 1, 1}, {256, 1, 1}, 0, true, one);
  });
  const double loop = best_of(cpu_ms, [&] {
    for (size_t i = 0; i < out.size(); ++i) out[i] = 2.0f * x[i] + 1.0f;
  });
  fmt::print("elementwise 2^22 (1 worker): plain loop over threads {:.1f} ms, fibers {:.1f} ms, "
             "C++ loop {:.1f} ms\n",
             plain, fibers, loop);
  return 0;
}
