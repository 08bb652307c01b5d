// The library path of the CUDA backend without a GPU: CudaExecutable end to end on the mock
// driver with mock cuBLASLt and cuDNN (tests/mocks/mock_vendor_libraries.h), which
// compute what the libraries document: results, the algorithm and workspace chosen, fallback
// to the generated kernel with its reason, errors, capture, and every handle released. The
// LibraryCalls come from select_library_call on textual IR, as codegen makes them.
#include <gtest/gtest.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <regex>

#include "codegen/library_dispatch.h"
#include "ir/diagnostic.h"
#include "ir/parser.h"
#include "ir/tensor.h"
#include "runtime/cuda/cuda_executable.h"
#include "runtime/cuda/driver_api.h"
#include "runtime/cuda/library_runner.h"
#include "tests/mocks/mock_libcuda.h"
#include "tests/mocks/mock_vendor_libraries.h"

namespace kiln::runtime::cuda {
namespace {

using codegen::BufferRole;

constexpr const char* kMockDriver = KILN_BINARY_DIR "/tests/mocks/libkiln_mock_cuda.so";
constexpr const char* kMockCublasLt = KILN_BINARY_DIR "/tests/mocks/libkiln_mock_cublaslt.so";
constexpr const char* kMockCudnn = KILN_BINARY_DIR "/tests/mocks/libkiln_mock_cudnn.so";
constexpr size_t kMiB = size_t{1} << 20;

codegen::Buffer make_buffer(std::string name, ir::TensorType type, BufferRole role, int index,
                            int64_t arena_offset = -1) {
  int64_t bytes = ir::num_elements(type.shape) * static_cast<int64_t>(ir::dtype_size(type.dtype));
  return codegen::Buffer{std::move(name), std::move(type), role, index, bytes, arena_offset};
}

ir::Tensor make_tensor(ir::Shape shape, const std::vector<float>& values) {
  ir::Tensor tensor({ir::DType::F32, std::move(shape)});
  EXPECT_EQ(values.size(), static_cast<size_t>(tensor.num_elements()));
  std::memcpy(tensor.data(), values.data(), tensor.byte_size());
  return tensor;
}

std::vector<float> to_floats(const ir::Tensor& tensor) {
  std::vector<float> values(static_cast<size_t>(tensor.num_elements()));
  std::memcpy(values.data(), tensor.data(), tensor.byte_size());
  return values;
}

// Small integers, so every sum is exact in f32 and any order of summation agrees.
std::vector<float> ramp(size_t count, int seed) {
  std::vector<float> values;
  for (size_t i = 0; i < count; ++i)
    values.push_back(static_cast<float>((static_cast<int>(i) * 7 + seed) % 9 - 4));
  return values;
}

// A bf16 or f16 tensor of `values`, rounded to nearest even.
ir::Tensor make_16bit(ir::DType dtype, ir::Shape shape, const std::vector<float>& values) {
  ir::Tensor tensor({dtype, std::move(shape)});
  EXPECT_EQ(values.size(), static_cast<size_t>(tensor.num_elements()));
  std::vector<uint16_t> bits;
  for (float value : values)
    bits.push_back(dtype == ir::DType::BF16 ? ir::float_to_bfloat16_bits(value) : ir::float_to_half_bits(value));
  std::memcpy(tensor.data(), bits.data(), tensor.byte_size());
  return tensor;
}

// The elements of a bf16 or f16 tensor, widened.
std::vector<float> widen(const ir::Tensor& tensor) {
  std::vector<uint16_t> bits(static_cast<size_t>(tensor.num_elements()));
  std::memcpy(bits.data(), tensor.data(), tensor.byte_size());
  std::vector<float> values;
  for (uint16_t b : bits)
    values.push_back(tensor.type().dtype == ir::DType::BF16 ? ir::bfloat16_bits_to_float(b)
                                                            : ir::half_bits_to_float(b));
  return values;
}

// `values` as a 16-bit tensor stores them.
std::vector<float> rounded(ir::DType dtype, const std::vector<float>& values) {
  return widen(make_16bit(dtype, {static_cast<int64_t>(values.size())}, values));
}

// The library call codegen makes for the first node of `text`.
codegen::LibraryCall library_call(const std::string& text,
                                  codegen::Precision precision = codegen::Precision::F32) {
  ir::Graph graph = ir::parse_graph(text, "library.ir");
  std::string why;
  auto call = codegen::select_library_call(*graph.nodes().front(), {true, true}, precision, &why);
  EXPECT_TRUE(call.has_value()) << why;
  return call.value_or(codegen::LibraryCall{});
}

// A program of one kernel, "fused_0", over the given buffers (inputs, then parameters, then
// the output, in kernel argument order).
codegen::Program one_kernel(std::vector<codegen::Buffer> buffers, codegen::LibraryCall call) {
  codegen::Program program;
  program.graph_name = "library";
  codegen::Kernel kernel;
  kernel.name = "fused_0";
  kernel.block = {1, 1, 1};
  for (size_t i = 0; i < buffers.size(); ++i) kernel.args.push_back(static_cast<int>(i));
  kernel.library = std::move(call);
  program.kernels = {kernel};
  program.outputs = {static_cast<int>(buffers.size()) - 1};
  program.buffers = std::move(buffers);
  return program;
}

CudaBinary mock_binary() {
  CudaBinary binary;
  binary.cubins["sm_90"] = std::string("\x7f" "ELF mock cubin");
  return binary;
}

// ---- end to end on the mocks ------------------------------------------------------------------

// dense(x [4,3], w [2,3]) + bias_add(b [2]) + relu, fused: buffers x, w, b, y.
constexpr const char* kDenseKernel = R"(graph @g(%x: f32[4,3], %w: f32[2,3], %b: f32[2]) -> (f32[4,2]) {
  %y = kernel @fused_0(%x, %w, %b) {kind = "epilogue"} : f32[4,2] {
    %d = dense(%x, %w) : f32[4,2]
    %db = bias_add(%d, %b) {axis = 1} : f32[4,2]
    %y = relu(%db) : f32[4,2]
    return %y
  }
  return %y
})";

std::vector<float> dense_reference(const std::vector<float>& x, const std::vector<float>& w,
                                   const std::vector<float>& b) {
  std::vector<float> y;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 2; ++j) {
      float sum = b[j];
      for (int k = 0; k < 3; ++k) sum += x[i * 3 + k] * w[j * 3 + k];
      y.push_back(std::max(sum, 0.0f));
    }
  return y;
}

// The generated kernel's stand-in on the mock driver.
void dense_kernel(void* const* args, unsigned long long) {
  auto arg = [&](int i) { return static_cast<const float*>(args[i]); };
  std::vector<float> x(arg(0), arg(0) + 12), w(arg(1), arg(1) + 6), b(arg(2), arg(2) + 2);
  const std::vector<float> y = dense_reference(x, w, b);
  std::memcpy(args[3], y.data(), y.size() * sizeof(float));
}

codegen::Program dense_program() {
  return one_kernel({make_buffer("x", {ir::DType::F32, {4, 3}}, BufferRole::Input, 0),
                     make_buffer("w", {ir::DType::F32, {2, 3}}, BufferRole::Parameter, 0),
                     make_buffer("b", {ir::DType::F32, {2}}, BufferRole::Parameter, 1),
                     make_buffer("y", {ir::DType::F32, {4, 2}}, BufferRole::Output, 0)},
                    library_call(kDenseKernel));
}

const std::vector<float> kDenseW = {1, -2, 3, 0.5, 1, -1};
const std::vector<float> kDenseB = {0.5, -4};

class CudaMockLibraries : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    for (const char* path : {kMockDriver, kMockCublasLt, kMockCudnn})
      if (!std::filesystem::exists(path)) return;  // SetUp fails each test, saying so
    api_ = DriverApi::load(kMockDriver).release();
    void* driver = dlopen(kMockDriver, RTLD_NOW | RTLD_LOCAL);
    reset_driver_ = reinterpret_cast<decltype(&kiln_mock_reset)>(dlsym(driver, "kiln_mock_reset"));
    register_ = reinterpret_cast<decltype(&kiln_mock_register_kernel)>(
        dlsym(driver, "kiln_mock_register_kernel"));
    driver_stats_ = reinterpret_cast<decltype(&kiln_mock_stats)>(dlsym(driver, "kiln_mock_stats"));
    void* lt = dlopen(kMockCublasLt, RTLD_NOW | RTLD_LOCAL);
    void* dnn = dlopen(kMockCudnn, RTLD_NOW | RTLD_LOCAL);
    reset_lt_ = reinterpret_cast<void (*)()>(dlsym(lt, "kiln_mock_cublaslt_reset"));
    reset_dnn_ = reinterpret_cast<void (*)()>(dlsym(dnn, "kiln_mock_cudnn_reset"));
    lt_stats_ = reinterpret_cast<Stats>(dlsym(lt, "kiln_mock_cublaslt_stats"));
    dnn_stats_ = reinterpret_cast<Stats>(dlsym(dnn, "kiln_mock_cudnn_stats"));
    lt_fail_ = reinterpret_cast<Fail>(dlsym(lt, "kiln_mock_cublaslt_fail_next"));
    dnn_fail_ = reinterpret_cast<Fail>(dlsym(dnn, "kiln_mock_cudnn_fail_next"));
  }

  void SetUp() override {
    ASSERT_NE(api_, nullptr) << "the mock libraries were not built (kiln_mock_cuda, "
                                "kiln_mock_cublaslt, kiln_mock_cudnn)";
    KilnMockConfig config;
    reset_driver_(&config);
    api_->initialize();
    reset_lt_();
    reset_dnn_();
    register_("fused_0", 4, dense_kernel);
  }

  static CudaOptions options(bool use_graph = false) {
    CudaOptions options;
    options.use_cuda_graph = use_graph;
    options.library_paths.cublaslt = kMockCublasLt;
    options.library_paths.cudnn = kMockCudnn;
    return options;
  }

  static std::unique_ptr<CudaExecutable> create(const codegen::Program& program,
                                                std::vector<ir::Tensor> parameters,
                                                const CudaOptions& options) {
    return CudaExecutable::create_with_driver(*api_, program, mock_binary(), parameters, options);
  }

  static std::unique_ptr<CudaExecutable> create_dense(const CudaOptions& options) {
    return create(dense_program(), {make_tensor({2, 3}, kDenseW), make_tensor({2}, kDenseB)},
                  options);
  }

  static void expect_dense_correct(CudaExecutable& executable, int seed) {
    const std::vector<float> x = ramp(12, seed);
    std::vector<ir::Tensor> outputs = executable.run({make_tensor({4, 3}, x)});
    ASSERT_EQ(outputs.size(), 1u);
    EXPECT_EQ(to_floats(outputs[0]), dense_reference(x, kDenseW, kDenseB));
  }

  static KilnMockLibraryStats lt_stats() {
    KilnMockLibraryStats s;
    lt_stats_(&s);
    return s;
  }
  static KilnMockLibraryStats dnn_stats() {
    KilnMockLibraryStats s;
    dnn_stats_(&s);
    return s;
  }
  static int kernel_runs() {
    KilnMockStats s;
    driver_stats_(&s);
    return s.kernel_runs;
  }

  using Stats = void (*)(KilnMockLibraryStats*);
  using Fail = void (*)(const char*, int);
  static inline DriverApi* api_ = nullptr;
  static inline decltype(&kiln_mock_reset) reset_driver_ = nullptr;
  static inline decltype(&kiln_mock_register_kernel) register_ = nullptr;
  static inline decltype(&kiln_mock_stats) driver_stats_ = nullptr;
  static inline void (*reset_lt_)() = nullptr;
  static inline void (*reset_dnn_)() = nullptr;
  static inline Stats lt_stats_ = nullptr;
  static inline Stats dnn_stats_ = nullptr;
  static inline Fail lt_fail_ = nullptr;
  static inline Fail dnn_fail_ = nullptr;
};

TEST_F(CudaMockLibraries, DenseBiasReluRunsOnCublasLt) {
  {
    auto executable = create_dense(options());
    EXPECT_EQ(executable->library_report(),
              std::vector<std::string>{"fused_0: cublasLt dense f32 4x3 * (2x3)^T + bias + relu "
                                       "(cuBLASLt heuristic algorithm, 1048576 B workspace, "
                                       "1.00 waves)"});
    for (int seed : {0, 5}) expect_dense_correct(*executable, seed);
    EXPECT_EQ(kernel_runs(), 0);  // the generated kernel never ran
    const KilnMockLibraryStats s = lt_stats();
    EXPECT_EQ(s.calls, 3);  // the first call at create(), then one per run
    EXPECT_NE(s.last_stream, nullptr);
    EXPECT_NE(s.last_workspace, nullptr);
    // The mock's best algorithm needs 64 MiB, beyond the 4 MiB reserved: the next one runs.
    EXPECT_EQ(s.last_workspace_bytes, 1 * kMiB);
    EXPECT_EQ(s.last_choice, CUBLASLT_EPILOGUE_RELU_BIAS);
    EXPECT_EQ(s.handles, 1);
  }
  EXPECT_EQ(lt_stats().handles, 0);
  EXPECT_EQ(lt_stats().descriptors, 0);
}

TEST_F(CudaMockLibraries, LibraryNoneRunsTheGeneratedKernel) {
  CudaOptions none = options();
  none.libraries = {};
  auto executable = create_dense(none);
  EXPECT_EQ(executable->library_report(),
            std::vector<std::string>{"fused_0: generated kernel: --library excludes cublasLt"});
  expect_dense_correct(*executable, 1);
  EXPECT_EQ(kernel_runs(), 1);
  EXPECT_EQ(lt_stats().calls, 0);
}

TEST_F(CudaMockLibraries, MissingLibraryFallsBackToTheGeneratedKernel) {
  CudaOptions missing = options();
  missing.library_paths.cublaslt = "/nonexistent/libcublasLt.so.13";
  auto executable = create_dense(missing);
  const std::vector<std::string> report = executable->library_report();
  ASSERT_EQ(report.size(), 2u);
  EXPECT_EQ(report[0].rfind("cuBLASLt: /nonexistent/libcublasLt.so.13 not found (", 0), 0u)
      << report[0];
  EXPECT_EQ(report[1], "fused_0: generated kernel: cublasLt did not load");
  expect_dense_correct(*executable, 2);
  EXPECT_EQ(kernel_runs(), 1);
}

TEST_F(CudaMockLibraries, RefusalAtPreparationFallsBackWithTheStatus) {
  lt_fail_("cublasLtMatmulAlgoGetHeuristic", CUBLAS_STATUS_NOT_SUPPORTED);
  auto executable = create_dense(options());
  EXPECT_EQ(executable->library_report(),
            std::vector<std::string>{
                "fused_0: generated kernel: cuBLASLt: cublasLtMatmulAlgoGetHeuristic failed for "
                "kernel 'fused_0': CUBLAS_STATUS_NOT_SUPPORTED (the functionality requested is "
                "not supported)"});
  expect_dense_correct(*executable, 3);
  EXPECT_EQ(lt_stats().descriptors, 0);  // what the failed preparation made is gone
}

TEST_F(CudaMockLibraries, ErrorWhileRunningNamesTheCall) {
  auto executable = create_dense(options());
  lt_fail_("cublasLtMatmul", CUBLAS_STATUS_NOT_SUPPORTED);
  try {
    executable->run({make_tensor({4, 3}, ramp(12, 0))});
    FAIL() << "the refused call went unnoticed";
  } catch (const Error& error) {
    EXPECT_EQ(error.diagnostic().message,
              "cuBLASLt: cublasLtMatmul failed for kernel 'fused_0': CUBLAS_STATUS_NOT_SUPPORTED "
              "(the functionality requested is not supported)");
  }
  expect_dense_correct(*executable, 4);  // the next run is fine again
}

// The mock computes at the call, so during capture, not at replay: only the captured run (the
// first) can be checked for its values here; tests/gpu checks replays on a device.
TEST_F(CudaMockLibraries, LibraryCallsAreCapturedOnTheExecutablesStream) {
  auto executable = create_dense(options(/*use_graph=*/true));
  expect_dense_correct(*executable, 6);
  KilnMockStats driver;
  driver_stats_(&driver);
  EXPECT_EQ(driver.captures, 1);
  EXPECT_EQ(driver.graph_launches, 1);
  EXPECT_EQ(lt_stats().calls, 2);  // at create(), and into the graph
}

// Matmul layouts: the row-major calls against the mock's column-major definition.
struct MatmulCase {
  const char* name;
  std::string text;  // graph with one plain matmul node over %a, %b
  ir::Shape a, b, y;
  bool transpose_a, transpose_b;
};

// y[batch, i, j] = sum_k a(batch, i, k) b(batch, k, j); an operand of rank 2 is shared.
std::vector<float> matmul_reference(const MatmulCase& c, const std::vector<float>& a,
                                    const std::vector<float>& b) {
  const int64_t m = c.y[c.y.size() - 2], n = c.y.back();
  const int64_t k = c.transpose_a ? c.a[c.a.size() - 2] : c.a.back();
  const int64_t batches = ir::num_elements(c.y) / (m * n);
  const bool a_batched = c.a.size() > 2, b_batched = c.b.size() > 2;
  std::vector<float> y;
  for (int64_t batch = 0; batch < batches; ++batch)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        float sum = 0;
        for (int64_t p = 0; p < k; ++p) {
          const float* pa = a.data() + (a_batched ? batch * m * k : 0);
          const float* pb = b.data() + (b_batched ? batch * k * n : 0);
          sum += (c.transpose_a ? pa[p * m + i] : pa[i * k + p]) *
                 (c.transpose_b ? pb[j * k + p] : pb[p * n + j]);
        }
        y.push_back(sum);
      }
  return y;
}

TEST_F(CudaMockLibraries, MatmulLayoutsMatchTheRowMajorDefinition) {
  auto graph = [](const char* a, const char* b, const char* y, const char* attrs) {
    return fmt::format("graph @g(%a: f32{}, %b: f32{}) -> (f32{}) {{\n  %y = matmul(%a, %b) {} "
                       ": f32{}\n  return %y\n}}",
                       a, b, y, attrs, y);
  };
  const std::vector<MatmulCase> cases = {
      {"batched", graph("[2,3,4]", "[2,4,5]", "[2,3,5]", ""), {2, 3, 4}, {2, 4, 5}, {2, 3, 5},
       false, false},
      {"transposed", graph("[4,3]", "[5,4]", "[3,5]", "{transpose_a = true, transpose_b = true}"),
       {4, 3}, {5, 4}, {3, 5}, true, true},
      {"shared b folded into rows", graph("[2,3,4]", "[4,5]", "[2,3,5]", ""), {2, 3, 4}, {4, 5},
       {2, 3, 5}, false, false},
      {"shared a", graph("[3,4]", "[2,4,5]", "[2,3,5]", ""), {3, 4}, {2, 4, 5}, {2, 3, 5}, false,
       false},
  };
  for (const MatmulCase& c : cases) {
    SCOPED_TRACE(c.name);
    const ir::TensorType a{ir::DType::F32, c.a}, b{ir::DType::F32, c.b}, y{ir::DType::F32, c.y};
    const codegen::Program program = one_kernel(
        {make_buffer("a", a, BufferRole::Input, 0), make_buffer("b", b, BufferRole::Input, 1),
         make_buffer("y", y, BufferRole::Output, 0)},
        library_call(c.text));
    register_("fused_0", 3, [](void* const*, unsigned long long) {});
    auto executable = create(program, {}, options());
    const std::vector<float> av = ramp(ir::num_elements(c.a), 1);
    const std::vector<float> bv = ramp(ir::num_elements(c.b), 2);
    std::vector<ir::Tensor> outputs = executable->run({make_tensor(c.a, av), make_tensor(c.b, bv)});
    EXPECT_EQ(to_floats(outputs[0]), matmul_reference(c, av, bv));
  }
  EXPECT_EQ(kernel_runs(), 0);
}

// conv2d(x [1,2,5,5], w [3,2,3,3], pad 1) + bias b [3] (+ residual r) + relu: x, w, b, r, y,
// all of `dtype`.
std::string conv_kernel(bool residual, bool relu, const std::string& dtype = "f32") {
  std::string body = "    %cb = bias_add(%c, %b) : f32[1,3,5,5]\n";
  std::string last = "%cb";
  if (residual) {
    body += "    %s = add(%cb, %r) : f32[1,3,5,5]\n";
    last = "%s";
  }
  body += relu ? "    %y = relu(" + last + ") : f32[1,3,5,5]\n"
               : "    %y = reshape(" + last + ") {shape = [1,3,5,5]} : f32[1,3,5,5]\n";
  std::string text = std::string(R"(graph @g(%x: f32[1,2,5,5], %w: f32[3,2,3,3], %b: f32[3], %r: f32[1,3,5,5]) -> (f32[1,3,5,5]) {
  %y = kernel @fused_0(%x, %w, %b)") + (residual ? ", %r" : "") +
         R"() {kind = "epilogue"} : f32[1,3,5,5] {
    %c = conv2d(%x, %w) {pad = [1,1,1,1]} : f32[1,3,5,5]
)" + body + R"(    return %y
  }
  return %y
})";
  for (size_t at = text.find("f32["); at != std::string::npos; at = text.find("f32[", at + dtype.size()))
    text.replace(at, 3, dtype);
  return text;
}

std::vector<float> conv_reference(const std::vector<float>& x, const std::vector<float>& w,
                                  const std::vector<float>& b, const std::vector<float>* r,
                                  bool relu) {
  std::vector<float> y;
  for (int k = 0; k < 3; ++k)
    for (int p = 0; p < 5; ++p)
      for (int q = 0; q < 5; ++q) {
        float sum = b[k] + (r != nullptr ? (*r)[(k * 5 + p) * 5 + q] : 0.0f);
        for (int c = 0; c < 2; ++c)
          for (int i = 0; i < 3; ++i)
            for (int j = 0; j < 3; ++j) {
              const int h = p + i - 1, v = q + j - 1;
              if (h < 0 || h >= 5 || v < 0 || v >= 5) continue;
              sum += x[(c * 5 + h) * 5 + v] * w[((k * 2 + c) * 3 + i) * 3 + j];
            }
        y.push_back(relu ? std::max(sum, 0.0f) : sum);
      }
  return y;
}

TEST_F(CudaMockLibraries, ConvBiasResidualReluRunsOnCudnn) {
  for (bool residual : {false, true}) {
    for (bool relu : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "residual " << residual << ", relu " << relu);
      std::vector<codegen::Buffer> buffers = {
          make_buffer("x", {ir::DType::F32, {1, 2, 5, 5}}, BufferRole::Input, 0),
          make_buffer("w", {ir::DType::F32, {3, 2, 3, 3}}, BufferRole::Parameter, 0),
          make_buffer("b", {ir::DType::F32, {3}}, BufferRole::Parameter, 1)};
      const ir::TensorType out{ir::DType::F32, {1, 3, 5, 5}};
      if (residual) buffers.push_back(make_buffer("r", out, BufferRole::Input, 1));
      buffers.push_back(make_buffer("y", out, BufferRole::Output, 0));
      const codegen::Program program =
          one_kernel(buffers, library_call(conv_kernel(residual, relu)));
      register_("fused_0", static_cast<int>(buffers.size()), [](void* const*, unsigned long long) {
      });
      const std::vector<float> w = ramp(54, 3), b = {1, -2, 0.5};
      {
        auto executable = create(program, {make_tensor({3, 2, 3, 3}, w), make_tensor({3}, b)},
                                 options());
        const std::vector<float> x = ramp(50, 4), r = ramp(75, 5);
        std::vector<ir::Tensor> inputs = {make_tensor({1, 2, 5, 5}, x)};
        if (residual) inputs.push_back(make_tensor({1, 3, 5, 5}, r));
        std::vector<ir::Tensor> outputs = executable->run(inputs);
        EXPECT_EQ(to_floats(outputs[0]), conv_reference(x, w, b, residual ? &r : nullptr, relu));
        // Identity runs only on IMPLICIT_PRECOMP_GEMM, which needs the mock's 4 KiB workspace.
        const KilnMockLibraryStats s = dnn_stats();
        EXPECT_EQ(s.last_choice, relu ? CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM
                                      : CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM);
        EXPECT_EQ(s.last_workspace_bytes, relu ? 0u : 4096u);
        EXPECT_NE(s.last_stream, nullptr);
        EXPECT_EQ(kernel_runs(), 0);
      }
      EXPECT_EQ(dnn_stats().handles, 0);
      EXPECT_EQ(dnn_stats().descriptors, 0);
    }
  }
}

// An NHWC convolution (layout-nhwc) on cuDNN: its call sets NHWC tensor, bias and residual
// descriptors and a KRSC filter one, and the mock (which computes in whichever format the
// descriptors say, and refuses mixed ones) gives the NCHW reference transposed.
TEST_F(CudaMockLibraries, NhwcConvRunsOnCudnnWithNhwcDescriptors) {
  const std::string text = R"(graph @g(%x: f32[1,5,5,2], %w: f32[3,3,3,2], %b: f32[3], %r: f32[1,5,5,3]) -> (f32[1,5,5,3]) {
  %y = kernel @fused_0(%x, %w, %b, %r) {kind = "epilogue"} : f32[1,5,5,3] {
    %c = conv2d(%x, %w) {layout = "nhwc", pad = [1,1,1,1]} : f32[1,5,5,3]
    %cb = bias_add(%c, %b) {axis = 3} : f32[1,5,5,3]
    %s = add(%cb, %r) : f32[1,5,5,3]
    %y = relu(%s) : f32[1,5,5,3]
    return %y
  }
  return %y
})";
  const ir::TensorType out{ir::DType::F32, {1, 5, 5, 3}};
  std::vector<codegen::Buffer> buffers = {make_buffer("x", {ir::DType::F32, {1, 5, 5, 2}}, BufferRole::Input, 0),
                                          make_buffer("w", {ir::DType::F32, {3, 3, 3, 2}}, BufferRole::Parameter, 0),
                                          make_buffer("b", {ir::DType::F32, {3}}, BufferRole::Parameter, 1),
                                          make_buffer("r", out, BufferRole::Input, 1),
                                          make_buffer("y", out, BufferRole::Output, 0)};
  const codegen::Program program = one_kernel(buffers, library_call(text));
  ASSERT_TRUE(program.kernels[0].library->conv()->nhwc);
  register_("fused_0", static_cast<int>(buffers.size()), [](void* const*, unsigned long long) {});
  // The NCHW values of conv_reference, stored NHWC (and the filter KRSC).
  const std::vector<float> w = ramp(54, 3), b = {1, -2, 0.5}, x = ramp(50, 4), r = ramp(75, 5);
  const auto nhwc = [](const std::vector<float>& nchw, int c, int hw) {
    std::vector<float> out(nchw.size());
    for (size_t i = 0; i < nchw.size(); ++i) {
      const int n = static_cast<int>(i) / (c * hw), ch = static_cast<int>(i) / hw % c, p = static_cast<int>(i) % hw;
      out[static_cast<size_t>((n * hw + p) * c + ch)] = nchw[i];
    }
    return out;
  };
  {
    auto executable = create(program, {make_tensor({3, 3, 3, 2}, nhwc(w, 2, 9)), make_tensor({3}, b)}, options());
    std::vector<ir::Tensor> outputs =
        executable->run({make_tensor({1, 5, 5, 2}, nhwc(x, 2, 25)), make_tensor({1, 5, 5, 3}, nhwc(r, 3, 25))});
    EXPECT_EQ(to_floats(outputs[0]), nhwc(conv_reference(x, w, b, &r, true), 3, 25));
    EXPECT_EQ(kernel_runs(), 0);
  }
  EXPECT_EQ(dnn_stats().descriptors, 0);
}

// autocast's bf16 and f16 tensors go to the libraries as stored (cuDNN's PSEUDO_BFLOAT16 and
// PSEUDO_HALF configurations, cuBLASLt's 16-bit layouts), summed in f32 and rounded once at the
// store, as the generated kernel does: with small integers every f32 sum is exact, so the
// results are the reference's rounded to the dtype, bit for bit.
TEST_F(CudaMockLibraries, SixteenBitTensorsRunOnTheLibrariesAsStored) {
  for (ir::DType dtype : {ir::DType::BF16, ir::DType::F16}) {
    const std::string name(ir::dtype_name(dtype));
    const codegen::Precision precision =
        dtype == ir::DType::BF16 ? codegen::Precision::Bf16 : codegen::Precision::F16;
    SCOPED_TRACE(name);
    {
      const codegen::Program program = one_kernel(
          {make_buffer("x", {dtype, {1, 2, 5, 5}}, BufferRole::Input, 0),
           make_buffer("w", {dtype, {3, 2, 3, 3}}, BufferRole::Parameter, 0),
           make_buffer("b", {dtype, {3}}, BufferRole::Parameter, 1),
           make_buffer("r", {dtype, {1, 3, 5, 5}}, BufferRole::Input, 1),
           make_buffer("y", {dtype, {1, 3, 5, 5}}, BufferRole::Output, 0)},
          library_call(conv_kernel(true, true, name), precision));
      register_("fused_0", 5, [](void* const*, unsigned long long) {});
      // Large enough that some sums need more bits than bf16 has: the rounding shows.
      std::vector<float> w = ramp(54, 3), b = {1, -2, 0.5}, x = ramp(50, 4), r = ramp(75, 5);
      for (float& v : w) v *= 8.0f;
      auto executable = create(program, {make_16bit(dtype, {3, 2, 3, 3}, w), make_16bit(dtype, {3}, b)},
                               options());
      EXPECT_EQ(executable->library_report(),
                std::vector<std::string>{fmt::format(
                    "fused_0: cudnn conv {} 1x2x5x5 * 3x2x3x3 pad 1,1 stride 1,1 + bias + residual + "
                    "relu (algo WINOGRAD_NONFUSED, 0 B workspace)",
                    name)});
      std::vector<ir::Tensor> outputs =
          executable->run({make_16bit(dtype, {1, 2, 5, 5}, x), make_16bit(dtype, {1, 3, 5, 5}, r)});
      ASSERT_EQ(outputs[0].type().dtype, dtype);
      const std::vector<float> expected = rounded(dtype, conv_reference(x, w, b, &r, true));
      EXPECT_EQ(widen(outputs[0]), expected);
      if (dtype == ir::DType::BF16) {
        EXPECT_NE(expected, conv_reference(x, w, b, &r, true));  // rounded, and checked as such
      }
      // 16-bit tensors allow tensor-op algorithms (the heuristics' Winograd) at any precision:
      // their products are exact either way.
      EXPECT_EQ(dnn_stats().last_choice, CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED);
      EXPECT_EQ(kernel_runs(), 0);
    }
    {
      const codegen::Program program = one_kernel(
          {make_buffer("x", {dtype, {4, 3}}, BufferRole::Input, 0),
           make_buffer("w", {dtype, {2, 3}}, BufferRole::Parameter, 0),
           make_buffer("b", {dtype, {2}}, BufferRole::Parameter, 1),
           make_buffer("y", {dtype, {4, 2}}, BufferRole::Output, 0)},
          library_call(std::regex_replace(std::string(kDenseKernel), std::regex("f32"), name), precision));
      auto executable = create(program, {make_16bit(dtype, {2, 3}, kDenseW), make_16bit(dtype, {2}, kDenseB)},
                               options());
      const std::vector<float> x = ramp(12, 2);
      std::vector<ir::Tensor> outputs = executable->run({make_16bit(dtype, {4, 3}, x)});
      EXPECT_EQ(widen(outputs[0]), rounded(dtype, dense_reference(x, kDenseW, kDenseB)));
      EXPECT_EQ(lt_stats().last_choice, CUBLASLT_EPILOGUE_RELU_BIAS);
      EXPECT_EQ(kernel_runs(), 0);
    }
    EXPECT_EQ(dnn_stats().descriptors, 0);
    EXPECT_EQ(lt_stats().descriptors, 0);
  }
}

// Planned in place, the output would overwrite the residual as cuDNN reads it.
TEST_F(CudaMockLibraries, ConvOverItsOwnResidualFallsBack) {
  const codegen::Program program = one_kernel(
      {make_buffer("x", {ir::DType::F32, {1, 2, 5, 5}}, BufferRole::Input, 0),
       make_buffer("w", {ir::DType::F32, {3, 2, 3, 3}}, BufferRole::Parameter, 0),
       make_buffer("b", {ir::DType::F32, {3}}, BufferRole::Parameter, 1),
       make_buffer("r", {ir::DType::F32, {1, 3, 5, 5}}, BufferRole::Intermediate, -1, 0),
       make_buffer("y", {ir::DType::F32, {1, 3, 5, 5}}, BufferRole::Output, 0, 0)},
      library_call(conv_kernel(true, true)));
  register_("fused_0", 5, [](void* const*, unsigned long long) {});
  auto executable =
      create(program, {make_tensor({3, 2, 3, 3}, ramp(54, 0)), make_tensor({3}, {1, 2, 3})},
             options());
  const std::vector<std::string> report = executable->library_report();
  ASSERT_EQ(report.size(), 1u);
  EXPECT_NE(report[0].find("fused_0: generated kernel: cuDNN: kernel 'fused_0' writes its output "
                           "over its residual"),
            std::string::npos)
      << report[0];
}

// conv2d's gradients on cuDNN's backward routines (conv_grad_runner.cpp) over a 3x3 window
// with padding 1: the heuristics' first, non-deterministic algorithm is skipped; the results
// are the scatter of dy through the forward's window, summed in the mock's order.
TEST_F(CudaMockLibraries, ConvGradientsRunOnCudnnsBackwardRoutines) {
  const std::vector<float> dy = ramp(75, 6), w = ramp(54, 7), x = ramp(50, 8);
  std::vector<float> dx(50, 0.0f), dw(54, 0.0f);
  for (int k = 0; k < 3; ++k)
    for (int p = 0; p < 5; ++p)
      for (int q = 0; q < 5; ++q)
        for (int c = 0; c < 2; ++c)
          for (int i = 0; i < 3; ++i)
            for (int j = 0; j < 3; ++j) {
              const int h = p + i - 1, v = q + j - 1;
              if (h < 0 || h >= 5 || v < 0 || v >= 5) continue;
              dx[(c * 5 + h) * 5 + v] += dy[(k * 5 + p) * 5 + q] * w[((k * 2 + c) * 3 + i) * 3 + j];
              dw[((k * 2 + c) * 3 + i) * 3 + j] += dy[(k * 5 + p) * 5 + q] * x[(c * 5 + h) * 5 + v];
            }
  const ir::TensorType dy_type{ir::DType::F32, {1, 3, 5, 5}}, w_type{ir::DType::F32, {3, 2, 3, 3}},
      x_type{ir::DType::F32, {1, 2, 5, 5}};
  {
    const codegen::Program program = one_kernel(
        {make_buffer("dy", dy_type, BufferRole::Input, 0), make_buffer("w", w_type, BufferRole::Input, 1),
         make_buffer("dx", x_type, BufferRole::Output, 0)},
        library_call(R"(graph @g(%dy: f32[1,3,5,5], %w: f32[3,2,3,3]) -> (f32[1,2,5,5]) {
  %dx = conv2d_grad_input(%dy, %w) {shape = [1,2,5,5], pad = [1,1,1,1]} : f32[1,2,5,5]
  return %dx
})"));
    register_("fused_0", 3, [](void* const*, unsigned long long) {});
    auto executable = create(program, {}, options());
    std::vector<ir::Tensor> outputs =
        executable->run({make_tensor({1, 3, 5, 5}, dy), make_tensor({3, 2, 3, 3}, w)});
    EXPECT_EQ(to_floats(outputs[0]), dx);
    const KilnMockLibraryStats stats = dnn_stats();
    EXPECT_EQ(stats.last_choice, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1);
    EXPECT_EQ(stats.last_workspace_bytes, 2048u);
    EXPECT_EQ(kernel_runs(), 0);
  }
  {
    const codegen::Program program = one_kernel(
        {make_buffer("dy", dy_type, BufferRole::Input, 0), make_buffer("x", x_type, BufferRole::Input, 1),
         make_buffer("dw", w_type, BufferRole::Output, 0)},
        library_call(R"(graph @g(%dy: f32[1,3,5,5], %x: f32[1,2,5,5]) -> (f32[3,2,3,3]) {
  %dw = conv2d_grad_weight(%dy, %x) {shape = [3,2,3,3], pad = [1,1,1,1]} : f32[3,2,3,3]
  return %dw
})"));
    register_("fused_0", 3, [](void* const*, unsigned long long) {});
    auto executable = create(program, {}, options());
    std::vector<ir::Tensor> outputs =
        executable->run({make_tensor({1, 3, 5, 5}, dy), make_tensor({1, 2, 5, 5}, x)});
    EXPECT_EQ(to_floats(outputs[0]), dw);
    const KilnMockLibraryStats stats = dnn_stats();
    EXPECT_EQ(stats.last_choice, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1);
    EXPECT_EQ(stats.last_workspace_bytes, 1024u);
    EXPECT_EQ(kernel_runs(), 0);
  }
  EXPECT_EQ(dnn_stats().handles, 0);
  EXPECT_EQ(dnn_stats().descriptors, 0);
}

}  // namespace
}  // namespace kiln::runtime::cuda
