// --library on a real device: graphs emitted by codegen, their conv and matmul kernels marked
// for cuDNN / cuBLASLt by select_library_call, run once with the libraries and once on the
// generated kernels only; the two must agree (up to summation order: both are exact f32, no
// TF32). Without a device each test is skipped with the reason; without the libraries on the
// device machine, too (the generated kernels would only be compared with themselves).
// LibrarySource.* needs no device: it only emits and compiles.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "codegen/emit.h"
#include "codegen/library_dispatch.h"
#include "ir/diagnostic.h"
#include "ir/parser.h"
#include "ir/verifier.h"
#include "runtime/compile/nvrtc.h"
#include "runtime/cuda/cuda_executable.h"

namespace kiln::runtime::cuda {
namespace {

// The graphs, every tensor a graph input. Fused kernels are written as fusion makes them.
constexpr const char* kConvBiasRelu = R"(graph @g(%x: f32[2,3,16,16], %w: f32[8,3,3,3], %b: f32[8]) -> (f32[2,8,16,16]) {
  %y = kernel @conv2d_bias_relu(%x, %w, %b) {kind = "epilogue"} : f32[2,8,16,16] {
    %c = conv2d(%x, %w) {pad = [1,1,1,1]} : f32[2,8,16,16]
    %cb = bias_add(%c, %b) : f32[2,8,16,16]
    %y = relu(%cb) : f32[2,8,16,16]
    return %y
  }
  return %y
})";

constexpr const char* kConvBiasResidualRelu = R"(graph @g(%x: f32[1,8,12,12], %w: f32[8,8,3,3], %b: f32[8], %r: f32[1,8,6,6]) -> (f32[1,8,6,6]) {
  %y = kernel @conv2d_bias_add_relu(%x, %w, %b, %r) {kind = "epilogue"} : f32[1,8,6,6] {
    %c = conv2d(%x, %w) {stride = [2,2], pad = [1,1,1,1]} : f32[1,8,6,6]
    %cb = bias_add(%c, %b) : f32[1,8,6,6]
    %s = add(%cb, %r) : f32[1,8,6,6]
    %y = relu(%s) : f32[1,8,6,6]
    return %y
  }
  return %y
})";

constexpr const char* kConvBiasThenRelu = R"(graph @g(%x: f32[1,4,9,9], %w: f32[6,2,3,3], %b: f32[6]) -> (f32[1,6,7,7]) {
  %c = conv2d(%x, %w, %b) {groups = 2} : f32[1,6,7,7]
  %y = relu(%c) : f32[1,6,7,7]
  return %y
})";

// NHWC (layout-nhwc): x [N, H, W, C], the filter KRSC, the residual and result [N, OH, OW, K];
// cuDNN takes NHWC descriptors, the generated kernel the same layout.
constexpr const char* kNhwcConvBiasResidualRelu = R"(graph @g(%x: f32[2,12,12,8], %w: f32[16,3,3,8], %b: f32[16], %r: f32[2,6,6,16]) -> (f32[2,6,6,16]) {
  %y = kernel @conv2d_bias_add_relu(%x, %w, %b, %r) {kind = "epilogue"} : f32[2,6,6,16] {
    %c = conv2d(%x, %w) {layout = "nhwc", stride = [2,2], pad = [1,1,1,1]} : f32[2,6,6,16]
    %cb = bias_add(%c, %b) {axis = 3} : f32[2,6,6,16]
    %s = add(%cb, %r) : f32[2,6,6,16]
    %y = relu(%s) : f32[2,6,6,16]
    return %y
  }
  return %y
})";

constexpr const char* kDenseBiasGelu = R"(graph @g(%x: f32[32,64], %w: f32[48,64], %b: f32[48]) -> (f32[32,48]) {
  %y = kernel @dense_bias_gelu(%x, %w, %b) {kind = "epilogue"} : f32[32,48] {
    %d = dense(%x, %w) : f32[32,48]
    %db = bias_add(%d, %b) {axis = 1} : f32[32,48]
    %y = gelu(%db) {approximate = "tanh"} : f32[32,48]
    return %y
  }
  return %y
})";

constexpr const char* kDenseAndMatmul = R"(graph @g(%x: f32[2,5,16], %w: f32[12,16], %b: f32[12], %a: f32[3,7,9], %m: f32[3,12,9]) -> (f32[2,5,12], f32[3,7,12]) {
  %d = dense(%x, %w, %b) : f32[2,5,12]
  %p = matmul(%a, %m) {transpose_b = true} : f32[3,7,12]
  return %d, %p
})";

constexpr const char* kDenseThenRelu = R"(graph @g(%x: f32[8,32], %w: f32[16,32], %b: f32[16]) -> (f32[8,16]) {
  %d = dense(%x, %w, %b) : f32[8,16]
  %y = relu(%d) : f32[8,16]
  return %y
})";

// Inputs of a few hundred elements in [-2, 2]: enough to cross relu's and gelu's bends.
ir::Tensor make_input(const ir::TensorType& type, int seed) {
  ir::Tensor tensor(type);
  std::vector<float> values(static_cast<size_t>(tensor.num_elements()));
  for (size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<float>((static_cast<int>(i) * 37 + seed * 11) % 41 - 20) / 10.0f;
  std::memcpy(tensor.data(), values.data(), tensor.byte_size());
  return tensor;
}

// A graph emitted by codegen with each kernel marked whose node a library computes (as
// emit_program does with --library=auto), compiled by NVRTC for `arch`.
struct Emitted {
  ir::Graph graph;
  codegen::Program program;
  CudaBinary binary;
};

Emitted emit(const char* text, const std::string& arch) {
  Emitted e{ir::parse_graph(text, "library.ir"), {}, {}};
  ir::verify(e.graph);
  e.program = codegen::emit_program(e.graph);
  KILN_CHECK(e.program.kernels.size() == e.graph.nodes().size()) << "one kernel per node";
  for (size_t i = 0; i < e.graph.nodes().size(); ++i)
    e.program.kernels[i].library = codegen::select_library_call(*e.graph.nodes()[i], {true, true});
  NvrtcOptions nvrtc;
  nvrtc.archs = {arch};
  e.binary = compile_with_nvrtc(e.program.source, "library.cu", nvrtc);
  return e;
}

std::vector<float> to_floats(const ir::Tensor& tensor) {
  std::vector<float> values(static_cast<size_t>(tensor.num_elements()));
  std::memcpy(values.data(), tensor.data(), tensor.byte_size());
  return values;
}

class LibraryRun : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda_available(&why)) GTEST_SKIP() << "CUDA backend unavailable: " << why;
    device_ = cuda_device_info(0);
  }

  // Emits `text` (every tensor a graph input), marks each kernel whose node a library computes,
  // and runs it with the libraries and without, on `runs` input sets, comparing every output.
  // Returns the library report of the run with libraries.
  std::vector<std::string> compare(const char* text, int runs = 2, bool use_graph = true) {
    const Emitted e = emit(text, device_.arch());
    kernel_names_.clear();
    for (const codegen::Kernel& kernel : e.program.kernels) kernel_names_.push_back(kernel.name);
    CudaOptions with;
    with.use_cuda_graph = use_graph;
    CudaOptions without = with;
    without.libraries = {};
    auto library = CudaExecutable::create(e.program, e.binary, {}, with);
    auto generated = CudaExecutable::create(e.program, e.binary, {}, without);
    for (int seed = 0; seed < runs; ++seed) {
      std::vector<ir::Tensor> inputs;
      for (const ir::Value* input : e.graph.inputs)
        inputs.push_back(make_input(input->type, seed));
      const std::vector<ir::Tensor> expected = generated->run(inputs);
      const std::vector<ir::Tensor> actual = library->run(inputs);
      EXPECT_EQ(actual.size(), expected.size());
      for (size_t o = 0; o < std::min(actual.size(), expected.size()); ++o) {
        const std::vector<float> a = to_floats(actual[o]), e = to_floats(expected[o]);
        size_t mismatches = 0;
        for (size_t i = 0; i < a.size() && mismatches < 5; ++i) {
          const bool close = std::fabs(a[i] - e[i]) <= 1e-4f * (1.0f + std::fabs(e[i]));
          if (close) continue;
          ++mismatches;
          ADD_FAILURE() << "output " << o << " element " << i << " of run " << seed << ": "
                        << a[i] << " with the library, " << e[i] << " without";
        }
      }
    }
    return library->library_report();
  }

  // The report says the library ran kernel `index`; skips when the library is not installed.
  void expect_library_ran(const std::vector<std::string>& report, size_t index,
                          const std::string& library) {
    ASSERT_LT(index, kernel_names_.size());
    const std::string& kernel = kernel_names_[index];
    for (const std::string& line : report) {
      if (line.find("not found") != std::string::npos) GTEST_SKIP() << line;
      if (line.rfind(kernel + ": ", 0) != 0) continue;
      EXPECT_EQ(line.rfind(kernel + ": " + library + " ", 0), 0u) << line;
      return;
    }
    ADD_FAILURE() << "no report line for " << kernel;
  }

  CudaDeviceInfo device_;
  std::vector<std::string> kernel_names_;  // of the last compare()
};

// Runs everywhere: each graph emits, every conv/dense/matmul kernel gets its library call,
// and the translation unit compiles for a real GPU.
TEST(LibrarySource, GraphsEmitWithLibraryCallsAndCompile) {
  const std::vector<std::pair<const char*, std::vector<std::string>>> cases = {
      {kConvBiasRelu, {"cudnn"}},          {kConvBiasResidualRelu, {"cudnn"}},
      {kConvBiasThenRelu, {"cudnn", ""}},  {kDenseBiasGelu, {"cublasLt"}},
      {kDenseAndMatmul, {"cublasLt", "cublasLt"}}, {kDenseThenRelu, {"cublasLt", ""}},
      {kNhwcConvBiasResidualRelu, {"cudnn"}}};
  for (const auto& [text, libraries] : cases) {
    SCOPED_TRACE(text);
    const Emitted e = emit(text, "sm_90");
    ASSERT_EQ(e.program.kernels.size(), libraries.size());
    for (size_t i = 0; i < libraries.size(); ++i) {
      const auto& call = e.program.kernels[i].library;
      EXPECT_EQ(call ? call->library : "", libraries[i]) << e.program.kernels[i].name;
    }
    EXPECT_EQ(e.binary.cubins.size(), 1u);
  }
}

TEST_F(LibraryRun, FusedConvBiasReluOnCudnn) {
  const auto report = compare(kConvBiasRelu);
  expect_library_ran(report, 0, "cudnn");
}

TEST_F(LibraryRun, FusedConvBiasResidualReluOnCudnn) {
  const auto report = compare(kConvBiasResidualRelu);
  expect_library_ran(report, 0, "cudnn");
}

TEST_F(LibraryRun, NhwcConvBiasResidualReluOnCudnn) {
  const auto report = compare(kNhwcConvBiasResidualRelu);
  expect_library_ran(report, 0, "cudnn");
}

// conv2d with its bias operand and no activation: the identity path (IMPLICIT_PRECOMP_GEMM),
// then relu as a generated kernel in the same graph.
TEST_F(LibraryRun, PlainConvWithBiasThenGeneratedRelu) {
  const auto report = compare(kConvBiasThenRelu);
  expect_library_ran(report, 0, "cudnn");
}

TEST_F(LibraryRun, FusedDenseBiasGeluTanhOnCublasLt) {
  const auto report = compare(kDenseBiasGelu);
  expect_library_ran(report, 0, "cublasLt");
}

TEST_F(LibraryRun, DenseAndBatchedMatmulsOnCublasLt) {
  const auto report = compare(kDenseAndMatmul);
  expect_library_ran(report, 0, "cublasLt");
  expect_library_ran(report, 1, "cublasLt");
}

// Without a CUDA graph the calls go straight to the stream.
TEST_F(LibraryRun, WithoutCudaGraph) {
  const auto report = compare(kDenseThenRelu,
                              /*runs=*/2, /*use_graph=*/false);
  expect_library_ran(report, 0, "cublasLt");
}

}  // namespace
}  // namespace kiln::runtime::cuda
