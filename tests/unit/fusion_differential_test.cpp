// Fusion against no fusion, on seeded random graphs.
//
// A generator (std::mt19937, fixed seeds) builds graphs of many independent random chains, each
// from a graph input of a random small shape (f32, rank 1-4, dims 1-9) through GEMMs (conv2d
// with stride, padding and now and then groups; dense with or without bias; matmul with
// transposes and batch broadcasting) followed by epilogue-like steps (bias_add, per-channel,
// scalar and residual operands, activations), activations, unary math kept in its domain
// (exp of a clipped value, sqrt/log/rsqrt of |x| + 1), binary ops with broadcasting (divisors
// bounded away from 0), reductions (softmax, log_softmax, layer_norm, reduce_* with axes and
// keepdims, global_avg_pool), pools, reshape, flatten, transpose, slice and concat, and backward
// ops (elementwise derivatives, scale, broadcast_to, softmax_grad, the maximum shares). Values get
// two users (a diamond, a residual, an earlier value read again), graph inputs and parameters
// are read again in other roles (a bias that is also a broadcast operand), some intermediates
// are graph outputs, and some names are built from others as exporters write them ("c0/v5",
// "c0.v5_index"), so fusion and codegen meet every kind of boundary and naming. One graph holds
// many chains because each graph costs one host compile.
//
// For each graph the reference interpreter on the graph as built is the oracle. A copy (the
// printed text, parsed again) goes through the -O1 pipeline with the verifier after every
// pass; the fused graph must then
//   1. print, parse back and print the same text;
//   2. give the oracle's results bit for bit on the reference interpreter, which runs a
//      kernel's body node by node exactly as it runs the unfused nodes (every -O1 rewrite here
//      is exact: see canonicalize.cpp and constant_fold.cpp; batch_norm, whose folding rounds
//      differently, is left out);
//   3. give them on the host backend, running the generated CUDA, within 1e-4 of each
//      output's largest magnitude (float accumulation in another order), with exactly the
//      oracle's shapes.
// Across the suite every kernel kind (epilogue, loop, reduce, single) must appear, and loop
// kernels storing several results (a value and its cast).
//
// Each graph's text, as built and fused, is written to build/tests/fusion_differential/
// (random_<seed>.ir, random_<seed>.fused.ir); value names say which chain they belong to
// (%c3.v7 is chain 3), so a failure reduces to one chain by deleting the others; `kiln opt
// FILE -O1 --debug-only=fuse-elementwise` replays the passes and `kiln emit FILE` the CUDA.
// KILN_FUSION_SEEDS=FIRST:COUNT runs other seeds (a longer hunt: KILN_FUSION_SEEDS=1:500).
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "codegen/emit.h"
#include "compiler/parameters.h"
#include "ir/diagnostic.h"
#include "ir/eval/interpreter.h"
#include "ir/kernel_region.h"
#include "ir/op_registry.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "passes/pass_manager.h"
#include "runtime/compile/kernel_cache.h"
#include "runtime/executor/host_executor.h"
#include "runtime/host/host_module.h"
#include "tests/unit/random_graph.h"

namespace kiln {
namespace {

using ir::Shape;
using ir::Value;
using random_graphs::RandomGraph;
using random_graphs::kChainsPerGraph;

constexpr uint32_t kSeeds[] = {1, 2, 3, 4, 5, 6};
// Host backend against the oracle: relative to the largest magnitude of each output, taken as
// at least kMinScale. The floor is for outputs near 0 computed from operands of order 1, whose
// float rounding is absolute, not relative: the largest entries of a log_softmax are
// -log(1 + tiny), rounded to ~1e-7 whatever their size, and a reduce_max of them is all such
// entries. 1e-4 x 1e-2 = 1e-6 (8 ulps of 1) is far below what a fusion or indexing bug changes.
constexpr double kHostTolerance = 1e-4;
constexpr double kMinScale = 1e-2;
// The count of kernels with several results among the kinds the suite reports.
constexpr std::string_view kSeveralResults = "several-results";

// --- running and comparing -----------------------------------------------------------------------

std::map<std::string, ir::Tensor> random_inputs(const ir::Graph& graph, uint32_t seed) {
  std::mt19937 rng(seed * 7919u + 1u);
  std::uniform_real_distribution<double> value(-2.0, 2.0);
  std::map<std::string, ir::Tensor> inputs;
  for (const Value* input : graph.inputs) {
    ir::Tensor tensor(input->type);
    for (int64_t i = 0; i < tensor.num_elements(); ++i) tensor.set(i, value(rng));
    inputs.emplace(input->name, std::move(tensor));
  }
  return inputs;
}

// "" when `got` matches `want`: the same type, and every element within `relative` of want's
// largest magnitude, or of `min_scale` if larger (0: bit-for-bit equal values; NaN matches NaN).
std::string compare(const ir::Tensor& got, const ir::Tensor& want, double relative,
                    double min_scale = 0) {
  if (got.type() != want.type())
    return "type " + got.type().to_string() + ", expected " + want.type().to_string();
  double scale = min_scale;
  for (int64_t i = 0; i < want.num_elements(); ++i) scale = std::max(scale, std::abs(want.get(i)));
  const double tolerance = relative * scale;
  int64_t worst = -1;
  double worst_error = 0;
  int64_t mismatches = 0;
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    const double g = got.get(i), w = want.get(i);
    if (std::isnan(g) && std::isnan(w)) continue;
    const double error = std::isnan(g) || std::isnan(w) ? INFINITY : std::abs(g - w);
    if (!(error <= tolerance)) {
      ++mismatches;
      if (worst < 0 || error > worst_error) worst = i, worst_error = error;
    }
  }
  if (mismatches == 0) return "";
  return fmt::format(
      "{} of {} elements differ; worst at flat index {}: got {:.9g}, expected {:.9g} "
      "(error {:.3g}, tolerance {:.3g} = {:g} x scale {:.6g})",
      mismatches, want.num_elements(), worst, got.get(worst), want.get(worst), worst_error,
      tolerance, relative, scale);
}

std::string graph_without_plan(ir::Graph& graph) {
  std::optional<ir::MemoryPlan> plan = std::move(graph.memory_plan);
  graph.memory_plan.reset();
  std::string text = ir::print_graph(graph);
  graph.memory_plan = std::move(plan);
  return text;
}

const runtime::KernelCache* host_cache() {
  static const runtime::KernelCache cache(std::string(KILN_BINARY_DIR) +
                                          "/tests/host_module_cache");
  return &cache;
}

using KindCounts = std::map<std::string, int>;

struct GraphRun {
  uint32_t seed = 0;
  std::string built_text;
  std::string fused_text;
  KindCounts kernels;
  int nodes_before = 0;
  int nodes_after = 0;
};

// Writes the graph's text, as built and fused, where failure messages point; returns the path.
std::string save_for_repro(const GraphRun& run) {
  const std::filesystem::path dir =
      std::filesystem::path(KILN_BINARY_DIR) / "tests" / "fusion_differential";
  std::filesystem::create_directories(dir);
  const std::filesystem::path built = dir / fmt::format("random_{}.ir", run.seed);
  std::ofstream(built) << run.built_text;
  std::ofstream(dir / fmt::format("random_{}.fused.ir", run.seed)) << run.fused_text;
  return built.string();
}

void check_graph(GraphRun& run) {
  const uint32_t seed = run.seed;
  run.built_text = ir::print_graph(RandomGraph(seed).build(kChainsPerGraph));
  const std::string file = fmt::format("random_{}.ir", seed);

  // The oracle: the graph as built, on the reference interpreter.
  ir::Graph oracle = ir::parse_graph(run.built_text, file);
  ASSERT_EQ(ir::print_graph(oracle), run.built_text)
      << "seed " << seed << ": the built graph does not round-trip";
  compiler::load_parameter_data(oracle);
  const std::map<std::string, ir::Tensor> inputs = random_inputs(oracle, seed);
  const std::vector<ir::Tensor> want = eval::run_reference(oracle, inputs);
  for (size_t i = 0; i < want.size(); ++i)
    for (int64_t e = 0; e < want[i].num_elements(); ++e)
      ASSERT_TRUE(std::isfinite(want[i].get(e))) << "seed " << seed << ": generator bug: output "
                                                 << oracle.output_name(i) << " is not finite";

  // The -O1 pipeline on a copy, verified after every pass.
  ir::Graph fused = ir::parse_graph(run.built_text, file);
  compiler::load_parameter_data(fused);
  passes::PassManagerOptions options;
  options.verify_each = true;
  std::ostringstream log;
  passes::PassManager manager(options, log);
  manager.add_all(passes::inference_pipeline(1));
  manager.run(fused);
  compiler::load_parameter_data(fused);
  run.fused_text = ir::print_graph(fused);
  run.nodes_before = static_cast<int>(oracle.nodes().size());
  run.nodes_after = static_cast<int>(fused.nodes().size());
  for (const auto& node : fused.nodes())
    if (node->is_kernel()) {
      ++run.kernels[ir::kernel_kind(*node)];
      if (node->results.size() > 1) ++run.kernels[std::string(kSeveralResults)];
    }

  const std::string where = fmt::format("seed {} (graph in {})", seed, save_for_repro(run));
  auto fail = [&](const std::string& message) { ADD_FAILURE() << where << ": " << message; };

  // 1. The fused IR prints, parses back and prints the same (the memory plan is comments).
  {
    const ir::Graph again = ir::parse_graph(run.fused_text, "fused_" + file);
    const std::string expected = graph_without_plan(fused);
    if (ir::print_graph(again) != expected)
      fail("the fused IR does not print the same after parsing");
  }

  ASSERT_EQ(fused.outputs.size(), oracle.outputs.size()) << where;

  // 2. The reference interpreter on the fused graph: bit for bit.
  const std::vector<ir::Tensor> reference_fused = eval::run_reference(fused, inputs);
  for (size_t i = 0; i < want.size(); ++i) {
    const std::string mismatch = compare(reference_fused[i], want[i], 0.0);
    if (!mismatch.empty())
      fail(fmt::format("reference interpreter, fused graph, output {} ({}): {}", i,
                       oracle.output_name(i), mismatch));
  }

  // 3. The generated CUDA on the host backend.
  const codegen::Program program = codegen::emit_program(fused);
  const runtime::host::HostModule module =
      runtime::host::HostModule::compile(program.source, fused.name, host_cache());
  std::vector<ir::Tensor> ordered_inputs;
  for (const Value* input : fused.inputs) ordered_inputs.push_back(inputs.at(input->name));
  std::vector<ir::Tensor> parameters;
  for (const Value* parameter : fused.parameters) parameters.push_back(*parameter->data);
  runtime::host::HostOptions host;
  host.strict = true;
  host.schedule = runtime::host::Schedule{runtime::host::Schedule::Kind::Random, seed};
  host.workers = 2;
  host.cuda_variants = true;  // the CUDA bodies, under the random schedule
  const std::vector<ir::Tensor> got =
      runtime::host::run_program(program, module, ordered_inputs, parameters, host);
  ASSERT_EQ(got.size(), want.size()) << where;
  for (size_t i = 0; i < want.size(); ++i) {
    const std::string mismatch = compare(got[i], want[i], kHostTolerance, kMinScale);
    if (!mismatch.empty())
      fail(fmt::format("host backend, output {} ({}): {}", i, oracle.output_name(i), mismatch));
  }
  // 4. The host-specific bodies (fused GEMMs): the CUDA bodies' results, bit for bit.
  const std::vector<ir::Tensor> host_bodies =
      runtime::host::run_program(program, module, ordered_inputs, parameters, {});
  for (size_t i = 0; i < want.size(); ++i)
    if (host_bodies.at(i).bytes() != got[i].bytes())
      fail(fmt::format("host backend, output {} ({}): the host-specific bodies' result differs "
                       "from the CUDA bodies'", i, oracle.output_name(i)));
}

// The seeds to run: kSeeds, or KILN_FUSION_SEEDS=FIRST:COUNT for a longer hunt.
std::vector<uint32_t> seeds() {
  const char* env = std::getenv("KILN_FUSION_SEEDS");
  if (env == nullptr) return {std::begin(kSeeds), std::end(kSeeds)};
  unsigned first = 0, count = 0;
  KILN_CHECK(std::sscanf(env, "%u:%u", &first, &count) == 2) << "KILN_FUSION_SEEDS=FIRST:COUNT";
  std::vector<uint32_t> list(count);
  std::iota(list.begin(), list.end(), first);
  return list;
}

TEST(FusionDifferential, RandomGraphsMatchTheUnfusedOracle) {
  const auto start = std::chrono::steady_clock::now();
  KindCounts totals;
  int before = 0, after = 0;
  const std::vector<uint32_t> all = seeds();
  for (const uint32_t seed : all) {
    GraphRun run;
    run.seed = seed;
    try {
      check_graph(run);
    } catch (const std::exception& error) {
      ADD_FAILURE() << "seed " << seed << ": " << error.what() << "\n(graph in "
                    << (run.built_text.empty() ? "<not built>" : save_for_repro(run)) << ")";
    }
    for (const auto& [kind, count] : run.kernels) totals[kind] += count;
    before += run.nodes_before;
    after += run.nodes_after;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << fmt::format("{} graphs: {} nodes before fusion, {} after; kernels:", all.size(),
                           before, after);
  for (const std::string_view kind :
       {ir::kEpilogueKernel, ir::kLoopKernel, ir::kReduceKernel, ir::kSingleKernel, kSeveralResults})
    std::cout << " " << kind << " " << totals[std::string(kind)];
  std::cout << fmt::format("; {:.1f} s\n", seconds);
  for (const std::string_view kind :
       {ir::kEpilogueKernel, ir::kLoopKernel, ir::kReduceKernel, ir::kSingleKernel, kSeveralResults})
    EXPECT_GT(totals[std::string(kind)], 0) << "no " << kind << " kernel in the whole suite";
}

}  // namespace
}  // namespace kiln
