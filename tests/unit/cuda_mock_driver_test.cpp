// CudaExecutable end to end against the mock libcuda (tests/mocks/mock_libcuda.h):
// the calls a real driver would get, the memory they touch, graph capture and replay, every
// failure path's message, and that every handle is released, including after a failure.
// What only a GPU can show (real kernels, JIT, timing) is tests/gpu/cuda_run_test.cpp.
#include <gtest/gtest.h>
#include <dlfcn.h>

#include <cstring>
#include <filesystem>
#include <thread>

#include "ir/diagnostic.h"
#include "runtime/cuda/cuda_executable.h"
#include "runtime/cuda/driver_api.h"
#include "tests/mocks/mock_libcuda.h"

namespace kiln::runtime::cuda {
namespace {

using codegen::BufferRole;

constexpr const char* kMockLibrary = KILN_BINARY_DIR "/tests/mocks/libkiln_mock_cuda.so";
constexpr uint32_t kSumSharedBytes = 64 * 1024;  // above the 48 KB default: needs the opt-in

// The host versions of the program's kernels: t = x * w, y = t + b, s = sum(y).
void mul_kernel(void* const* args, unsigned long long) {
  auto* x = static_cast<const float*>(args[0]);
  auto* w = static_cast<const float*>(args[1]);
  auto* t = static_cast<float*>(args[2]);
  for (int i = 0; i < 6; ++i) t[i] = x[i] * w[i % 3];
}
void add_kernel(void* const* args, unsigned long long) {
  auto* t = static_cast<const float*>(args[0]);
  auto* b = static_cast<const float*>(args[1]);
  auto* y = static_cast<float*>(args[2]);
  for (int i = 0; i < 6; ++i) y[i] = t[i] + b[i % 3];
}
void sum_kernel(void* const* args, unsigned long long) {
  auto* y = static_cast<const float*>(args[0]);
  float total = 0;
  for (int i = 0; i < 6; ++i) total += y[i];
  *static_cast<float*>(args[1]) = total;
}

codegen::Buffer make_buffer(std::string name, ir::TensorType type, BufferRole role, int index) {
  int64_t bytes = ir::num_elements(type.shape) * static_cast<int64_t>(ir::dtype_size(type.dtype));
  return codegen::Buffer{std::move(name), std::move(type), role, index, bytes};
}

codegen::Kernel make_kernel(std::string name, std::vector<int> args, uint32_t shared = 0) {
  codegen::Kernel kernel;
  kernel.name = std::move(name);
  kernel.block = {6, 1, 1};
  kernel.args = std::move(args);
  kernel.dynamic_shared_bytes = shared;
  return kernel;
}

// Buffer ids: 0 x, 1 w, 2 t, 3 b, 4 y, 5 s.
codegen::Program make_program() {
  codegen::Program program;
  program.graph_name = "mock";
  ir::TensorType matrix{ir::DType::F32, {2, 3}};
  ir::TensorType row{ir::DType::F32, {3}};
  program.buffers = {make_buffer("x", matrix, BufferRole::Input, 0),
                     make_buffer("w", row, BufferRole::Parameter, 0),
                     make_buffer("t", matrix, BufferRole::Intermediate, -1),
                     make_buffer("b", row, BufferRole::Input, 1),
                     make_buffer("y", matrix, BufferRole::Output, 0),
                     make_buffer("s", {ir::DType::F32, {}}, BufferRole::Output, 1)};
  program.kernels = {make_kernel("mul_0", {0, 1, 2}), make_kernel("add_1", {2, 3, 4}),
                     make_kernel("sum_2", {4, 5}, kSumSharedBytes)};
  program.outputs = {4, 5};
  return program;
}

CudaBinary make_binary() {
  CudaBinary binary;
  binary.cubins["sm_90"] = std::string("\x7f" "ELF mock cubin");
  binary.ptx = ".version 9.0\n.target sm_80\n";
  binary.ptx_arch = "compute_80";
  binary.compiler = "nvrtc 13.0";
  return binary;
}

ir::Tensor make_tensor(ir::Shape shape, std::vector<float> values) {
  ir::Tensor tensor({ir::DType::F32, std::move(shape)});
  std::memcpy(tensor.data(), values.data(), tensor.byte_size());
  return tensor;
}

std::vector<float> to_floats(const ir::Tensor& tensor) {
  std::vector<float> values(static_cast<size_t>(tensor.num_elements()));
  std::memcpy(values.data(), tensor.data(), tensor.byte_size());
  return values;
}

const std::vector<float> kWeights = {1, 2, 3};
const KilnMockConfig kDefaultConfig;

// Runs with inputs derived from `seed` and checks both outputs.
void expect_correct(CudaExecutable& executable, float seed) {
  std::vector<float> x = {seed, 1, 2, 3, 4, 5}, b = {seed, -1, 0.5};
  std::vector<ir::Tensor> outputs = executable.run({make_tensor({2, 3}, x), make_tensor({3}, b)});
  ASSERT_EQ(outputs.size(), 2u);
  std::vector<float> y = to_floats(outputs[0]);
  float total = 0;
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(y[i], x[i] * kWeights[i % 3] + b[i % 3]) << i;
    total += y[i];
  }
  EXPECT_EQ(to_floats(outputs[1]), std::vector<float>{total});
}

class CudaMockDriver : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!std::filesystem::exists(kMockLibrary)) return;  // SetUp fails each test, saying so
    api_ = DriverApi::load(kMockLibrary).release();
    // The same handle DriverApi holds (dlopen counts references), for the kiln_mock_* controls.
    handle_ = dlopen(kMockLibrary, RTLD_NOW | RTLD_LOCAL);
    reset_ = reinterpret_cast<decltype(&kiln_mock_reset)>(dlsym(handle_, "kiln_mock_reset"));
    register_ = reinterpret_cast<decltype(&kiln_mock_register_kernel)>(
        dlsym(handle_, "kiln_mock_register_kernel"));
    fail_next_ =
        reinterpret_cast<decltype(&kiln_mock_fail_next)>(dlsym(handle_, "kiln_mock_fail_next"));
    stats_ = reinterpret_cast<decltype(&kiln_mock_stats)>(dlsym(handle_, "kiln_mock_stats"));
  }

  void SetUp() override {
    ASSERT_NE(api_, nullptr) << kMockLibrary << " was not built (target kiln_mock_cuda)";
    configure(9, 0);
  }
  void TearDown() override {
    if (reset_ != nullptr) reset_(&kDefaultConfig);  // frees what a test leaked on purpose
  }

  void configure(int major, int minor, int optin_shared = 227 * 1024) {
    KilnMockConfig config;
    config.major = major;
    config.minor = minor;
    config.optin_shared_bytes = optin_shared;
    reset_(&config);
    api_->initialize();
    register_("mul_0", 3, mul_kernel);
    register_("add_1", 3, add_kernel);
    register_("sum_2", 2, sum_kernel);
  }

  std::unique_ptr<CudaExecutable> create(bool use_graph,
                                         const codegen::Program& program = make_program(),
                                         const CudaBinary& binary = make_binary(),
                                         int device = 0) {
    return CudaExecutable::create_with_driver(*api_, program, binary,
                                              {make_tensor({3}, kWeights)},
                                              CudaOptions{device, use_graph});
  }

  KilnMockStats stats() const {
    KilnMockStats s;
    stats_(&s);
    return s;
  }

  // Every handle released: nothing of the executable outlives it, whatever path it took.
  void expect_all_released() const {
    KilnMockStats s = stats();
    EXPECT_EQ(s.context_references, 0);
    EXPECT_EQ(s.modules, 0);
    EXPECT_EQ(s.streams, 0);
    EXPECT_EQ(s.allocations, 0);
    EXPECT_EQ(s.graphs, 0);
    EXPECT_EQ(s.graph_execs, 0);
    EXPECT_EQ(s.events, 0);
    EXPECT_EQ(s.pinned_allocations, 0);
  }

  // The kiln::Error `body` throws; fails the test when it throws nothing.
  template <typename Body>
  static Diagnostic error_of(Body body) {
    try {
      body();
    } catch (const Error& error) {
      return error.diagnostic();
    }
    ADD_FAILURE() << "no kiln::Error thrown";
    return {};
  }

  static inline DriverApi* api_ = nullptr;  // lives for the whole process, like driver()
  static inline void* handle_ = nullptr;
  static inline decltype(&kiln_mock_reset) reset_ = nullptr;
  static inline decltype(&kiln_mock_register_kernel) register_ = nullptr;
  static inline decltype(&kiln_mock_fail_next) fail_next_ = nullptr;
  static inline decltype(&kiln_mock_stats) stats_ = nullptr;
};

TEST_F(CudaMockDriver, RunsKernelsInOrderWithoutGraph) {
  auto executable = create(/*use_graph=*/false);
  EXPECT_EQ(executable->device_name(), "Kiln Mock GPU 0");
  EXPECT_EQ(executable->loaded_code(), "cubin sm_90");
  for (float seed : {0.f, 7.f, -3.f}) expect_correct(*executable, seed);
  KilnMockStats s = stats();
  EXPECT_FALSE(s.loaded_ptx);
  EXPECT_EQ(s.captures, 0);
  EXPECT_EQ(s.kernel_runs, 9);
  EXPECT_EQ(s.allocations, 1);  // one arena for every buffer
  executable.reset();
  expect_all_released();
}

TEST_F(CudaMockDriver, RunsOnViewsOfTheCallersMemory) {
  // run_views stages the caller's memory for upload as it is (the Python package's inputs).
  auto executable = create(/*use_graph=*/true);
  const std::vector<float> x = {9, 1, 2, 3, 4, 5}, b = {2, -1, 0.5};
  const std::vector<ir::Tensor> expected = executable->run({make_tensor({2, 3}, x), make_tensor({3}, b)});
  const std::vector<ir::TensorView> views = {
      {{ir::DType::F32, {2, 3}}, reinterpret_cast<const std::byte*>(x.data())},
      {{ir::DType::F32, {3}}, reinterpret_cast<const std::byte*>(b.data())}};
  const std::vector<ir::Tensor> outputs = executable->run_views(views);
  ASSERT_EQ(outputs.size(), 2u);
  EXPECT_EQ(to_floats(outputs[0]), to_floats(expected[0]));
  EXPECT_EQ(to_floats(outputs[1]), to_floats(expected[1]));
  const std::vector<ir::TensorView> wrong = {views[0], {{ir::DType::F32, {4}}, views[1].data}};
  EXPECT_EQ(error_of([&] { executable->run_views(wrong); }).message,
            "CUDA backend: input 'b': expected f32[3], got f32[4]");
  executable.reset();
  expect_all_released();
}

TEST_F(CudaMockDriver, GraphIsCapturedOnceAndReplayed) {
  auto executable = create(/*use_graph=*/true);
  for (float seed : {1.f, 2.f, 3.f}) expect_correct(*executable, seed);
  KilnMockStats s = stats();
  EXPECT_EQ(s.captures, 1);
  EXPECT_EQ(s.instantiations, 1);
  EXPECT_EQ(s.graph_launches, 3);
  EXPECT_EQ(s.kernel_runs, 9);
  EXPECT_EQ(s.graphs, 0);  // the captured graph is freed once instantiated
  EXPECT_EQ(s.graph_execs, 1);
  executable.reset();
  expect_all_released();
}

// --profile: each launch between two events, outside the CUDA graph, the events freed after.
TEST_F(CudaMockDriver, ProfiledRunTimesEveryKernelWithEvents) {
  auto executable = create(/*use_graph=*/true);
  std::vector<float> x = {1, 1, 2, 3, 4, 5}, b = {1, -1, 0.5};
  RunProfile profile;
  std::vector<ir::Tensor> outputs =
      executable->run({make_tensor({2, 3}, x), make_tensor({3}, b)}, &profile);
  EXPECT_EQ(to_floats(outputs[0])[5], 5 * kWeights[2] + 0.5f);
  EXPECT_EQ(profile.backend, "cuda");
  EXPECT_EQ(profile.device, "Kiln Mock GPU 0");
  ASSERT_EQ(profile.kernels.size(), 3u);
  double previous_start = -1;
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(profile.kernels[k].kernel, static_cast<int>(k));
    EXPECT_GE(profile.kernels[k].duration_us, 0);
    EXPECT_GT(profile.kernels[k].start_us, previous_start);
    previous_start = profile.kernels[k].start_us;
  }
  KilnMockStats s = stats();
  EXPECT_EQ(s.captures, 0);  // not replayed as a graph: events need launches of their own
  EXPECT_EQ(s.kernel_runs, 3);
  EXPECT_EQ(s.event_records, 6);  // 4 around the kernels, the staging slot's uploaded and done
  EXPECT_EQ(s.events, 4);         // the kernels' are gone; the two staging slots keep theirs
  expect_correct(*executable, 2.f);  // an unprofiled run afterwards uses the graph
  EXPECT_EQ(stats().captures, 1);
  executable.reset();
  expect_all_released();
}

TEST_F(CudaMockDriver, ArenaStartsZeroed) {
  codegen::Program program = make_program();
  program.kernels.clear();  // nothing writes the outputs
  auto executable = create(/*use_graph=*/true, program);
  std::vector<ir::Tensor> outputs =
      executable->run({make_tensor({2, 3}, {1, 2, 3, 4, 5, 6}), make_tensor({3}, {1, 2, 3})});
  EXPECT_EQ(to_floats(outputs[0]), std::vector<float>(6, 0.f));
  EXPECT_EQ(stats().captures, 0);  // nothing to capture
}

TEST_F(CudaMockDriver, PtxForAnotherArch) {
  configure(8, 6);
  auto executable = create(/*use_graph=*/true);
  EXPECT_EQ(executable->loaded_code(), "PTX compute_80 (JIT for sm_86)");
  EXPECT_TRUE(stats().loaded_ptx);
  expect_correct(*executable, 4);
}

TEST_F(CudaMockDriver, NoCodeForTheDevice) {
  configure(7, 5);
  EXPECT_EQ(error_of([&] { create(true); }).message,
            "CUDA backend: graph 'mock' has no code that runs on device 0 ('Kiln Mock GPU 0', "
            "sm_75): the binary holds cubins for sm_90 and PTX for compute_80; compile for sm_75 "
            "too");
  expect_all_released();
}

TEST_F(CudaMockDriver, NoSuchDevice) {
  EXPECT_EQ(error_of([&] { create(true, make_program(), make_binary(), 3); }).message,
            "CUDA backend: there is no CUDA device 3 (1 found); use --backend=host to run on the "
            "CPU");
}

TEST_F(CudaMockDriver, OutOfMemoryReleasesEverything) {
  fail_next_("cuMemAlloc_v2", CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(error_of([&] { create(true); }).message,
            "CUDA backend: cuMemAlloc failed for the 1536 B arena of graph 'mock': "
            "CUDA_ERROR_OUT_OF_MEMORY (out of memory)");
  expect_all_released();
}

TEST_F(CudaMockDriver, PinnedMemoryFailureReleasesEverything) {
  fail_next_("cuMemHostAlloc", CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(error_of([&] { create(true); }).message,
            "CUDA backend: cuMemHostAlloc failed for 2048 bytes of pinned staging for inputs and "
            "outputs: CUDA_ERROR_OUT_OF_MEMORY (out of memory)");
  expect_all_released();
  fail_next_("cuEventCreate", CUDA_ERROR_OUT_OF_MEMORY);  // after the pinned memory
  EXPECT_NE(error_of([&] { create(true); }).message.find("cuEventCreate failed"), std::string::npos);
  expect_all_released();
}

TEST_F(CudaMockDriver, InvalidPtxCarriesTheJitLog) {
  CudaBinary binary;
  binary.ptx = "invalid ptx";
  binary.ptx_arch = "compute_80";
  Diagnostic diagnostic = error_of([&] { create(true, make_program(), binary); });
  EXPECT_EQ(diagnostic.message,
            "CUDA backend: cuModuleLoadData failed for PTX compute_80 (JIT for sm_90): "
            "CUDA_ERROR_INVALID_PTX (a PTX JIT compilation failed)");
  ASSERT_GE(diagnostic.notes.size(), 1u);
  EXPECT_EQ(diagnostic.notes[0], "JIT log:\nmock ptxas: syntax error");
  expect_all_released();
}

TEST_F(CudaMockDriver, MissingKernelIsNamed) {
  codegen::Program program = make_program();
  program.kernels[1].name = "add_9";
  EXPECT_EQ(error_of([&] { create(true, program); }).message,
            "CUDA backend: cuModuleGetFunction failed for kernel 'add_9': CUDA_ERROR_NOT_FOUND "
            "(named symbol not found)");
  expect_all_released();
}

TEST_F(CudaMockDriver, SharedMemoryBeyondTheDeviceIsAClearError) {
  configure(9, 0, 60 * 1024);
  EXPECT_EQ(error_of([&] { create(true); }).message,
            "CUDA backend: kernel 'sum_2' needs 65536 B of shared memory per block; device "
            "'Kiln Mock GPU 0' (sm_90) allows at most 61440 B");
  expect_all_released();
}

TEST_F(CudaMockDriver, LaunchFailureDuringCaptureEndsTheCapture) {
  auto executable = create(/*use_graph=*/true);
  fail_next_("cuLaunchKernel", CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(error_of([&] { executable->run({make_tensor({2, 3}, {1, 2, 3, 4, 5, 6}),
                                            make_tensor({3}, {1, 2, 3})}); })
                .message,
            "CUDA backend: cuLaunchKernel failed for kernel 'mul_0' (grid [1,1,1], block [6,1,1], "
            "0 B dynamic shared memory): CUDA_ERROR_INVALID_VALUE (invalid argument)");
  KilnMockStats s = stats();
  EXPECT_FALSE(s.capturing);
  EXPECT_EQ(s.graphs, 0);
  EXPECT_EQ(s.graph_execs, 0);
  // The next run captures again and works.
  expect_correct(*executable, 5);
  EXPECT_EQ(stats().captures, 2);
  executable.reset();
  expect_all_released();
}

TEST_F(CudaMockDriver, LaunchFailureWithoutGraphNamesTheKernel) {
  auto executable = create(/*use_graph=*/false);
  fail_next_("cuLaunchKernel", CUDA_ERROR_INVALID_VALUE);
  std::string message = error_of([&] {
    executable->run({make_tensor({2, 3}, {1, 2, 3, 4, 5, 6}), make_tensor({3}, {1, 2, 3})});
  }).message;
  EXPECT_NE(message.find("cuLaunchKernel failed for kernel 'mul_0'"), std::string::npos) << message;
  expect_correct(*executable, 6);
}

TEST_F(CudaMockDriver, KernelFaultSaysHowToFindIt) {
  auto executable = create(/*use_graph=*/true);
  // A run ends waiting for its staging slot's `done` event: that is where a fault surfaces.
  fail_next_("cuEventSynchronize", CUDA_ERROR_ILLEGAL_ADDRESS);
  Diagnostic diagnostic = error_of([&] {
    executable->run({make_tensor({2, 3}, {1, 2, 3, 4, 5, 6}), make_tensor({3}, {1, 2, 3})});
  });
  EXPECT_EQ(diagnostic.message,
            "CUDA backend: cuEventSynchronize failed for running graph 'mock': "
            "CUDA_ERROR_ILLEGAL_ADDRESS (an illegal memory access was encountered)");
  ASSERT_EQ(diagnostic.notes.size(), 1u);
  EXPECT_NE(diagnostic.notes[0].find("compute-sanitizer"), std::string::npos);
  // The destructor still releases everything and throws nothing, even when releases fail.
  fail_next_("cuModuleUnload", CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_NO_THROW(executable.reset());
  KilnMockStats s = stats();
  EXPECT_EQ(s.context_references, 0);
  EXPECT_EQ(s.allocations, 0);
  EXPECT_EQ(s.streams, 0);
}

TEST_F(CudaMockDriver, BadInputsTouchNothing) {
  auto executable = create(/*use_graph=*/true);
  std::string message = error_of([&] { executable->run({make_tensor({3}, {1, 2, 3})}); }).message;
  EXPECT_EQ(message, "CUDA backend: graph 'mock' takes 2 inputs, got 1");
  message = error_of([&] {
    executable->run({make_tensor({3, 2}, {1, 2, 3, 4, 5, 6}), make_tensor({3}, {1, 2, 3})});
  }).message;
  EXPECT_EQ(message, "CUDA backend: input 'x': expected f32[2,3], got f32[3,2]");
  EXPECT_EQ(stats().captures, 0);
  expect_correct(*executable, 8);
}

// run() makes the context current itself: a thread that never saw it can run the program.
TEST_F(CudaMockDriver, RunsOnAnotherThread) {
  auto executable = create(/*use_graph=*/true);
  ASSERT_EQ(api_->cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
  expect_correct(*executable, 9);
  std::thread other([&] { expect_correct(*executable, 10); });
  other.join();
  executable.reset();
  expect_all_released();
}

TEST_F(CudaMockDriver, ExecutablesShareTheContext) {
  auto first = create(true);
  auto second = create(false);
  EXPECT_EQ(stats().context_references, 2);
  expect_correct(*first, 11);
  first.reset();
  expect_correct(*second, 12);
  second.reset();
  expect_all_released();
}

}  // namespace
}  // namespace kiln::runtime::cuda

namespace kiln::runtime::cuda {
namespace {

void step_kernel(void* const* args, unsigned long long) {
  auto* w = static_cast<const float*>(args[0]);
  auto* next = static_cast<float*>(args[1]);
  for (int i = 0; i < 3; ++i) next[i] = w[i] + 1;
}

// Inputs and outputs travel through the two pinned staging slots: one page-locked allocation,
// every run's copies from and to it (only the parameters' one-time upload is pageable).
TEST_F(CudaMockDriver, RunsCopyThroughPinnedStaging) {
  auto executable = create(/*use_graph=*/true);
  for (float seed : {1.f, 2.f, 3.f}) expect_correct(*executable, seed);
  KilnMockStats s = stats();
  EXPECT_EQ(s.pinned_allocations, 1);
  EXPECT_EQ(s.pinned_uploads, 6);    // 2 inputs x 3 runs
  EXPECT_EQ(s.pageable_uploads, 1);  // the weights, at create()
  EXPECT_EQ(s.pinned_downloads, 6);  // 2 outputs x 3 runs
  EXPECT_EQ(s.pageable_downloads, 0);
  executable.reset();
  expect_all_released();
}

// make_program() plus a state output: step_3 writes next.w = w + 1, which becomes w.
codegen::Program make_step_program() {
  codegen::Program program = make_program();
  program.buffers.push_back(make_buffer("next.w", {ir::DType::F32, {3}}, BufferRole::Output, 2));
  program.kernels.push_back(make_kernel("step_3", {1, 6}));
  program.state_updates = {{6, 1}};
  return program;
}

// A training step's state: the output next.w becomes parameter w after every run, on the
// device, and is not returned; parameters can be read and replaced between runs.
TEST_F(CudaMockDriver, StateUpdatesCarryParametersBetweenRuns) {
  register_("step_3", 2, step_kernel);
  const codegen::Program program = make_step_program();
  for (bool use_graph : {false, true}) {
    auto executable = create(use_graph, program);
    const ir::Tensor x = make_tensor({2, 3}, {1, 1, 1, 1, 1, 1});
    const ir::Tensor b = make_tensor({3}, {0, 0, 0});
    EXPECT_EQ(to_floats(executable->run({x, b})[0]), (std::vector<float>{1, 2, 3, 1, 2, 3}));
    EXPECT_EQ(to_floats(executable->parameter(0)), (std::vector<float>{2, 3, 4}));
    const std::vector<ir::Tensor> second = executable->run({x, b});
    EXPECT_EQ(second.size(), 2u) << "state outputs are not returned";
    EXPECT_EQ(to_floats(second[0]), (std::vector<float>{2, 3, 4, 2, 3, 4}));
    executable->set_parameter(0, make_tensor({3}, {10, 20, 30}));
    EXPECT_EQ(to_floats(executable->run({x, b})[0]), (std::vector<float>{10, 20, 30, 10, 20, 30}));
    EXPECT_EQ(to_floats(executable->parameter(0)), (std::vector<float>{11, 21, 31}));
    const Diagnostic error = error_of([&] { executable->set_parameter(0, make_tensor({2, 3}, {0, 0, 0, 0, 0, 0})); });
    EXPECT_EQ(error.message, "CUDA backend: parameter 'w': expected f32[3], got f32[2,3]");
  }
}

// submit() / collect(): two runs in flight, collected in order, each on the inputs as they
// were when submitted (staged copies), with the state carried from one to the next; misuse is
// an internal error, not a wrong result.
TEST_F(CudaMockDriver, SubmittedRunsAreCollectedInOrder) {
  register_("step_3", 2, step_kernel);
  const codegen::Program program = make_step_program();
  for (bool use_graph : {false, true}) {
    auto executable = create(use_graph, program);
    ir::Tensor x = make_tensor({2, 3}, {1, 1, 1, 1, 1, 1});
    const ir::Tensor b = make_tensor({3}, {0, 0, 0});
    executable->submit({x, b});
    std::memset(x.data(), 0, x.byte_size());  // the first run has its own copy already
    executable->submit({x, b});
    EXPECT_EQ(executable->pending(), 2u);
    EXPECT_THROW(executable->submit({x, b}), InternalError);
    EXPECT_THROW(executable->run({x, b}), InternalError);
    EXPECT_EQ(to_floats(executable->collect()[0]), (std::vector<float>{1, 2, 3, 1, 2, 3}));
    EXPECT_EQ(to_floats(executable->collect()[0]), (std::vector<float>(6, 0.f)));
    EXPECT_EQ(executable->pending(), 0u);
    EXPECT_THROW(executable->collect(), InternalError);
    EXPECT_EQ(to_floats(executable->parameter(0)), (std::vector<float>{3, 4, 5}));  // two steps
    executable.reset();
    expect_all_released();
  }
}

}  // namespace
}  // namespace kiln::runtime::cuda
