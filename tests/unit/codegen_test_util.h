// Shared by the codegen kernel tests (codegen_elementwise_test.cpp, codegen_reduce_test.cpp):
// emit a graph written in textual IR, check that the source compiles for real GPUs with NVRTC,
// run it on the host backend under several thread schedules and compare every output with the
// reference interpreter.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "codegen/emit.h"
#include "codegen/kernel_emitter.h"
#include "ir/eval/interpreter.h"
#include "ir/parser.h"
#include "ir/verifier.h"

// Define as 0 to build these tests without NVRTC (runtime/compile) or the host backend
// (runtime/host): the source checks still run.
#ifndef KILN_CODEGEN_TEST_NVRTC
#define KILN_CODEGEN_TEST_NVRTC 1
#endif
#ifndef KILN_CODEGEN_TEST_HOST
#define KILN_CODEGEN_TEST_HOST 1
#endif

#if KILN_CODEGEN_TEST_NVRTC
#include "runtime/compile/nvrtc.h"
#endif
#if KILN_CODEGEN_TEST_HOST
#include "runtime/executor/host_executor.h"
#include "runtime/host/host_module.h"
#endif

namespace kiln::codegen::testing {

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

inline ir::Tensor tensor(ir::DType dtype, ir::Shape shape, const std::vector<double>& values) {
  return ir::Tensor::from_doubles(ir::TensorType{dtype, std::move(shape)}, values);
}

// How close a float result must be to the reference: |got - want| <= rel * |want| + abs.
struct Tolerance {
  double rel = 0;
  double abs = 0;
};
inline constexpr Tolerance kExact{0, 0};
// f32 elementwise math: a few ulp of float against a double-precision reference.
inline constexpr Tolerance kElementwiseF32{1e-5, 1e-30};
// GELU: the reference forms 1 + erf(x / sqrt 2) (or 1 + tanh(u)) in double, which cancels
// for x << 0 and leaves it an absolute error of about |x| * 1e-16; the kernels use erfc (and
// x * sigmoid(2u)), accurate to float's relative precision there. Agreement is therefore
// relative where the result is large and absolute (1e-14 covers |x| <= 50) in the far tail.
inline constexpr Tolerance kGelu{1e-5, 1e-14};

inline ir::Graph parse(const std::string& text) {
  ir::Graph graph = ir::parse_graph(text, "codegen_test.ir");
  ir::verify(graph);
  return graph;
}

// Uniform values in [lo, hi] for float inputs, integers in [lo, hi] for integer inputs, 0/1
// for bool; seeded, so every run sees the same data.
inline std::vector<ir::Tensor> random_inputs(const ir::Graph& graph, double lo, double hi,
                                             uint32_t seed = 1) {
  std::mt19937 rng(seed);
  std::vector<ir::Tensor> inputs;
  for (const ir::Value* value : graph.inputs) {
    ir::Tensor tensor(value->type);
    for (int64_t i = 0; i < tensor.num_elements(); ++i) {
      if (ir::is_floating(value->type.dtype))
        tensor.set(i, std::uniform_real_distribution<double>(lo, hi)(rng));
      else if (value->type.dtype == ir::DType::Bool)
        tensor.set(i, static_cast<double>(rng() % 2));
      else
        tensor.set(i, static_cast<double>(std::uniform_int_distribution<int64_t>(
                          static_cast<int64_t>(lo), static_cast<int64_t>(hi))(rng)));
    }
    inputs.push_back(std::move(tensor));
  }
  return inputs;
}

// With KILN_CODEGEN_DUMP=DIR set, writes the translation unit to DIR/<name>.cu for manual
// checks (nvcc -cubin -Xptxas -v).
inline void maybe_dump(const Program& program, const std::string& name) {
  const char* dir = std::getenv("KILN_CODEGEN_DUMP");
  if (dir == nullptr) return;
  std::filesystem::create_directories(dir);
  std::ofstream(std::filesystem::path(dir) / (name + ".cu")) << program.source;
}

// The text of kernel `name` in the program's source, from its signature to its closing brace.
inline std::string kernel_source(const Program& program, const std::string& name) {
  const size_t begin = program.source.find(") " + name + "(\n");
  if (begin == std::string::npos) {
    // Else a check that the kernel lacks something would pass on a kernel that is not there.
    ADD_FAILURE() << "no kernel named '" << name << "' in the generated source";
    return "";
  }
  return program.source.substr(begin, program.source.find("\n}\n", begin) - begin);
}

inline void expect_close(const ir::Tensor& got, const ir::Tensor& want, Tolerance tolerance,
                         const std::string& what) {
  ASSERT_EQ(got.type(), want.type()) << what;
  int failures = 0;
  for (int64_t i = 0; i < want.num_elements() && failures < 5; ++i) {
    const double g = got.get(i);
    const double w = want.get(i);
    if (std::isnan(w) || std::isnan(g)) {
      if (std::isnan(w) != std::isnan(g)) {
        ADD_FAILURE() << what << ": element " << i << " is " << g << ", reference " << w;
        ++failures;
      }
      continue;
    }
    if (g == w) continue;
    if (std::abs(g - w) <= tolerance.rel * std::abs(w) + tolerance.abs) continue;
    ADD_FAILURE() << what << ": element " << i << " is " << g << ", reference " << w
                  << " (difference " << std::abs(g - w) << ")";
    ++failures;
  }
}

// NVRTC for sm_80 and sm_90: compiles, and no kernel spills registers.
inline void check_nvrtc(const Program& program, const std::string& name) {
#if KILN_CODEGEN_TEST_NVRTC
  const runtime::CudaBinary binary = runtime::compile_with_nvrtc(program.source, name + ".cu", {});
  std::set<std::string> functions;  // kernels of identical code share one (Kernel::entry)
  for (const Kernel& kernel : program.kernels) functions.insert(kernel.function());
  EXPECT_EQ(binary.resources.size(), 2 * functions.size()) << name << ": one per function and arch";
  for (const runtime::KernelResources& r : binary.resources) {
    EXPECT_EQ(r.spill_store_bytes, 0) << name << ": " << r.kernel << " spills on " << r.arch;
    EXPECT_EQ(r.spill_load_bytes, 0) << name << ": " << r.kernel << " spills on " << r.arch;
  }
#else
  (void)program;
  (void)name;
#endif
}

#if KILN_CODEGEN_TEST_HOST
// The program's outputs on the host backend (in-order schedule, strict), without the
// reference: for behaviour the reference rejects (integer division by zero, a bad label).
inline std::vector<ir::Tensor> run_on_host(const Program& program, const std::string& name,
                                           const std::vector<ir::Tensor>& inputs) {
  const runtime::host::HostModule module =
      runtime::host::HostModule::compile(program.source, name, nullptr);
  runtime::host::HostOptions options;
  options.strict = true;
  return runtime::host::run_program(program, module, inputs, {}, options);
}
#endif

// Whether two results hold the same values bit for bit, NaNs aside: a NaN equals any NaN. Which
// NaN an operation on NaNs returns (its sign and payload) is not specified by C++ and depends on
// the operand order the compiler picks (x86 returns the first operand's): two bodies that
// compute the same values can differ there (softmax of a row holding a NaN).
inline bool same_values(const ir::Tensor& a, const ir::Tensor& b) {
  if (a.bytes() == b.bytes()) return true;
  if (a.dtype() != b.dtype() || a.bytes().size() != b.bytes().size()) return false;
  const auto* x = reinterpret_cast<const unsigned char*>(a.bytes().data());
  const auto* y = reinterpret_cast<const unsigned char*>(b.bytes().data());
  const auto bits = [](const unsigned char* p, size_t size) {
    uint64_t v = 0;
    std::memcpy(&v, p, size);
    return v;
  };
  // (element size, exponent mask, mantissa mask) of the floating types; others compare bytes.
  size_t size = 0;
  uint64_t exponent = 0, mantissa = 0;
  switch (a.dtype()) {
    case ir::DType::F32: size = 4, exponent = 0x7f800000u, mantissa = 0x007fffffu; break;
    case ir::DType::F64: size = 8, exponent = 0x7ff0000000000000u, mantissa = 0x000fffffffffffffu; break;
    case ir::DType::F16: size = 2, exponent = 0x7c00u, mantissa = 0x03ffu; break;
    case ir::DType::BF16: size = 2, exponent = 0x7f80u, mantissa = 0x007fu; break;
    default: return false;
  }
  const auto is_nan = [&](uint64_t v) { return (v & exponent) == exponent && (v & mantissa) != 0; };
  for (size_t i = 0; i < a.bytes().size(); i += size) {
    const uint64_t u = bits(x + i, size), v = bits(y + i, size);
    if (u != v && !(is_nan(u) && is_nan(v))) return false;
  }
  return true;
}

// Emits `text`'s graph and checks it: NVRTC for sm_80 and sm_90 with no spills, then the host
// backend under in-order, reverse and random:7 schedules against the reference interpreter,
// running the kernels' CUDA bodies (HostOptions::cuda_variants); then, where kernels have a
// host-specific body, the default run, whose outputs must equal the in-order run's bit for bit
// (NaNs aside: same_values). Returns the program for source checks. `per_output` overrides the tolerance of some
// outputs.
inline Program check_graph(const std::string& name, const std::string& text,
                           const std::vector<ir::Tensor>& inputs, Tolerance tolerance,
                           const std::map<size_t, Tolerance>& per_output = {}) {
  const ir::Graph graph = parse(text);
  Program program = emit_program(graph);
  maybe_dump(program, name);
  check_nvrtc(program, name);
#if KILN_CODEGEN_TEST_HOST
  std::map<std::string, ir::Tensor> named;
  for (size_t i = 0; i < graph.inputs.size(); ++i) named[graph.inputs[i]->name] = inputs[i];
  const std::vector<ir::Tensor> want = eval::run_reference(graph, named);
  const runtime::host::HostModule module =
      runtime::host::HostModule::compile(program.source, name, nullptr);
  using Kind = runtime::host::Schedule::Kind;
  std::vector<ir::Tensor> in_order;
  for (const runtime::host::Schedule schedule :
       {runtime::host::Schedule{Kind::InOrder, 0}, runtime::host::Schedule{Kind::Reverse, 0},
        runtime::host::Schedule{Kind::Random, 7}}) {
    runtime::host::HostOptions options;
    options.schedule = schedule;
    options.strict = true;
    options.cuda_variants = true;
    // One worker for the in-order run, one per core for the others.
    options.workers = schedule.kind == Kind::InOrder ? 1 : 0;
    const std::vector<ir::Tensor> got =
        runtime::host::run_program(program, module, inputs, {}, options);
    if (in_order.empty()) in_order = got;
    EXPECT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size() && i < want.size(); ++i)
      expect_close(got[i], want[i], per_output.count(i) ? per_output.at(i) : tolerance,
                   name + " output " + std::to_string(i) + " (" + schedule.describe() + ")");
  }
  if (std::any_of(program.kernels.begin(), program.kernels.end(),
                  [](const Kernel& kernel) { return kernel.host_variant; })) {
    runtime::host::HostOptions options;
    options.strict = true;
    const std::vector<ir::Tensor> got =
        runtime::host::run_program(program, module, inputs, {}, options);
    EXPECT_EQ(got.size(), in_order.size());
    for (size_t i = 0; i < got.size() && i < in_order.size(); ++i)
      EXPECT_TRUE(same_values(got[i], in_order[i]))
          << name << " output " << i << ": the host bodies' result differs from the CUDA bodies'";
  }
#else
  (void)inputs;
  (void)tolerance;
  (void)per_output;
#endif
  return program;
}

}  // namespace kiln::codegen::testing
