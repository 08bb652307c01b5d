// The training step: the fused, planned step on the host backend (the generated CUDA on the
// CPU) against the reference interpreter running the unfused step graph, over several steps
// of each optimizer; and the Philox dropout stream, identical across backends.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include "codegen/emit.h"
#include "codegen/precision.h"
#include "compiler/model_loader.h"
#include "compiler/parameters.h"
#include "compiler/training_graph.h"
#include "ir/eval/interpreter.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "passes/pass_manager.h"
#include "runtime/executor/executable.h"

namespace kiln {
namespace {

runtime::KernelCache* cache() {
  static runtime::KernelCache instance(std::string(KILN_BINARY_DIR) + "/tests/host_module_cache");
  return &instance;
}

void run_passes(ir::Graph& graph, const std::vector<std::string>& names) {
  passes::PassManager manager(passes::PassManagerOptions{}, std::cerr);
  manager.add_all(names);
  manager.run(graph);
}

ir::Graph training_graph(const std::string& model, int64_t batch,
                         const std::vector<std::string>& pipeline) {
  ir::Graph graph = compiler::load_model(std::string(KILN_SOURCE_DIR) + "/" + model);
  compiler::load_parameter_data(graph);
  compiler::make_training_graph(graph, {batch, /*seed=*/3});
  run_passes(graph, pipeline);
  return graph;
}

std::unique_ptr<runtime::Executable> host_executable(const ir::Graph& graph) {
  std::vector<ir::Tensor> parameters;
  for (const ir::Value* param : graph.parameters) parameters.push_back(*param->data);
  runtime::ExecutableOptions options;
  options.cache = cache();
  options.host.workers = 2;
  return runtime::Executable::create(codegen::emit_program(graph), parameters, options);
}

// A batch of `batch` images in [0, 1) and labels in 0..9, from `seed`.
std::pair<ir::Tensor, ir::Tensor> random_batch(const ir::TensorType& image_type, int64_t batch,
                                               uint32_t seed) {
  std::mt19937 engine(seed);
  std::uniform_real_distribution<double> pixel(0.0, 1.0);
  std::vector<double> pixels(static_cast<size_t>(ir::num_elements(image_type.shape)));
  for (double& p : pixels) p = pixel(engine);
  std::vector<double> labels(static_cast<size_t>(batch));
  for (double& l : labels) l = static_cast<double>(engine() % 10);
  return {ir::Tensor::from_doubles(image_type, pixels),
          ir::Tensor::from_doubles(ir::TensorType{ir::DType::I32, {batch}}, labels)};
}

// Runs `steps` steps on the reference interpreter, feeding each next.P output back into P.
// Returns the losses; the graph's parameters hold the final state.
std::vector<double> reference_steps(ir::Graph& graph, const std::vector<std::pair<ir::Tensor, ir::Tensor>>& batches) {
  std::vector<double> losses;
  for (const auto& [images, labels] : batches) {
    const std::vector<ir::Tensor> outputs =
        eval::run_reference(graph, {{graph.inputs[0]->name, images}, {"label", labels}});
    losses.push_back(outputs[0].get(0));
    for (size_t i = 0; i < outputs.size(); ++i) {
      const std::string& name = graph.output_name(i);
      if (name.rfind("next.", 0) != 0) continue;
      ir::Value* param = graph.find_value(name.substr(5));
      if (param == nullptr) throw std::runtime_error("no parameter for output " + name);
      param->data = std::make_shared<const ir::Tensor>(outputs[i]);
    }
  }
  return losses;
}

struct StepCase {
  const char* name;
  const char* model;
  const char* optimizer;
};

class TrainingStepTest : public ::testing::TestWithParam<StepCase> {};

TEST_P(TrainingStepTest, FusedHostStepsEqualReferenceSteps) {
  const StepCase& c = GetParam();
  constexpr int64_t kBatch = 8;
  const std::string optimizer = c.optimizer;
  ir::Graph reference = training_graph(c.model, kBatch,
                                       {"autodiff", "append-optimizer{" + optimizer + "}"});
  ir::Graph fused = training_graph(c.model, kBatch, passes::training_pipeline(optimizer));

  std::vector<std::pair<ir::Tensor, ir::Tensor>> batches;
  for (uint32_t step = 0; step < 3; ++step)
    batches.push_back(random_batch(reference.inputs[0]->type, kBatch, 100 + step));
  const std::vector<double> reference_losses = reference_steps(reference, batches);

  // Every update writes its parameter or state in place (ir/state_in_place.cpp): the
  // optimizer's, the step counter's and batch norm's running averages (elementwise in the
  // running statistic and the batch's). Nothing is copied after the step.
  const codegen::Program program = codegen::emit_program(fused, {});
  ASSERT_FALSE(program.state_updates.empty());
  for (const codegen::Program::StateUpdate& update : program.state_updates)
    EXPECT_TRUE(update.in_place()) << program.buffers[update.parameter].name;

  std::unique_ptr<runtime::Executable> host = host_executable(fused);
  for (size_t step = 0; step < batches.size(); ++step) {
    const std::vector<ir::Tensor> outputs = host->run({batches[step].first, batches[step].second});
    EXPECT_NEAR(outputs[0].get(0), reference_losses[step], 1e-4 * (1 + std::fabs(reference_losses[step])))
        << "loss of step " << step + 1;
  }
  // Every parameter and state tensor after three steps (the step counter included).
  int compared = 0;
  for (const std::string& name : host->parameter_names()) {
    const ir::Value* value = reference.find_value(name);
    if (value == nullptr || value->role != ir::ValueRole::Parameter) continue;
    const ir::Tensor actual = host->parameter(host->parameter_index(name));
    const ir::Tensor& expected = *value->data;
    ASSERT_EQ(actual.type(), expected.type()) << name;
    double scale = 0, worst = 0;
    for (int64_t i = 0; i < expected.num_elements(); ++i) scale = std::max(scale, std::fabs(expected.get(i)));
    for (int64_t i = 0; i < expected.num_elements(); ++i)
      worst = std::max(worst, std::fabs(actual.get(i) - expected.get(i)));
    EXPECT_LE(worst, 1e-5 * (1 + scale)) << name << " after 3 steps";
    ++compared;
  }
  EXPECT_GE(compared, 5);
  EXPECT_EQ(host->parameter(host->parameter_index("train.step")).get(0), 4);
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, TrainingStepTest,
    ::testing::Values(StepCase{"MlpSgdMomentum", "tests/lit/Inputs/mnist_mlp.json",
                               "optimizer=sgd lr=0.1 momentum=0.9"},
                      StepCase{"MlpAdam", "tests/lit/Inputs/mnist_mlp.json", "optimizer=adam lr=0.001"},
                      StepCase{"MlpAdamW", "tests/lit/Inputs/mnist_mlp.json",
                               "optimizer=adamw lr=0.001 weight_decay=0.1"},
                      // Batch norm in training mode: batch statistics, running averages updated.
                      // Its dense has no bias: a bias before batch norm has an exactly zero
                      // gradient, whose rounding noise Adam would scale up to +-lr per step
                      // differently on each backend (true of PyTorch too).
                      StepCase{"MlpBatchNormSgdNesterov", "tests/lit/Inputs/mnist_mlp_bn.json",
                               "optimizer=sgd lr=0.05 momentum=0.9 nesterov=1 weight_decay=0.001"},
                      StepCase{"MlpBatchNormAdam", "tests/lit/Inputs/mnist_mlp_bn.json",
                               "optimizer=adam lr=0.001"},
                      // Convolutions, pooling, batch norm and dropout: the seed CNN's ops.
                      StepCase{"CnnBatchNormSgd", "tests/lit/Inputs/mnist_cnn_bn.json",
                               "optimizer=sgd lr=0.05 momentum=0.9"},
                      StepCase{"CnnBatchNormAdam", "tests/lit/Inputs/mnist_cnn_bn.json",
                               "optimizer=adam lr=0.001"}),
    [](const ::testing::TestParamInfo<StepCase>& info) { return std::string(info.param.name); });

// --precision=bf16 training: autocast before autodiff, so the forward and backward GEMMs read
// and write bf16 and the casts' gradients bring every parameter's back to f32. The fused step on
// bf16 tensor cores (host backend) against the reference's unfused step, which rounds after
// every op where a fused kernel rounds once at its store: three steps of SGD with momentum (no
// Adam: it scales any difference up to lr per step) on the seed CNN (conv, pool, dropout,
// dense; no batch norm, whose centring cancels most of the bits bf16 keeps). Each gradient is
// off by a few units of bf16's roundoff u = 2^-8: every parameter and momentum agrees within 8u
// of its norm, the losses within 8u of theirs. The same reference in f32 is further than that
// from the bf16 one (measured 11-23u on the momenta), so the bound sees a missing rounding.
double relative_error_in_units(const ir::Tensor& actual, const ir::Tensor& expected, double unit) {
  double norm = 0, error = 0;
  for (int64_t i = 0; i < expected.num_elements(); ++i) {
    norm += expected.get(i) * expected.get(i);
    error += (actual.get(i) - expected.get(i)) * (actual.get(i) - expected.get(i));
  }
  return norm == 0 ? std::sqrt(error) : std::sqrt(error / norm) / unit;
}

TEST(TrainingStepAutocast, FusedBf16StepsMatchReferenceSteps) {
  constexpr int64_t kBatch = 8;
  constexpr double kU = 1.0 / 256;
  const std::string optimizer = "optimizer=sgd lr=0.05 momentum=0.9";
  const std::string model = "examples/mnist_cnn.json";
  ir::Graph reference = training_graph(
      model, kBatch, {"autocast{to=bf16}", "autodiff", "append-optimizer{" + optimizer + "}"});
  ir::Graph exact = training_graph(model, kBatch, {"autodiff", "append-optimizer{" + optimizer + "}"});
  ir::Graph fused =
      training_graph(model, kBatch, passes::with_autocast(passes::training_pipeline(optimizer), "bf16"));
  // The step runs its GEMMs in bf16, every parameter stays f32.
  int bf16_values = 0;
  for (const auto& value : fused.values()) bf16_values += value->type.dtype == ir::DType::BF16;
  EXPECT_GT(bf16_values, 10);
  for (const ir::Value* param : fused.parameters) {
    if (ir::is_floating(param->type.dtype)) {
      EXPECT_EQ(param->type.dtype, ir::DType::F32) << param->name;
    }
  }

  std::vector<std::pair<ir::Tensor, ir::Tensor>> batches;
  for (uint32_t step = 0; step < 3; ++step)
    batches.push_back(random_batch(reference.inputs[0]->type, kBatch, 200 + step));
  const std::vector<double> reference_losses = reference_steps(reference, batches);
  reference_steps(exact, batches);

  std::vector<ir::Tensor> parameters;
  for (const ir::Value* param : fused.parameters) parameters.push_back(*param->data);
  runtime::ExecutableOptions options;
  options.cache = cache();
  options.host.workers = 2;
  std::unique_ptr<runtime::Executable> host = runtime::Executable::create(
      codegen::emit_program(fused, {}, codegen::Precision::Bf16), parameters, options);
  for (size_t step = 0; step < batches.size(); ++step) {
    const std::vector<ir::Tensor> outputs = host->run({batches[step].first, batches[step].second});
    EXPECT_NEAR(outputs[0].get(0), reference_losses[step], 8 * kU * (1 + std::fabs(reference_losses[step])))
        << "loss of step " << step + 1;
  }
  int compared = 0;
  double farthest_from_f32 = 0;
  for (const std::string& name : host->parameter_names()) {
    const ir::Value* value = reference.find_value(name);
    if (value == nullptr || value->role != ir::ValueRole::Parameter ||
        !ir::is_floating(value->type.dtype) || name == "grad.seed")
      continue;
    const ir::Tensor actual = host->parameter(host->parameter_index(name));
    EXPECT_LE(relative_error_in_units(actual, *value->data, kU), 8) << name << " after 3 steps";
    farthest_from_f32 = std::max(
        farthest_from_f32, relative_error_in_units(*value->data, *exact.find_value(name)->data, kU));
    ++compared;
  }
  EXPECT_GE(compared, 16);
  EXPECT_GT(farthest_from_f32, 8) << "the bf16 reference is as close to f32 as the bound: it tests nothing";
}

// Training dropout draws the same Philox stream in the reference interpreter and in the
// generated kernel (run on the host backend): the masks are identical bit for bit.
TEST(PhiloxDropout, ReferenceAndGeneratedKernelDrawTheSameMask) {
  ir::Graph graph = ir::parse_graph(R"(
graph @drop(%x: f32[4099], %step: i32[1]) -> (f32[4099]) {
  %y = dropout(%x, %step) {rate = 0.3, training = true, seed = 12345} : f32[4099]
  return %y
}
)", "dropout.ir");
  std::vector<double> ones(4099, 1.0);
  const ir::Tensor x = ir::Tensor::from_doubles(graph.inputs[0]->type, ones);
  std::unique_ptr<runtime::Executable> host = host_executable(graph);
  std::vector<double> kept_fraction;
  std::vector<ir::Tensor> masks;
  for (double step : {1.0, 2.0, 1.0}) {
    const ir::Tensor s = ir::Tensor::from_doubles(graph.inputs[1]->type, {step});
    const ir::Tensor expected = eval::run_reference(graph, {{"x", x}, {"step", s}})[0];
    const ir::Tensor actual = host->run({x, s})[0];
    int64_t kept = 0;
    for (int64_t i = 0; i < x.num_elements(); ++i) {
      ASSERT_EQ(actual.get(i), expected.get(i)) << "element " << i << ", step " << step;
      kept += actual.get(i) != 0;
      if (actual.get(i) != 0) {
        ASSERT_FLOAT_EQ(actual.get(i), 1 / 0.7);
      }
    }
    kept_fraction.push_back(static_cast<double>(kept) / 4099);
    masks.push_back(actual);
  }
  // 4099 Bernoulli(0.7) draws: the fraction kept is 0.7 +- 0.03 (4 standard deviations).
  for (double fraction : kept_fraction) EXPECT_NEAR(fraction, 0.7, 0.03);
  EXPECT_NE(std::memcmp(masks[0].data(), masks[1].data(), masks[0].byte_size()), 0)
      << "another step must draw another mask";
  EXPECT_EQ(std::memcmp(masks[0].data(), masks[2].data(), masks[0].byte_size()), 0)
      << "the same step must draw the same mask";
}

}  // namespace
}  // namespace kiln
