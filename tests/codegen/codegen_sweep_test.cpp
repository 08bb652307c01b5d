// The generated CUDA kernels against PyTorch, for every op, over the sweep of shapes and
// attributes that gen_cases.py writes (odd and prime sizes, broadcasting, strides, padding,
// dilation, groups, keepdims, negative axes...).
//
// Usage: kiln_codegen_sweep_test DIR [gtest flags]. All cases go into ONE graph, so codegen
// emits one translation unit holding one kernel per case; it is compiled once by NVRTC (sm_80
// and sm_90: every kernel must compile with zero spill bytes) and once by the host compiler,
// then run on the host backend under three schedules — threads in order with one worker,
// reversed with two workers, seeded random with two workers — with poisoned shared memory, so
// a missing __syncthreads or a read of an unwritten shared slot changes the result, and in
// strict mode, where divergent barriers and out-of-mask shuffles are errors. Those runs take
// every kernel's CUDA body; a fourth runs the GEMMs' host bodies (HostOptions::cuda_variants),
// which must give the in-order run's results byte for byte.
#include <gtest/gtest.h>

#include <iostream>
#include <memory>
#include <set>

#include "codegen/emit.h"
#include "codegen/kernel_emitter.h"
#include "ir/diagnostic.h"
#include "ir/verifier.h"
#include "runtime/compile/nvrtc.h"
#include "runtime/executor/host_executor.h"
#include "runtime/host/host_module.h"
#include "tests/torch/torch_cases.h"

namespace kiln {
namespace {

using runtime::host::HostOptions;
using runtime::host::Schedule;
using testing_support::TorchCase;

// Ops whose kernels accumulate many terms in float (the oracle accumulates in double): the
// error grows with the number of terms, about sqrt(K) ulps typically and K ulps at worst; the
// sweep's reductions have K <= ~2000, so 1e-4 relative to the output's scale bounds it.
const std::set<std::string> kAccumulatingOps = {
    "conv2d", "matmul", "dense", "reduce_sum", "reduce_mean", "softmax", "log_softmax",
    "layer_norm", "batch_norm", "avg_pool2d", "global_avg_pool", "softmax_cross_entropy",
    "mse_loss", "batch_norm_train", "batch_norm_train_grad", "batch_norm_chunk_stats", "batch_norm_chunk_sums", "layer_norm_grad", "softmax_grad", "log_softmax_grad", "softmax_cross_entropy_grad",
    "conv2d_grad_input", "conv2d_grad_weight", "max_pool2d_grad", "avg_pool2d_grad",
    "gather_elements_grad", "rms_norm", "rms_norm_grad", "attention", "attention_grad",
    "grad_norm_clip"};

double tolerance_for(const TorchCase& test_case) {
  const ir::DType dtype = test_case.expected.at(0).dtype();
  const double rounding = testing_support::rounding_tolerance(dtype);
  if (kAccumulatingOps.count(test_case.op)) return std::max(rounding, 1e-4);
  // Transcendental functions: device and host libm are within a few ulps of the exact value.
  return std::max(rounding, ir::is_floating(dtype) ? 1e-5 : 0.0);
}

// Every op of the sweep must have an emitter: a case without one fails the whole run.
std::vector<TorchCase> emittable_cases(std::vector<TorchCase> cases) {
  for (const TorchCase& c : cases)
    if (codegen::find_kernel_emitter(*ir::find_op_id(c.op)) == nullptr)
      throw std::runtime_error("codegen has no emitter for op '" + c.op + "'");
  return cases;
}

struct Sweep {
  std::vector<TorchCase> cases;
  ir::Graph graph;
  codegen::Program program;
  std::unique_ptr<runtime::host::HostModule> module;
  std::vector<ir::Tensor> inputs;      // graph order
  std::vector<size_t> first_output;    // per case: the graph output of its result 0
};

Sweep* g_sweep = nullptr;

struct ScheduleRun {
  std::string name;
  HostOptions options;
  bool same_bytes_as_first = false;
  bool done = false;
  std::string error;
  std::vector<ir::Tensor> outputs;
};

std::vector<ScheduleRun>& schedule_runs() {
  static std::vector<ScheduleRun> runs = [] {
    std::vector<ScheduleRun> r(3);
    r.reserve(4);
    r[0].name = "InOrder1Worker";
    r[0].options.workers = 1;
    r[1].name = "Reverse2Workers";
    r[1].options.schedule.kind = Schedule::Kind::Reverse;
    r[1].options.workers = 2;
    r[2].name = "Random7";
    r[2].options.schedule = Schedule{Schedule::Kind::Random, 7};
    r[2].options.workers = 2;
    // Strict: a barrier reached from two places or a shuffle outside its mask fails the run.
    // The CUDA bodies: a GEMM's host body has no threads to schedule.
    for (ScheduleRun& run : r) {
      run.options.strict = true;
      run.options.cuda_variants = true;
    }
    // Then as the host backend runs by default: GEMMs on their host bodies, whose results must
    // be the in-order run's, byte for byte.
    r.emplace_back();
    r[3].name = "HostBodies2Workers";
    r[3].options.workers = 2;
    r[3].same_bytes_as_first = true;
    return r;
  }();
  return runs;
}

// Runs the whole program under one schedule, once, on first use.
const ScheduleRun& outputs_for(size_t schedule) {
  ScheduleRun& run = schedule_runs()[schedule];
  if (!run.done) {
    run.done = true;
    try {
      run.outputs = runtime::host::run_program(g_sweep->program, *g_sweep->module, g_sweep->inputs,
                                               {}, run.options);
    } catch (const std::exception& error) {
      run.error = error.what();
    }
  }
  return run;
}

void check_case(size_t schedule, size_t index) {
  const ScheduleRun& run = outputs_for(schedule);
  ASSERT_TRUE(run.error.empty()) << run.error;
  const TorchCase& test_case = g_sweep->cases[index];
  for (size_t i = 0; i < test_case.expected.size(); ++i) {
    const std::string mismatch = testing_support::compare_tensors(
        run.outputs.at(g_sweep->first_output[index] + i), test_case.expected[i],
        tolerance_for(test_case));
    EXPECT_TRUE(mismatch.empty()) << test_case.name << " result " << i << " (" << run.name
                                  << "): " << mismatch;
    if (run.same_bytes_as_first) {
      const ScheduleRun& first = outputs_for(0);
      ASSERT_TRUE(first.error.empty()) << first.error;
      const size_t output = g_sweep->first_output[index] + i;
      EXPECT_TRUE(run.outputs.at(output).bytes() == first.outputs.at(output).bytes())
          << test_case.name << " result " << i << " (" << run.name << "): differs from "
          << first.name << "'s";
    }
  }
}

void check_nvrtc() {
  runtime::NvrtcOptions options;  // sm_80 and sm_90, no cache: this is the compile under test
  const runtime::CudaBinary binary =
      runtime::compile_with_nvrtc(g_sweep->program.source, "sweep.cu", options);
  for (const codegen::Kernel& kernel : g_sweep->program.kernels) {
    for (const std::string& arch : options.archs) {
      bool found = false;
      for (const runtime::KernelResources& r : binary.resources) {
        if (r.kernel != kernel.function() || r.arch != arch) continue;
        found = true;
        EXPECT_EQ(r.spill_store_bytes + r.spill_load_bytes, 0)
            << kernel.name << " (" << kernel.source_nodes.at(0) << ") spills on " << arch;
      }
      EXPECT_TRUE(found) << "no ptxas report for " << kernel.name << " on " << arch;
    }
  }
}

template <typename F>
void register_test(const std::string& suite, const std::string& name, F body) {
  struct T : testing::Test {
    F body;
    explicit T(F body) : body(std::move(body)) {}
    void TestBody() override { body(); }
  };
  testing::RegisterTest(suite.c_str(), name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
                        [body]() -> testing::Test* { return new T(body); });
}

}  // namespace
}  // namespace kiln

int main(int argc, char** argv) {
  using namespace kiln;
  testing::InitGoogleTest(&argc, argv);
  if (argc != 2) {
    std::cerr << "usage: kiln_codegen_sweep_test DIR (DIR holds cases.json from gen_cases.py)\n";
    return 2;
  }
  static Sweep sweep;
  g_sweep = &sweep;
  try {
    sweep.cases = emittable_cases(testing_support::load_torch_cases(argv[1]));
    sweep.graph.name = "sweep";
    for (size_t i = 0; i < sweep.cases.size(); ++i) {
      ir::Node* node = testing_support::add_case_node(sweep.graph, sweep.cases[i],
                                                      "c" + std::to_string(i) + "_");
      // Every result (an optimizer update returns the parameter and its state).
      sweep.first_output.push_back(sweep.graph.outputs.size());
      for (ir::Value* result : node->results) sweep.graph.outputs.push_back(result);
      for (const ir::Tensor& input : sweep.cases[i].inputs) sweep.inputs.push_back(input);
    }
    ir::verify(sweep.graph);
    sweep.program = codegen::emit_program(sweep.graph);
    sweep.module = std::make_unique<runtime::host::HostModule>(
        runtime::host::HostModule::compile(sweep.program.source, "sweep", nullptr));
  } catch (const std::exception& error) {
    std::cerr << "kiln_codegen_sweep_test: " << error.what() << "\n";
    return 1;
  }
  std::cout << "sweep: " << sweep.cases.size() << " cases, " << sweep.program.kernels.size()
            << " kernels\n";

  register_test("Nvrtc", "EveryKernelCompilesWithoutSpills", check_nvrtc);
  for (size_t s = 0; s < schedule_runs().size(); ++s)
    for (size_t i = 0; i < sweep.cases.size(); ++i)
      register_test(schedule_runs()[s].name + "_" + sweep.cases[i].op, sweep.cases[i].name,
                    [s, i] { check_case(s, i); });
  return RUN_ALL_TESTS();
}
