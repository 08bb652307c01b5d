// The collective kernels of a data-parallel step (codegen::Kernel::collective) on both
// backends, with a fake world of two ranks whose other rank holds kPeer everywhere: the CUDA
// backend against the mock driver and the mock NCCL (tests/mocks/), the host backend through
// the Communicator interface. Each checks that the bucket's gradients go out packed, come back
// averaged into the kernel's results, and that kernels after it read the means. The MPI
// communicator itself runs under mpirun in tests/distributed/data_parallel.sh.
#include <gtest/gtest.h>
#include <dlfcn.h>

#include <cstring>
#include <filesystem>

#include "codegen/emit.h"
#include "ir/diagnostic.h"
#include "ir/parser.h"
#include "ir/verifier.h"
#include "runtime/cuda/cuda_executable.h"
#include "runtime/cuda/driver_api.h"
#include "runtime/distributed/collective_schedule.h"
#include "runtime/distributed/communicator.h"
#include "runtime/executor/host_executor.h"
#include "runtime/host/host_module.h"
#include "tests/mocks/mock_libcuda.h"

namespace kiln::runtime {
namespace {

using codegen::BufferRole;

constexpr const char* kMockDriver = KILN_BINARY_DIR "/tests/mocks/libkiln_mock_cuda.so";
constexpr const char* kMockNccl = KILN_BINARY_DIR "/tests/mocks/libkiln_mock_nccl.so";
constexpr float kPeer = 1.0f;  // every element of the other rank's gradients

// Rank 0 of two; the other rank's buckets hold kPeer. Broadcasts keep this rank's bytes.
class FakeWorld final : public distributed::Communicator {
 public:
  FakeWorld() {
    rank_ = 0;
    size_ = 2;
  }
  int start_mean(void* data, int64_t count, ir::DType dtype) override {
    EXPECT_EQ(dtype, ir::DType::F32);
    requests.push_back({static_cast<float*>(data), count, false});
    return static_cast<int>(requests.size()) - 1;
  }
  int start_broadcast(void* data, int64_t bytes, int root) override {
    // From the other rank: its floats, all kPeer; from this one: nothing changes.
    requests.push_back({root == rank_ ? nullptr : static_cast<float*>(data), bytes / 4, true});
    return static_cast<int>(requests.size()) - 1;
  }
  void wait(int request) override {
    const Request& r = requests.at(static_cast<size_t>(request));
    for (int64_t i = 0; r.data && i < r.count; ++i)
      r.data[i] = r.broadcast ? kPeer : (r.data[i] + kPeer) / 2;
    ++waits;
  }
  void progress() override {}
  void sum(double*, int) override {}
  void broadcast(void*, int64_t, int) override { ++broadcasts; }
  [[noreturn]] void abort(int) override { std::abort(); }

  struct Request {
    float* data;
    int64_t count;
    bool broadcast;
  };
  std::vector<Request> requests;
  int waits = 0, broadcasts = 0;
};

codegen::Buffer make_buffer(std::string name, ir::Shape shape, BufferRole role, int index) {
  ir::TensorType type{ir::DType::F32, std::move(shape)};
  const int64_t bytes = ir::num_elements(type.shape) * 4;
  return codegen::Buffer{std::move(name), std::move(type), role, index, bytes};
}

codegen::Kernel make_kernel(std::string name, std::vector<int> args, int outputs = 1) {
  codegen::Kernel kernel;
  kernel.name = std::move(name);
  kernel.block = {4, 1, 1};
  kernel.args = std::move(args);
  kernel.num_outputs = outputs;
  return kernel;
}

// Buffer ids: 0 x [4], 1 g [4] and 2 h [2] (this rank's gradients), 3 gm and 4 hm (their
// means), 5 y [4] = gm + hm[0] (a kernel after the bucket reads the means), 6 r [4]: rank 1's x.
codegen::Program make_program() {
  codegen::Program program;
  program.graph_name = "data_parallel";
  program.buffers = {make_buffer("x", {4}, BufferRole::Input, 0),
                     make_buffer("g", {4}, BufferRole::Intermediate, -1),
                     make_buffer("h", {2}, BufferRole::Intermediate, -1),
                     make_buffer("gm", {4}, BufferRole::Intermediate, -1),
                     make_buffer("hm", {2}, BufferRole::Intermediate, -1),
                     make_buffer("y", {4}, BufferRole::Output, 0),
                     make_buffer("r", {4}, BufferRole::Output, 1)};
  codegen::Kernel bucket = make_kernel("all_reduce_1", {1, 2, 3, 4}, 2);
  bucket.collective = codegen::Collective{codegen::Collective::Mean, 0};
  codegen::Kernel broadcast = make_kernel("broadcast_3", {0, 6});
  broadcast.collective = codegen::Collective{codegen::Collective::Broadcast, 1};
  program.kernels = {make_kernel("grads_0", {0, 1, 2}, 2), bucket,
                     make_kernel("use_2", {3, 4, 5}), broadcast};
  program.outputs = {5, 6};
  return program;
}

// What both backends rest on: each collective's packing, and that it finishes right before its
// first reader (use_2 reads the bucket; nothing reads the broadcast, which the end collects).
TEST(CollectiveSchedule, FinishesEachCollectiveBeforeItsFirstReader) {
  const codegen::Program program = make_program();
  distributed::CollectiveSchedule schedule(program);
  ASSERT_EQ(schedule.collectives().size(), 2u);
  const distributed::CollectiveSchedule::Collective& bucket = *schedule.find(1);
  EXPECT_EQ(bucket.operands, (std::vector<int>{1, 2}));
  EXPECT_EQ(bucket.results, (std::vector<int>{3, 4}));
  EXPECT_EQ(bucket.sizes, (std::vector<int64_t>{16, 8}));
  EXPECT_EQ(bucket.bytes, 24);
  EXPECT_EQ(schedule.find(0), nullptr);
  EXPECT_TRUE(schedule.due_before(2).empty()) << "nothing started yet";
  schedule.started(1);
  schedule.started(3);
  EXPECT_TRUE(schedule.due_before(1).empty()) << "the bucket's own kernel reads no result";
  EXPECT_EQ(schedule.due_before(2), (std::vector<size_t>{1}));
  EXPECT_TRUE(schedule.due_before(2).empty()) << "finished once";
  EXPECT_EQ(schedule.due_at_end(), (std::vector<size_t>{3}));
  EXPECT_FALSE(schedule.any_pending());
}

// g = 3x, h = {x0, x1}; the one-process all_reduce copies; y = gm + hm[0].
void grads_kernel(void* const* args, unsigned long long) {
  auto* x = static_cast<const float*>(args[0]);
  auto* g = static_cast<float*>(args[1]);
  auto* h = static_cast<float*>(args[2]);
  for (int i = 0; i < 4; ++i) g[i] = 3 * x[i];
  h[0] = x[0];
  h[1] = x[1];
}
void copy_kernel(void* const* args, unsigned long long) {
  std::memcpy(args[2], args[0], 16);
  std::memcpy(args[3], args[1], 8);
}
void copy_x_kernel(void* const* args, unsigned long long) { std::memcpy(args[1], args[0], 16); }
void use_kernel(void* const* args, unsigned long long) {
  auto* gm = static_cast<const float*>(args[0]);
  auto* hm = static_cast<const float*>(args[1]);
  auto* y = static_cast<float*>(args[2]);
  for (int i = 0; i < 4; ++i) y[i] = gm[i] + hm[0];
}

ir::Tensor input() {
  ir::Tensor x({ir::DType::F32, {4}});
  const float values[] = {2, 4, 6, 8};
  std::memcpy(x.data(), values, sizeof(values));
  return x;
}

std::vector<float> floats(const ir::Tensor& tensor) {
  std::vector<float> values(static_cast<size_t>(tensor.num_elements()));
  std::memcpy(values.data(), tensor.data(), tensor.byte_size());
  return values;
}

// y = mean(3x) + mean(x0): with the other rank at 1, (3x + 1) / 2 + (2 + 1) / 2.
const std::vector<float> kAveraged = {5.0f, 8.0f, 11.0f, 14.0f};
// One process: y = 3x + x0.
const std::vector<float> kOneProcess = {8.0f, 14.0f, 20.0f, 26.0f};

class DataParallelCuda : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(kMockDriver) || !std::filesystem::exists(kMockNccl)) return;
    api_ = cuda::DriverApi::load(kMockDriver).release();
    driver_ = dlopen(kMockDriver, RTLD_NOW | RTLD_LOCAL);
    nccl_ = dlopen(kMockNccl, RTLD_NOW | RTLD_LOCAL);
  }
  void SetUp() override {
    ASSERT_NE(api_, nullptr) << kMockDriver << " or " << kMockNccl << " was not built";
    const KilnMockConfig config;
    symbol<decltype(&kiln_mock_reset)>(driver_, "kiln_mock_reset")(&config);
    api_->initialize();
    auto reg = symbol<decltype(&kiln_mock_register_kernel)>(driver_, "kiln_mock_register_kernel");
    reg("grads_0", 3, grads_kernel);
    reg("all_reduce_1", 4, copy_kernel);
    reg("use_2", 3, use_kernel);
    reg("broadcast_3", 2, copy_x_kernel);
    symbol<void (*)(double)>(nccl_, "kiln_mock_nccl_set_peer")(kPeer);
  }
  template <typename F>
  static F symbol(void* handle, const char* name) {
    return reinterpret_cast<F>(dlsym(handle, name));
  }
  KilnMockStats stats() const {
    KilnMockStats s;
    symbol<decltype(&kiln_mock_stats)>(driver_, "kiln_mock_stats")(&s);
    return s;
  }
  std::unique_ptr<cuda::CudaExecutable> create(distributed::Communicator* world,
                                               const std::string& nccl = kMockNccl) {
    CudaBinary binary;
    binary.cubins["sm_90"] = std::string("\x7f" "ELF mock cubin");
    binary.compiler = "nvrtc 13.0";
    cuda::CudaOptions options(0, /*use_cuda_graph=*/true);
    options.communicator = world;
    options.library_paths.nccl = nccl;
    return cuda::CudaExecutable::create_with_driver(*api_, make_program(), binary, {}, options);
  }
  static inline cuda::DriverApi* api_ = nullptr;
  static inline void* driver_ = nullptr;
  static inline void* nccl_ = nullptr;
};

TEST_F(DataParallelCuda, BucketIsAveragedWithNcclBeforeItsReaders) {
  FakeWorld world;
  auto executable = create(&world);
  EXPECT_EQ(world.broadcasts, 1);  // rank 0's NCCL unique id
  for (int run = 0; run < 2; ++run) {
    const std::vector<ir::Tensor> outputs = executable->run({input()});
    EXPECT_EQ(floats(outputs.at(0)), kAveraged);
    EXPECT_EQ(floats(outputs.at(1)), std::vector<float>(4, kPeer));  // rank 1's x
  }
  EXPECT_EQ(symbol<int (*)()>(nccl_, "kiln_mock_nccl_all_reduces")(), 2);  // one per step
  EXPECT_EQ(symbol<int (*)()>(nccl_, "kiln_mock_nccl_broadcasts")(), 2);
  const KilnMockStats s = stats();
  EXPECT_EQ(s.captures, 0);        // kernel by kernel: no CUDA graph with NCCL
  EXPECT_EQ(s.kernel_runs, 4);     // grads and use; the collective kernels never launch
  EXPECT_EQ(s.event_waits, 8);     // per collective: comm waits for the packing, compute for it
  EXPECT_EQ(s.allocations, 3);     // the arena and the collectives' buffers
  executable.reset();
  EXPECT_EQ(symbol<int (*)()>(nccl_, "kiln_mock_nccl_live_comms")(), 0);
  EXPECT_EQ(stats().allocations, 0);
  EXPECT_EQ(stats().streams, 0);
  EXPECT_EQ(stats().events, 0);
}

TEST_F(DataParallelCuda, OneProcessLaunchesTheCopy) {
  auto executable = create(nullptr);
  const std::vector<ir::Tensor> outputs = executable->run({input()});
  EXPECT_EQ(floats(outputs.at(0)), kOneProcess);
  EXPECT_EQ(floats(outputs.at(1)), floats(input()));
  EXPECT_EQ(stats().kernel_runs, 4);
}

TEST_F(DataParallelCuda, MissingNcclIsAClearError) {
  FakeWorld world;
  try {
    create(&world, "/nonexistent/libnccl.so.2");
    FAIL() << "no error";
  } catch (const Error& error) {
    const std::string message = error.diagnostic().message;
    EXPECT_NE(message.find("NCCL: /nonexistent/libnccl.so.2 not found"), std::string::npos) << message;
    EXPECT_NE(message.find("data-parallel training on GPUs needs NCCL 2.10 or newer"), std::string::npos)
        << message;
    EXPECT_NE(message.find("--backend=host"), std::string::npos) << message;
  }
  EXPECT_EQ(stats().allocations, 0);
}

// The host backend, on the CUDA source codegen emits for a graph with an all_reduce: the mean
// replaces the kernel's copy, and the kernel after it reads the means.
TEST(DataParallelHost, BucketIsAveragedThroughTheCommunicator) {
  ir::Graph graph = ir::parse_graph(R"(graph @step(%x: f32[4]) -> (f32[4], f32[4]) {
  %g = mul(%x, %x) : f32[4]
  %h = add(%x, %x) : f32[4]
  %gm, %hm = all_reduce(%g, %h) : f32[4], f32[4]
  %y = sub(%gm, %hm) : f32[4]
  %r = broadcast(%x) {root = 1} : f32[4]
  return %y, %r
})",
                                    "data_parallel.ir");
  ir::verify(graph);
  const codegen::Program program = codegen::emit_program(graph);
  const host::HostModule module = host::HostModule::compile(program.source, "data_parallel", nullptr);
  // x = 2, 4, 6, 8: g = x^2, h = 2x; with the other rank at 1, y = (g + 1) / 2 - (h + 1) / 2.
  const std::vector<float> averaged = {0.0f, 4.0f, 12.0f, 24.0f};
  const std::vector<float> one_process = {0.0f, 8.0f, 24.0f, 48.0f};
  FakeWorld world;
  host::HostOptions options;
  options.communicator = &world;
  host::HostExecutable distributed(program, module, {}, options);
  for (int run = 0; run < 2; ++run) {
    const std::vector<ir::Tensor> outputs = distributed.run({input()});
    EXPECT_EQ(floats(outputs.at(0)), averaged);
    EXPECT_EQ(floats(outputs.at(1)), std::vector<float>(4, kPeer));  // rank 1's x
  }
  EXPECT_EQ(world.waits, 4);
  ASSERT_EQ(world.requests.size(), 4u);
  EXPECT_EQ(world.requests[0].count, 8);  // both gradients in one packed transfer
  host::HostExecutable alone(program, module, {}, host::HostOptions{});
  const std::vector<ir::Tensor> outputs = alone.run({input()});
  EXPECT_EQ(floats(outputs.at(0)), one_process);
  EXPECT_EQ(floats(outputs.at(1)), floats(input()));
}

}  // namespace
}  // namespace kiln::runtime
