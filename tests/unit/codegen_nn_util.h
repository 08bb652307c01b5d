// Helpers for the codegen tests of the neural-network kernels (codegen_nn_*_test.cpp): one-op
// graphs written as textual IR, random operands, and the comparison with the interpreter.
#pragma once

#include <algorithm>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <chrono>
#include <functional>
#include <map>

#include "codegen/emit.h"
#include "ir/eval/interpreter.h"
#include "ir/op_registry.h"
#include "ir/parser.h"
#include "ir/verifier.h"
#include "runtime/compile/kernel_cache.h"
#include "runtime/compile/nvrtc.h"
#include "runtime/executor/host_executor.h"
#include "runtime/host/host_module.h"

namespace kiln::codegen::testing {

// Textual IR of a one-node graph: every operand is a graph input named after the op's operand
// names; the result type comes from shape inference, so sweeps need not compute it by hand.
inline std::string single_op_ir(const std::string& op, const std::vector<ir::TensorType>& types,
                                ir::AttrMap attrs = {}) {
  const ir::OpDef* def = ir::OpRegistry::instance().find(op);
  EXPECT_NE(def, nullptr) << op;
  std::string params;
  std::string operands;
  for (size_t i = 0; i < types.size(); ++i) {
    const std::string name = def->input_names[std::min(i, def->input_names.size() - 1)];
    params += (i ? ", %" : "%") + name + ": " + types[i].to_string();
    operands += (i ? ", %" : "%") + name;
  }
  const ir::AttrMap written = attrs;
  const std::vector<ir::TensorType> results = ir::infer_op(*def, types, attrs);
  std::string attr_text;
  for (const auto& [name, value] : written)
    attr_text += (attr_text.empty() ? "" : ", ") + name + " = " + ir::attribute_to_string(value);
  const std::string result = results.at(0).to_string();
  return "graph @" + op + "_case(" + params + ") -> (" + result + ") {\n  %out = " + op + "(" +
         operands + ")" + (attr_text.empty() ? "" : " {" + attr_text + "}") + " : " + result +
         "\n  return %out\n}\n";
}

// Emits the program for `ir_text`. With KILN_CODEGEN_DUMP=DIR set, also writes DIR/NAME.cu,
// for checking by hand (nvcc -cubin -Xptxas -v).
inline Program emit_ir(const std::string& ir_text, const std::string& name) {
  const ir::Graph graph = ir::parse_graph(ir_text, name + ".ir");
  Program program = emit_program(graph);
  if (const char* dir = std::getenv("KILN_CODEGEN_DUMP")) {
    std::ofstream(std::string(dir) + "/" + name + ".cu") << program.source;
  }
  return program;
}

// The text of kernel `name`, from its signature to its closing brace.
inline std::string kernel_text(const Program& program, const std::string& name) {
  const size_t begin = program.source.find(") " + name + "(\n");
  if (begin == std::string::npos) return "";
  return program.source.substr(begin, program.source.find("\n}\n", begin) - begin);
}

// Uniform values in [-1, 1), the same for a given seed on every machine.
inline std::vector<double> random_values(int64_t count, uint32_t seed) {
  std::mt19937 engine(seed);
  std::vector<double> values(static_cast<size_t>(count));
  for (double& v : values)
    v = static_cast<double>(engine() >> 8) / static_cast<double>(1u << 24) * 2.0 - 1.0;
  return values;
}

// One op applied to fresh graph inputs; many of them make one test graph, so one translation
// unit (one NVRTC and one g++ run) covers a whole sweep.
struct OpCase {
  std::string op;
  std::vector<ir::TensorType> operands;
  ir::AttrMap attrs = {};
  // Terms summed into each output (K for GEMM-like ops, the window for pooling): float rounding
  // grows with its square root, and so does the tolerance.
  int64_t terms = 1;
};

// Textual IR of a graph applying every case to its own inputs (%c<i>_<operand>); result i is
// case i, located as loc("case<i>").
inline std::string cases_ir(const std::string& name, const std::vector<OpCase>& cases) {
  std::string params;
  std::string body;
  std::string results;
  std::string returned;
  for (size_t c = 0; c < cases.size(); ++c) {
    const OpCase& one = cases[c];
    const ir::OpDef* def = ir::OpRegistry::instance().find(one.op);
    EXPECT_NE(def, nullptr) << one.op;
    std::string operands;
    for (size_t i = 0; i < one.operands.size(); ++i) {
      const std::string input = "%c" + std::to_string(c) + "_" +
                                def->input_names[std::min(i, def->input_names.size() - 1)];
      params += (params.empty() ? "" : ", ") + input + ": " + one.operands[i].to_string();
      operands += (i ? ", " : "") + input;
    }
    ir::AttrMap attrs = one.attrs;
    const std::string type = ir::infer_op(*def, one.operands, attrs).at(0).to_string();
    std::string attr_text;
    for (const auto& [key, value] : one.attrs)
      attr_text += (attr_text.empty() ? "" : ", ") + key + " = " + ir::attribute_to_string(value);
    body += "  %c" + std::to_string(c) + " = " + one.op + "(" + operands + ")" +
            (attr_text.empty() ? "" : " {" + attr_text + "}") + " : " + type + " loc(\"case" +
            std::to_string(c) + "\")\n";
    results += (c ? ", " : "") + type;
    returned += (c ? ", %c" : "%c") + std::to_string(c);
  }
  return "graph @" + name + "(" + params + ") -> (" + results + ") {\n" + body + "  return " +
         returned + "\n}\n";
}

// How close a float result must be: |got - want| <= base * sqrt(terms) * (1 + |want|).
// f32: base 1e-5, so a 129-term dot product may be off by 1.1e-4 relative (float rounding is
// ~6e-8 per term); f16/bf16 add the output rounding of their format.
inline double tolerance_base(ir::DType dtype) {
  switch (dtype) {
    case ir::DType::F16: return 1e-3;
    case ir::DType::BF16: return 8e-3;
    default: return 1e-5;
  }
}

struct CheckOptions {
  std::vector<runtime::host::Schedule> schedules = {runtime::host::Schedule{}};
  bool nvrtc = true;
  int workers = 0;
  uint32_t seed = 1;
  // Changes the random inputs (graph input order) before the runs, e.g. to plant a NaN.
  std::function<void(std::vector<ir::Tensor>&)> edit_inputs;
  // Tf32, Bf16, F16: the GEMMs run on (emulated) tensor cores; see check_cases for what is
  // compared.
  Precision precision = Precision::F32;
};

// f32 rounded to TF32 as cvt.rna.tf32.f32 does: 10 mantissa bits, to nearest, ties away.
inline double tf32_round(double value) {
  float f = static_cast<float>(value);
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7f800000u) != 0x7f800000u) bits = (bits + 0x1000u) & 0xffffe000u;
  std::memcpy(&f, &bits, sizeof bits);
  return f;
}

// A GEMM operand as the tensor cores read it at `precision`: rounded to TF32 (ties away), or
// to bf16 or f16 (to nearest even, as cvt.rn.bf16x2.f32 and cvt.rn.f16x2.f32 do).
inline double tensor_core_round(double value, Precision precision) {
  const float f = static_cast<float>(value);
  switch (precision) {
    case Precision::Tf32: return tf32_round(f);
    case Precision::Bf16: return ir::bfloat16_bits_to_float(ir::float_to_bfloat16_bits(f));
    case Precision::F16: return ir::half_bits_to_float(ir::float_to_half_bits(f));
    case Precision::F32: break;
  }
  return f;
}

// The rounding's bound on one operand: |round(x) - x| <= unit * |x| + absolute. The unit
// roundoff is half an ulp at 1: 2^-11 with 10 stored mantissa bits (TF32, f16), 2^-8 with 7
// (bf16); f16's subnormals are 2^-24 apart, so below 2^-14 the error is up to 2^-25 absolute.
struct RoundingBound {
  double unit = 0;
  double absolute = 0;
};
inline RoundingBound rounding_bound(Precision precision) {
  switch (precision) {
    case Precision::Tf32: return {std::ldexp(1.0, -11), 0};
    case Precision::Bf16: return {std::ldexp(1.0, -8), 0};
    case Precision::F16: return {std::ldexp(1.0, -11), std::ldexp(1.0, -25)};
    case Precision::F32: break;
  }
  return {};
}

// Whether graph input `input` is an A or B operand of a GEMM (conv2d, dense, matmul, and the
// operands of conv2d's gradients), which the tensor cores read as TF32; a bias is added in f32.
inline bool is_gemm_operand(const ir::Graph& graph, const ir::Value* input) {
  for (const auto& node : graph.nodes()) {
    const bool gemm = node->op == ir::OpId::Matmul || node->op == ir::OpId::Dense ||
                      node->op == ir::OpId::Conv2d || node->op == ir::OpId::Conv2dGradWeight ||
                      node->op == ir::OpId::Conv2dGradInput;
    if (gemm && (node->inputs[0] == input || node->inputs[1] == input)) return true;
  }
  return false;
}

// NVRTC and g++ dominate these tests' time: compiled code is cached in the build tree (the key
// covers the source, compiler versions, flags and host prelude, so a hit is always valid).
inline runtime::KernelCache& test_cache() {
  static runtime::KernelCache cache(std::string(KILN_BINARY_DIR) + "/codegen_nn_test_cache");
  return cache;
}

struct CheckResult {
  Program program;
  std::vector<runtime::KernelResources> resources;  // per kernel and arch
  double host_seconds = 0;  // one run of the whole program on the host, in order
};

// Emits the cases' graph; compiles it with NVRTC for sm_80 and sm_90 and expects no spills and
// at most 64 KB of shared memory (the GEMM template's 3 stages at 128 tiles; the CUDA runtime
// opts in past 48 KB); runs it on the host backend under each schedule (strict
// mode, poisoned shared memory) and compares every result with the reference interpreter.
inline CheckResult check_cases(const std::string& name, const std::vector<OpCase>& cases,
                               const CheckOptions& options = {}) {
  CheckResult result;
  const ir::Graph graph = ir::parse_graph(cases_ir(name, cases), name + ".ir");
  ir::verify(graph);
  result.program = emit_program(graph, {}, options.precision);
  const Program& program = result.program;
  if (const char* dir = std::getenv("KILN_CODEGEN_DUMP"))
    std::ofstream(std::string(dir) + "/" + name + ".cu") << program.source;
  for (const Kernel& kernel : program.kernels)
    EXPECT_LE(kernel.dynamic_shared_bytes, 64u * 1024) << kernel.name;

  if (options.nvrtc) {
    runtime::NvrtcOptions nvrtc;
    nvrtc.cache = &test_cache();
    const runtime::CudaBinary binary =
        runtime::compile_with_nvrtc(program.source, name + ".cu", nvrtc);
    EXPECT_EQ(binary.resources.size(), 2 * program.kernels.size()) << name;
    for (const runtime::KernelResources& r : binary.resources) {
      EXPECT_EQ(r.spill_store_bytes, 0) << r.kernel << " spills on " << r.arch;
      EXPECT_EQ(r.spill_load_bytes, 0) << r.kernel << " spills on " << r.arch;
      EXPECT_EQ(r.stack_frame_bytes, 0) << r.kernel << " has a stack frame on " << r.arch;
    }
    result.resources = binary.resources;
  }

  std::vector<ir::Tensor> inputs;
  std::map<std::string, ir::Tensor> named;
  for (size_t i = 0; i < graph.inputs.size(); ++i) {
    const ir::TensorType& type = graph.inputs[i]->type;
    ir::Tensor tensor = ir::Tensor::from_doubles(
        type, random_values(ir::num_elements(type.shape), options.seed + static_cast<uint32_t>(i)));
    named[graph.inputs[i]->name] = tensor;
    inputs.push_back(std::move(tensor));
  }
  // Variances must be positive: batch_norm's var operands read |x| + 0.5.
  for (const auto& node : graph.nodes()) {
    if (node->op != ir::OpId::BatchNorm) continue;
    const ir::Value* var = node->inputs[4];
    for (size_t i = 0; i < graph.inputs.size(); ++i) {
      if (graph.inputs[i] != var) continue;
      std::vector<double> values = inputs[i].to_doubles();
      for (double& v : values) v = std::abs(v) + 0.5;
      inputs[i] = ir::Tensor::from_doubles(var->type, values);
      named[var->name] = inputs[i];
    }
  }
  if (options.edit_inputs) {
    options.edit_inputs(inputs);
    for (size_t i = 0; i < graph.inputs.size(); ++i) named[graph.inputs[i]->name] = inputs[i];
  }
  const std::vector<ir::Tensor> want = eval::run_reference(graph, named);
  // TF32 (docs/tensor-cores.md): the tensor cores multiply A and B rounded to TF32, exactly,
  // and sum in f32. So the results must match the reference run on rounded operands to the
  // f32 tolerance below, and the exact reference to within the rounding's bound: each rounded
  // operand is off by at most 2^-11 of itself, so each product by (1 + 2^-11)^2 - 1 < 2^-10
  // of |a b|, and a result by 2^-10 of the sum of |a b| over its terms: the reference run on
  // |operands| (biases included, which only loosens it).
  // bf16 and f16 alike with their own unit roundoff u (rounding_bound): a product is off by
  // at most (2u + u^2) |a b|, plus, where f16's subnormals add an absolute error e per operand,
  // e (|a| + |b|) (1 + u) + e^2 <= 2 M e (1 + u) + e^2 with M the largest operand magnitude.
  const bool tensor_cores = options.precision != Precision::F32;
  const RoundingBound rounding = rounding_bound(options.precision);
  double largest_operand = 0;
  std::vector<ir::Tensor> want_rounded, magnitudes;
  if (tensor_cores) {
    std::map<std::string, ir::Tensor> rounded = named, absolute = named;
    for (const ir::Value* input : graph.inputs) {
      const ir::TensorType& type = input->type;
      std::vector<double> values = named[input->name].to_doubles();
      std::vector<double> abs_values = values;
      for (double& v : abs_values) v = std::abs(v);
      absolute[input->name] = ir::Tensor::from_doubles(type, abs_values);
      if (is_gemm_operand(graph, input))
        for (double& v : values) {
          largest_operand = std::max(largest_operand, std::abs(v));
          v = tensor_core_round(v, options.precision);
        }
      rounded[input->name] = ir::Tensor::from_doubles(type, values);
    }
    want_rounded = eval::run_reference(graph, rounded);
    magnitudes = eval::run_reference(graph, absolute);
  }
  const runtime::host::HostModule module =
      runtime::host::HostModule::compile(program.source, name, &test_cache());
  // The schedules run the CUDA bodies (a GEMM's host-specific body has no threads to reorder);
  // the host bodies must then give the first schedule's results bit for bit.
  std::vector<ir::Tensor> cuda_results;
  for (const runtime::host::Schedule& schedule : options.schedules) {
    runtime::host::HostOptions host;
    host.schedule = schedule;
    host.workers = options.workers;
    host.strict = true;
    host.cuda_variants = true;
    const auto start = std::chrono::steady_clock::now();
    const std::vector<ir::Tensor> got =
        runtime::host::run_program(program, module, inputs, {}, host);
    if (cuda_results.empty()) cuda_results = got;
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    if (schedule == runtime::host::Schedule{}) result.host_seconds = elapsed.count();
    EXPECT_EQ(got.size(), want.size());
    for (size_t c = 0; c < got.size() && c < want.size(); ++c) {
      const double base =
          tolerance_base(want[c].dtype()) * std::sqrt(static_cast<double>(cases[c].terms));
      int failures = 0;
      for (int64_t i = 0; i < want[c].num_elements() && failures < 5; ++i) {
        const double g = got[c].get(i);
        double w = want[c].get(i);
        if (std::isnan(w) && std::isnan(g)) continue;
        if (tensor_cores) {
          const double exact = w;
          w = want_rounded[c].get(i);
          const double u = rounding.unit, e = rounding.absolute;
          const double terms = static_cast<double>(cases[c].terms);
          const double bound = (2 * u + u * u) * magnitudes[c].get(i) +
                               terms * (2 * largest_operand * e * (1 + u) + e * e) +
                               base * (1 + std::abs(exact));
          if (std::abs(g - exact) > bound) {
            ADD_FAILURE() << name << " case " << c << " (" << precision_name(options.precision)
                          << "): element " << i << " is " << g << ", exact " << exact
                          << ", beyond the rounding's bound " << bound;
            ++failures;
          }
        }
        if (std::abs(g - w) <= base * (1 + std::abs(w))) continue;
        ADD_FAILURE() << name << " case " << c << " (" << cases[c].op << " "
                      << graph.nodes()[c]->inputs[0]->type.to_string() << ", "
                      << schedule.describe() << "): element " << i << " is " << g
                      << ", reference " << w;
        ++failures;
      }
    }
  }
  if (std::any_of(program.kernels.begin(), program.kernels.end(),
                  [](const Kernel& kernel) { return kernel.host_variant; })) {
    runtime::host::HostOptions host;
    host.workers = options.workers;
    const std::vector<ir::Tensor> got = runtime::host::run_program(program, module, inputs, {}, host);
    EXPECT_EQ(got.size(), cuda_results.size());
    for (size_t c = 0; c < got.size() && c < cuda_results.size(); ++c)
      EXPECT_TRUE(got[c].bytes() == cuda_results[c].bytes())
          << name << " case " << c << ": the host bodies' result differs from the CUDA bodies'";
  }
  return result;
}

}  // namespace kiln::codegen::testing
