// The CUDA backend on a real device: a hand-written translation unit and kernel table,
// compiled with NVRTC, run through CudaExecutable and compared with values computed here.
// Without a driver or device every test that needs one is skipped, and the skip says why.
//
// All values are small integers and halves, so every product and sum is exact in f32 and the
// comparison can be exact whether or not the device contracts a * b + c into an FMA.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "ir/diagnostic.h"
#include "runtime/compile/nvrtc.h"
#include "runtime/cuda/cuda_executable.h"

namespace kiln::runtime::cuda {
namespace {

using codegen::BufferRole;

constexpr int kRows = 250;
constexpr int kCols = 4;
constexpr int kCount = kRows * kCols;
// More than the 48 KB a kernel gets without opting in, so create() must raise the limit.
constexpr uint32_t kSumSharedBytes = 64 * 1024;

// y = x * w + b (w, b per column); z = relu(y); s = sum(y) in index order.
constexpr const char* kSource = R"(
#define KILN_ROWS 250
#define KILN_COLS 4
#define KILN_COUNT (KILN_ROWS * KILN_COLS)

// nodes: mul, add; x: f32[250,4], w: f32[4], b: f32[4] -> y: f32[250,4]
extern "C" __global__ void scale_bias_0(const float* x, const float* b, const float* w, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < KILN_COUNT) y[i] = x[i] * w[i % KILN_COLS] + b[i % KILN_COLS];
}

// nodes: relu; y: f32[250,4] -> z: f32[250,4]
extern "C" __global__ void relu_1(const float* y, float* z) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < KILN_COUNT) z[i] = fmaxf(y[i], 0.0f);
}

// nodes: reduce_sum; y: f32[250,4] -> s: f32[] (one block; staged through 64 KB of shared
// memory, summed by thread 0 in index order so the host can repeat the exact rounding)
extern "C" __global__ void sum_2(const float* y, float* s) {
  extern __shared__ float staged[];
  for (int i = threadIdx.x; i < KILN_COUNT; i += blockDim.x) staged[i] = y[i];
  __syncthreads();
  if (threadIdx.x != 0) return;
  float total = 0.0f;
  for (int i = 0; i < KILN_COUNT; ++i) total += staged[i];
  *s = total;
}
)";

codegen::Buffer make_buffer(std::string name, ir::TensorType type, BufferRole role, int index) {
  int64_t bytes = ir::num_elements(type.shape) * static_cast<int64_t>(ir::dtype_size(type.dtype));
  return codegen::Buffer{std::move(name), std::move(type), role, index, bytes};
}

codegen::Kernel make_kernel(std::string name, codegen::Dim3 grid, codegen::Dim3 block,
                            std::vector<int> args, uint32_t shared_bytes = 0) {
  codegen::Kernel kernel;
  kernel.name = std::move(name);
  kernel.grid = grid;
  kernel.block = block;
  kernel.args = std::move(args);
  kernel.dynamic_shared_bytes = shared_bytes;
  return kernel;
}

// Buffer ids: 0 x, 1 w, 2 y, 3 z, 4 b, 5 s. The inputs are listed out of order (b is input
// 1 but comes after the outputs) so the test also checks that inputs bind by index.
codegen::Program make_program() {
  codegen::Program program;
  program.graph_name = "gpu_test";
  program.source = kSource;
  ir::TensorType matrix{ir::DType::F32, {kRows, kCols}};
  ir::TensorType row{ir::DType::F32, {kCols}};
  program.buffers = {make_buffer("x", matrix, BufferRole::Input, 0),
                     make_buffer("w", row, BufferRole::Parameter, 0),
                     make_buffer("y", matrix, BufferRole::Intermediate, -1),
                     make_buffer("z", matrix, BufferRole::Output, 0),
                     make_buffer("b", row, BufferRole::Input, 1),
                     make_buffer("s", {ir::DType::F32, {}}, BufferRole::Output, 1)};
  const uint32_t blocks = (kCount + 127) / 128;
  program.kernels = {make_kernel("scale_bias_0", {blocks}, {128}, {0, 4, 1, 2}),
                     make_kernel("relu_1", {blocks}, {128}, {2, 3}),
                     make_kernel("sum_2", {1}, {256}, {2, 5}, kSumSharedBytes)};
  program.outputs = {3, 5};
  return program;
}

ir::Tensor make_tensor(ir::Shape shape, const std::vector<float>& values) {
  ir::Tensor tensor({ir::DType::F32, std::move(shape)});
  std::memcpy(tensor.data(), values.data(), tensor.byte_size());
  return tensor;
}

std::vector<float> to_floats(const ir::Tensor& tensor) {
  std::vector<float> values(static_cast<size_t>(tensor.num_elements()));
  std::memcpy(values.data(), tensor.data(), tensor.byte_size());
  return values;
}

const std::vector<float> kWeights = {0.5f, -1.0f, 2.0f, 0.25f};

struct Case {
  std::vector<float> x, b;
};

Case make_case(int seed) {
  Case c;
  for (int i = 0; i < kCount; ++i) c.x.push_back(static_cast<float>((i * 7 + seed) % 17 - 8));
  for (int j = 0; j < kCols; ++j) c.b.push_back(static_cast<float>(seed + j) - 2.0f);
  return c;
}

std::vector<ir::Tensor> inputs_of(const Case& c) {
  return {make_tensor({kRows, kCols}, c.x), make_tensor({kCols}, c.b)};
}

// Runs `c` and compares z and s with the same arithmetic done here.
void expect_correct(CudaExecutable& executable, const Case& c) {
  std::vector<ir::Tensor> outputs = executable.run(inputs_of(c));
  ASSERT_EQ(outputs.size(), 2u);
  EXPECT_EQ(outputs[0].type(), (ir::TensorType{ir::DType::F32, {kRows, kCols}}));
  EXPECT_EQ(outputs[1].type(), (ir::TensorType{ir::DType::F32, {}}));
  std::vector<float> z = to_floats(outputs[0]);
  float total = 0.0f;
  for (int i = 0; i < kCount; ++i) {
    float y = c.x[i] * kWeights[i % kCols] + c.b[i % kCols];
    total += y;
    ASSERT_EQ(z[i], std::max(y, 0.0f)) << "z[" << i << "]";
  }
  EXPECT_EQ(to_floats(outputs[1])[0], total);
}

class CudaRun : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda_available(&why)) GTEST_SKIP() << "CUDA backend unavailable: " << why;
    device_ = cuda_device_info(0);
  }

  // PTX for sm_75 (the oldest arch CUDA 13 targets, so it JITs on any device) and a cubin for
  // the device's own arch.
  CudaBinary compile() const {
    NvrtcOptions options;
    options.archs = {"sm_75"};
    if (device_.arch() != "sm_75") options.archs.push_back(device_.arch());
    return compile_with_nvrtc(kSource, "gpu_test.cu", options);
  }

  std::unique_ptr<CudaExecutable> create(const CudaBinary& binary, bool use_graph) const {
    return CudaExecutable::create(make_program(), binary, {make_tensor({kCols}, kWeights)},
                                  CudaOptions{0, use_graph});
  }

  CudaDeviceInfo device_;
};

// Runs everywhere: the translation unit above must compile for real GPUs.
TEST(CudaRunSource, Compiles) {
  NvrtcOptions options;
  options.archs = {"sm_80", "sm_90"};
  CudaBinary binary = compile_with_nvrtc(kSource, "gpu_test.cu", options);
  EXPECT_FALSE(binary.ptx.empty());
  EXPECT_EQ(binary.cubins.size(), 2u);
}

TEST_F(CudaRun, CubinWithoutGraph) {
  auto executable = create(compile(), /*use_graph=*/false);
  EXPECT_EQ(executable->loaded_code(), "cubin " + device_.arch());
  EXPECT_EQ(executable->device_name(), device_.name);
  expect_correct(*executable, make_case(0));
  expect_correct(*executable, make_case(1));
}

TEST_F(CudaRun, PtxJit) {
  CudaBinary binary = compile();
  binary.cubins.clear();
  auto executable = create(binary, /*use_graph=*/false);
  EXPECT_EQ(executable->loaded_code(), "PTX compute_75 (JIT for " + device_.arch() + ")");
  expect_correct(*executable, make_case(2));
}

// The first run captures the graph, later runs replay it: each must see its own inputs.
TEST_F(CudaRun, GraphReplaysWithNewInputs) {
  auto executable = create(compile(), /*use_graph=*/true);
  for (int seed = 0; seed < 4; ++seed) expect_correct(*executable, make_case(seed));
}

TEST_F(CudaRun, BadInputsThrowAndLeaveTheExecutableUsable) {
  auto executable = create(compile(), /*use_graph=*/true);
  std::vector<ir::Tensor> wrong = {make_tensor({kCols}, kWeights), make_tensor({kCols}, kWeights)};
  EXPECT_THROW(executable->run(wrong), Error);
  EXPECT_THROW(executable->run({}), Error);
  expect_correct(*executable, make_case(3));
}

TEST_F(CudaRun, ExecutablesShareTheDevice) {
  CudaBinary binary = compile();
  auto first = create(binary, true);
  auto second = create(binary, false);
  expect_correct(*first, make_case(4));
  first.reset();  // releases its reference on the primary context, not the context itself
  expect_correct(*second, make_case(5));
}

TEST_F(CudaRun, PtxForANewerArchIsAClearError) {
  CudaBinary binary;
  binary.ptx = ".version 9.0\n.target sm_999\n";
  binary.ptx_arch = "compute_" + std::to_string(device_.sm + 1);
  try {
    create(binary, true);
    FAIL() << "created an executable without code for the device";
  } catch (const Error& error) {
    std::string message = error.diagnostic().message;
    EXPECT_NE(message.find("has no code that runs on device 0"), std::string::npos) << message;
    EXPECT_NE(message.find(binary.ptx_arch), std::string::npos) << message;
  }
}

TEST_F(CudaRun, InvalidPtxCarriesTheJitLog) {
  CudaBinary binary;
  binary.ptx = "this is not PTX\n";
  binary.ptx_arch = "compute_75";
  try {
    create(binary, true);
    FAIL() << "loaded invalid PTX";
  } catch (const Error& error) {
    EXPECT_NE(error.diagnostic().message.find("cuModuleLoadData failed for PTX compute_75"),
              std::string::npos)
        << error.what();
  }
}

TEST_F(CudaRun, TooMuchSharedMemoryIsAClearError) {
  codegen::Program program = make_program();
  program.kernels[2].dynamic_shared_bytes = 64 * 1024 * 1024;
  try {
    CudaExecutable::create(program, compile(), {make_tensor({kCols}, kWeights)}, {});
    FAIL() << "created a kernel with 64 MB of shared memory";
  } catch (const Error& error) {
    EXPECT_NE(error.diagnostic().message.find("kernel 'sum_2' needs 67108864 B of shared memory"),
              std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace kiln::runtime::cuda
